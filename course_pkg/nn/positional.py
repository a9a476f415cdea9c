"""Positional encodings: the sinusoidal table of Vaswani et al. (2017) and a
learned one.

Chapter: "Self-attention and positional encoding"; used by the Transformer.

P[i, 2j] = sin(i / 10000^(2j/D)),  P[i, 2j+1] = cos(i / 10000^(2j/D)).
"""

from __future__ import annotations

import torch
from torch import nn

from course_pkg.checks import (
    check_float_tensor,
    check_last_dim,
    check_nonnegative_int,
    check_on_device,
    check_positive_int,
    check_probability,
    check_sizes,
)


def sinusoidal_table(max_len: int, num_hiddens: int) -> torch.Tensor:
    """The sinusoidal table P.

    Args:
        max_len: number of positions.
        num_hiddens: D, even.
    Returns:
        (max_len, D) float32 tensor on the CPU (callers register it as a
        buffer, so it moves with them).
    Raises:
        TypeError: if num_hiddens or max_len is not an int.
        ValueError: if num_hiddens is odd or not positive, or max_len < 0.
    """
    _check_sinusoidal_table(max_len, num_hiddens)
    positions = torch.arange(max_len, dtype=torch.float32)[
        :, None
    ]  # (max_len, 1)
    # i / 10000^(2j/D), computed literally as the formula reads (so it matches
    # d2l bit for bit).
    angles = positions / torch.pow(
        10000.0,
        torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens,
    )
    table = torch.zeros(max_len, num_hiddens)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table


def _check_sinusoidal_table(max_len: object, num_hiddens: object) -> None:
    """num_hiddens D a positive even int; max_len an int >= 0."""
    check_positive_int("num_hiddens", num_hiddens)
    check_nonnegative_int("max_len", max_len)
    if num_hiddens % 2:
        raise ValueError(
            f"num_hiddens must be a positive even number, got {num_hiddens}"
        )


class PositionalEncoding(nn.Module):
    """Add the sinusoidal table to the input, then dropout.

    Args:
        num_hiddens: D, even.
        dropout: dropout probability.
        max_len: longest sequence allowed.
    Attributes:
        P: (1, max_len, D) buffer (saved with the model and moved by
            ``.to(device)``).
    Raises:
        TypeError: if an argument is not a number of its kind.
        ValueError: if num_hiddens is odd, max_len < 1 or dropout outside
            [0, 1).
    """

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000):
        super().__init__()
        _check_positional_encoding_args(max_len, dropout)
        self.num_hiddens, self.max_len = num_hiddens, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("P", sinusoidal_table(max_len, num_hiddens)[None])

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """X (B, T, D) -> (B, T, D); positions start at ``offset`` (for
        step-by-step decoding).
        """
        _check_input(X, self.num_hiddens, self.max_len, offset, self.P)
        return self.dropout(
            X + self.P[:, offset : offset + X.shape[1]].to(X.dtype)
        )


def _check_positional_encoding_args(max_len: object, dropout: object) -> None:
    """max_len an int >= 1; dropout in [0, 1) (num_hiddens:
    :func:`sinusoidal_table`)."""
    check_positive_int("max_len", max_len)
    check_probability("dropout", dropout)


class LearnedPositionalEncoding(nn.Module):
    """Add a learned embedding of each position (as in BERT and GPT), then
    dropout.

    Args:
        num_hiddens: D.
        dropout: dropout probability.
        max_len: number of positions with an embedding.
    Attributes:
        embedding: ``nn.Embedding(max_len, D)``; positions never seen in
            training keep their random init.
    Raises:
        TypeError/ValueError: if num_hiddens or max_len is not an int >= 1,
            or dropout not in [0, 1).
    """

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000):
        super().__init__()
        _check_learned_positional_encoding_args(num_hiddens, dropout, max_len)
        self.num_hiddens, self.max_len = num_hiddens, max_len
        self.embedding = nn.Embedding(max_len, num_hiddens)
        self.dropout = nn.Dropout(dropout)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """X (B, T, D) -> (B, T, D); positions start at ``offset``."""
        _check_input(
            X, self.num_hiddens, self.max_len, offset, self.embedding.weight
        )
        positions = torch.arange(offset, offset + X.shape[1], device=X.device)
        return self.dropout(X + self.embedding(positions)[None].to(X.dtype))


def _check_learned_positional_encoding_args(
    num_hiddens: object, dropout: object, max_len: object
) -> None:
    """num_hiddens and max_len ints >= 1; dropout in [0, 1)."""
    check_sizes(num_hiddens=num_hiddens, max_len=max_len)
    check_probability("dropout", dropout)


def _check_input(
    X: torch.Tensor,
    num_hiddens: int,
    max_len: int,
    offset: int,
    table: torch.Tensor,
) -> None:
    """X: floats (B, T, D) on the table's device (an integer X is refused,
    not cast: the sum would be truncated); offset: an int >= 0."""
    check_float_tensor("X", X, 3, f"(B, T, {num_hiddens})")
    check_last_dim("X", X, num_hiddens, f"(B, T, {num_hiddens})")
    check_on_device("X", X, table.device)
    check_nonnegative_int("offset", offset)
    if offset + X.shape[1] > max_len:
        raise ValueError(
            f"offset + T = {offset} + {X.shape[1]} positions, "
            f"more than max_len={max_len}"
        )
