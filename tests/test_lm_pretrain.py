"""Tests of course_pkg.training.lm_pretraining: windows, count baselines, bits per byte, the schedule, the loop."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from course_pkg.models.gpt2 import GPT2
from course_pkg.training.lm_pretraining import (
    CharTokenizer,
    LMSettings,
    NGramModel,
    adamw,
    bits_per_byte,
    evaluate_lm,
    lm_loss,
    pretrain_lm,
    random_windows,
    validation_windows,
    warmup_cosine,
)

# ------------------------------------------------------------ the schedule


def test_warmup_cosine_at_every_step_by_hand():
    # W = 2, S = 6, m = 0.1: s / W, then m + (1 - m) (1 + cos(pi j / 4)) / 2
    # for j = s - W = 1..4, i.e. (2 + sqrt 2) / 4, 1 / 2, (2 - sqrt 2) / 4, 0
    m, r = 0.1, math.sqrt(2)
    cosine = [(2 + r) / 4, 1 / 2, (2 - r) / 4, 0.0]
    expected = [0.5, 1.0] + [m + (1 - m) * c for c in cosine] + [m, m]
    got = [warmup_cosine(s, 2, 6, m) for s in range(1, 9)]
    assert got == pytest.approx(expected, abs=1e-15)
    # no warm-up: the cosine from the first update; all warm-up: s / W
    assert warmup_cosine(1, 0, 4, 0.0) == pytest.approx((2 + r) / 4, abs=1e-15)
    assert [warmup_cosine(s, 4, 4, 0.0) for s in range(1, 5)] == [
        0.25,
        0.5,
        0.75,
        1.0,
    ]


@pytest.mark.parametrize(
    "warmup,total,m", [(3, 11, 0.1), (1, 7, 0.0), (5, 5, 0.2)]
)
def test_warmup_cosine_matches_torch_schedulers_at_every_step(
    warmup, total, m
):
    """The warm-up is torch's LinearLR from 1 / W to 1 over W - 1 steps; the
    decay, from update W on, torch's CosineAnnealingLR over S - W steps to m."""
    weight = nn.Parameter(torch.zeros(1))

    def torch_factors(make, steps):
        optimizer = torch.optim.SGD([weight], lr=1.0)
        scheduler = make(optimizer)
        factors = []
        for _ in range(steps):
            factors.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return factors

    linear = torch_factors(
        lambda o: torch.optim.lr_scheduler.LinearLR(
            o, 1 / warmup, 1.0, total_iters=warmup - 1
        ),
        warmup,
    )
    assert [
        warmup_cosine(s, warmup, total, m) for s in range(1, warmup + 1)
    ] == (pytest.approx(linear, abs=1e-12))
    if total > warmup:
        cosine = torch_factors(
            lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(
                o, total - warmup, eta_min=m
            ),
            total - warmup + 1,
        )
        ours = [
            warmup_cosine(s, warmup, total, m)
            for s in range(warmup, total + 1)
        ]
        assert ours == pytest.approx(cosine, abs=1e-12)


def test_warmup_cosine_refuses_a_warmup_longer_than_the_run():
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_cosine(1, 5, 4)
    with pytest.raises(ValueError, match="min_factor"):
        warmup_cosine(1, 0, 4, 1.5)


# -------------------------------------------------------------- the batches


def test_random_windows_are_windows_and_targets_are_inputs_shifted():
    tokens = torch.arange(100)  # the id is the position: windows show
    generator = torch.Generator().manual_seed(0)
    X, Y = random_windows(tokens, 8, 5, generator)
    assert X.shape == Y.shape == (8, 5) and X.dtype == torch.int64
    starts = X[:, :1]
    assert torch.equal(X, starts + torch.arange(5))  # consecutive
    assert torch.equal(Y, X + 1)  # the next token
    assert torch.equal(Y[:, :-1], X[:, 1:])
    again = random_windows(tokens, 8, 5, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], X)
    other = random_windows(tokens, 8, 5, torch.Generator().manual_seed(1))
    assert not torch.equal(other[0], X)


def test_random_windows_reach_every_start_and_the_last_token():
    tokens = torch.arange(10)
    X, Y = random_windows(tokens, 2000, 4, torch.Generator().manual_seed(0))
    # starts 0 .. N - T - 1 = 5; the last token (9) is a target
    assert set(X[:, 0].tolist()) == set(range(6))
    assert int(Y.max()) == 9 and int(X.max()) == 8


def test_random_windows_refuse_a_stream_shorter_than_a_window():
    with pytest.raises(ValueError, match="tokens"):
        random_windows(torch.arange(4), 2, 4)


def test_validation_windows_are_fixed_and_cover_the_stream():
    tokens = torch.arange(23)
    X, Y = validation_windows(tokens, 5)
    # starts 0, 5, 10, 15 (a window needs T + 1 = 6 tokens: 15 + 5 < 23)
    assert torch.equal(X[:, 0], torch.tensor([0, 5, 10, 15]))
    assert torch.equal(Y, X + 1)
    X2, _ = validation_windows(tokens, 5, max_windows=3)
    assert torch.equal(X2[:, 0], torch.tensor([0, 8, 17]))  # i * 17 // 2
    assert torch.equal(validation_windows(tokens, 5, max_windows=3)[0], X2)
    X3, _ = validation_windows(tokens, 5, max_windows=10)  # more than fit
    assert torch.equal(X3, X)


# ------------------------------------------------------ the tokenizer


def test_char_tokenizer_round_trip_and_unknown_characters():
    tokenizer = CharTokenizer("to be, or not")
    assert len(tokenizer) == len(set("to be, or not")) == 8
    ids = tokenizer.encode("not to be")
    assert tokenizer.decode(ids) == "not to be"
    assert tokenizer.encode(" ,") == [0, 1]  # sorted: ' ' < ',' < 'b' ...
    with pytest.raises(ValueError, match="text"):
        tokenizer.encode("to die")
    with pytest.raises(ValueError, match="ids"):
        tokenizer.decode([8])


# ------------------------------------------------------ count baselines

# "abcab" with a = 0, b = 1, c = 2: unigram counts 2, 2, 1 of 5; bigrams
# ab x2, bc, ca; contexts (the first 4 tokens) a x2, b, c.
ABCAB = torch.tensor([0, 1, 2, 0, 1])


def test_unigram_by_hand():
    model = NGramModel(ABCAB, 1, 3, k=1.0)
    got = model.log_probs(torch.tensor([0, 1, 2])).exp()
    # (count + 1) / (5 + 3)
    assert got.tolist() == pytest.approx([3 / 8, 3 / 8, 2 / 8], abs=1e-15)


def test_bigram_by_hand():
    model = NGramModel(ABCAB, 2, 3, k=0.5)
    # "abba": p(b|a) = (2 + .5) / (2 + 1.5), p(b|b) = .5 / (1 + 1.5),
    # p(a|b) = .5 / 2.5
    got = model.log_probs(torch.tensor([0, 1, 1, 0])).exp()
    assert got.tolist() == pytest.approx([5 / 7, 1 / 5, 1 / 5], abs=1e-15)


def test_trigram_by_hand_with_an_unseen_context():
    model = NGramModel(ABCAB, 3, 3, k=0.25)
    # trigrams abc, bca, cab once each; contexts ab, bc, ca once each.
    # "abcc": p(c|ab) = 1.25 / 1.75, p(c|bc) = .25 / 1.75
    got = model.log_probs(torch.tensor([0, 1, 2, 2])).exp()
    assert got.tolist() == pytest.approx([5 / 7, 1 / 7], abs=1e-15)
    # "ccab": context cc never seen: 1 / V; then p(b|ca) = 1.25 / 1.75
    got = model.log_probs(torch.tensor([2, 2, 0, 1])).exp()
    assert got.tolist() == pytest.approx([1 / 3, 5 / 7], abs=1e-15)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_ngram_probabilities_sum_to_one_for_every_context(order):
    V = 5
    generator = torch.Generator().manual_seed(order)
    tokens = torch.randint(0, V, (300,), generator=generator)
    model = NGramModel(tokens, order, V, k=0.1)
    # every context of order - 1 tokens (seen or not), followed by each w
    for context in itertools.product(range(V), repeat=order - 1):
        probs = [
            model.log_probs(torch.tensor([*context, w])).exp().item()
            for w in range(V)
        ]
        assert sum(probs) == pytest.approx(1.0, abs=1e-12)


def test_unigram_matches_counts_of_a_text():
    tokens = torch.tensor([3, 1, 1, 0, 3, 3, 2, 1])
    model = NGramModel(tokens, 1, 4, k=0.5)
    counts = torch.bincount(tokens, minlength=4).double()
    expected = ((counts + 0.5) / (len(tokens) + 2.0)).log()
    assert torch.allclose(
        model.log_probs(torch.arange(4)), expected, atol=1e-15
    )


# ------------------------------------------------------ bits per byte


def test_bits_per_byte_exact():
    # one bit per byte: ln 2 nats per one-byte token, or 2 ln 2 per 2-byte token
    assert bits_per_byte(math.log(2), 10, 10) == pytest.approx(1.0, abs=1e-15)
    assert bits_per_byte(2 * math.log(2), 5, 10) == pytest.approx(
        1.0, abs=1e-15
    )
    # a uniform guess over 256 byte values: 8 bits per byte
    assert bits_per_byte(math.log(256), 7, 7) == pytest.approx(8.0, abs=1e-14)
    # formula: nats * tokens / bytes / ln 2
    assert bits_per_byte(1.5, 300, 1000) == pytest.approx(
        1.5 * 0.3 / math.log(2), abs=1e-15
    )
    assert bits_per_byte(0.0, 1, 1) == 0.0


def test_bits_per_byte_of_a_char_count_model_is_its_mean_bits_per_character():
    text = "to be or not to be that is the question"
    tokenizer = CharTokenizer(text)
    ids = torch.tensor(tokenizer.encode(text))
    log_probs = NGramModel(ids, 1, len(tokenizer), k=1.0).log_probs(ids)
    by_formula = bits_per_byte(-log_probs.mean().item(), len(ids), len(text))
    direct = -(log_probs / math.log(2)).sum().item() / len(text.encode())
    assert by_formula == pytest.approx(direct, rel=1e-13)


# ------------------------------------------------------ the loss and loop


def _model(V: int = 11, T: int = 8, seed: int = 0) -> GPT2:
    torch.manual_seed(seed)
    return GPT2(V, 16, 2, 1, T)


def _stream() -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """A stream of 200 ids (0 to 10 again and again) and its validation
    windows of 8 steps, 4 apart."""
    tokens = torch.arange(200) % 11
    return tokens, validation_windows(tokens, 8, 4)


def _settings(**change) -> LMSettings:
    """A short run of batches of 4 windows of 8 steps at lr 1e-2."""
    return LMSettings(batch_size=4, num_steps=8, lr=1e-2, **change)


def test_lm_loss_is_the_mean_cross_entropy_and_evaluate_averages_it(float64):
    model = _model().eval()
    X, Y = validation_windows(torch.arange(50) % 11, 8)  # (6, 8)
    scores = model(X)
    by_hand = -scores.log_softmax(-1).gather(-1, Y[..., None]).mean()
    assert abs(lm_loss(model, X, Y).item() - by_hand.item()) < 1e-12
    # evaluate_lm in batches of 4 and 2 windows: the same mean
    assert abs(evaluate_lm(model, X, Y, batch_size=4) - by_hand.item()) < 1e-12
    X5, Y5 = X[:5], Y[:5]  # an uneven last batch, weighted by its tokens
    full = lm_loss(model, X5, Y5).item()
    assert abs(evaluate_lm(model, X5, Y5, batch_size=2) - full) < 1e-12


def test_lm_loss_and_windows_on_meta():
    model = _model().to("meta")
    tokens = torch.arange(40).to("meta") % 11
    X, Y = random_windows(tokens, 3, 8)
    assert X.device.type == "meta" and X.shape == (3, 8)
    loss = lm_loss(model, X, Y)
    assert loss.device.type == "meta" and loss.shape == ()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_adamw_decays_matrices_only_and_holds_the_tied_weight_once():
    model = _model()
    decay, no_decay = adamw(model, LMSettings()).param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    held = [id(p) for p in decay["params"] + no_decay["params"]]
    assert sorted(held) == sorted(id(p) for p in model.parameters())
    assert any(p is model.embedding.weight for p in decay["params"])


def test_pretrain_lm_follows_the_schedule_and_is_repeatable():
    tokens, valid = _stream()
    settings = _settings(num_updates=7, warmup_steps=2, eval_every=3)
    seen = []
    record = pretrain_lm(
        _model(), tokens, *valid, settings, progress=False,
        on_eval=lambda update, model, loss: seen.append((update, model.training, loss)),
    )  # fmt: skip
    assert record["step_lr"] == pytest.approx(
        [1e-2 * warmup_cosine(s, 2, 7, 0.1) for s in range(1, 8)], abs=1e-15
    )
    assert record["eval_updates"] == [0, 3, 6, 7]
    assert [(u, t) for u, t, _ in seen] == [
        (0, False),
        (3, False),
        (6, False),
        (7, False),
    ]
    assert [loss for _, _, loss in seen] == record["eval_loss"]
    assert record["num_tokens"] == 7 * 4 * 8 and len(record["step_loss"]) == 7
    again = pretrain_lm(_model(), tokens, *valid, settings, progress=False)
    assert again["step_loss"] == record["step_loss"]
    assert again["eval_loss"] == record["eval_loss"]


# A short run on a real text. Floors by the README's rule, seeds 0-9 (model
# and windows): the loss before training is ln V within 0.017 (GPT-2's
# initial scores are near 0; mean |diff| 0.007), and after 150 updates it is
# 2.549-2.885 nats (mean 2.748, std 0.123), so the ceiling max + 3 std =
# 3.25 lies below the unigram count model's 3.364 on the same text (and the
# bigram's 2.487 is not claimed).
UNIGRAM_CEILING = 3.25


def short_run(play: str, seed: int) -> dict:
    tokenizer = CharTokenizer(play)
    ids = torch.tensor(tokenizer.encode(play))
    train, valid = ids[:80_000], ids[80_000:100_000]
    unigram = NGramModel(train, 1, len(tokenizer), k=1.0)
    torch.manual_seed(seed)
    model = GPT2(len(tokenizer), 32, 2, 1, 32)
    settings = LMSettings(
        batch_size=16, num_steps=32, num_updates=150, lr=1e-2,
        warmup_steps=10, eval_every=150, seed=seed,
    )  # fmt: skip
    record = pretrain_lm(
        model,
        train,
        *validation_windows(valid, 32, 64),
        settings,
        progress=False,
    )
    return {
        "log_V": math.log(len(tokenizer)),
        "unigram": -unigram.log_probs(valid).mean().item(),
        "before": record["eval_loss"][0],
        "after": record["eval_loss"][-1],
    }


def test_a_short_run_on_macbeth_beats_the_unigram_model(shakespeare_works):
    torch.set_num_threads(1)
    result = short_run(shakespeare_works["Macbeth"], seed=0)
    assert abs(result["before"] - result["log_V"]) < 0.05
    assert result["after"] <= UNIGRAM_CEILING < result["unigram"]


# ------------------------------------------------------ bad settings


@pytest.mark.parametrize(
    "field,value,error",
    [
        ("batch_size", 0, ValueError),
        ("num_steps", 1.5, TypeError),
        ("num_updates", 0, ValueError),
        ("lr", float("nan"), ValueError),
        ("warmup_steps", 3000, ValueError),
        ("beta2", 1.0, ValueError),
        ("grad_clip", 0.0, ValueError),
        ("min_lr_factor", 2.0, ValueError),
    ],
)
def test_settings_refuse_bad_values_by_name(field, value, error):
    with pytest.raises(error, match=field):
        LMSettings(**{field: value})


# ------------------------------------------------------------ ids out of range


class _NoVocabSize(torch.nn.Module):
    """A language model that does not say its vocabulary size."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, X):
        return self.model(X)


@pytest.mark.parametrize("bad", [-100, -1, 11, 12])
@pytest.mark.parametrize("say_vocab_size", [True, False])
def test_lm_loss_refuses_targets_outside_the_vocabulary(bad, say_vocab_size):
    # -100 is cross_entropy's ignore_index: it was skipped without a word,
    # and a batch of nothing but -100 gave NaN
    model = _model().eval()
    model = model if say_vocab_size else _NoVocabSize(model)
    X, Y = validation_windows(torch.arange(50) % 11, 8)
    for targets in (Y.masked_fill(Y == 3, bad), torch.full_like(Y, bad)):
        with pytest.raises(
            ValueError, match=r"Y \(the targets\) must hold token ids in \[0, "
        ):
            lm_loss(model, X, targets)
    assert lm_loss(model, X, Y).isfinite()


@pytest.mark.parametrize(
    "argument, bad",
    [("train_tokens", 11), ("train_tokens", -1), ("valid_Y", 11)],
)
def test_pretrain_lm_refuses_ids_outside_the_vocabulary_before_any_update(
    argument, bad
):
    model = _model()
    before = {n: p.detach().clone() for n, p in model.state_dict().items()}
    tokens, (valid_X, valid_Y) = _stream()
    arguments = dict(train_tokens=tokens, valid_X=valid_X, valid_Y=valid_Y)
    arguments[argument] = arguments[argument].clone()
    arguments[argument].view(-1)[-1] = bad  # one id, late in the stream
    settings = _settings(num_updates=30, warmup_steps=2, eval_every=10)
    with pytest.raises(ValueError, match=argument):
        pretrain_lm(model, settings=settings, progress=False, **arguments)
    after = model.state_dict()
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_aux_loss_joins_the_update_but_not_the_recorded_loss():
    tokens, valid = _stream()
    settings = _settings(num_updates=5, warmup_steps=1, eval_every=5)
    calls = []

    def shrink(model):  # a large penalty on the weights' size
        calls.append(model.training)
        return 10.0 * sum((p**2).sum() for p in model.parameters())

    plain = _model()
    penalised = _model()
    record = pretrain_lm(plain, tokens, *valid, settings, progress=False)
    shrunk = pretrain_lm(
        penalised, tokens, *valid, settings, progress=False, aux_loss=shrink
    )
    assert calls == [True] * 5  # once per update, in training mode
    # the first update's language-model loss is recorded, not the sum
    assert shrunk["step_loss"][0] == record["step_loss"][0]
    norm = lambda m: sum((p**2).sum().item() for p in m.parameters())  # noqa: E731
    assert norm(penalised) < 0.9 * norm(plain)
    with pytest.raises(TypeError, match="aux_loss"):
        pretrain_lm(_model(), tokens, *valid, settings, aux_loss=3.0)
