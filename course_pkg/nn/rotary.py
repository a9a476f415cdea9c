"""Rotary position embedding (RoPE, Su et al. 2021).

Chapter: "Attention at scale".

Split a query or key of width d into d/2 pairs (x[2i], x[2i+1]) and rotate
pair i of the vector at position m by the angle m * theta_i, with
theta_i = base^(-2i/d). A rotation R_m is orthogonal and R_m^T R_n = R_{n-m},
so the score between a query rotated at m and a key rotated at n,
(R_m q)^T (R_n k) = q^T R_{n-m} k, depends on the positions only through
their difference: attention sees relative positions, although each vector is
rotated by its own absolute position.

Shape letters: ``B`` batch, ``H`` heads, ``T`` sequence length, ``d`` width
of one head.
"""

from __future__ import annotations

import torch
from torch import nn

from course_pkg.checks import (
    check_positive_number,
    check_tensor,
)


class RotaryEmbedding(nn.Module):
    """Rotate each pair of features by an angle proportional to the position.

    It has no parameters: apply it to the queries and keys of every head,
    after their projections and before the scores.

    Args:
        head_width: d, the width of the vectors it rotates; even.
        base: the base of the frequencies theta_i = base^(-2i/d).
        position_scale: positions are divided by it before they are turned
            into angles (position interpolation, see
            :mod:`course_pkg.nn.position_scaling`); 1 is plain RoPE.
    Raises:
        TypeError: if head_width is not an int.
        ValueError: if head_width is not positive and even, base <= 1 or
            position_scale <= 0.
    """

    def __init__(
        self,
        head_width: int,
        base: float = 10000.0,
        position_scale: float = 1.0,
    ):
        super().__init__()
        _check_rotary_embedding_args(head_width, base, position_scale)
        self.head_width, self.base = head_width, float(base)
        self.position_scale = float(position_scale)
        # (key, (cos, sin)) of the last positions asked for (_cos_sin)
        self._last: tuple | None = None

    def angles(
        self,
        positions: torch.Tensor,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """The angles (m / position_scale) * theta_i.

        Args:
            positions: (T,) positions m (integers or floats).
            dtype: dtype of the result.
        Returns:
            (T, d/2) tensor on positions' device.
        Raises:
            TypeError/ValueError: if positions is not a (T,) tensor.
        """
        check_tensor("positions", positions, 1, "(T,)")
        pair_index = torch.arange(
            0, self.head_width, 2, device=positions.device, dtype=dtype
        )
        inverse_frequency = self.base ** (-pair_index / self.head_width)
        scaled = positions.to(dtype) / self.position_scale
        return scaled[:, None] * inverse_frequency[None]

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Rotate the vectors of positions offset, ..., offset + T - 1.

        Args:
            X: (..., T, d), e.g. (B, H, T, d) queries or keys of every head.
            offset: position of X's first row (for step-by-step decoding with
                a cache).
        Returns:
            (..., T, d) in X's dtype and device; pair i of row t is rotated
            by (offset + t) * theta_i.
        Raises:
            TypeError: if X is not a tensor or offset not an int.
            ValueError: if X has rank < 2 or last dimension != d, or offset
                < 0.
        """
        _check_rotary_embedding_forward(self, X, offset)
        return self._rotate(X, offset)

    def _rotate(self, X: torch.Tensor, offset: int) -> torch.Tensor:
        """:meth:`forward` on checked inputs: X (..., T, d) -> (..., T, d)."""
        cos, sin = self._cos_sin(offset, X.shape[-2], X.dtype, X.device)
        even, odd = X[..., 0::2], X[..., 1::2]  # (..., T, d/2) each
        rotated = torch.stack(
            [even * cos - odd * sin, even * sin + odd * cos], dim=-1
        )  # (..., T, d/2, 2)
        return rotated.flatten(-2)

    def _cos_sin(
        self, offset: int, T: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (T, d/2) in dtype of the angles of positions offset,
        ..., offset + T - 1. The last pair is kept: the blocks of a model
        share one embedding and, at each step, ask for the same positions."""
        key = (offset, T, dtype, device, self.base, self.position_scale)
        key += (torch.is_inference_mode_enabled(),)
        if self._last is None or self._last[0] != key:
            # Angles in at least float32: half precision cannot tell
            # position 2049 from 2050.
            angle_dtype = torch.promote_types(dtype, torch.float32)
            positions = torch.arange(
                offset, offset + T, device=device, dtype=angle_dtype
            )
            angles = self.angles(positions, angle_dtype)  # (T, d/2)
            self._last = (
                key,
                (angles.cos().to(dtype), angles.sin().to(dtype)),
            )
        return self._last[1]


def _check_rotary_embedding_args(
    head_width: object, base: object, position_scale: object
) -> None:
    """head_width d a positive even int; base a number > 1;
    position_scale a number > 0."""
    _check_head_width_and_base(head_width, base)
    check_positive_number("position_scale", position_scale)


def _check_rotary_embedding_forward(
    rotary: RotaryEmbedding, X: object, offset: object
) -> None:
    """X a float tensor (..., T, d) with d the embedding's head_width;
    offset an int >= 0."""
    if not isinstance(X, torch.Tensor) or not X.is_floating_point():
        raise TypeError(
            f"X must be a float torch.Tensor of shape (..., T, {rotary.head_width}), "
            f"got {getattr(X, 'dtype', type(X).__name__)}"
        )
    if X.dim() < 2 or X.shape[-1] != rotary.head_width:
        raise ValueError(
            f"X must have shape (..., T, {rotary.head_width}), "
            f"got {tuple(X.shape)}"
        )
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"offset must be an int, got {type(offset).__name__}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")


def _check_head_width_and_base(head_width: object, base: object) -> None:
    """What every RoPE checks first (here and in
    :mod:`course_pkg.nn.rope_scaling`): head_width d a positive even int,
    base a number > 1 (TypeError, ValueError)."""
    if not isinstance(head_width, int) or isinstance(head_width, bool):
        raise TypeError(
            f"head_width must be an int, got {type(head_width).__name__}"
        )
    if head_width <= 0 or head_width % 2:
        raise ValueError(
            f"head_width must be a positive even number, got {head_width}"
        )
    check_positive_number("base", base)
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base}")
