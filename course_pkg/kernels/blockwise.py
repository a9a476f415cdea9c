"""Blockwise attention: exact attention that never holds the whole score matrix.

Chapter: "Attention at scale". :func:`blockwise_attention` holds at most a
(Q, block_size) slice of scores per head, with the online softmax of
FlashAttention (Dao et al. 2022) written in plain PyTorch; the chapter
"Writing the attention kernel" takes the same algorithm to
:mod:`course_pkg.kernels.flash` and the Triton kernels.

Shapes and masks as in :mod:`course_pkg.nn.grouped_query`: ``B`` batch, ``H``
heads, ``Q`` queries, ``K`` keys, ``d`` one head's width; a query with no valid
key gets zeros, never NaN.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from course_pkg.checks import (
    check_axes,
    check_masks,
    check_positive_int,
    check_same_float_dtype,
)
from course_pkg.nn.masks import _hide_unseen


def _check_blockwise(
    queries: Any,
    keys: Any,
    values: Any,
    block_size: Any,
    causal: Any,
    valid_lens: Any,
) -> None:
    """The checks of :func:`blockwise_attention`."""
    check_axes("queries", queries, "BHQd", (None,) * 4)
    batch_size, num_heads, _, head_width = queries.shape
    check_axes("keys", keys, "BHKd", (batch_size, num_heads, None, head_width))
    num_keys = keys.shape[2]
    check_axes(
        "values", values, "BHKv", (batch_size, num_heads, num_keys, None)
    )
    check_same_float_dtype(queries=queries, keys=keys, values=values)
    check_positive_int("block_size", block_size)
    check_masks(valid_lens, causal, num_keys, like=("queries", queries))


def _block_mask(
    start: int,
    end: int,
    lens: torch.Tensor | None,
    last_seen: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor | None:
    """Which queries may attend to keys start..end - 1: None (all), or
    (B or 1, 1, Q or 1, block) bool from the lengths lens (B, 1 or Q) and
    the last key each query sees, last_seen (Q, 1)."""
    key_positions = torch.arange(start, end, device=device)
    mask = None
    if lens is not None:
        mask = key_positions < lens[..., None]
    if last_seen is not None:
        causal_block = (key_positions <= last_seen)[None]  # (1, Q, block)
        mask = causal_block if mask is None else mask & causal_block
    return None if mask is None else mask[:, None]  # a head axis


def blockwise_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    block_size: int,
    causal: bool = False,
    valid_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact softmax(q k^T / sqrt(d)) v, visiting keys and values in blocks.

    For each block of keys the scores S (a (Q, block_size) slice per head)
    update a running maximum m, a running sum l of exp(S - m) and a running
    sum o of exp(S - m) v; whenever m grows, l and o are rescaled by
    exp(m_old - m_new). At the end o / l is the attention output. No (Q, K)
    matrix is ever formed in the forward pass. Under autograd, PyTorch keeps
    each block's probabilities for the backward pass (FlashAttention instead
    recomputes them); the memory saving is the forward pass's.

    Args:
        queries: (B, H, Q, d).
        keys: (B, H, K, d).
        values: (B, H, K, d_v).
        block_size: number of keys per block, >= 1; the last block may be
            shorter.
        causal: hide keys after each query (query i sees keys up to
            i + K - Q); needs K >= Q.
        valid_lens: None, (B,) or (B, Q) numbers of valid keys, shared by
            every head.
    Returns:
        (B, H, Q, d_v), in queries' dtype and device; zeros for a query with
        no valid key.
    Raises:
        TypeError: on a non-tensor input, inputs that are not floating point
            or (outside autocast) not of one dtype, a non-int block_size or
            non-integer valid_lens.
        ValueError: on shapes that do not fit each other, block_size < 1,
            causal with K < Q, or valid_lens outside [0, K].
    """
    _check_blockwise(queries, keys, values, block_size, causal, valid_lens)
    batch_size, num_heads, num_queries, head_width = queries.shape
    num_keys = keys.shape[2]
    scale = 1.0 / math.sqrt(head_width)
    lens = None
    if valid_lens is not None:  # (B, 1) or (B, Q)
        lens = valid_lens.to(queries.device).reshape(batch_size, -1)
    seen = None  # (B, 1, K): keys some query may see
    if lens is not None and num_queries > 0:
        positions = torch.arange(num_keys, device=queries.device)
        seen = (positions < lens.amax(-1, keepdim=True))[:, None]
    last_seen = None
    if causal:  # (Q, 1): the last key each query may see
        last_seen = torch.arange(num_queries, device=queries.device)[:, None]
        last_seen = last_seen + (num_keys - num_queries)
    # The most negative finite number rather than -inf: m - m is then never
    # -inf - (-inf) = NaN for a query that has seen no valid key yet.
    lowest = torch.finfo(queries.dtype).min
    state_shape = (batch_size, num_heads, num_queries)
    row_max = queries.new_full((*state_shape, 1), lowest)
    row_sum = queries.new_zeros((*state_shape, 1))
    output = queries.new_zeros((*state_shape, values.shape[3]))
    for start in range(0, num_keys, block_size):
        end = min(start + block_size, num_keys)
        block_keys = keys[:, :, start:end]  # (B, H, block, d)
        block_values = values[:, :, start:end]  # (B, H, block, d_v)
        if seen is not None:
            # Keys no query may see (padding) never reach the output, even
            # NaN or inf ones (0 * NaN is NaN).
            block_seen = seen[..., start:end]
            block_keys = _hide_unseen(block_keys, block_seen)
            block_values = _hide_unseen(block_values, block_seen)
        # (B, H, Q, block): the only score matrix, one block wide.
        scores = queries @ block_keys.transpose(2, 3) * scale
        mask = _block_mask(start, end, lens, last_seen, queries.device)
        if mask is not None:  # (B or 1, 1, Q or 1, block): True = may attend
            scores = scores.masked_fill(~mask, lowest)
        new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
        weights = torch.exp(scores - new_max)  # (B, H, Q, block)
        if mask is not None:
            # A query with no valid key so far has new_max = lowest, which
            # gives its masked scores exp(0) = 1: zero them explicitly.
            weights = weights * mask
        rescale = torch.exp(row_max - new_max)  # (B, H, Q, 1)
        row_sum = row_sum * rescale + weights.sum(-1, keepdim=True)
        output = output * rescale + weights @ block_values
        row_max = new_max
    # A query with nothing valid has row_sum = 0 and output = 0: keep 0.
    return output / torch.where(row_sum > 0, row_sum, 1.0)
