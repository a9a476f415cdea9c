"""Two small synthetic tasks that show what attention layers can learn.

Chapter "Multi-head attention": :class:`NeighbourReader` reads, at every
position, the token one step to the left and one to the right; one head can
attend to only one side at a time, two heads can do both. Chapter
"Self-attention and positional encoding": :class:`CopyBack` outputs at
position t the token of position t - shift, which only a model that knows
positions can do; it shows how sinusoidal and learned encodings extrapolate
to lengths not seen in training. Chapter "Attention at scale" trains the same
task with rotary positions inside a grouped-query attention layer
(``CopyBack(None, num_kv_heads=2, rotary=True)``).

Shape letters (see the package docstring): ``B`` batch, ``T`` sequence
length, ``V`` vocabulary size, ``D`` width.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_cpu_or_on,
    check_device,
    check_module_input,
    check_positive_int,
    check_seed,
    check_size,
    check_sizes,
    check_token_ids,
)
from course_pkg.device import seed_everything
from course_pkg.nn.attention import MultiHeadAttention
from course_pkg.nn.grouped_query import GroupedQueryAttention
from course_pkg.nn.position_scaling import scaled_rotary
from course_pkg.nn.positional import (
    LearnedPositionalEncoding,
    PositionalEncoding,
)

_Model = TypeVar("_Model", bound=nn.Module)


def neighbour_batch(
    batch_size: int,
    generator: torch.Generator,
    vocab_size: int = 8,
    num_steps: int = 8,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random token sequences and, for each position, its two neighbours.

    Args:
        batch_size: B. generator: the source of randomness, a CPU generator
            (the tokens are drawn on the CPU, so they are the same whatever
            the device). vocab_size: V. num_steps: T.
        device: where to put the tokens (default: the CPU).
    Returns:
        (tokens, left, right), each (B, T) long: ``left[:, t]`` is the token
        at t - 1 and ``right[:, t]`` the one at t + 1, cyclically.
    """
    device = _check_neighbour_batch(batch_size, vocab_size, num_steps, device)
    tokens = torch.randint(
        0, vocab_size, (batch_size, num_steps), generator=generator
    ).to(device)
    return tokens, tokens.roll(1, dims=1), tokens.roll(-1, dims=1)


def _check_neighbour_batch(
    batch_size: object, vocab_size: object, num_steps: object, device: object
) -> torch.device | None:
    """batch_size B, vocab_size V and num_steps T ints >= 1; device None or
    usable. Returns the device as a torch.device (or None)."""
    check_sizes(
        batch_size=batch_size, vocab_size=vocab_size, num_steps=num_steps
    )
    return check_device("device", device)


class NeighbourReader(nn.Module):
    """One multi-head attention layer, then two V-way classifiers (left and
    right neighbour). The input at each position is [one-hot token; one-hot
    position], so the attention can find a neighbour by its position.

    Args:
        num_heads: H. vocab_size: V. num_steps: T, the (fixed) length.
        num_hiddens: D, the attention's width.
    """

    def __init__(
        self,
        num_heads: int,
        vocab_size: int = 8,
        num_steps: int = 8,
        num_hiddens: int = 32,
    ):
        super().__init__()
        _check_neighbour_reader_args(
            num_heads, vocab_size, num_steps, num_hiddens
        )
        self.vocab_size, self.num_steps = vocab_size, num_steps
        in_size = vocab_size + num_steps
        self.attention = MultiHeadAttention(
            num_hiddens,
            num_heads,
            query_size=in_size,
            key_size=in_size,
            value_size=in_size,
        )
        self.readout = nn.Linear(num_hiddens, 2 * vocab_size)

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """The attention's input: tokens (B, T) ids in [0, V) -> (B, T, V + T)
        one-hots (TypeError, ValueError on other tokens)."""
        _check_neighbour_reader_features(self, tokens)
        steps = torch.arange(self.num_steps, device=tokens.device)
        positions = F.one_hot(steps, self.num_steps).expand(
            tokens.shape[0], -1, -1
        )
        one_hot = F.one_hot(tokens, self.vocab_size)
        return torch.cat([one_hot, positions], dim=-1).to(
            self.readout.weight.dtype
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Scores of the two neighbours: tokens (B, T) -> (B, T, 2, V), index
        0 scoring the left neighbour, 1 the right."""
        X = self.features(tokens)
        return self.readout(self.attention(X, X, X)).reshape(
            *tokens.shape, 2, self.vocab_size
        )


def _check_neighbour_reader_args(
    num_heads: object,
    vocab_size: object,
    num_steps: object,
    num_hiddens: object,
) -> None:
    """vocab_size V and num_steps T ints >= 1; num_hiddens D and num_heads H
    ints >= 1 with H dividing D."""
    check_sizes(vocab_size=vocab_size, num_steps=num_steps)
    check_block_sizes(num_hiddens, None, num_heads, 0.0)


def _check_neighbour_reader_features(
    model: NeighbourReader, tokens: object
) -> None:
    """tokens a (B, T) integer tensor of ids in [0, V), T the model's
    num_steps, on the model's device."""
    check_token_ids("tokens", tokens, model.vocab_size)
    check_module_input("tokens", tokens, model)
    if tokens.shape[1] != model.num_steps:
        raise ValueError(
            f"tokens must have shape (B, {model.num_steps}), "
            f"got {tuple(tokens.shape)}"
        )


def train_neighbour_reader(
    num_heads: int,
    num_steps: int = 300,
    seed: int = 0,
    *,
    device: torch.device | str = "cpu",
) -> NeighbourReader:
    """Train a :class:`NeighbourReader` with Adam on fresh random batches.

    Args:
        num_heads: H. num_steps: optimisation steps (batches of 128).
        seed: seeds the weights; the batches come from a CPU generator
            seeded 1, so they are the same on every device.
        device: where to train.
    Returns:
        The trained model, on device.
    """
    check_positive_int("num_heads", num_heads)

    def loss_of_a_batch(
        model: NeighbourReader, generator: torch.Generator
    ) -> torch.Tensor:
        tokens, left, right = neighbour_batch(
            128, generator, device=model.readout.weight.device
        )
        targets = torch.stack([left, right], -1)  # (B, T, 2)
        scores = model(tokens)  # (B, T, 2, V)
        return F.cross_entropy(
            scores.reshape(-1, model.vocab_size), targets.reshape(-1)
        )

    return _train(
        lambda: NeighbourReader(num_heads),
        loss_of_a_batch,
        num_steps,
        seed,
        device=device,
    )


def neighbour_accuracy(
    model: NeighbourReader,
    tokens: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
) -> tuple[float, float]:
    """Share of positions whose left and right neighbours are predicted.

    Args:
        model: a NeighbourReader. tokens, left, right: (B, T) from
            :func:`neighbour_batch`, on any device (moved to the model's).
    Returns:
        (left accuracy, right accuracy), each in [0, 1].
    """
    _check_neighbour_accuracy(model, tokens, left, right)
    device = model.readout.weight.device
    tokens, left, right = (t.to(device) for t in (tokens, left, right))
    with torch.no_grad():
        predicted = model(tokens).argmax(-1)  # (B, T, 2)
    return (
        (predicted[..., 0] == left).float().mean().item(),
        (predicted[..., 1] == right).float().mean().item(),
    )


def _check_neighbour_accuracy(
    model: NeighbourReader, tokens: object, left: object, right: object
) -> None:
    """tokens, left and right (B, T) integer id tensors, each on the CPU or
    on the model's device."""
    check_token_ids("tokens", tokens, None)
    for name, ids in (("left", left), ("right", right)):
        check_token_ids(name, ids, None)
    check_cpu_or_on(
        model.readout.weight.device, tokens=tokens, left=left, right=right
    )


class CopyBack(nn.Module):
    """Embedding + positional encoding -> one self-attention layer ->
    read-out over the vocabulary.

    The attention is :class:`course_pkg.nn.attention.MultiHeadAttention`, or,
    given ``num_kv_heads`` or ``rotary``,
    :class:`course_pkg.nn.grouped_query.GroupedQueryAttention` with those
    options (with rotary positions nothing needs to be added to the
    embeddings: ``positional=None``).

    Args:
        positional: a positional encoding of width num_hiddens added to the
            embeddings (e.g. :class:`course_pkg.nn.positional.PositionalEncoding`),
            or None for none.
        vocab_size: V. num_hiddens: D. num_heads: H.
        num_kv_heads: G, the key/value heads of a grouped-query layer.
        rotary: rotate the queries and keys by their positions.
        alibi: bias the scores by distance (ALiBi) instead.
    """

    def __init__(
        self,
        positional: nn.Module | None,
        vocab_size: int = 10,
        num_hiddens: int = 32,
        num_heads: int = 2,
        *,
        num_kv_heads: int | None = None,
        rotary: bool = False,
        alibi: bool = False,
    ):
        super().__init__()
        _check_copy_back_args(vocab_size, num_hiddens, num_heads, num_kv_heads)
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.positional = nn.Identity() if positional is None else positional
        if num_kv_heads is None and not rotary and not alibi:
            self.attention = MultiHeadAttention(num_hiddens, num_heads)
        else:
            self.attention = GroupedQueryAttention(
                num_hiddens,
                num_heads,
                num_kv_heads=num_kv_heads,
                rotary=rotary,
                alibi=alibi,
            )
        self.readout = nn.Linear(num_hiddens, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) ids -> (B, T, V) scores of the output token.

        Raises:
            TypeError, ValueError: if tokens is not (B, T) ids in [0, V).
        """
        check_token_ids("tokens", tokens, self.embedding)
        X = self.positional(self.embedding(tokens))
        return self.readout(self.attention(X, X, X))


def _check_copy_back_args(
    vocab_size: object,
    num_hiddens: object,
    num_heads: object,
    num_kv_heads: object,
) -> None:
    """vocab_size V an int >= 1; num_hiddens D, num_heads H and num_kv_heads
    G (None or an int) block sizes that divide (H | D, G | H)."""
    check_sizes(vocab_size=vocab_size)
    check_block_sizes(num_hiddens, None, num_heads, 0.0, num_kv_heads)


def train_copy_back(
    positional: nn.Module | None,
    num_steps: int = 400,
    shift: int = 2,
    max_train_len: int = 16,
    seed: int = 0,
    *,
    data_seed: int = 1,
    num_kv_heads: int | None = None,
    rotary: bool = False,
    alibi: bool = False,
    device: torch.device | str = "cpu",
) -> CopyBack:
    """Train a :class:`CopyBack` to output, at t >= shift, the token at
    t - shift.

    Each batch holds 64 sequences of one random length in
    [shift + 1, max_train_len].

    Args:
        positional: the encoding to train with (it is trained too if it has
            parameters), or None. num_steps: optimisation steps.
        shift: how far back to copy. max_train_len: longest training length.
        seed: seeds the weights. data_seed: seeds the (CPU) generator of the
            batches. num_kv_heads, rotary, alibi: as in :class:`CopyBack`.
        device: where to train.
    Returns:
        The trained CopyBack, on device.
    Raises:
        TypeError: if shift or max_train_len is not an int.
        ValueError: if shift is not in [1, max_train_len - 1].
    """
    _check_train_copy_back(shift, max_train_len, num_kv_heads)

    def loss_of_a_batch(
        model: CopyBack, generator: torch.Generator
    ) -> torch.Tensor:
        length = int(
            torch.randint(
                shift + 1, max_train_len + 1, (1,), generator=generator
            )
        )
        # drawn on the CPU: the same batches whatever the model's device
        tokens = torch.randint(
            0, model.vocab_size, (64, length), generator=generator
        ).to(model.readout.weight.device)
        scores = model(tokens)[:, shift:]  # (B, T - shift, V)
        return F.cross_entropy(
            scores.reshape(-1, model.vocab_size),
            tokens[:, :-shift].reshape(-1),
        )

    def make_model() -> CopyBack:
        return CopyBack(
            positional, num_kv_heads=num_kv_heads, rotary=rotary, alibi=alibi
        )

    return _train(
        make_model, loss_of_a_batch, num_steps, seed, data_seed, device
    )


def _check_train_copy_back(
    shift: object, max_train_len: object, num_kv_heads: object
) -> None:
    """num_kv_heads None or an int >= 1; max_train_len an int >= 1; shift an
    int in [1, max_train_len - 1]."""
    if num_kv_heads is not None:
        check_positive_int("num_kv_heads", num_kv_heads)
    check_positive_int("max_train_len", max_train_len)
    _check_shift(shift, max_train_len, "max_train_len")


def accuracy_by_position(
    model: CopyBack, length: int, shift: int = 2, seed: int = 2
) -> torch.Tensor:
    """Accuracy of a :class:`CopyBack` at every position, on 1,000 random
    sequences of one length.

    Args:
        model: the model. length: T. shift: as in training.
        seed: seeds the generator of the sequences (drawn on the CPU, then
            moved to the model's device).
    Returns:
        (T - shift,) float tensor on the model's device: entry t - shift is
        the accuracy at position t.
    Raises:
        TypeError: if length or shift is not an int.
        ValueError: if shift is not in [1, length - 1].
    """
    _check_accuracy_by_position(length, shift, seed)
    tokens = torch.randint(
        0,
        model.vocab_size,
        (1000, length),
        generator=torch.Generator().manual_seed(seed),
    ).to(model.readout.weight.device)
    with torch.no_grad():
        predicted = model(tokens)[:, shift:].argmax(-1)
    return (predicted == tokens[:, :-shift]).float().mean(0)


def _check_accuracy_by_position(
    length: object, shift: object, seed: object
) -> None:
    """seed an int; length T an int >= 1; shift an int in [1, T - 1]."""
    check_seed("seed", seed)
    check_positive_int("length", length)
    _check_shift(shift, length, "length")


# Position schemes of the longer-than-trained experiment ("Attention at
# inference time"): the three RoPE rows share one trained model, rescaled
# only at test time.
LENGTH_VARIANTS = (
    "learned",
    "sinusoidal",
    "rope",
    "rope-interpolation",
    "rope-ntk",
    "alibi",
)


def copy_back_at_lengths(
    variant: str,
    seed: int,
    test_lens: tuple[int, ...],
    max_train_len: int = 16,
    model: CopyBack | None = None,
    num_steps: int = 400,
) -> tuple[dict[int, float], CopyBack]:
    """Train a :class:`CopyBack` on lengths up to L = max_train_len with
    one position scheme, and measure its accuracy on longer sequences.

    The RoPE rows rescale a model trained with plain RoPE for each test
    length T' by the factor s = T' / L
    (:func:`course_pkg.nn.position_scaling.scaled_rotary`), without fine-tuning;
    pass that model as ``model`` to reuse it.

    Args:
        variant: one of ``LENGTH_VARIANTS``. seed: weights (batches:
            seed + 1000). test_lens: the lengths T' to test.
        max_train_len: L. model: a trained model to test instead of
            training one. num_steps: training steps.
    Returns:
        ({T': mean accuracy over positions}, the trained model).
    Raises:
        ValueError: on an unknown variant, a size < 1, or no test length.
        TypeError: if a size or the seed is not an int, or model is neither
            None nor a :class:`CopyBack`.
    """
    _check_copy_back_at_lengths(
        variant, seed, test_lens, max_train_len, model, num_steps
    )
    if model is None:
        longest = max(test_lens)
        positional = {
            "learned": LearnedPositionalEncoding(32, 0.0, longest),
            "sinusoidal": PositionalEncoding(32, 0.0, longest),
        }.get(variant)
        model = train_copy_back(
            positional,
            num_steps=num_steps,
            max_train_len=max_train_len,
            seed=seed,
            data_seed=seed + 1000,
            rotary=variant.startswith("rope"),
            alibi=variant == "alibi",
        )
    accuracy = {}
    for length in test_lens:
        tested = model
        if variant in ("rope-interpolation", "rope-ntk"):
            tested = copy.deepcopy(model)
            scaling = variant.removeprefix("rope-")
            factor = max(length / max_train_len, 1.0)
            tested.attention.rotary = scaled_rotary(
                model.attention.head_width, scaling, factor
            )
        accuracy[length] = accuracy_by_position(
            tested, length, seed=100
        ).mean()
        accuracy[length] = float(accuracy[length])
    return accuracy, model


def _check_copy_back_at_lengths(
    variant: object,
    seed: object,
    test_lens: object,
    max_train_len: object,
    model: object,
    num_steps: object,
) -> None:
    """variant one of LENGTH_VARIANTS; seed an int; test_lens a non-empty
    tuple/list of ints >= 1; max_train_len and num_steps ints >= 1; model
    None or a CopyBack."""
    if variant not in LENGTH_VARIANTS:
        raise ValueError(
            f"variant must be one of {LENGTH_VARIANTS}, got {variant!r}"
        )
    check_seed("seed", seed)
    if not isinstance(test_lens, (tuple, list)):
        raise TypeError(
            f"test_lens must be a tuple of ints, got {type(test_lens).__name__}"
        )
    if not test_lens:
        raise ValueError("test_lens must hold at least one length")
    for length in test_lens:
        check_positive_int("test_lens", length)
    check_sizes(max_train_len=max_train_len, num_steps=num_steps)
    if model is not None and not isinstance(model, CopyBack):
        raise TypeError(
            f"model must be None or a CopyBack, got {type(model).__name__}"
        )


def _check_shift(shift: int, length: int, length_name: str) -> None:
    """TypeError unless shift is a Python int (an offset), ValueError unless
    1 <= shift < length (copying from shift back needs a position t >=
    shift)."""
    check_size("shift", shift, 1)
    if shift >= length:
        raise ValueError(
            f"shift must be in [1, {length_name} - 1] = [1, {length - 1}], "
            f"got {shift}"
        )


def _train(
    make_model: Callable[[], _Model],
    loss_of_a_batch: Callable[[_Model, torch.Generator], torch.Tensor],
    num_steps: int,
    seed: int,
    data_seed: int = 1,
    device: torch.device | str = "cpu",
) -> _Model:
    """Seed, make the model (on the CPU, then moved to device), then Adam
    (lr 0.01) for num_steps steps; each call of loss_of_a_batch draws a fresh
    batch from a CPU generator seeded data_seed and scores the model on it."""
    check_positive_int("num_steps", num_steps)
    check_seed("seed", seed)
    check_seed("data_seed", data_seed)
    device = check_device("device", device)
    seed_everything(seed)
    model = make_model().to(device)
    generator = torch.Generator().manual_seed(data_seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(num_steps):
        loss = loss_of_a_batch(model, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model
