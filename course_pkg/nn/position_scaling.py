"""Attending beyond the trained length: ALiBi, position interpolation and
NTK-aware scaling of RoPE.

Chapter: "Attention at inference time". A model trained on sequences of at
most L positions meets, at test time, positions or distances it never saw.

- ALiBi (Press et al. 2022) adds no position to the tokens; it subtracts
  m_h * abs(i - j) from the score of query i and key j in head h. The slopes
  m_h form a geometric sequence, 2^(-8h/H) for h = 1..H, so some heads look
  far and others near. A longer sequence only brings larger distances,
  penalised further along the same line.
- Position interpolation (Chen et al. 2023) divides every RoPE position by
  s = L' / L: a sequence of L' positions is squeezed into the angles seen in
  training (with fine-tuning in the paper; here, none).
- NTK-aware scaling (bloc97 2023, described in Peng et al. 2023) keeps the
  positions and raises RoPE's base to base * s^(d / (d - 2)): the slowest
  pair rotates s times slower, as under interpolation, while the fastest
  pairs, which resolve neighbouring positions, are nearly unchanged.

Shape letters (see the package docstring): ``H`` heads, ``Q`` queries,
``K`` keys, ``d`` width of one head.
"""

from __future__ import annotations

import math

import torch

from course_pkg.checks import (
    check_float_dtype_arg,
    check_positive_int,
    check_positive_number,
)
from course_pkg.nn.masks import query_key_distance
from course_pkg.nn.rotary import RotaryEmbedding

# ---------------------------------------------------------------------- ALiBi


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The H slopes m_h: 2^(-8h/H) for h = 1..H when H is a power of two;
    otherwise those of the power of two n below H, then every other slope of
    2n heads for the H - n heads left (the paper's recipe).

    Returns:
        (H,) float64 tensor, all in (0, 1); decreasing when H is a power of
        two. Otherwise the first n decrease, and so do the H - n after them,
        which fall between those (for H = 12: 2^-1 ... 2^-8, then 2^-0.5,
        2^-1.5, 2^-2.5, 2^-3.5), not in one decreasing order.
    Raises:
        TypeError, ValueError: if num_heads is not an int >= 1.
    """
    check_positive_int("num_heads", num_heads)

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    power = 2 ** int(math.log2(num_heads))
    extra = geometric(2 * power)[0::2][: num_heads - power]
    return torch.tensor(geometric(power) + extra, dtype=torch.float64)


def alibi_bias(
    num_heads: int,
    num_queries: int,
    num_keys: int,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """-m_h * abs(i - j) for every head, query and key; the queries are the
    last Q of the K positions.

    The product is computed in float32 (float64 for float64) and then cast
    to ``dtype``: a distance past 65504 would overflow float16 before the
    multiply.

    Returns:
        (H, Q, K) tensor, 0 on the diagonal, more negative with distance.
    Raises:
        TypeError: if dtype is not a floating-point torch.dtype, or a size
            is not an int.
        ValueError: if a size is < 1 or K < Q.
    """
    _check_alibi_bias(num_heads, dtype)
    distance = query_key_distance(num_queries, num_keys, device)  # (Q, K)
    exact = torch.float64 if dtype == torch.float64 else torch.float32
    slopes = alibi_slopes(num_heads).to(distance.device, exact)
    return (-slopes[:, None, None] * distance.abs().to(exact)).to(dtype)


def _check_alibi_bias(num_heads: object, dtype: object) -> None:
    """dtype a floating-point torch.dtype; num_heads an int >= 1 (the other
    sizes and the device: :func:`~course_pkg.nn.masks.query_key_distance`)."""
    check_float_dtype_arg("dtype", dtype)
    check_positive_int("num_heads", num_heads)


# ------------------------------------------------------------- RoPE, stretched


def ntk_scaled_base(base: float, factor: float, head_width: int) -> float:
    """RoPE's base for a context factor times longer, NTK-aware:
    base * factor^(d / (d - 2)).

    Raises:
        TypeError, ValueError: if base or factor is not a number > 0, or
            head_width is not an even int >= 4.
    """
    _check_ntk_scaled_base(base, factor, head_width)
    return base * factor ** (head_width / (head_width - 2))


def _check_ntk_scaled_base(
    base: object, factor: object, head_width: object
) -> None:
    """base and factor numbers > 0; head_width an even int >= 4."""
    check_positive_number("base", base)
    check_positive_number("factor", factor)
    check_positive_int("head_width", head_width)
    if head_width < 4 or head_width % 2:
        raise ValueError(f"head_width must be even and >= 4, got {head_width}")


ROPE_SCALINGS = ("none", "interpolation", "ntk")


def scaled_rotary(
    head_width: int,
    scaling: str,
    factor: float,
    base: float = 10000.0,
) -> RotaryEmbedding:
    """A :class:`~course_pkg.nn.rotary.RotaryEmbedding` for a context factor
    times the trained one.

    Args:
        head_width: d. scaling: "none" (plain RoPE), "interpolation"
            (positions divided by factor) or "ntk" (base raised by
            :func:`ntk_scaled_base`). factor: >= 1. base: the trained base.
    Raises:
        ValueError: on an unknown scaling or factor < 1.
    """
    _check_scaled_rotary(scaling, factor)
    if scaling == "interpolation":
        return RotaryEmbedding(head_width, base, position_scale=factor)
    if scaling == "ntk":
        return RotaryEmbedding(
            head_width, ntk_scaled_base(base, factor, head_width)
        )
    return RotaryEmbedding(head_width, base)


def _check_scaled_rotary(scaling: object, factor: object) -> None:
    """scaling one of :data:`ROPE_SCALINGS`; factor a number >= 1 (head_width
    and base: :class:`~course_pkg.nn.rotary.RotaryEmbedding`)."""
    if scaling not in ROPE_SCALINGS:
        raise ValueError(
            f"scaling must be one of {ROPE_SCALINGS}, got {scaling!r}"
        )
    check_positive_number("factor", factor)
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
