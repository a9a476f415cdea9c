"""Llama 3's RoPE frequency scaling: stretch only the slow rotations.

Chapter: "Attention at scale". Position interpolation
(:mod:`course_pkg.nn.position_scaling`) divides every RoPE frequency by the
same factor s; NTK-aware scaling changes the base. Llama 3.1 (Meta 2024)
decides pair by pair, from the pair's wavelength 2 pi / theta_i measured
against the trained context L (``original_max_len``):

- a wavelength shorter than L / high_freq_factor (a fast pair, which
  resolves neighbouring tokens and has turned many times within L) keeps
  theta_i;
- a wavelength longer than L / low_freq_factor (a slow pair, which never
  completed a turn in training) gets theta_i / factor, as under
  interpolation;
- in between, the two are blended linearly in L / wavelength:
  (1 - a) theta_i / factor + a theta_i with a = (L / wavelength -
  low_freq_factor) / (high_freq_factor - low_freq_factor).

The frequencies do not depend on the sequence: a model built with them
rotates position m by m * theta'_i at every length.

Shape letters (see the package docstring): ``T`` positions, ``d`` width of
one head.
"""

from __future__ import annotations

import math

import torch

from course_pkg.checks import (
    check_device,
    check_float_dtype_arg,
    check_positive_int,
    check_positive_number,
    check_tensor,
)
from course_pkg.nn.rotary import RotaryEmbedding, _check_head_width_and_base


def llama3_inverse_frequency(
    head_width: int,
    base: float = 10000.0,
    *,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_len: int = 8192,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The d/2 rotation frequencies theta'_i of Llama 3's scaled RoPE.

    Args:
        head_width: d, even; pair i has theta_i = base^(-2i/d) before scaling.
        base: RoPE's base, > 1.
        factor: what the slow frequencies are divided by, >= 1.
        low_freq_factor, high_freq_factor: wavelengths above
            original_max_len / low_freq_factor are divided by factor, below
            original_max_len / high_freq_factor kept;
            0 < low_freq_factor < high_freq_factor.
        original_max_len: L, the context the model was trained on.
        dtype: floating-point dtype of the result. device: its device.
    Returns:
        (d/2,) tensor theta'_i.
    Raises:
        TypeError: on a non-int size, a non-number, or a non-float dtype.
        ValueError: on an odd or non-positive head_width, base <= 1,
            factor < 1, or low_freq_factor >= high_freq_factor.
    """
    device = _check_llama3_inverse_frequency(
        head_width, base, factor, low_freq_factor, high_freq_factor,
        original_max_len, dtype, device,
    )  # fmt: skip
    return _llama3_inverse_frequency(
        head_width, base, factor, low_freq_factor, high_freq_factor,
        original_max_len, dtype, device,
    )  # fmt: skip


def _check_llama3_inverse_frequency(
    head_width: object,
    base: object,
    factor: object,
    low_freq_factor: object,
    high_freq_factor: object,
    original_max_len: object,
    dtype: object,
    device: object,
) -> torch.device | None:
    """The scaling's arguments (:func:`_check_llama3`), dtype a
    floating-point torch.dtype and device None or a usable device, returned
    as a torch.device (or None)."""
    _check_llama3(
        head_width, base, factor, low_freq_factor, high_freq_factor,
        original_max_len,
    )  # fmt: skip
    check_float_dtype_arg("dtype", dtype)
    return check_device("device", device)


def _llama3_inverse_frequency(
    head_width: int,
    base: float,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_len: int,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> torch.Tensor:
    """:func:`llama3_inverse_frequency` on checked arguments."""
    pair_index = torch.arange(0, head_width, 2, device=device, dtype=dtype)
    # as RotaryEmbedding.angles computes theta_i
    inverse = base ** (-pair_index / head_width)  # (d/2,)
    wavelength = 2 * math.pi / inverse
    longest_kept = original_max_len / high_freq_factor
    shortest_divided = original_max_len / low_freq_factor
    blend = (original_max_len / wavelength - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    blended = (1 - blend) * inverse / factor + blend * inverse
    return torch.where(
        wavelength < longest_kept,
        inverse,
        torch.where(wavelength > shortest_divided, inverse / factor, blended),
    )


def _check_llama3(
    head_width: object,
    base: object,
    factor: object,
    low_freq_factor: object,
    high_freq_factor: object,
    original_max_len: object,
) -> None:
    """The arguments of Llama 3's scaling (TypeError, ValueError)."""
    _check_head_width_and_base(head_width, base)
    check_positive_number("factor", factor)
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    check_positive_number("low_freq_factor", low_freq_factor)
    check_positive_number("high_freq_factor", high_freq_factor)
    if not high_freq_factor > low_freq_factor:
        raise ValueError(
            f"high_freq_factor must be > low_freq_factor={low_freq_factor}, "
            f"got {high_freq_factor}"
        )
    check_positive_int("original_max_len", original_max_len)


class Llama3RotaryEmbedding(RotaryEmbedding):
    """A :class:`~course_pkg.nn.rotary.RotaryEmbedding` whose frequencies are
    Llama 3's (:func:`llama3_inverse_frequency`); it rotates pairs
    (x[2i], x[2i+1]) as its parent does.

    Args:
        head_width: d, even. base: RoPE's base.
        factor, low_freq_factor, high_freq_factor, original_max_len: as in
            :func:`llama3_inverse_frequency` (Llama 3.1: 8, 1, 4, 8192).
    Raises:
        TypeError, ValueError: as :func:`llama3_inverse_frequency`.
    """

    def __init__(
        self,
        head_width: int,
        base: float = 10000.0,
        *,
        factor: float = 8.0,
        low_freq_factor: float = 1.0,
        high_freq_factor: float = 4.0,
        original_max_len: int = 8192,
    ):
        _check_llama3(
            head_width, base, factor, low_freq_factor, high_freq_factor,
            original_max_len,
        )  # fmt: skip
        super().__init__(head_width, base)
        self.factor = float(factor)
        self.low_freq_factor = float(low_freq_factor)
        self.high_freq_factor = float(high_freq_factor)
        self.original_max_len = original_max_len
        # (device, dtype) -> the (d/2,) inverse frequencies, a constant of
        # the settings above (not a buffer: nothing to save or load)
        self._inverse: dict[
            tuple[torch.device, torch.dtype], torch.Tensor
        ] = {}

    def angles(
        self,
        positions: torch.Tensor,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """The angles m * theta'_i.

        Args:
            positions: (T,) positions m (integers or floats).
            dtype: floating-point dtype of the result.
        Returns:
            (T, d/2) tensor on positions' device.
        Raises:
            TypeError/ValueError: if positions is not a (T,) tensor or dtype
                not a floating-point dtype.
        """
        _check_llama3_rotary_embedding_angles(positions, dtype)
        key = (positions.device, dtype)
        if key not in self._inverse:  # computed once a device and dtype
            self._inverse[key] = _llama3_inverse_frequency(
                self.head_width, self.base, self.factor, self.low_freq_factor,
                self.high_freq_factor, self.original_max_len, dtype,
                positions.device,
            )  # fmt: skip
        return positions.to(dtype)[:, None] * self._inverse[key][None]

    def extra_repr(self) -> str:
        return (
            f"head_width={self.head_width}, base={self.base}, "
            f"factor={self.factor}, low_freq_factor={self.low_freq_factor}, "
            f"high_freq_factor={self.high_freq_factor}, "
            f"original_max_len={self.original_max_len}"
        )


def _check_llama3_rotary_embedding_angles(
    positions: object, dtype: object
) -> None:
    """positions a (T,) tensor; dtype a floating-point torch.dtype."""
    check_tensor("positions", positions, 1, "(T,)")
    check_float_dtype_arg("dtype", dtype)
