"""The harness of the chapter "Attention on images"
(course_pkg.experiments.vision), on cases whose answer is known.

- captions: the vocabulary holds every word of the grammar, the same on
  every call; the teacher-forcing tensors are the captions' ids shifted by
  <bos> and closed by <eos>, exactly; the reported loss leaves the penalty
  out; the attention measure equals a count by hand, and is 1 for a model
  that always looks at the named object;
- classifiers: exactly ``num_updates`` updates, each epoch a permutation of
  the examples; the loss falls on a separable problem; accuracy is exact on
  a model of fixed scores; the CNN has the parameter count closest to the
  one asked for;
- explanations: one red shape a scene, its pixels in the returned cell and
  shaped as its label; the four maps, their shapes, and occlusion and
  gradient x input by hand; localisation on hand-made maps.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.data.scenes import (
    COLOURS,
    RELATIONS,
    SHAPES,
    generate_scenes,
    shape_mask,
)
from course_pkg.experiments import vision
from course_pkg.models.convnet import ConvNet, convnet_parameters

RED = torch.tensor(COLOURS["red"])  # float32, as the scenes are drawn


def _scenes(n=8, seed=0):
    return generate_scenes(n, torch.Generator().manual_seed(seed))


def _small_captions() -> vision.CaptionSettings:
    return vision.CaptionSettings(
        embed_size=4, num_hiddens=8, channels=2, num_epochs=2, batch_size=8
    )


# ------------------------------------------------------------- captions


def test_caption_vocab_holds_every_word_the_same_on_every_call():
    vocab = vision.caption_vocab()
    assert vocab.idx_to_token == vision.caption_vocab().idx_to_token
    words = {*COLOURS, *SHAPES} | {w for r in RELATIONS for w in r.split()}
    assert words <= set(vocab.idx_to_token)
    for word in words:
        assert vocab[word] != vocab.unk
    assert vocab.idx_to_token[:3] == ["<pad>", "<bos>", "<eos>"]
    assert len(vocab) == len(set(vocab.idx_to_token))


def test_caption_tensors_shift_the_ids_by_bos_and_close_them_by_eos():
    vocab = vision.caption_vocab()
    _, scenes = _scenes(50)
    dec_X, Y = vision.caption_tensors(scenes, vocab)
    longest = max(len(s.caption) for s in scenes)
    assert dec_X.shape == Y.shape == (50, longest + 1)
    assert dec_X.dtype == Y.dtype == torch.int64
    pad, bos, eos = vocab["<pad>"], vocab["<bos>"], vocab["<eos>"]
    for n, scene in enumerate(scenes):
        ids = vocab[list(scene.caption)]
        assert vocab.unk not in ids
        padding = [pad] * (longest - len(ids))
        assert dec_X[n].tolist() == [bos, *ids, *padding]
        assert Y[n].tolist() == [*ids, eos, *padding]
        row = Y[n].tolist()
        assert vocab.to_tokens(row[: row.index(eos)]) == list(scene.caption)
    # both relation lengths occur, so some rows are padded and some are not
    assert {len(s.caption) for s in scenes} == {5, 6}


def test_the_reported_loss_leaves_the_penalty_out():
    vocab = vision.caption_vocab()
    images, scenes = _scenes(8)
    dec_X, Y = vision.caption_tensors(scenes, vocab)
    # 8 scenes, batches of 8: each epoch is one update, so the first epoch's
    # loss is computed before any update
    settings = _small_captions()
    data = (images, dec_X, Y, vocab["<pad>"], settings)
    runs = []
    for penalty in (0.0, 100.0):
        torch.manual_seed(0)
        model = vision.new_captioner(vocab, settings)
        generator = torch.Generator().manual_seed(0)
        runs.append(vision.train_captioner(model, *data, penalty, generator))
    assert len(runs[0]) == len(runs[1]) == settings.num_epochs
    assert runs[0][0] == runs[1][0]  # the same model, before any update
    assert runs[0][1] != runs[1][1]  # the penalty changed the update


class _LooksAt(nn.Module):
    """A stand-in captioner whose weights at every step are one-hot on
    the cells it is given, (N, Q) cell indices."""

    def __init__(self, cells: torch.Tensor):
        super().__init__()
        self.cells = cells
        self.weights = None

    def forward(self, images, dec_X):
        self.weights = F.one_hot(self.cells, vision.GRID**2).float()
        return self.weights

    @property
    def attention_weights(self):
        return self.weights


def _object_cells(scenes, Q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, Q) the cell index of each step's object (0 where none) and (N, Q)
    whether the step's word names an object."""
    index = torch.zeros(len(scenes), Q, dtype=torch.long)
    named = torch.zeros(len(scenes), Q, dtype=torch.bool)
    for n, scene in enumerate(scenes):
        for t, cell in enumerate(scene.word_cells):
            if cell is not None:
                index[n, t] = cell[0] * vision.GRID + cell[1]
                named[n, t] = True
    return index, named


def test_attention_on_objects_is_one_for_a_model_that_looks_at_them():
    images, scenes = _scenes(20)
    dec_X, _ = vision.caption_tensors(scenes, vision.caption_vocab())
    index, named = _object_cells(scenes, dec_X.shape[1])
    # elsewhere (relation words, padding) it looks at the wrong cell
    looking = torch.where(named, index, (index + 1) % vision.GRID**2)
    assert vision.attention_on_objects(
        _LooksAt(looking), images, dec_X, scenes
    ) == (1.0, 1.0)
    # always at cell (0, 0): right exactly where the object lies there
    corner = torch.zeros_like(index)
    share = ((index == 0) & named).sum().item() / named.sum().item()
    hits, mass = vision.attention_on_objects(
        _LooksAt(corner), images, dec_X, scenes
    )
    assert hits == pytest.approx(share) and mass == pytest.approx(share)
    # one step later: the word's cell is that of the word before it
    late = torch.cat([index[:, :1], index[:, :-1]], dim=1)
    hits, _ = vision.attention_on_objects(
        _LooksAt(late), images, dec_X, scenes
    )
    assert hits < 1.0


def test_attention_on_objects_equals_a_count_by_hand():
    vocab = vision.caption_vocab()
    images, scenes = _scenes(6)
    dec_X, _ = vision.caption_tensors(scenes, vocab)
    torch.manual_seed(0)
    model = vision.new_captioner(vocab, _small_captions())
    model.train()
    hits, mass = vision.attention_on_objects(model, images, dec_X, scenes)
    assert model.training  # the mode is given back
    assert 0.0 <= hits <= 1.0 and 0.0 <= mass <= 1.0
    model.eval()
    with torch.no_grad():
        model(images, dec_X)
    weights = model.attention_weights  # (N, Q, G^2)
    index, named = _object_cells(scenes, dec_X.shape[1])
    on_object = weights.gather(-1, index[..., None]).squeeze(-1)  # (N, Q)
    peak = weights.argmax(-1) == index
    assert hits == pytest.approx(peak[named].float().mean().item())
    assert mass == pytest.approx(on_object[named].mean().item())
    assert named.sum() == 4 * len(scenes)  # two objects, two words each


def test_caption_bleu_is_a_score_between_0_and_1():
    vocab = vision.caption_vocab()
    images, scenes = _scenes(4)
    torch.manual_seed(0)
    model = vision.new_captioner(vocab, _small_captions())
    score = vision.caption_bleu(model, images, scenes, vocab)
    assert isinstance(score, float) and 0.0 <= score <= 1.0


# ---------------------------------------------------------- classifiers


class _Recorder(nn.Module):
    """Records the example indices it is shown (the images hold them)."""

    def __init__(self, num_classes: int = 2):
        super().__init__()
        self.linear = nn.Linear(1, num_classes)
        self.seen: list[list[int]] = []

    def forward(self, X):
        self.seen.append(X[:, 0, 0, 0].long().tolist())
        return self.linear(X[:, 0, 0, :1])


@pytest.mark.parametrize("num_updates", [1, 3, 7, 8])
def test_train_classifier_makes_num_updates_updates_over_permutations(
    num_updates,
):
    images = torch.arange(10.0)[:, None, None, None].expand(10, 1, 2, 2)
    labels = torch.arange(10) % 2
    model = _Recorder()
    settings = vision.ClassifierSettings(num_updates=num_updates, batch_size=4)
    losses = vision.train_classifier(
        model, images, labels, settings, torch.Generator().manual_seed(0)
    )
    assert len(losses) == len(model.seen) == num_updates
    # batches of 4, 4, 2: each epoch shows every example once
    sizes = [len(batch) for batch in model.seen]
    assert sizes == ([4, 4, 2] * 3)[:num_updates]
    for start in range(0, num_updates - 2, 3):
        epoch = sum(model.seen[start : start + 3], [])
        assert sorted(epoch) == list(range(10))
    last = sum(model.seen[3 * (num_updates // 3) :], [])
    assert len(set(last)) == len(last)


def _separable(n=32, seed=0):
    """Images of class 1 are bright, of class 0 dark, with noise."""
    labels = torch.arange(n) % 2
    noise = torch.randn(
        n, 1, 4, 4, generator=torch.Generator().manual_seed(seed)
    )
    return (labels.float() * 2 - 1)[:, None, None, None] + 0.3 * noise, labels


def test_train_classifier_lowers_the_loss_the_same_on_every_run():
    images, labels = _separable()
    settings = vision.ClassifierSettings(
        num_updates=40, batch_size=8, lr=0.01, weight_decay=0.0
    )
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = ConvNet(2, 4, img_size=4)
        losses = vision.train_classifier(
            model, images, labels, settings, torch.Generator().manual_seed(0)
        )
        runs.append(losses)
    assert runs[0] == runs[1]
    losses = runs[0]
    assert len(losses) == 40
    # measured: 0.63 at first, 0.09 over the last five
    assert sum(losses[-5:]) / 5 < losses[0] / 3
    assert vision.accuracy(model, images, labels) == 1.0


class _FixedScores(nn.Module):
    """Scores one-hot on the class written in each image's first pixel."""

    def forward(self, X):
        return F.one_hot(X[:, 0, 0, 0].long(), 3).float()


@pytest.mark.parametrize("num_images", [5, 500, 1203])
def test_accuracy_is_the_share_of_top_classes_equal_to_the_label(num_images):
    predicted = torch.arange(num_images) % 3
    images = predicted.float()[:, None, None, None].expand(-1, 1, 2, 2)
    labels = predicted.clone()
    wrong = torch.arange(0, num_images, 4)  # every fourth label is wrong
    labels[wrong] = (labels[wrong] + 1) % 3
    model = _FixedScores().train()
    assert vision.accuracy(model, images, labels) == pytest.approx(
        1 - len(wrong) / num_images
    )
    assert model.training  # the mode is given back


def test_count_parameters_counts_the_trainable_ones():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))  # 16 + 10
    assert vision.count_parameters(model) == 26
    model[1].requires_grad_(False)
    assert vision.count_parameters(model) == 16


@pytest.mark.parametrize("target", [100, 5_000, 19_402, 23_722, 60_000])
def test_digits_convnet_has_the_closest_parameter_count(target):
    model = vision.digits_convnet(target)
    count = vision.count_parameters(model)
    gaps = [abs(convnet_parameters(10, c) - target) for c in range(1, 201)]
    assert abs(count - target) == min(gaps)
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


@pytest.mark.parametrize("patch_size", vision.PATCH_SIZES)
def test_the_chapters_cnn_has_as_many_parameters_as_its_vit(patch_size):
    target = vision.count_parameters(vision.digits_vit(patch_size))
    count = vision.count_parameters(vision.digits_convnet(target))
    gaps = [abs(convnet_parameters(10, c) - target) for c in range(1, 201)]
    assert abs(count - target) == min(gaps)
    assert abs(count - target) < 0.05 * target


# ---------------------------------------------------------- explanations


def _red_pixels(image: torch.Tensor) -> torch.Tensor:
    """(H, W) bool: the pixels of the red colour."""
    return (image == RED[:, None, None]).all(0)


def test_red_object_scenes_have_one_red_shape_in_the_returned_cell():
    images, labels, cells = vision.red_object_scenes(
        40, torch.Generator().manual_seed(0)
    )
    assert images.shape == (40, 3, 32, 32) and images.dtype == torch.float32
    assert labels.shape == (40,) and cells.shape == (40, 2)
    assert labels.dtype == cells.dtype == torch.int64
    assert set(labels.tolist()) == set(range(len(SHAPES)))
    size = vision.CELL
    for image, label, (row, column) in zip(images, labels, cells.tolist()):
        red = _red_pixels(image)
        in_cell = red[row * size : (row + 1) * size,
                      column * size : (column + 1) * size]  # fmt: skip
        # the red pixels are the label's shape, in that cell and nowhere else
        assert torch.equal(in_cell, shape_mask(SHAPES[label], size))
        assert red.sum() == in_cell.sum()


def test_red_object_scenes_are_the_same_for_a_seed():
    first = vision.red_object_scenes(12, torch.Generator().manual_seed(3))
    again = vision.red_object_scenes(12, torch.Generator().manual_seed(3))
    other = vision.red_object_scenes(12, torch.Generator().manual_seed(4))
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], other[0])


def _explained(num_scenes: int, seed: int):
    """Scenes drawn from seed, a ViT drawn from seed 0, and its explanation
    maps of the scenes."""
    images, _, _ = vision.red_object_scenes(
        num_scenes, torch.Generator().manual_seed(seed)
    )
    torch.manual_seed(0)
    model = vision.scenes_vit()
    return images, model, vision.explanation_maps(model, images)


def test_explanation_maps_give_the_four_maps_over_the_cells():
    _, _, maps = _explained(3, seed=0)
    assert tuple(maps) == vision.METHODS
    G = vision.GRID
    for method, cell_map in maps.items():
        assert cell_map.shape == (3, G, G), method
        assert torch.isfinite(cell_map).all(), method
    # attention maps are shares of the class token's attention
    for method in ("last-layer attention", "rollout"):
        total = maps[method].sum((1, 2))
        assert (maps[method] >= 0).all() and (total <= 1 + 1e-6).all()
    assert (maps["gradient x input"] >= 0).all()


def test_occlusion_and_gradient_maps_explain_the_predicted_class():
    images, model, maps = _explained(2, seed=1)
    with torch.no_grad():
        predicted = model(images).argmax(-1)  # (N,)

    def score(x):
        return model(x)[torch.arange(len(x)), predicted]

    size = vision.CELL
    with torch.no_grad():
        full = score(images)
        for row, column in [(0, 0), (1, 2), (3, 3)]:
            hidden = images.clone()
            hidden[..., row * size : (row + 1) * size,
                   column * size : (column + 1) * size] = 0.0  # fmt: skip
            torch.testing.assert_close(
                maps["occlusion"][:, row, column], full - score(hidden)
            )
    pixels = images.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(score(pixels).sum(), pixels)
    per_pixel = (gradient * images).sum(1).abs()  # (N, H, W)
    G = vision.GRID
    by_hand = per_pixel.reshape(-1, G, size, G, size).sum((2, 4))
    torch.testing.assert_close(maps["gradient x input"], by_hand)


def test_localisation_is_the_share_of_maps_peaking_on_the_true_cell():
    G = vision.GRID
    cell_maps = -torch.rand(
        5, G, G, generator=torch.Generator().manual_seed(0)
    )
    peaks = [(0, 0), (1, 3), (2, 2), (3, 0), (3, 3)]
    for n, (row, column) in enumerate(peaks):
        cell_maps[n, row, column] = 0.5  # the largest entry, no tie
    cells = torch.tensor(peaks)
    assert vision.localisation(cell_maps, cells) == 1.0
    cells[1] = torch.tensor([3, 1])  # row and column swapped
    cells[4] = torch.tensor([0, 0])
    assert vision.localisation(cell_maps, cells) == pytest.approx(3 / 5)
    # all entries negative: the peak is the least negative one
    assert vision.localisation(
        cell_maps - 10, torch.tensor(peaks)
    ) == pytest.approx(1.0)
    assert vision.localisation(cell_maps[:1], torch.tensor([[1, 0]])) == 0.0
