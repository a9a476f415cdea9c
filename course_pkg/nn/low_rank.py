"""Linformer: softmax attention over keys and values projected along the
sequence to a fixed length (Wang et al. 2020).

Chapter: "Beyond softmax attention". The (Q, K) weight matrix of softmax
attention is, in practice, close to low rank. Linformer mixes the K keys
into P << K "summary" keys, E K with a learned (P, K) matrix E, and the
values likewise, F V: each query then scores P keys, not K, and the work
is O(Q P d) for a fixed P,

    output = softmax(Q (E K)^T / sqrt(d)) (F V).

With P = K and E = F = the identity the projections change nothing and the
result is exact softmax attention (the tests check it). The mixing runs
over every position at once, so a query would see later keys: Linformer
is an encoder's attention, with no causal form here.

Shape letters (see the package docstring): ``B`` batch, ``H`` heads, ``Q``
queries, ``K`` key-value pairs; here also ``d`` the width of a query or
key, ``d_v`` of a value, ``P`` the projected length.
"""

from __future__ import annotations

import math

import torch

from course_pkg.checks import check_axes, check_same_float_dtype


def linformer_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_projection: torch.Tensor,
    value_projection: torch.Tensor,
) -> torch.Tensor:
    """softmax(Q (E K)^T / sqrt(d)) (F V), keys and values projected along
    the sequence by E = key_projection and F = value_projection.

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        key_projection: E (P, K). value_projection: F (P, K); shared by
            the batch and the heads.
    Returns:
        (B, H, Q, d_v).
    Raises:
        TypeError, ValueError: on shapes that do not fit (E and F of
            another K, or of different P), integer tensors, or tensors of
            another dtype or device.
    """
    _check_linformer_attention(
        queries, keys, values, key_projection, value_projection
    )
    width = queries.shape[-1]
    projected_keys = key_projection @ keys  # (B, H, P, d)
    projected_values = value_projection @ values  # (B, H, P, d_v)
    scores = queries @ projected_keys.transpose(-1, -2) / math.sqrt(width)
    return torch.softmax(scores, dim=-1) @ projected_values


def _check_linformer_attention(
    queries: object,
    keys: object,
    values: object,
    key_projection: object,
    value_projection: object,
) -> None:
    """queries (B, H, Q, d), keys (B, H, K, d), values (B, H, K, d_v),
    key_projection E (P, K) and value_projection F (P, K), all of one float
    dtype and device."""
    check_axes("queries", queries, "BHQd", (None,) * 4)
    batch, heads, _, width = queries.shape
    check_axes("keys", keys, "BHKd", (batch, heads, None, width))
    num_keys = keys.shape[2]
    check_axes("values", values, "BHKd", (batch, heads, num_keys, None))
    check_axes("key_projection", key_projection, "PK", (None, num_keys))
    projected = key_projection.shape[0]
    check_axes(
        "value_projection", value_projection, "PK", (projected, num_keys)
    )
    check_same_float_dtype(
        queries=queries,
        keys=keys,
        values=values,
        key_projection=key_projection,
        value_projection=value_projection,
    )
