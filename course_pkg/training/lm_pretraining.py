"""Pretraining a language model on a token stream (chapter "Pretraining on real text").

A text becomes one long 1-D tensor of ids; training reads random windows of
it, and validation reads fixed windows of a held-out text. The pieces, in the
order the chapter introduces them:

- :class:`CharTokenizer`: one id per character, the tokenizer every other is
  compared with (``course_pkg.data.bpe``'s tokenizers have the same ``encode``,
  ``decode`` and ``len``);
- :func:`random_windows` and :func:`validation_windows`: the batches;
- :class:`NGramModel`: counted unigram, bigram, trigram... models with add-k
  smoothing, the baselines a network has to beat;
- :func:`bits_per_byte`: a loss per token turned into bits per byte of text,
  so that tokenizers with different token lengths compare;
- :func:`warmup_cosine`: the learning-rate schedule of GPT-2-style
  pretraining, a linear warm-up then a cosine decay;
- :class:`LMSettings`, :func:`adamw`, :func:`lm_loss`, :func:`evaluate_lm`
  and :func:`pretrain_lm`: the loop (AdamW, clipping, periodic validation),
  with a budget in updates (so in tokens), never in seconds.

Letters: N tokens in a stream, B windows in a batch, M fixed validation
windows, T tokens in a window (``num_steps``), V the vocabulary size, W
warm-up updates, S updates in all.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from course_pkg.checks import (
    check_callable,
    check_cpu_or_on,
    check_device,
    check_generator,
    check_grad_clip,
    check_int,
    check_integer_dtype,
    check_logits,
    check_nonnegative_int,
    check_nonnegative_number,
    check_positive_int,
    check_positive_number,
    check_range,
    check_same_device,
    check_seed,
    check_str,
    check_tensor,
)
from course_pkg.device import model_device
from course_pkg.training.loop import linear_warmup, optimizer_step

# ------------------------------------------------------------ the tokens


class CharTokenizer:
    """One id per character: the characters of ``text``, sorted, are the
    vocabulary.

    Args:
        text: the text whose characters make the vocabulary (the training
            text; a held-out text must not bring new ones).
    Raises:
        TypeError: if text is not a str. ValueError: if it is empty.
    """

    def __init__(self, text: str):
        _check_char_tokenizer_args(text)
        self.chars = sorted(set(text))
        self._ids = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """The ids of text's characters (ValueError names one not in the
        vocabulary)."""
        _check_char_tokenizer_encode(text, self._ids)
        return [self._ids[c] for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (ints in [0, V)); ValueError names one
        outside."""
        ids = _id_list("ids", ids, len(self))
        return "".join(self.chars[i] for i in ids)


def _check_char_tokenizer_args(text: object) -> None:
    """text a non-empty str."""
    check_str("text", text)
    if not text:
        raise ValueError("text must hold at least one character")


def _check_char_tokenizer_encode(text: object, vocab: dict[str, int]) -> None:
    """text a str whose characters all lie in vocab (the tokenizer's ids)."""
    check_str("text", text)
    unknown = set(text) - vocab.keys()
    if unknown:
        raise ValueError(
            f"text holds characters outside the vocabulary: "
            f"{sorted(unknown)[:5]}"
        )


def _id_list(name: str, ids: Any, vocab_size: int) -> list[int]:
    """ids (a sequence of ints or a 1-D integer tensor) as a list, each
    checked to lie in [0, vocab_size)."""
    if isinstance(ids, torch.Tensor):
        check_tensor(name, ids, 1, "(N,)")
        check_integer_dtype(name, ids)
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(
            f"{name} must be a sequence of ints, got {type(ids).__name__}"
        )
    for i in ids:
        check_int(name, i)
        if not 0 <= i < vocab_size:
            raise ValueError(f"{name} must lie in [0, {vocab_size}), got {i}")
    return list(ids)


def _check_stream(name: str, tokens: Any, min_len: int = 1) -> None:
    """Refuse anything but a 1-D int64/int32 tensor of at least ``min_len``
    ids (TypeError, ValueError)."""
    check_tensor(name, tokens, 1, "(N,)")
    check_integer_dtype(name, tokens, "token ids")
    if tokens.numel() < min_len:
        raise ValueError(
            f"{name} must hold at least {min_len} tokens, got {tokens.numel()}"
        )


def _check_windows(X: Any, Y: Any, device: torch.device, names: str) -> None:
    """Windows X, Y: (M, T) integer tensors of one shape, each on the CPU or
    ``device``; ``names`` gives the arguments' names ("X Y")."""
    name_X, name_Y = names.split()
    for name, tensor in ((name_X, X), (name_Y, Y)):
        check_tensor(name, tensor, 2, "(M, T)")
        check_integer_dtype(name, tensor, "token ids")
    check_cpu_or_on(device, **{name_X: X, name_Y: Y})
    if X.shape != Y.shape:
        raise ValueError(
            f"{name_X} and {name_Y} must share one shape (M, T), got "
            f"{tuple(X.shape)} and {tuple(Y.shape)}"
        )


# ----------------------------------------------------------- the batches


def random_windows(
    tokens: torch.Tensor,
    batch_size: int,
    num_steps: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """B windows of T + 1 consecutive tokens, at starts drawn uniformly.

    Args:
        tokens: (N,) ids, N >= T + 1. batch_size: B. num_steps: T.
        generator: a CPU ``torch.Generator`` for the starts (None: torch's
            global one).
    Returns:
        X (B, T) the inputs and Y (B, T) the targets, ``Y[:, t] = X[:, t + 1]``
        for t < T - 1 (the targets are the inputs shifted by one), on
        tokens' device.
    Raises:
        TypeError, ValueError: tokens not a 1-D integer tensor of at least
            T + 1 ids, a size not an int >= 1, a generator that is not one.
    """
    _check_random_windows(tokens, batch_size, num_steps, generator)
    num_starts = tokens.numel() - num_steps  # starts 0 .. N - T - 1
    starts = torch.randint(num_starts, (batch_size,), generator=generator)
    offsets = torch.arange(num_steps + 1)
    windows = tokens[(starts[:, None] + offsets).to(tokens.device)]
    return windows[:, :-1], windows[:, 1:]  # (B, T), (B, T)


def _check_random_windows(
    tokens: object, batch_size: object, num_steps: object, generator: object
) -> None:
    """batch_size, num_steps (T) ints >= 1; tokens (N,) integer ids with
    N >= T + 1; generator None or a CPU torch.Generator."""
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_steps", num_steps)
    _check_stream("tokens", tokens, num_steps + 1)
    check_generator(generator)


def validation_windows(
    tokens: torch.Tensor, num_steps: int, max_windows: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed windows of a held-out stream: the same on every call.

    Non-overlapping windows at starts 0, T, 2T, ... (every one that fits);
    with ``max_windows`` (fewer than fit) the starts are instead that many,
    evenly spaced from the first to the last that fits, ``i * last // (M - 1)``
    (a cheaper estimate for periodic evaluation).

    Args:
        tokens: (N,) ids, N >= T + 1. num_steps: T. max_windows: None, or
            the number of windows, >= 1.
    Returns:
        X (M, T) and Y (M, T) as in :func:`random_windows`.
    Raises:
        TypeError, ValueError: as :func:`random_windows`.
    """
    _check_validation_windows(tokens, num_steps, max_windows)
    last = tokens.numel() - num_steps - 1  # the last start that fits
    starts = torch.arange(0, last + 1, num_steps)
    if max_windows is not None and max_windows < len(starts):
        # integer arithmetic: the same starts on every machine
        starts = torch.arange(max_windows) * last // max(max_windows - 1, 1)
    windows = tokens[
        (starts[:, None] + torch.arange(num_steps + 1)).to(tokens.device)
    ]
    return windows[:, :-1], windows[:, 1:]


def _check_validation_windows(
    tokens: object, num_steps: object, max_windows: object
) -> None:
    """num_steps (T) an int >= 1; max_windows None or an int >= 1; tokens
    (N,) integer ids with N >= T + 1."""
    check_positive_int("num_steps", num_steps)
    if max_windows is not None:
        check_positive_int("max_windows", max_windows)
    _check_stream("tokens", tokens, num_steps + 1)


# ------------------------------------------------------ count baselines


class NGramModel:
    """A counted n-gram model with add-k smoothing.

    p(w | c) = (count(c, w) + k) / (count(c) + k V), where c is the n - 1
    tokens before w and count(c) counts c as a context (followed by any
    token), so the probabilities over w sum to 1 for every c, seen or not.
    An unseen context gets the uniform 1 / V. Counts are kept as sorted keys
    (a context and token read as one base-V number), so V^n may be large.

    Args:
        tokens: (N,) training ids in [0, V), N >= order. order: n (1:
            unigram, 2: bigram, 3: trigram, ...). vocab_size: V. k: the
            added count, > 0.
    Raises:
        TypeError, ValueError: tokens not a 1-D integer tensor of at least n
            ids in [0, V); order, vocab_size not ints >= 1; k not > 0;
            V^n too large for int64 keys.
    """

    def __init__(
        self, tokens: torch.Tensor, order: int, vocab_size: int, k: float
    ):
        tokens = _check_ngram_model_args(tokens, order, vocab_size, k)
        self.order, self.vocab_size, self.k = order, vocab_size, k
        self._keys, self._counts = torch.unique(
            self._ngram_keys(tokens, order), return_counts=True
        )
        # contexts: every (n-1)-gram that some token follows
        self._context_keys, self._context_counts = torch.unique(
            self._ngram_keys(tokens[:-1], order - 1), return_counts=True
        )

    def _ngram_keys(self, tokens: torch.Tensor, n: int) -> torch.Tensor:
        """(N - n + 1,) the n-grams of tokens as base-V numbers."""
        count = tokens.numel() - n + 1
        keys = torch.zeros(max(count, 0), dtype=torch.long)
        for j in range(n):
            keys = keys * self.vocab_size + tokens[j : j + count]
        return keys

    @staticmethod
    def _lookup(keys: torch.Tensor, counts: torch.Tensor, query: torch.Tensor):
        if keys.numel() == 0:
            return torch.zeros_like(query)
        where = torch.searchsorted(keys, query).clamp(max=keys.numel() - 1)
        return torch.where(keys[where] == query, counts[where], 0)

    def log_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """log p of every token of a stream that has n - 1 tokens before it.

        Args:
            tokens: (N,) ids in [0, V), N >= n.
        Returns:
            (N - n + 1,) float64 natural logs: entry i scores tokens[i + n - 1]
            given the n - 1 tokens before it.
        Raises:
            TypeError, ValueError: as the constructor's tokens.
        """
        tokens = _check_ngram_model_log_probs(
            tokens, self.order, self.vocab_size
        )
        query = self._ngram_keys(tokens, self.order)
        joint = self._lookup(self._keys, self._counts, query).double()
        if self.order == 1:
            context = torch.full_like(joint, float(self._counts.sum()))
        else:
            context = self._lookup(
                self._context_keys,
                self._context_counts,
                query // self.vocab_size,
            ).double()
        k, V = self.k, self.vocab_size
        return ((joint + k) / (context + k * V)).log()


def _check_ngram_model_args(
    tokens: object, order: object, vocab_size: object, k: object
) -> torch.Tensor:
    """order (n), vocab_size (V) ints >= 1, k > 0, V^n < 2**63; tokens (N,)
    integer ids in [0, V), N >= n. Returns tokens as a CPU int64 tensor."""
    check_positive_int("order", order)
    check_positive_int("vocab_size", vocab_size)
    check_positive_number("k", k)
    _check_stream("tokens", tokens, order)
    if vocab_size**order >= 2**63:
        raise ValueError(
            f"vocab_size ** order must be < 2**63 for int64 keys, got "
            f"{vocab_size}**{order}"
        )
    tokens = tokens.detach().cpu().long()
    check_range("tokens", tokens, 0, vocab_size - 1)
    return tokens


def _check_ngram_model_log_probs(
    tokens: object, order: int, vocab_size: int
) -> torch.Tensor:
    """tokens (N,) integer ids in [0, vocab_size), N >= order. Returns
    tokens as a CPU int64 tensor."""
    _check_stream("tokens", tokens, order)
    tokens = tokens.detach().cpu().long()
    check_range("tokens", tokens, 0, vocab_size - 1)
    return tokens


# ----------------------------------------------------- bits per byte


def bits_per_byte(
    nats_per_token: float, num_tokens: int, num_bytes: int
) -> float:
    """A mean loss per token as bits per byte of the text.

    bits/byte = nats_per_token * (num_tokens / num_bytes) / ln 2: the total
    information of the text, in bits, over its UTF-8 bytes. A tokenizer with
    longer tokens has a larger loss per token and fewer tokens; bits per byte
    compare them (and the count models) on one scale.

    Args:
        nats_per_token: mean cross-entropy per token (natural log), >= 0.
        num_tokens: tokens of the text, >= 1. num_bytes: its UTF-8 bytes,
            >= 1.
    Returns:
        The bits per byte, a float.
    Raises:
        TypeError, ValueError: a loss that is not a finite number >= 0, a
            count that is not an int >= 1.
    """
    _check_bits_per_byte(nats_per_token, num_tokens, num_bytes)
    return nats_per_token * num_tokens / num_bytes / math.log(2)


def _check_bits_per_byte(
    nats_per_token: object, num_tokens: object, num_bytes: object
) -> None:
    """nats_per_token a finite number >= 0; num_tokens, num_bytes ints
    >= 1."""
    check_nonnegative_number("nats_per_token", nats_per_token)
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("num_bytes", num_bytes)


# --------------------------------------------------- the learning rate


def warmup_cosine(
    step: int, warmup_steps: int, total_steps: int, min_factor: float = 0.1
) -> float:
    """Factor on the peak learning rate at one update: linear warm-up, then
    cosine decay to ``min_factor`` (Loshchilov & Hutter's cosine, one cycle).

    With s the update (from 1), W = warmup_steps and S = total_steps:
    s <= W: s / W (:func:`course_pkg.training.loop.linear_warmup`); W < s <= S:
    m + (1 - m) (1 + cos(pi (s - W) / (S - W))) / 2 with m = min_factor, so
    1 just after the warm-up and m at s = S; s > S: m.

    Args:
        step: the update's number, >= 1. warmup_steps: W >= 0 (0: none).
        total_steps: S >= W, >= 1. min_factor: m in [0, 1].
    Returns:
        The factor, in [m, 1] after the warm-up.
    Raises:
        TypeError, ValueError: non-int steps, step < 1, W < 0, S < max(W, 1),
            m outside [0, 1].
    """
    warmup = _check_warmup_cosine(step, warmup_steps, total_steps, min_factor)
    if step <= warmup_steps:
        return warmup
    if step >= total_steps:
        return float(min_factor)
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_factor + (1 - min_factor) * 0.5 * (
        1 + math.cos(math.pi * progress)
    )


def _check_warmup_cosine(
    step: object, warmup_steps: object, total_steps: object, min_factor: object
) -> float:
    """total_steps (S) an int >= 1; step, warmup_steps (W) as
    :func:`linear_warmup` checks them, W <= S; min_factor in [0, 1].
    Returns the warm-up factor, ``linear_warmup(step, warmup_steps)``."""
    check_positive_int("total_steps", total_steps)
    warmup = linear_warmup(step, warmup_steps)  # checks step, warmup_steps
    if warmup_steps > total_steps:
        raise ValueError(
            f"warmup_steps ({warmup_steps}) must be <= total_steps "
            f"({total_steps})"
        )
    check_nonnegative_number("min_factor", min_factor)
    if min_factor > 1:
        raise ValueError(f"min_factor must lie in [0, 1], got {min_factor}")
    return warmup


# ------------------------------------------------------------ the loop


@dataclass(frozen=True)
class LMSettings:
    """A pretraining run: batches, budget, AdamW and its schedule.

    The budget is ``num_updates`` updates of ``batch_size`` windows of
    ``num_steps`` tokens: num_updates * B * T tokens.
    """

    batch_size: int = 32
    num_steps: int = 128  # T, the context
    num_updates: int = 2000
    lr: float = 3e-3  # the peak learning rate
    warmup_steps: int = 100
    min_lr_factor: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float | None = 1.0
    eval_every: int = 250  # updates between validation losses
    eval_batch_size: int = 64
    seed: int = 0  # the windows' generator

    def __post_init__(self) -> None:
        _check_lm_settings_args(self)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lr_at(self, update: int) -> float:
        """The learning rate of one update (from 1): lr times
        :func:`warmup_cosine`."""
        return self.lr * warmup_cosine(
            update, self.warmup_steps, self.num_updates, self.min_lr_factor
        )


def _check_lm_settings_args(settings: LMSettings) -> None:
    """The fields: batch_size, num_steps, eval_every, eval_batch_size ints
    >= 1; num_updates an int >= 1, warmup_steps <= it, seed an int; lr > 0;
    min_lr_factor in [0, 1]; weight_decay >= 0; betas in [0, 1)."""
    for name in (
        "batch_size",
        "num_steps",
        "eval_every",
        "eval_batch_size",
        "num_updates",
    ):
        check_positive_int(name, getattr(settings, name))
    check_nonnegative_int("warmup_steps", settings.warmup_steps)
    check_seed("seed", settings.seed)
    check_positive_number("lr", settings.lr)
    for name in ("min_lr_factor", "weight_decay", "beta1", "beta2"):
        check_nonnegative_number(name, getattr(settings, name))
    check_grad_clip(settings.grad_clip)
    if settings.min_lr_factor > 1:
        raise ValueError(
            f"min_lr_factor must lie in [0, 1], got {settings.min_lr_factor}"
        )
    for name in ("beta1", "beta2"):
        if getattr(settings, name) >= 1:
            raise ValueError(
                f"{name} must lie in [0, 1), got {getattr(settings, name)}"
            )
    warmup_cosine(1, settings.warmup_steps, settings.num_updates)


# The brief run of the chapter "Pretraining on real text" (book/pretraining.ipynb,
# which `make claims CHAPTERS=pretraining` runs over seeds 0-9): a GPT-2 of 2
# blocks, width 64, 4 heads, on a context of 64 characters, 800 updates of 32
# windows (1.6 M tokens).
BRIEF_SETTINGS = LMSettings(
    batch_size=32,
    num_steps=64,
    num_updates=800,
    lr=1e-2,
    warmup_steps=40,
    eval_every=100,
)
BRIEF_MODEL = {"num_hiddens": 64, "num_heads": 4, "num_blks": 2}


def adamw(model: nn.Module, settings: LMSettings) -> torch.optim.AdamW:
    """AdamW (Loshchilov & Hutter) with weight decay on the matrices only.

    Weights with two or more dimensions (projections, embeddings) decay;
    biases and norm gains do not (shrinking a gain towards 0 is not a
    simpler model). A tied weight is one parameter and appears once.

    Args:
        model: whose parameters are trained. settings: lr, weight_decay,
            beta1, beta2.
    Returns:
        A ``torch.optim.AdamW`` with two parameter groups (decay, no decay).
    """
    _check_adamw(model, settings)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=settings.lr,
        betas=(settings.beta1, settings.beta2),
        weight_decay=settings.weight_decay,
    )


def _check_adamw(model: object, settings: object) -> None:
    """model an nn.Module; settings an LMSettings."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be an nn.Module, got {type(model).__name__}"
        )
    if not isinstance(settings, LMSettings):
        raise TypeError(
            f"settings must be LMSettings, got {type(settings).__name__}"
        )


def _vocab_size(model: nn.Module) -> int | None:
    """The model's vocabulary size V (its ``vocab_size``, as the package's
    models have), or None when it does not say."""
    size = getattr(model, "vocab_size", None)
    if isinstance(size, int) and not isinstance(size, bool) and size >= 1:
        return size
    return None


def _check_ids(name: str, ids: torch.Tensor, vocab_size: int | None) -> None:
    """On the CPU, refuse ids outside [0, V) (below 0 when V is None), with
    ValueError; ``name`` says which argument (e.g. "Y (the targets)")."""
    if ids.device.type != "cpu" or ids.numel() == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or (vocab_size is not None and high >= vocab_size):
        bound = "V" if vocab_size is None else vocab_size
        raise ValueError(
            f"{name} must hold token ids in [0, {bound}) (the model's "
            f"vocabulary), got values in [{low}, {high}]"
        )


def lm_loss(
    model: nn.Module, X: torch.Tensor, Y: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of a language model on a batch.

    Args:
        model: maps X (B, T) to (B, T, V) scores. X: (B, T) inputs. Y: (B, T)
            targets, on X's device.
    Returns:
        A scalar tensor (float32 at least), differentiable.
    Raises:
        TypeError, ValueError: X, Y not (B, T) integer tensors of one shape
            and device, scores not (B, T, V) floats.
        ValueError: (CPU tensors) a target in Y outside [0, V), e.g.
            cross_entropy's ignore_index -100: checked before the forward
            when the model has a ``vocab_size``, else before the loss.
    """
    vocab_size = _check_lm_loss(model, X, Y)
    scores = model(X)
    check_logits("model(X)", scores, 3, "(B, T, V)")
    if vocab_size is None:
        _check_ids("Y (the targets)", Y, scores.shape[-1])
    dtype = torch.promote_types(scores.dtype, torch.float32)
    return F.cross_entropy(scores.flatten(0, 1).to(dtype), Y.flatten().long())


def _check_lm_loss(model: nn.Module, X: object, Y: object) -> int | None:
    """X, Y (B, T) integer tensors of one shape and device; on the CPU, Y's
    ids in [0, V). Returns V, the model's vocab_size (None: unknown)."""
    check_tensor("X", X, 2, "(B, T)")
    check_integer_dtype("X", X, "token ids")
    check_tensor("Y", Y, 2, "(B, T)")
    check_integer_dtype("Y", Y, "token ids")
    check_same_device(X=X, Y=Y)
    if X.shape != Y.shape:
        raise ValueError(
            f"X and Y must share one shape (B, T), got {tuple(X.shape)} "
            f"and {tuple(Y.shape)}"
        )
    vocab_size = _vocab_size(model)
    _check_ids("Y (the targets)", Y, vocab_size)
    return vocab_size


def evaluate_lm(
    model: nn.Module, X: torch.Tensor, Y: torch.Tensor, batch_size: int = 64
) -> float:
    """Mean loss per token over fixed windows, without gradients.

    Args:
        model: as :func:`lm_loss` (evaluated in eval mode, its mode
            restored after). X, Y: (M, T) windows
            (:func:`validation_windows`), on the CPU or the model's device.
        batch_size: windows per forward pass.
    Returns:
        The mean cross-entropy in nats per token over all M * T targets.
    """
    device = _check_evaluate_lm(model, X, Y, batch_size)
    was_training = model.training
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(X), batch_size):
            X_i, Y_i = X[i : i + batch_size], Y[i : i + batch_size]
            loss = lm_loss(model, X_i.to(device), Y_i.to(device))
            total += loss.item() * Y_i.numel()
    model.train(was_training)
    return total / Y.numel()


def _check_evaluate_lm(
    model: object, X: object, Y: object, batch_size: object
) -> torch.device:
    """batch_size an int >= 1; model a module; X, Y (M, T) integer windows
    of one shape on the CPU or the model's device. Returns that device."""
    check_positive_int("batch_size", batch_size)
    device = model_device(model)
    _check_windows(X, Y, device, "X Y")
    return device


def _check_run(
    model: Any,
    train_tokens: Any,
    valid_X: Any,
    valid_Y: Any,
    settings: Any,
    device: Any,
    on_eval: Any,
    aux_loss: Any,
) -> torch.device:
    """:func:`pretrain_lm`'s arguments checked; the device to train on."""
    if not isinstance(settings, LMSettings):
        raise TypeError(
            f"settings must be LMSettings, got {type(settings).__name__}"
        )
    _check_stream("train_tokens", train_tokens, settings.num_steps + 1)
    device = check_device("device", device)
    if device is None:
        device = model_device(model)
    check_cpu_or_on(device, train_tokens=train_tokens)
    _check_windows(valid_X, valid_Y, device, "valid_X valid_Y")
    # every id against the vocabulary before the first update, not at the
    # update that happens to draw a bad one
    vocab_size = _vocab_size(model)
    for name, ids in (
        ("train_tokens", train_tokens),
        ("valid_X", valid_X),
        ("valid_Y", valid_Y),
    ):
        _check_ids(name, ids, vocab_size)
    for name, hook in (("on_eval", on_eval), ("aux_loss", aux_loss)):
        if hook is not None:
            check_callable(name, hook)
    return device


def _train_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    lr: float,
    grad_clip: float | None,
    aux_loss: Callable[[nn.Module], torch.Tensor] | None,
) -> float:
    """One AdamW update at rate lr on a batch (X, Y), on the language-model
    loss plus aux_loss(model) where given; the language-model loss."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    model.train()
    loss = lm_loss(model, *batch)
    total = loss if aux_loss is None else loss + aux_loss(model)
    optimizer_step(model, optimizer, total, grad_clip)
    return loss.item()


def _progress_bar(settings: LMSettings, progress: bool | None) -> tqdm:
    """Updates 0..S with tqdm: its rate in tokens/s, the loss beside it;
    shown on a tty when progress is None."""
    show = sys.stderr.isatty() if progress is None else progress
    return tqdm(
        range(settings.num_updates + 1),
        disable=not show,
        unit="tok",
        unit_scale=settings.batch_size * settings.num_steps,
    )


def pretrain_lm(
    model: nn.Module,
    train_tokens: torch.Tensor,
    valid_X: torch.Tensor,
    valid_Y: torch.Tensor,
    settings: LMSettings,
    *,
    device: torch.device | str | None = None,
    progress: bool | None = None,
    on_eval: Callable[[int, nn.Module, float], None] | None = None,
    aux_loss: Callable[[nn.Module], torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Train a language model, (B, T) ids -> (B, T, V) scores, on random
    windows of train_tokens (N,). Update s = 1..S: an AdamW step on
    :func:`lm_loss` plus ``aux_loss(model)`` where given (e.g. a weighted
    load-balancing loss), at the rate ``lr * warmup_cosine(s)``, clipped.
    At s = 0, every ``eval_every`` updates and at S: the loss on the windows
    (valid_X, valid_Y) (M, T), then ``on_eval(s, model, loss)``. device:
    None, the model's; progress: a tqdm bar (None: on a tty). Raises
    TypeError/ValueError on bad arguments, before the first update. Returns
    {step_loss (the language-model loss), step_lr, eval_updates, eval_loss
    (nats/token), num_tokens, train_seconds, tokens_per_s, settings}; the
    model is left in eval mode."""
    device = _check_run(
        model, train_tokens, valid_X, valid_Y, settings, device, on_eval,
        aux_loss,
    )  # fmt: skip
    s, seconds = settings, 0.0
    optimizer = adamw(model.to(device), s)
    generator = torch.Generator().manual_seed(s.seed)
    record = {
        n: [] for n in ("step_loss", "step_lr", "eval_updates", "eval_loss")
    }
    for update in (bar := _progress_bar(s, progress)):
        if update > 0:
            start = time.perf_counter()
            X, Y = random_windows(
                train_tokens, s.batch_size, s.num_steps, generator
            )
            lr = s.lr_at(update)
            batch = (X.to(device), Y.to(device))
            loss = _train_update(
                model, optimizer, batch, lr, s.grad_clip, aux_loss
            )
            seconds += time.perf_counter() - start  # .item() waited for it
            record["step_loss"].append(loss)
            record["step_lr"].append(lr)
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        if update % s.eval_every == 0 or update == s.num_updates:
            record["eval_updates"].append(update)
            record["eval_loss"].append(
                evaluate_lm(model.eval(), valid_X, valid_Y, s.eval_batch_size)
            )
            if on_eval is not None:
                on_eval(update, model, record["eval_loss"][-1])
    total = s.num_updates * s.batch_size * s.num_steps
    speed = total / seconds if seconds > 0 else float("nan")
    record |= dict(num_tokens=total, train_seconds=seconds, tokens_per_s=speed)
    return record | dict(settings=s.as_dict())
