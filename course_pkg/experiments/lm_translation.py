"""Translation as language modelling: data, training and translating with a GPT.

Chapter: "A decoder-only model: GPT". A pair becomes one sequence,
``english <sep> french <eos>``, over one vocabulary for both languages. The
model reads the sequence shifted right and is scored only where it predicts
the French words and the final ``<eos>``: the English part is given at
translation time (it is the prompt), so predicting it is not the task, and
its loss would spend the model's capacity on modelling English.

To translate, the model continues the prompt ``english <sep>`` until it
writes ``<eos>`` (:func:`translate_lm`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, TensorDataset

from course_pkg.checks import (
    check_choice,
    check_device,
    check_grad_clip,
    check_int,
    check_positive_int,
    check_rates,
    check_seed,
    check_sentences,
    check_str,
)
from course_pkg.data.translation import (
    Vocab,
    tokenize,
    tokenize_pairs,
    truncate_pad,
)
from course_pkg.device import seed_everything
from course_pkg.models.gpt import GPT, POSITIONAL, GPTSettings, generate
from course_pkg.training.loop import (
    linear_warmup,
    masked_cross_entropy,
    optimizer_step,
    training_record,
)

SEP = "<sep>"
Pair = tuple[str, str]


GPT_SETTINGS = GPTSettings()
# The inference chapter's draft for speculative decoding: its target's
# settings (GPT_SETTINGS) but for a narrower FFN and half the blocks.
DRAFT_SETTINGS = GPTSettings(ffn_num_hiddens=64, num_blks=2)


def translation_lm_vocab(pairs: Sequence[Pair], min_freq: int = 1) -> Vocab:
    """One vocabulary for both languages, with ``<sep>`` after the four specials.

    Args:
        pairs: the training (English, French) pairs. min_freq: see Vocab.
    Returns:
        A :class:`course_pkg.data.translation.Vocab` whose reserved tokens include SEP.
    """
    english, french = tokenize_pairs(pairs)
    return Vocab(english + french, min_freq=min_freq, reserved_tokens=[SEP])


def prompt_ids(sentence: str, vocab: Vocab) -> list[int]:
    """The ids of ``english <sep>``: what the model continues to translate.

    Raises:
        TypeError: if sentence is not a str.
    """
    check_str("sentence", sentence)
    return vocab[tokenize(sentence)] + [vocab[SEP]]


def _prompts_by_length(
    sentences: Sequence[str], vocab: Vocab
) -> tuple[list[list[int]], dict[int, list[int]]]:
    """The prompts of sentences, and which of them share a length: prompts
    of one length are continued together (a batch that needs no padding).

    Returns:
        (prompts, groups): N lists of ids (:func:`prompt_ids`), and
        ``{length: indices of the prompts of that length}`` in the order of
        their first appearance.
    """
    prompts = [prompt_ids(sentence, vocab) for sentence in sentences]
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        groups.setdefault(len(ids), []).append(i)
    return prompts, groups


def translation_lm_arrays(
    pairs: Sequence[Pair], vocab: Vocab, num_steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and French-only labels of ``english <sep> french <eos>``.

    For a sequence s of length L, the input is s[:-1] and the label at
    position i is s[i + 1] where that is a French word or the final
    ``<eos>`` (i.e. from the ``<sep>`` position on), and ``<pad>``
    (ignored by the loss) on the English part. Both are cut or padded to
    num_steps.

    Args:
        pairs: N (English, French) strings. vocab: from
            :func:`translation_lm_vocab`. num_steps: T.
    Returns:
        X (N, T) and Y (N, T) long tensors on the CPU.
    Raises:
        ValueError: if num_steps < 1.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    inputs, labels = [], []
    for english, french in pairs:
        prompt = prompt_ids(english, vocab)
        sequence = prompt + vocab[tokenize(french)] + [vocab.eos]
        hidden = [vocab.pad] * (len(prompt) - 1)  # English: no loss
        inputs.append(truncate_pad(sequence[:-1], num_steps, vocab.pad))
        labels.append(
            truncate_pad(
                hidden + sequence[len(prompt) :], num_steps, vocab.pad
            )
        )
    shape = (len(pairs), num_steps)
    return (
        torch.tensor(inputs, dtype=torch.long).reshape(shape),
        torch.tensor(labels, dtype=torch.long).reshape(shape),
    )


class _LengthBuckets:
    """Batches of indices of similar lengths, in a new random order each epoch.

    Each epoch: shuffle, sort by length (stably, so equal lengths stay
    shuffled), cut into batches, shuffle the batches.
    """

    def __init__(self, lengths: torch.Tensor, batch_size: int, seed: int):
        self.lengths, self.batch_size = lengths, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self):
        order = torch.randperm(len(self.lengths), generator=self.generator)
        order = order[torch.argsort(self.lengths[order], stable=True)]
        batches = order.split(self.batch_size)
        for i in torch.randperm(len(batches), generator=self.generator):
            yield batches[i].tolist()


def translation_lm_loader(
    pairs: Sequence[Pair],
    vocab: Vocab,
    batch_size: int,
    num_steps: int,
    shuffle: bool = True,
    seed: int = 0,
) -> DataLoader:
    """Batches ``(X (B, T'), Y (B, T'))`` of :func:`translation_lm_arrays`.

    Each batch is cut to T' <= T, its longest input: the padding columns
    only cost time. With shuffle, sequences of similar lengths are batched
    together (little padding) and the batches come in a new random order
    every epoch, drawn from a generator seeded with seed (the same epochs in
    every run); without, batches follow the order of pairs.

    Args:
        pairs, vocab, num_steps: as :func:`translation_lm_arrays`.
        batch_size: B. shuffle, seed: see above.
    Returns:
        A DataLoader over CPU tensors.
    Raises:
        ValueError: if batch_size or num_steps < 1.
    """
    _check_translation_lm_loader(batch_size, seed)
    X, Y = translation_lm_arrays(pairs, vocab, num_steps)
    if shuffle:
        batches = _LengthBuckets((X != vocab.pad).sum(dim=1), batch_size, seed)
    else:
        batches = BatchSampler(range(len(X)), batch_size, drop_last=False)
    # The sampler yields whole batches of indices: dataset[list] is fast.
    return DataLoader(
        TensorDataset(X, Y),
        sampler=batches,
        batch_size=None,
        collate_fn=functools.partial(_trim_padding, pad=vocab.pad),
    )


def _check_translation_lm_loader(batch_size: object, seed: object) -> None:
    """batch_size B an int >= 1; seed an int."""
    check_positive_int("batch_size", batch_size)
    check_seed("seed", seed)


def _trim_padding(
    batch: tuple[torch.Tensor, torch.Tensor], pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the columns that are padding in every row of X.

    Padding sits at the end and the model is causal, so no score at a real
    position changes; only the wasted work goes.
    """
    X, Y = batch
    longest = int((X != pad).sum(dim=1).max()) if X.numel() else 0
    return X[:, : max(longest, 1)], Y[:, : max(longest, 1)]


def train_lm(
    model: nn.Module,
    batches: Iterable,
    lr_per_epoch: Sequence[float],
    pad: int,
    grad_clip: float | None = 1.0,
    device: torch.device | str | None = None,
    warmup_steps: int = 0,
) -> dict[str, Any]:
    """Train a language model with Adam, one learning rate per epoch.

    Args:
        model: maps X (B, T) to (B, T, V) scores.
        batches: re-iterable over ``(X (B, T), Y (B, T))``; labels equal to
            pad are ignored (:func:`course_pkg.training.loop.masked_cross_entropy`).
        lr_per_epoch: Adam's learning rate in each epoch (their number is
            the number of epochs).
        pad: the ignored label. grad_clip: largest gradient norm, or None.
        device: where to train; None: the model's device.
        warmup_steps: W; update s (counted from 1 over the whole run) uses
            its epoch's rate times :func:`course_pkg.training.loop.linear_warmup`
            ``(s, W)``, a linear ramp that reaches the epoch's rate at update
            W. 0: no warm-up.
    Returns:
        dict with ``epoch_loss`` (label-weighted mean per epoch),
        ``step_loss`` (per batch), ``step_lr`` (the rate of each update) and
        ``train_seconds``; the model is left in eval mode.
    Raises:
        TypeError: if a learning rate is not a number or warmup_steps not an
            int.
        ValueError: if lr_per_epoch is empty, a rate is not finite > 0, or
            warmup_steps < 0.
    """
    device = _check_train_lm(
        lr_per_epoch, pad, grad_clip, device, warmup_steps
    )
    if device is None:
        device = next(model.parameters()).device
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr_per_epoch[0])
    epoch_loss: list[float] = []
    step_loss: list[float] = []
    step_lr: list[float] = []
    start = time.perf_counter()
    for lr in lr_per_epoch:
        loss_sum, num_labels = 0.0, 0
        for X, Y in batches:
            step_lr.append(lr * linear_warmup(len(step_lr) + 1, warmup_steps))
            for group in optimizer.param_groups:
                group["lr"] = step_lr[-1]
            X, Y = X.to(device), Y.to(device)
            loss = masked_cross_entropy(model(X), Y, pad)
            step_loss.append(optimizer_step(model, optimizer, loss, grad_clip))
            count = int((Y != pad).sum())
            loss_sum, num_labels = (
                loss_sum + step_loss[-1] * count,
                num_labels + count,
            )
        epoch_loss.append(loss_sum / max(num_labels, 1))
    record = training_record(model, start, epoch_loss, step_loss)
    return {**record, "step_lr": step_lr}


def _check_train_lm(
    lr_per_epoch: object,
    pad: object,
    grad_clip: object,
    device: object,
    warmup_steps: object,
) -> torch.device | None:
    """lr_per_epoch a non-empty sequence of finite numbers > 0; pad an int;
    grad_clip None or > 0; device None or usable; warmup_steps an int >= 0.
    Returns the device as a torch.device (or None)."""
    check_rates("lr_per_epoch", lr_per_epoch)
    check_int("pad", pad)
    check_grad_clip(grad_clip)
    device = check_device("device", device)
    linear_warmup(1, warmup_steps)  # refuses a bad warmup_steps up front
    return device


def train_translation_gpt(
    pairs: Sequence[Pair],
    vocab: Vocab,
    settings: GPTSettings = GPT_SETTINGS,
    *,
    seed: int = 0,
    positional: str = "sinusoidal",
    num_epochs: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[GPT, dict[str, Any]]:
    """A GPT trained on the translation pairs, as the GPT and inference
    chapters train theirs: batches, then weights drawn after
    ``seed_everything(seed)``, then :func:`train_lm`.

    Args:
        pairs, vocab: the pairs and their :func:`translation_lm_vocab`.
        settings: sizes and budget. seed: of the batches' order and the
            weights. positional: as in :class:`~course_pkg.models.gpt.GPT`.
        num_epochs: the first num_epochs of the budget's rates (None: all).
        device: where to train (None: the CPU).
    Returns:
        The model (eval mode, need_weights off) and train_lm's history.
    Raises:
        TypeError, ValueError: naming a bad argument (e.g. num_epochs not
            in [1, len(settings.lr_per_epoch)]), before any work.
    """
    _check_train_translation_gpt(
        settings, seed, positional, num_epochs, device
    )
    loader = translation_lm_loader(
        pairs, vocab, settings.batch_size, settings.num_steps, seed=seed
    )
    seed_everything(seed)
    model = GPT(len(vocab), **settings.model_sizes(), positional=positional)
    model.need_weights = False
    lr_per_epoch = settings.lr_per_epoch[:num_epochs]
    history = train_lm(
        model, loader, lr_per_epoch, vocab.pad, settings.grad_clip, device
    )
    return model.eval(), history


def _check_train_translation_gpt(
    settings: object,
    seed: object,
    positional: object,
    num_epochs: object,
    device: object,
) -> None:
    """settings a GPTSettings; seed an int; positional one of the GPT's;
    num_epochs None or an int in [1, len(settings.lr_per_epoch)]; device
    None or usable."""
    if not isinstance(settings, GPTSettings):
        raise TypeError(
            f"settings must be a GPTSettings, got {type(settings).__name__}"
        )
    check_seed("seed", seed)
    check_choice("positional", positional, POSITIONAL)
    if num_epochs is not None:
        check_positive_int("num_epochs", num_epochs)
        if num_epochs > len(settings.lr_per_epoch):
            raise ValueError(
                f"num_epochs must be <= len(settings.lr_per_epoch) = "
                f"{len(settings.lr_per_epoch)}, got {num_epochs}"
            )
    check_device("device", device)


def translate_lm(
    model: GPT,
    sentences: Sequence[str],
    vocab: Vocab,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = 1,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> list[list[str]]:
    """Translate by continuing ``english <sep>`` until ``<eos>``.

    Prompts of the same length are continued together in one batch (a GPT
    batch needs no padding then), in the order of their first appearance.

    Args:
        model: a trained :class:`course_pkg.models.gpt.GPT`. sentences: English
            sentences in normal form. vocab: the model's vocabulary.
        max_new_tokens: most French tokens (``<eos>`` included).
        temperature, top_k, top_p, generator, use_cache: as in
            :func:`course_pkg.models.gpt.generate`; the default top_k=1 is greedy.
    Returns:
        One list of French tokens per sentence, without ``<eos>``.
    Raises:
        TypeError: if sentences is not a list/tuple of str (a str would be
            read one character per sentence).
    """
    check_sentences("sentences", sentences)
    device = next(model.parameters()).device
    prompts, groups = _prompts_by_length(sentences, vocab)
    translations: list[list[str]] = [[] for _ in sentences]
    for length, members in groups.items():
        prompt = torch.tensor(
            [prompts[i] for i in members], dtype=torch.long, device=device
        )  # (B, T0)
        tokens = generate(
            model,
            prompt,
            min(max_new_tokens, model.max_len - length),
            temperature,
            top_k,
            top_p,
            vocab.eos,
            generator,
            use_cache,
        )[:, length:]
        for i, row in zip(members, tokens.tolist()):
            row = row[: row.index(vocab.eos)] if vocab.eos in row else row
            translations[i] = vocab.to_tokens(row)
    return translations
