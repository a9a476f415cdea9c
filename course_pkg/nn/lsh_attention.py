"""Reformer's LSH attention: each query attends only to the keys that fall
in its hash bucket (Kitaev et al. 2020).

Chapter: "Beyond softmax attention". The softmax is dominated by its
largest scores, so a query loses little if it only looks at the keys most
aligned with it. Angular locality-sensitive hashing finds those without
comparing every pair: rotate x by a random (d, n/2) matrix R and take the
bucket argmax([x R ; -x R]) among n (:func:`lsh_buckets`). Vectors at a
small angle land in one bucket with high probability, vectors far apart
rarely; the bucket does not depend on a vector's length.

Reformer shares the query and key projections: the keys are the queries,
normalised to unit length, k_j = q_j / norm(q_j). Then q_i and k_i hash alike,
so every query finds at least one key in its bucket, its own, and no row of
weights is empty. (Reformer lets a query see its own key only when nothing
else is there, since q_i . k_i is nearly always its largest score; this
module keeps the own key always, which makes one bucket exactly full
attention.) :func:`lsh_attention` writes the restriction as a mask on the
full (T, T) score matrix, for clarity: Reformer's speed comes from sorting
by bucket and attending within chunks, which this module does not do.

Shape letters (see the package docstring): ``B`` batch, ``H`` heads, ``T``
sequence length; here also ``d`` the width of a query or key, ``d_v`` of a
value, ``n`` the number of buckets (``num_buckets``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_pkg.checks import (
    check_axes,
    check_bool,
    check_generator,
    check_positive_int,
    check_same_float_dtype,
)
from course_pkg.nn.masks import _attention_mask, _masked_softmax


def lsh_buckets(X: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Angular LSH: the bucket argmax([x R ; -x R]) of every vector x.

    Args:
        X: (..., d) vectors. rotations: R (d, n/2), random (Gaussian)
            directions.
    Returns:
        (...) int64 buckets in [0, n).
    Raises:
        TypeError, ValueError: if X or rotations is not a floating-point
            tensor, R is not 2-D with d rows and at least one column, or
            their dtypes or devices differ.
    """
    _check_lsh_buckets(X, rotations)
    return _lsh_buckets(X, rotations)


def _check_lsh_buckets(X: object, rotations: object) -> None:
    """rotations R (d, n/2) float with n/2 >= 1; X (..., d) of R's dtype
    and device."""
    check_axes("rotations", rotations, "dn", (None, None))
    if rotations.shape[1] < 1:
        raise ValueError(
            "rotations must have shape (d, n/2) with n/2 >= 1, got "
            f"{tuple(rotations.shape)}"
        )
    if not isinstance(X, torch.Tensor):
        raise TypeError(
            f"X must be a torch.Tensor of shape (..., d), got {type(X).__name__}"
        )
    if X.dim() < 1 or X.shape[-1] != rotations.shape[0]:
        raise ValueError(
            f"X must have shape (..., d={rotations.shape[0]}) (rotations' "
            f"d), got {tuple(X.shape)}"
        )
    check_same_float_dtype(X=X, rotations=rotations)


def _lsh_buckets(X: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    rotated = X @ rotations  # (..., n/2)
    return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)


def lsh_attention(
    queries: torch.Tensor,
    values: torch.Tensor,
    num_buckets: int,
    causal: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Shared-QK attention within LSH buckets: query i attends to key
    k_j = q_j / norm(q_j) only when q_i and q_j hash to one bucket (and j <= i
    when causal), with scores q_i . k_j / sqrt(d).

    Args:
        queries: (B, H, T, d), also the keys once normalised.
        values: (B, H, T, d_v).
        num_buckets: n, 1 (full attention) or even; one R is drawn per
            call, ``torch.randn(d, n/2, generator=generator)`` in the
            queries' dtype, shared by the batch and the heads.
        causal: also hide later positions.
        generator: the source of R (None: torch's global one); R is drawn
            on the generator's device (the queries' without one), then
            moved to the queries.
    Returns:
        (B, H, T, d_v). A query alone in its bucket attends to itself: no
        row is empty, nothing is NaN.
    Raises:
        TypeError, ValueError: on shapes that do not fit, integer tensors,
            tensors of another dtype or device, num_buckets not 1 or an
            even int >= 2, causal not a bool, or generator not a
            torch.Generator.
    """
    _check_lsh_attention(queries, values, num_buckets, causal, generator)
    num_steps, width = queries.shape[2:]
    if num_buckets == 1:
        buckets = queries.new_zeros(queries.shape[:3], dtype=torch.long)
    else:
        source = queries.device if generator is None else generator.device
        rotations = torch.randn(
            width, num_buckets // 2, generator=generator, device=source,
            dtype=queries.dtype,
        ).to(queries.device)  # fmt: skip
        buckets = _lsh_buckets(queries, rotations)  # (B, H, T)
    same_bucket = buckets[..., :, None] == buckets[..., None, :]  # (B,H,T,T)
    if causal:
        same_bucket = same_bucket & _attention_mask(
            None, num_steps, num_steps, True, queries.device
        )  # (1, T, T)
    keys = F.normalize(queries, dim=-1)  # a zero query stays zero
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(width)
    return _masked_softmax(scores, same_bucket) @ values


def _check_lsh_attention(
    queries: object,
    values: object,
    num_buckets: object,
    causal: object,
    generator: object,
) -> None:
    """queries (B, H, T, d) and values (B, H, T, d_v) of one float dtype;
    num_buckets 1 or an even int >= 2; causal a bool; generator None or a
    torch.Generator."""
    check_axes("queries", queries, "BHTd", (None,) * 4)
    check_axes("values", values, "BHTd", (*queries.shape[:3], None))
    check_same_float_dtype(queries=queries, values=values)
    check_positive_int("num_buckets", num_buckets)
    if num_buckets > 1 and num_buckets % 2:
        raise ValueError(f"num_buckets must be 1 or even, got {num_buckets}")
    check_bool("causal", causal)
    check_generator(generator)
