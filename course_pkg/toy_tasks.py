"""Two small synthetic tasks that show what attention layers can learn.

Chapter "Multi-head attention": :class:`NeighbourReader` reads, at every
position, the token one step to the left and one to the right; one head can
attend to only one side at a time, two heads can do both. Chapter
"Self-attention and positional encoding": :class:`CopyBack` outputs at
position t the token of position t - shift, which only a model that knows
positions can do; it shows how sinusoidal and learned encodings extrapolate
to lengths not seen in training.

Shape letters (see the package docstring): ``B`` batch, ``T`` sequence
length, ``V`` vocabulary size, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.attention import MultiHeadAttention
from course_pkg.checks import check_token_ids
from course_pkg.device import seed_everything

_Model = TypeVar("_Model", bound=nn.Module)


def neighbour_batch(
    batch_size: int,
    generator: torch.Generator,
    vocab_size: int = 8,
    num_steps: int = 8,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random token sequences and, for each position, its two neighbours.

    Args:
        batch_size: B. generator: the source of randomness.
        vocab_size: V. num_steps: T.
    Returns:
        (tokens, left, right), each (B, T) long: ``left[:, t]`` is the token
        at t - 1 and ``right[:, t]`` the one at t + 1, cyclically.
    """
    tokens = torch.randint(
        0, vocab_size, (batch_size, num_steps), generator=generator
    )
    return tokens, tokens.roll(1, dims=1), tokens.roll(-1, dims=1)


class NeighbourReader(nn.Module):
    """One multi-head attention layer, then two V-way classifiers (left and
    right neighbour).

    The input at each position is [one-hot token; one-hot position], so the
    attention can find a neighbour by its position.

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
        """The attention's input: tokens (B, T) -> (B, T, V + T) one-hots.

        Raises:
            TypeError, ValueError: if tokens is not (B, T) ids in [0, V).
        """
        check_token_ids("tokens", tokens, self.vocab_size)
        if tokens.shape[1] != self.num_steps:
            raise ValueError(
                f"tokens must have shape (B, {self.num_steps}), "
                f"got {tuple(tokens.shape)}"
            )
        steps = torch.arange(self.num_steps, device=tokens.device)
        positions = F.one_hot(steps, self.num_steps).expand(
            tokens.shape[0], -1, -1
        )
        one_hot = F.one_hot(tokens, self.vocab_size)
        return torch.cat([one_hot, positions], dim=-1).to(
            self.readout.weight.dtype
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Scores of the two neighbours.

        Args:
            tokens: (B, T) ids.
        Returns:
            (B, T, 2, V): index 0 scores the left neighbour, 1 the right.
        """
        X = self.features(tokens)
        return self.readout(self.attention(X, X, X)).reshape(
            *tokens.shape, 2, self.vocab_size
        )


def train_neighbour_reader(
    num_heads: int, num_steps: int = 300, seed: int = 0
) -> NeighbourReader:
    """Train a :class:`NeighbourReader` with Adam on fresh random batches.

    Args:
        num_heads: H. num_steps: optimisation steps (batches of 128).
        seed: seeds the weights; the batches come from a generator seeded 1.
    Returns:
        The trained model (CPU).
    """

    def loss_of_a_batch(
        model: NeighbourReader, generator: torch.Generator
    ) -> torch.Tensor:
        tokens, left, right = neighbour_batch(128, generator)
        targets = torch.stack([left, right], -1)  # (B, T, 2)
        scores = model(tokens)  # (B, T, 2, V)
        return F.cross_entropy(
            scores.reshape(-1, model.vocab_size), targets.reshape(-1)
        )

    return _train(
        lambda: NeighbourReader(num_heads), loss_of_a_batch, num_steps, seed
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
            :func:`neighbour_batch`.
    Returns:
        (left accuracy, right accuracy), each in [0, 1].
    """
    with torch.no_grad():
        predicted = model(tokens).argmax(-1)  # (B, T, 2)
    return (
        (predicted[..., 0] == left).float().mean().item(),
        (predicted[..., 1] == right).float().mean().item(),
    )


class CopyBack(nn.Module):
    """Embedding + positional encoding -> one self-attention layer ->
    read-out over the vocabulary.

    Args:
        positional: a positional encoding of width num_hiddens (e.g.
            :class:`course_pkg.positional.PositionalEncoding`).
        vocab_size: V. num_hiddens: D. num_heads: H.
    """

    def __init__(
        self,
        positional: nn.Module,
        vocab_size: int = 10,
        num_hiddens: int = 32,
        num_heads: int = 2,
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.positional = positional
        self.attention = MultiHeadAttention(num_hiddens, num_heads=num_heads)
        self.readout = nn.Linear(num_hiddens, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) ids -> (B, T, V) scores of the output token.

        Raises:
            TypeError, ValueError: if tokens is not (B, T) ids in [0, V).
        """
        check_token_ids("tokens", tokens, self.vocab_size)
        X = self.positional(self.embedding(tokens))
        return self.readout(self.attention(X, X, X))


def train_copy_back(
    positional: nn.Module,
    num_steps: int = 400,
    shift: int = 2,
    max_train_len: int = 16,
    seed: int = 0,
) -> CopyBack:
    """Train a :class:`CopyBack` to output, at t >= shift, the token at
    t - shift.

    Each batch holds 64 sequences of one random length in
    [shift + 1, max_train_len].

    Args:
        positional: the encoding to train with (it is trained too if it has
            parameters). num_steps: optimisation steps.
        shift: how far back to copy. max_train_len: longest training length.
        seed: as in :func:`train_neighbour_reader`.
    Returns:
        The trained CopyBack, on the CPU.
    """

    def loss_of_a_batch(
        model: CopyBack, generator: torch.Generator
    ) -> torch.Tensor:
        length = int(
            torch.randint(
                shift + 1, max_train_len + 1, (1,), generator=generator
            )
        )
        tokens = torch.randint(
            0, model.vocab_size, (64, length), generator=generator
        )
        scores = model(tokens)[:, shift:]  # (B, T - shift, V)
        return F.cross_entropy(
            scores.reshape(-1, model.vocab_size),
            tokens[:, :-shift].reshape(-1),
        )

    return _train(
        lambda: CopyBack(positional), loss_of_a_batch, num_steps, seed
    )


def accuracy_by_position(
    model: CopyBack, length: int, shift: int = 2
) -> torch.Tensor:
    """Accuracy of a :class:`CopyBack` at every position, on 1,000 random
    sequences of one length (generator seeded 2).

    Args:
        model: the model. length: T. shift: as in training.
    Returns:
        (T - shift,) float tensor: entry t - shift is the accuracy at
        position t.
    """
    tokens = torch.randint(
        0,
        model.vocab_size,
        (1000, length),
        generator=torch.Generator().manual_seed(2),
    )
    with torch.no_grad():
        predicted = model(tokens)[:, shift:].argmax(-1)
    return (predicted == tokens[:, :-shift]).float().mean(0)


def _train(
    make_model: Callable[[], _Model],
    loss_of_a_batch: Callable[[_Model, torch.Generator], torch.Tensor],
    num_steps: int,
    seed: int,
) -> _Model:
    """Seed, make the model, then Adam (lr 0.01) for num_steps steps; each
    call of loss_of_a_batch draws a fresh batch from a generator seeded 1 and
    scores the model on it."""
    seed_everything(seed)
    model = make_model()
    generator = torch.Generator().manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(num_steps):
        loss = loss_of_a_batch(model, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model
