"""FlashAttention in PyTorch: the tiled forward that saves the log-sum-exp,
the backward by recomputation, and a count of the bytes they move.

Chapter: "Writing the attention kernel". The online softmax and a blockwise
forward came first, in :mod:`course_pkg.nn.grouped_query`; this module
is the algorithm a GPU kernel runs (FlashAttention-2's loop order, Dao 2023),
written so that every tile moved between the large memory ("HBM") and the
small fast one ("SRAM") goes through an :class:`IOCounter`. The Triton
kernels of :mod:`course_pkg.kernels.flash_triton` do the same steps.

- :func:`flash_forward`: outer loop over query blocks, inner loop over key
  blocks, one division at the end; returns the output and the log-sum-exp
  of each row, the one number per query that the backward needs.
- :func:`flash_backward`: dQ, dK, dV from Q, K, V, O, the log-sum-exp and
  dO, recomputing each block of probabilities instead of storing them.
- :class:`FlashAttention` / :func:`flash_attention`: the two as a
  ``torch.autograd.Function`` that saves only Q, K, V, O and the
  log-sum-exp (the Triton kernels use it too).
- :func:`standard_attention`: the explicit algorithm, S and P written to and
  read back from HBM, with the same counter, for the comparison.

Shape letters: ``B`` batch, ``H`` heads, ``Q`` queries, ``K`` key-value
pairs, ``d`` width of one head; ``block_q`` and ``block_k`` are the tile
heights (B_r and B_c in the papers).

Masks follow :func:`course_pkg.nn.masks.masked_softmax`: ``valid_lens`` is
None, (B,) or (B, Q) numbers of valid keys; ``causal`` lets query i see keys
0..i + (K - Q). A query with no visible key gets output 0 and gradient 0,
never NaN; its log-sum-exp is stored as +inf, so that exp(S - LSE) is 0
there without a special case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from course_pkg.checks import (
    check_float_dtype,
    check_masks,
    check_positive_int,
    check_same_device,
    check_same_float_dtype,
    check_shape,
    check_sizes,
    check_tensor,
)
from course_pkg.nn.masks import _hide_unseen

# ------------------------------------------------------------- counting bytes


@dataclass
class IOCounter:
    """Bytes moved between the large memory (HBM) and tiles (SRAM).

    Every tile a kernel loads goes through ``read``, every result it
    stores through ``write``; both return the tensor unchanged.
    Attributes: ``reads`` and ``writes`` in bytes, ``skipped_blocks``
    (causal tiles never visited) and ``visited_blocks``.
    """

    reads: int = 0
    writes: int = 0
    visited_blocks: int = 0
    skipped_blocks: int = 0

    def read(self, tile: torch.Tensor) -> torch.Tensor:
        self.reads += tile.numel() * tile.element_size()
        return tile

    def write(self, tile: torch.Tensor) -> torch.Tensor:
        self.writes += tile.numel() * tile.element_size()
        return tile

    @property
    def total(self) -> int:
        """reads + writes, in bytes."""
        return self.reads + self.writes


def flash_forward_bytes(
    num_queries: int,
    num_keys: int,
    head_width: int,
    block_q: int,
    element_size: int,
    lse_size: int = 4,
) -> int:
    """Bytes :func:`flash_forward` moves for one head without masks: Q read
    once, K and V once per query block, O and the log-sum-exp written once.

    Args:
        num_queries, num_keys, head_width: Q, K, d.
        block_q: the query tile height B_r.
        element_size: bytes per number of Q, K, V and O.
        lse_size: bytes per log-sum-exp (float32: 4; float64: 8).
    Returns:
        (2 Q d + 2 ceil(Q / B_r) K d) * element_size + Q * lse_size.
    """
    check_sizes(
        num_queries=num_queries,
        num_keys=num_keys,
        head_width=head_width,
        block_q=block_q,
        element_size=element_size,
        lse_size=lse_size,
    )
    query_blocks = -(-num_queries // block_q)
    numbers = 2 * num_queries * head_width
    numbers += 2 * query_blocks * num_keys * head_width
    return numbers * element_size + num_queries * lse_size


def standard_attention_bytes(
    num_queries: int, num_keys: int, head_width: int, element_size: int
) -> int:
    """Bytes :func:`standard_attention` moves for one head: read Q and K,
    write S, read S, write P, read P and V, write O.

    Returns:
        (2 Q d + 2 K d + 4 Q K) * element_size, i.e. Theta(T d + T^2).
    """
    check_sizes(
        num_queries=num_queries,
        num_keys=num_keys,
        head_width=head_width,
        element_size=element_size,
    )
    numbers = 2 * num_queries * head_width + 2 * num_keys * head_width
    return (numbers + 4 * num_queries * num_keys) * element_size


# ------------------------------------------------------------------ masks


def _visible(
    rows: range,
    cols: range,
    num_queries: int,
    num_keys: int,
    lens: torch.Tensor | None,
    causal: bool,
    device: torch.device,
) -> torch.Tensor | None:
    """(B or 1, 1, len(rows), len(cols)) bool, True where query row may see
    key col; None when nothing is hidden. lens: None or (B, Q) lengths."""
    key_pos = torch.arange(cols.start, cols.stop, device=device)
    visible = None
    if lens is not None:
        visible = key_pos < lens[:, rows.start : rows.stop, None]
        visible = visible[:, None]
    if causal:
        query_pos = torch.arange(rows.start, rows.stop, device=device)
        last_key = query_pos[:, None] + (num_keys - num_queries)
        no_future = key_pos <= last_key
        visible = no_future if visible is None else visible & no_future
    return visible


def _skip(
    io: IOCounter,
    rows: range,
    cols: range,
    num_queries: int,
    num_keys: int,
    causal: bool,
) -> bool:
    """Whether a tile is left out: under the causal mask, one wholly above
    the diagonal (its first key comes after the last key its last query may
    see). Counts the tile in ``io`` as skipped or visited."""
    skip = causal and cols.start > rows.stop - 1 + (num_keys - num_queries)
    if skip:
        io.skipped_blocks += 1
    else:
        io.visited_blocks += 1
    return skip


# ---------------------------------------------------------------- the forward


class FlashForward(NamedTuple):
    """What :func:`flash_forward` returns: ``output`` (B, H, Q, d_v) and
    ``lse`` (B, H, Q), the log of each row's sum of exp(scores), +inf for a
    row with nothing visible."""

    output: torch.Tensor
    lse: torch.Tensor


def flash_forward(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    counter: IOCounter | None = None,
) -> FlashForward:
    """softmax(Q K^T / sqrt(d)) V, one (block_q, block_k) tile at a time.

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        valid_lens: None, (B,) or (B, Q) numbers of valid keys.
        causal: hide keys after each query; tiles wholly above the diagonal
            are skipped (counted in ``counter.skipped_blocks``).
        block_q, block_k: tile heights B_r and B_c, >= 1.
        counter: an :class:`IOCounter` to add the moved bytes to.
    Returns:
        :class:`FlashForward` (output, lse).
    Raises:
        TypeError, ValueError: as :func:`check_flash_inputs`.
    """
    check_flash_inputs(
        queries, keys, values, valid_lens, causal, block_q, block_k
    )
    keys, values = _hide_padding(keys, values, valid_lens, causal, queries)
    io = IOCounter() if counter is None else counter
    B, H, num_queries, d = queries.shape
    num_keys = keys.shape[2]
    scale = 1.0 / math.sqrt(d)
    lens = _lengths(valid_lens, B, num_queries, queries.device)
    output = queries.new_empty((B, H, num_queries, values.shape[3]))
    lse = queries.new_empty((B, H, num_queries), dtype=_stat_dtype(queries))
    for q0 in range(0, num_queries, block_q):
        rows = range(q0, min(q0 + block_q, num_queries))
        q_tile = io.read(queries[:, :, rows.start : rows.stop])
        row_max = q_tile.new_full((B, H, len(rows), 1), -math.inf)
        row_sum = q_tile.new_zeros((B, H, len(rows), 1))
        acc = q_tile.new_zeros((B, H, len(rows), values.shape[3]))
        for k0 in range(0, num_keys, block_k):
            cols = range(k0, min(k0 + block_k, num_keys))
            if _skip(io, rows, cols, num_queries, num_keys, causal):
                continue
            k_tile = io.read(keys[:, :, cols.start : cols.stop])
            v_tile = io.read(values[:, :, cols.start : cols.stop])
            scores = q_tile @ k_tile.transpose(2, 3) * scale
            visible = _visible(
                rows, cols, num_queries, num_keys, lens, causal, q_tile.device
            )
            if visible is not None:
                scores = scores.masked_fill(~visible, -math.inf)
            new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
            # A row with nothing visible yet keeps max -inf: subtract 0
            # instead, so exp(-inf - 0) = 0 rather than exp(-inf + inf) = NaN.
            shift = new_max.masked_fill(new_max == -math.inf, 0.0)
            weights = torch.exp(scores - shift)  # (B, H, block_q, block_k)
            rescale = torch.exp(row_max - shift)
            row_sum = row_sum * rescale + weights.sum(-1, keepdim=True)
            acc = acc * rescale + weights @ v_tile
            row_max = new_max
        # One division per row, after the last key block (FlashAttention-2).
        empty = row_sum == 0
        tile_out = acc / row_sum.masked_fill(empty, 1.0)
        tile_lse = (row_max + torch.log(row_sum)).masked_fill(empty, math.inf)
        output[:, :, rows.start : rows.stop] = io.write(tile_out)
        lse[:, :, rows.start : rows.stop] = io.write(tile_lse.squeeze(-1))
    return FlashForward(output, lse)


# --------------------------------------------------------------- the backward


def flash_backward(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    output: torch.Tensor,
    lse: torch.Tensor,
    grad_output: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    counter: IOCounter | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of attention, recomputing P one tile at a time.

    With P = exp(S - LSE) and D = rowsum(dO * O) (= rowsum(P * dP)):
    dV = P^T dO, dP = dO V^T, dS = P * (dP - D), dQ = dS K / sqrt(d),
    dK = dS^T Q / sqrt(d). Outer loop over key blocks (dK, dV stay in the
    tile), inner over query blocks (dQ is read, added to and written back,
    as a GPU kernel does with atomic adds).

    Args:
        queries, keys, values, valid_lens, causal, block_q, block_k: as in
            :func:`flash_forward`. output: (B, H, Q, d_v) and lse: (B, H, Q)
            from it. grad_output: (B, H, Q, d_v), dO.
        counter: an :class:`IOCounter` to add the moved bytes to.
    Returns:
        (dQ, dK, dV), shaped as queries, keys, values.
    Raises:
        TypeError, ValueError: as :func:`check_flash_inputs`, and if output,
            lse or grad_output is not a float tensor of its shape on
            queries' device.
    """
    check_flash_inputs(
        queries, keys, values, valid_lens, causal, block_q, block_k
    )
    out_shape = (*queries.shape[:3], values.shape[3])
    for name, tensor, shape, letters in (
        ("output", output, out_shape, "(B, H, Q, d_v)"),
        ("lse", lse, tuple(queries.shape[:3]), "(B, H, Q)"),
        ("grad_output", grad_output, out_shape, "(B, H, Q, d_v)"),
    ):
        check_shape(name, tensor, shape, letters)
        check_float_dtype(name, tensor)
        check_same_device(queries=queries, **{name: tensor})
    keys, values = _hide_padding(keys, values, valid_lens, causal, queries)
    io = IOCounter() if counter is None else counter
    B, H, num_queries, d = queries.shape
    num_keys = keys.shape[2]
    scale = 1.0 / math.sqrt(d)
    lens = _lengths(valid_lens, B, num_queries, queries.device)
    delta = io.write((io.read(grad_output) * io.read(output)).sum(-1))
    grad_q = torch.zeros_like(queries)
    grad_k, grad_v = torch.empty_like(keys), torch.empty_like(values)
    for k0 in range(0, num_keys, block_k):
        cols = range(k0, min(k0 + block_k, num_keys))
        k_tile = io.read(keys[:, :, cols.start : cols.stop])
        v_tile = io.read(values[:, :, cols.start : cols.stop])
        dk_tile, dv_tile = torch.zeros_like(k_tile), torch.zeros_like(v_tile)
        for q0 in range(0, num_queries, block_q):
            rows = range(q0, min(q0 + block_q, num_queries))
            if _skip(io, rows, cols, num_queries, num_keys, causal):
                continue
            part = slice(rows.start, rows.stop)
            q_tile = io.read(queries[:, :, part])
            do_tile = io.read(grad_output[:, :, part])
            lse_tile = io.read(lse[:, :, part])[..., None].to(q_tile.dtype)
            delta_tile = io.read(delta[:, :, part])[..., None]
            scores = q_tile @ k_tile.transpose(2, 3) * scale
            visible = _visible(
                rows, cols, num_queries, num_keys, lens, causal, q_tile.device
            )
            if visible is not None:
                scores = scores.masked_fill(~visible, -math.inf)
            probs = torch.exp(scores - lse_tile)  # P, recomputed
            dv_tile += probs.transpose(2, 3) @ do_tile
            grad_probs = do_tile @ v_tile.transpose(2, 3)  # dP
            grad_scores = probs * (grad_probs - delta_tile)  # dS
            dk_tile += grad_scores.transpose(2, 3) @ q_tile * scale
            dq = io.read(grad_q[:, :, part]) + grad_scores @ k_tile * scale
            grad_q[:, :, part] = io.write(dq)
        grad_k[:, :, cols.start : cols.stop] = io.write(dk_tile)
        grad_v[:, :, cols.start : cols.stop] = io.write(dv_tile)
    return grad_q, grad_k, grad_v


# ------------------------------------------------------- the autograd Function


class FlashAttention(torch.autograd.Function):
    """Attention whose forward saves Q, K, V, O and the log-sum-exp only.

    ``FlashAttention.apply(queries, keys, values, valid_lens, causal,
    block_q, block_k, passes)``; passes, the functions that compute the two
    passes: :func:`flash_forward` and :func:`flash_backward`, or the Triton
    kernels' (:mod:`course_pkg.kernels.flash_triton`). Use
    :func:`flash_attention`, which checks first.
    """

    @staticmethod
    def forward(
        ctx, queries, keys, values, valid_lens, causal, bq, bk, passes
    ):
        """The forward pass, passes[0]; saves Q, K, V, O and the LSE."""
        forward_pass, ctx.backward_pass = passes
        output, lse = forward_pass(
            queries, keys, values, valid_lens, causal, bq, bk
        )
        ctx.save_for_backward(queries, keys, values, output, lse)
        ctx.options = (valid_lens, causal, bq, bk)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        """The backward pass, passes[1]: dQ, dK, dV from the saved tensors."""
        saved = ctx.saved_tensors
        grads = ctx.backward_pass(
            *saved, grad_output.contiguous(), *ctx.options
        )
        return (*grads, None, None, None, None, None)


def flash_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """Scaled dot-product attention by :class:`FlashAttention`.

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        valid_lens: None, (B,) or (B, Q) numbers of valid keys.
        causal: hide the keys after each query (needs K >= Q).
        block_q, block_k: tile heights, >= 1.
    Returns:
        (B, H, Q, d_v); zeros (and zero gradients) for a query that sees no
        key.
    Raises:
        TypeError, ValueError: as :func:`check_flash_inputs`, or block sizes
            that are not ints >= 1.
    """
    check_flash_inputs(
        queries, keys, values, valid_lens, causal, block_q, block_k
    )
    return FlashAttention.apply(
        queries, keys, values, valid_lens, causal, block_q, block_k,
        (flash_forward, flash_backward),
    )  # fmt: skip


# ----------------------------------------------------- the explicit algorithm


def standard_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    counter: IOCounter | None = None,
) -> torch.Tensor:
    """Attention as its formula reads, every intermediate through HBM:
    S = Q K^T / sqrt(d) written, read back for P = softmax(S), P written,
    read back for O = P V. For counting bytes (no masks).

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        counter: an :class:`IOCounter` to add the moved bytes to.
    Returns:
        (B, H, Q, d_v).
    """
    check_flash_inputs(queries, keys, values, None, False)
    io = IOCounter() if counter is None else counter
    scale = 1.0 / math.sqrt(queries.shape[-1])
    scores = io.write(io.read(queries) @ io.read(keys).transpose(2, 3) * scale)
    probs = io.write(torch.softmax(io.read(scores), dim=-1))
    return io.write(io.read(probs) @ io.read(values))


# ---------------------------------------------------------------- input checks


def check_flash_inputs(
    queries: object,
    keys: object,
    values: object,
    valid_lens: object,
    causal: object,
    block_q: object = 1,
    block_k: object = 1,
) -> None:
    """Refuse attention inputs that do not fit each other.

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v);
            one floating dtype and one device.
        valid_lens: None, (B,) or (B, Q) lengths in [0, K].
        causal: a bool; True needs K >= Q.
        block_q, block_k: ints >= 1.
    Raises:
        TypeError: on a non-tensor, non-float or mixed dtypes, a non-bool
            causal, non-integer valid_lens, non-int block sizes.
        ValueError: on shapes or devices that do not fit, causal with K < Q,
            lengths outside [0, K], block sizes < 1.
    """
    check_positive_int("block_q", block_q)
    check_positive_int("block_k", block_k)
    check_tensor("queries", queries, 4, "(B, H, Q, d)")
    check_tensor("keys", keys, 4, "(B, H, K, d)")
    check_tensor("values", values, 4, "(B, H, K, d_v)")
    check_same_float_dtype(queries=queries, keys=keys, values=values)
    B, H, _, d = queries.shape
    if keys.shape[:2] != (B, H) or keys.shape[3] != d:
        raise ValueError(
            f"keys must have shape (B, H, K, d)=({B}, {H}, K, {d}), "
            f"got {tuple(keys.shape)}"
        )
    if values.shape[:3] != keys.shape[:3]:
        raise ValueError(
            f"values must have shape (B, H, K, d_v)=({B}, {H}, "
            f"{keys.shape[2]}, d_v), got {tuple(values.shape)}"
        )
    devices = {t.device for t in (queries, keys, values)}
    if len(devices) > 1:
        raise ValueError(
            "queries, keys and values must be on one device, got "
            f"{queries.device}, {keys.device}, {values.device}"
        )
    check_masks(valid_lens, causal, keys.shape[2], like=("queries", queries))


def _hide_padding(
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
    causal: bool,
    queries: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """keys and values with their non-finite entries at keys no query may
    see (padding past every query's valid length) replaced by 0, through
    :func:`course_pkg.nn.masks.hide_unseen`: a weight of 0 times a NaN value
    is NaN, which would otherwise reach every row. Finite inputs come back
    bit for bit (on the CPU, the tensors themselves). Inputs already checked
    by :func:`check_flash_inputs`; the mask is (B, 1, K), never (B, Q, K).
    """
    B, _, num_queries, _ = queries.shape
    num_keys = keys.shape[2]
    if valid_lens is None or num_queries == 0 or keys.numel() == 0:
        return keys, values
    lens = _lengths(valid_lens, B, num_queries, keys.device)
    if causal:  # query i sees keys 0 .. i + (K - Q) at most
        last = torch.arange(num_queries, device=keys.device)
        lens = torch.minimum(lens, last + (num_keys - num_queries + 1))
    positions = torch.arange(num_keys, device=keys.device)
    seen = (positions < lens.amax(-1, keepdim=True))[:, None]  # (B, 1, K)
    return _hide_unseen(keys, seen), _hide_unseen(values, seen)


def _lengths(
    valid_lens: torch.Tensor | None,
    batch_size: int,
    num_queries: int,
    device: torch.device,
) -> torch.Tensor | None:
    """None, or valid_lens as (B, Q) lengths on device."""
    if valid_lens is None:
        return None
    lens = valid_lens.to(device).reshape(batch_size, -1)
    return lens.expand(batch_size, num_queries)


def _stat_dtype(queries: torch.Tensor) -> torch.dtype:
    """The dtype of the log-sum-exp: float64 for float64 inputs, else
    float32 (a half-precision exponent would lose the row's scale)."""
    return torch.float64 if queries.dtype == torch.float64 else torch.float32
