"""FlashAttention forward and backward as Triton kernels.

Chapter: "Writing the attention kernel". The algorithm is the one of
:mod:`course_pkg.kernels.flash` (FlashAttention-2's loop order, Dao 2023): one
program per (query block, head) for the forward and for dQ, one per
(key block, head) for dK and dV, each recomputing its tiles of
probabilities from the saved log-sum-exp. The tile heights are
``tl.constexpr``: Triton compiles one kernel per choice.

Where it runs: compiled on a CUDA GPU, or, with ``TRITON_INTERPRET=1`` set
before this module is imported, in Triton's interpreter on the CPU, which
executes the programs one after another with NumPy (for correctness, not
speed: it cannot show races or out-of-bounds reads, and its bfloat16
``tl.dot`` is not trustworthy, so bfloat16 is refused there).
:func:`compile_kernels` compiles the kernels ahead of time for a GPU
architecture without one (Triton's bundled ``ptxas``).

Importing this module needs ``triton`` (Linux); see
:func:`course_pkg.kernels.triton_status`.

Layout: queries, keys, values (B, H, T, d), contiguous, one dtype and
device; d = d_v, a power of two in [16, 128]; valid_lens, causal as in
:func:`course_pkg.kernels.flash.flash_attention`.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import torch

from course_pkg.checks import (
    check_same_device,
    check_same_float_dtype,
    check_shape,
)
from course_pkg.kernels.flash import (
    FlashAttention,
    _hide_padding,
    _lengths,
    _stat_dtype,
    check_flash_inputs,
)

try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError(
        "course_pkg.kernels.flash_triton needs triton, which ships with "
        "PyTorch's Linux wheels only; course_pkg.kernels.flash runs everywhere"
    ) from error

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
TORCH_TO_TRITON = {
    torch.float16: tl.float16,
    torch.bfloat16: tl.bfloat16,
    torch.float32: tl.float32,
    torch.float64: tl.float64,
}

# ------------------------------------------------------------------ kernels


@triton.jit
def _visible(rows, cols, lens, num_queries, num_keys, CAUSAL: tl.constexpr):
    """(BLOCK_Q, BLOCK_K) True where query row may see key col."""
    visible = (cols[None, :] < lens[:, None]) & (cols[None, :] < num_keys)
    if CAUSAL:
        last_key = rows[:, None] + (num_keys - num_queries)
        visible = visible & (cols[None, :] <= last_key)
    return visible


@triton.jit
def _matmul(a, b, ACC: tl.constexpr):
    """a @ b accumulated in ACC; float32 inputs multiplied in full float32
    ("ieee"), not TensorFloat-32, which keeps only 10 bits of mantissa."""
    return tl.dot(a, b, out_dtype=ACC, input_precision="ieee")


@triton.jit
def _scale(D: tl.constexpr, ACC: tl.constexpr):
    """1 / sqrt(d), computed in the accumulator's dtype (a Python float
    argument would reach the kernel as float32, too coarse for float64)."""
    return 1.0 / tl.sqrt(tl.full([1], D, ACC))


@triton.jit
def _tile_at(head, positions, length, D: tl.constexpr):
    """Offsets (N, D) of the rows ``positions`` (N,) of head ``head`` (an
    int64, so that B * H * T * d may pass 2**31) in a contiguous
    (B * H, length, D) tensor, and the (N, 1) mask of the rows that exist
    (position < length)."""
    dims = tl.arange(0, D)
    at = head * length * D + positions[:, None] * D + dims[None, :]
    return at, (positions < length)[:, None]


@triton.jit
def _key_range(block, num_queries, num_keys, BLOCK_Q: tl.constexpr,
               BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr):
    """The keys query block ``block`` reads: (masked_from, end). Tiles before
    masked_from are seen whole by every query of the block; causal, the
    tiles from masked_from to end cross the diagonal and pay for the mask,
    and the loop stops at end, after the last key its last query sees."""
    end = num_keys
    masked_from = num_keys
    if CAUSAL:
        shift = num_keys - num_queries  # query i sees keys j <= i + shift
        end = tl.minimum(num_keys, (block + 1) * BLOCK_Q + shift)
        masked_from = (block * BLOCK_Q + shift + 1) // BLOCK_K * BLOCK_K
    return masked_from, end


@triton.jit
def _key_tile(
    K, V, head, start, q, rows, lens, num_queries, num_keys, scale,
    D: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    """The key tile from key ``start`` on, for the query tile q at ``rows``:
    its keys and values (BLOCK_K, D), zeros past num_keys, and the scores
    q k^T * scale (BLOCK_Q, BLOCK_K), -inf where a query may not see a key
    (so that their exp() is 0); CAUSAL: apply the causal mask here."""
    cols = start + tl.arange(0, BLOCK_K)
    kv_at, kv_real = _tile_at(head, cols, num_keys, D)
    k = tl.load(K + kv_at, mask=kv_real, other=0.0)
    v = tl.load(V + kv_at, mask=kv_real, other=0.0)
    scores = _matmul(q, tl.trans(k), ACC) * scale
    seen = _visible(rows, cols, lens, num_queries, num_keys, CAUSAL)
    return k, v, tl.where(seen, scores, float("-inf"))


@triton.jit
def _online_softmax_step(scores, v, row_max, row_sum, acc, ACC: tl.constexpr):
    """Fold one tile of scores (BLOCK_Q, BLOCK_K) and its values into the
    running max, sum and output (FlashAttention-2: rescale, then add)."""
    new_max = tl.maximum(row_max, tl.max(scores, 1))
    shift = tl.where(new_max == float("-inf"), 0.0, new_max)
    weights = tl.exp(scores - shift[:, None])
    rescale = tl.exp(row_max - shift)
    row_sum = row_sum * rescale + tl.sum(weights, 1)
    acc = acc * rescale[:, None] + _matmul(weights.to(v.dtype), v, ACC)
    return new_max, row_sum, acc


@triton.jit
def flash_forward_kernel(
    Q, K, V, OUT, LSE, LENS, num_queries, num_keys,
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):
    block, head = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    in_range = rows < num_queries
    q_at, q_real = _tile_at(head, rows, num_queries, D)
    q = tl.load(Q + q_at, mask=q_real, other=0.0)
    lens = tl.load(LENS + head * num_queries + rows, mask=in_range, other=0)
    row_max = tl.full([BLOCK_Q], float("-inf"), ACC)
    row_sum = tl.zeros([BLOCK_Q], ACC)
    acc = tl.zeros([BLOCK_Q, D], ACC)
    scale = _scale(D, ACC)
    masked_from, end = _key_range(
        block, num_queries, num_keys, BLOCK_Q, BLOCK_K, CAUSAL
    )
    for start in range(0, masked_from, BLOCK_K):  # whole tiles: no causal mask
        k, v, scores = _key_tile(
            K, V, head, start, q, rows, lens, num_queries, num_keys, scale,
            D, BLOCK_K, False, ACC,
        )
        row_max, row_sum, acc = _online_softmax_step(
            scores, v, row_max, row_sum, acc, ACC
        )
    for start in range(masked_from, end, BLOCK_K):  # across the diagonal
        k, v, scores = _key_tile(
            K, V, head, start, q, rows, lens, num_queries, num_keys, scale,
            D, BLOCK_K, CAUSAL, ACC,
        )
        row_max, row_sum, acc = _online_softmax_step(
            scores, v, row_max, row_sum, acc, ACC
        )
    empty = row_sum == 0.0
    safe_sum = tl.where(empty, 1.0, row_sum)
    out = acc / safe_sum[:, None]
    lse = tl.where(empty, float("inf"), row_max + tl.log(safe_sum))
    tl.store(OUT + q_at, out.to(OUT.dtype.element_ty), mask=q_real)
    tl.store(LSE + head * num_queries + rows, lse, mask=in_range)


@triton.jit
def _query_tile(Q, DO, LSE, DELTA, LENS, head, rows, num_queries,
                D: tl.constexpr):
    """What the backward kernels read of the query tile at ``rows``: q and
    dO (BLOCK_Q, D), zeros past num_queries; the log-sum-exp, D_i and the
    lengths (BLOCK_Q,), +inf, 0 and 0 past num_queries."""
    q_at, q_real = _tile_at(head, rows, num_queries, D)
    q = tl.load(Q + q_at, mask=q_real, other=0.0)
    grad_out = tl.load(DO + q_at, mask=q_real, other=0.0)
    at, in_range = head * num_queries + rows, rows < num_queries
    lse = tl.load(LSE + at, mask=in_range, other=float("inf"))
    delta = tl.load(DELTA + at, mask=in_range, other=0.0)
    lens = tl.load(LENS + at, mask=in_range, other=0)
    return q, grad_out, lse, delta, lens


@triton.jit
def _dkdv_step(
    Q, DO, LSE, DELTA, LENS, head, start, k, v, cols, grad_k, grad_v,
    num_queries, num_keys, scale, D: tl.constexpr, BLOCK_Q: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):
    """Add one query tile's share to dK and dV (BLOCK_K, D) of a key tile."""
    rows = start + tl.arange(0, BLOCK_Q)
    q, grad_out, lse, delta, lens = _query_tile(
        Q, DO, LSE, DELTA, LENS, head, rows, num_queries, D
    )
    scores = _matmul(q, tl.trans(k), ACC) * scale
    seen = _visible(rows, cols, lens, num_queries, num_keys, CAUSAL)
    probs = tl.where(seen, tl.exp(scores - lse[:, None]), 0.0)
    grad_v += _matmul(tl.trans(probs.to(v.dtype)), grad_out, ACC)
    grad_probs = _matmul(grad_out, tl.trans(v), ACC)
    grad_scores = (probs * (grad_probs - delta[:, None])).to(q.dtype)
    grad_k += _matmul(tl.trans(grad_scores), q, ACC)
    return grad_k, grad_v


@triton.jit
def flash_backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, LENS, num_queries, num_keys,
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):
    block, head = tl.program_id(0), tl.program_id(1).to(tl.int64)
    cols = block * BLOCK_K + tl.arange(0, BLOCK_K)
    kv_at, kv_real = _tile_at(head, cols, num_keys, D)
    k = tl.load(K + kv_at, mask=kv_real, other=0.0)
    v = tl.load(V + kv_at, mask=kv_real, other=0.0)
    grad_k = tl.zeros([BLOCK_K, D], ACC)
    grad_v = tl.zeros([BLOCK_K, D], ACC)
    scale = _scale(D, ACC)
    # Causal: query blocks before `begin` see none of these keys; those from
    # `begin` to `whole_from` cross the diagonal; later ones see them whole.
    begin, whole_from = 0, 0
    if CAUSAL:
        shift = num_keys - num_queries
        begin = tl.maximum(block * BLOCK_K - shift, 0) // BLOCK_Q * BLOCK_Q
        first_whole = tl.maximum((block + 1) * BLOCK_K - shift, 0)
        whole_from = tl.minimum(
            (first_whole + BLOCK_Q - 1) // BLOCK_Q * BLOCK_Q, num_queries
        )
    for start in range(begin, whole_from, BLOCK_Q):  # across the diagonal
        grad_k, grad_v = _dkdv_step(
            Q, DO, LSE, DELTA, LENS, head, start, k, v, cols, grad_k, grad_v,
            num_queries, num_keys, scale, D, BLOCK_Q, CAUSAL, ACC,
        )
    for start in range(whole_from, num_queries, BLOCK_Q):  # no causal mask
        grad_k, grad_v = _dkdv_step(
            Q, DO, LSE, DELTA, LENS, head, start, k, v, cols, grad_k, grad_v,
            num_queries, num_keys, scale, D, BLOCK_Q, False, ACC,
        )
    grad_k = grad_k * scale
    tl.store(DK + kv_at, grad_k.to(DK.dtype.element_ty), mask=kv_real)
    tl.store(DV + kv_at, grad_v.to(DV.dtype.element_ty), mask=kv_real)


@triton.jit
def _dq_step(
    K, V, head, start, q, rows, lens, grad_out, lse, delta, grad_q,
    num_queries, num_keys, scale, D: tl.constexpr, BLOCK_K: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):
    """Add one key tile's share to dQ (BLOCK_Q, D) of a query tile."""
    k, v, scores = _key_tile(
        K, V, head, start, q, rows, lens, num_queries, num_keys, scale,
        D, BLOCK_K, CAUSAL, ACC,
    )
    probs = tl.exp(scores - lse[:, None])  # 0 where hidden: -inf scores
    grad_probs = _matmul(grad_out, tl.trans(v), ACC)
    grad_scores = (probs * (grad_probs - delta[:, None])).to(k.dtype)
    return grad_q + _matmul(grad_scores, k, ACC)


@triton.jit
def flash_backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, LENS, num_queries, num_keys,
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):
    block, head = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    q, grad_out, lse, delta, lens = _query_tile(
        Q, DO, LSE, DELTA, LENS, head, rows, num_queries, D
    )
    grad_q = tl.zeros([BLOCK_Q, D], ACC)
    scale = _scale(D, ACC)
    masked_from, end = _key_range(
        block, num_queries, num_keys, BLOCK_Q, BLOCK_K, CAUSAL
    )
    for start in range(0, masked_from, BLOCK_K):  # whole tiles
        grad_q = _dq_step(
            K, V, head, start, q, rows, lens, grad_out, lse, delta, grad_q,
            num_queries, num_keys, scale, D, BLOCK_K, False, ACC,
        )
    for start in range(masked_from, end, BLOCK_K):  # across the diagonal
        grad_q = _dq_step(
            K, V, head, start, q, rows, lens, grad_out, lse, delta, grad_q,
            num_queries, num_keys, scale, D, BLOCK_K, CAUSAL, ACC,
        )
    grad_q = grad_q * scale
    q_at, q_real = _tile_at(head, rows, num_queries, D)
    tl.store(DQ + q_at, grad_q.to(DQ.dtype.element_ty), mask=q_real)


# ---------------------------------------------------------- launching them


# Tiles the kernels take: block_q and block_k in BLOCKS, where all three
# kernels fit the shared memory a program may ask for on an A100 (sm80) and
# an H100 (sm90): CUDA's per-block opt-in limits, the H100's read on one by
# torch.cuda.get_device_properties. Which tiles fit is not a formula: it is
# what Triton compiles. bench/kernel_resources.py compiles every candidate
# for both GPUs, without a GPU, into RESOURCES (one JSON line per kernel,
# with the shared memory it asks for); tests/test_flash_triton.py checks
# that record against today's kernels and Triton. (For example, float32 at
# d = 128 with 64 x 64 tiles asks more than an A100 has.)
BLOCKS = (16, 32, 64)
SHARED_LIMITS = {80: 166_912, 90: 232_448}
RESOURCES = Path(__file__).resolve().parent / "flash_resources.jsonl"


@functools.cache
def _fitting_tiles() -> frozenset[tuple[str, int, int, int]]:
    """(dtype, d, block_q, block_k) of every tile whose kernels all fit."""
    too_large, seen = set(), set()
    for line in RESOURCES.read_text().splitlines():
        row = json.loads(line)
        tile = (row["dtype"], row["d"], row["block_q"], row["block_k"])
        seen.add(tile)
        if row["shared"] > SHARED_LIMITS[row["capability"]]:
            too_large.add(tile)
    return frozenset(seen - too_large)


def tile_fits(dtype: torch.dtype, d: int, block_q: int, block_k: int) -> bool:
    """Whether the kernels take tiles block_q x block_k of width d in dtype:
    compiled for sm80 and sm90, all three kernels within both GPUs' shared
    memory (the record ``RESOURCES``, ``flash_resources.jsonl``)."""
    name = str(dtype).removeprefix("torch.")
    return (name, d, block_q, block_k) in _fitting_tiles()


def check_kernel_inputs(
    queries: object,
    keys: object,
    values: object,
    valid_lens: object,
    causal: object,
    block_q: object,
    block_k: object,
) -> None:
    """Refuse what the kernels cannot take, before anything is launched.

    On top of :func:`course_pkg.kernels.flash.check_flash_inputs`: contiguous
    tensors; d = d_v a power of two in [16, 128] (``tl.arange`` needs a
    power of two, ``tl.dot`` at least 16); T * d below 2**31 (offsets within
    a head are int32); tiles that fit an A100 and an H100
    (:func:`tile_fits`); a CUDA
    device, or the CPU under the interpreter; float16, bfloat16, float32 or
    float64, and no bfloat16 in the interpreter.

    Raises:
        TypeError: on a dtype the kernels do not take, non-int blocks.
        ValueError: on layout, sizes or devices they cannot take.
    """
    check_flash_inputs(queries, keys, values, valid_lens, causal)
    for name, tensor in (
        ("queries", queries),
        ("keys", keys),
        ("values", values),
    ):
        if not tensor.is_contiguous():
            raise ValueError(
                f"{name} must be contiguous (B, H, T, d); call .contiguous()"
            )
    if queries.dtype not in TORCH_TO_TRITON:
        raise TypeError(
            f"queries, keys and values must be float16, bfloat16, float32 "
            f"or float64, got {queries.dtype}"
        )
    if INTERPRETED and queries.dtype == torch.bfloat16:
        raise TypeError(
            "bfloat16 is refused under TRITON_INTERPRET=1 (the interpreter's "
            "bfloat16 tl.dot is wrong); use float32 here, bfloat16 on a GPU"
        )
    width = queries.shape[3]
    if values.shape[3] != width or not _power_of_two(width, 16, 128):
        raise ValueError(
            "the kernels need d = d_v, a power of two in [16, 128], got "
            f"d={width}, d_v={values.shape[3]}"
        )
    longest = max(queries.shape[2], keys.shape[2])
    if longest * width >= 2**31:
        raise ValueError(
            f"the kernels need T * d < 2**31 (int32 offsets within a head), "
            f"got T={longest}, d={width}"
        )
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(
                f"{name} must be an int, got {type(size).__name__}"
            )
    if not tile_fits(queries.dtype, width, block_q, block_k):
        fitting = sorted(
            (q, k) for q in BLOCKS for k in BLOCKS
            if tile_fits(queries.dtype, width, q, k)
        )
        raise ValueError(
            f"block_q x block_k must be a tile that fits an A100's and an "
            f"H100's shared memory, for d={width} in {queries.dtype} one of "
            f"{fitting}; got {block_q} x {block_k}"
        )
    device = queries.device
    if device.type != "cuda" and not (device.type == "cpu" and INTERPRETED):
        raise ValueError(
            f"the Triton kernels run on a CUDA device, or on the CPU with "
            f"TRITON_INTERPRET=1 set before import; got tensors on {device}"
        )


def _power_of_two(size: int, low: int, high: int) -> bool:
    return low <= size <= high and size & (size - 1) == 0


def _launch_setup(
    queries: torch.Tensor, keys: torch.Tensor, valid_lens: torch.Tensor | None
):
    """Accumulator dtype and (B * H, Q) int32 lengths for a launch, made
    on the inputs' device."""
    B, H, num_queries, _ = queries.shape
    device = queries.device
    lens = _lengths(valid_lens, B, num_queries, device)
    if lens is None:
        lens = torch.full((B, num_queries), keys.shape[2], device=device)
    lens = lens.to(torch.int32)[:, None].expand(B, H, num_queries)
    acc = tl.float64 if queries.dtype == torch.float64 else tl.float32
    return acc, lens.contiguous()


def triton_flash_forward(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 32,
    block_k: int = 32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward kernel: (output (B, H, Q, d), lse (B, H, Q) float32,
    float64 for float64 inputs). Checks first (:func:`check_kernel_inputs`)."""
    check_kernel_inputs(
        queries, keys, values, valid_lens, causal, block_q, block_k
    )
    # NaN or inf in padding no query sees would reach every row (0 * NaN):
    # zeroed here, before the launch; finite inputs are passed as they are.
    keys, values = _hide_padding(keys, values, valid_lens, causal, queries)
    keys, values = keys.contiguous(), values.contiguous()
    B, H, num_queries, width = queries.shape
    acc, lens = _launch_setup(queries, keys, valid_lens)
    output = torch.empty_like(queries)
    lse = torch.empty(
        (B, H, num_queries), dtype=_stat_dtype(queries),
        device=queries.device,
    )
    grid = (triton.cdiv(num_queries, block_q), B * H)
    flash_forward_kernel[grid](
        queries, keys, values, output, lse, lens, num_queries, keys.shape[2],
        D=width, BLOCK_Q=block_q, BLOCK_K=block_k, CAUSAL=causal, ACC=acc,
    )
    return output, lse


def _check_backward_inputs(
    queries: torch.Tensor,
    values: torch.Tensor,
    output: torch.Tensor,
    lse: torch.Tensor,
    grad_output: torch.Tensor,
) -> None:
    """Refuse a forward's results that do not belong to these inputs."""
    B, H, num_queries, _ = queries.shape
    rows = (B, H, num_queries, values.shape[3])
    check_shape("output", output, rows, "(B, H, Q, d_v)")
    check_shape("grad_output", grad_output, rows, "(B, H, Q, d_v)")
    check_shape("lse", lse, (B, H, num_queries), "(B, H, Q)")
    check_same_float_dtype(
        queries=queries, output=output, grad_output=grad_output
    )
    if lse.dtype != _stat_dtype(queries):
        raise TypeError(
            f"lse must be {_stat_dtype(queries)} for {queries.dtype} "
            f"inputs (as triton_flash_forward returns it), got {lse.dtype}"
        )
    check_same_device(queries=queries, lse=lse)  # output's: checked above


def triton_flash_backward(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    output: torch.Tensor,
    lse: torch.Tensor,
    grad_output: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 32,
    block_k: int = 32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward kernels: (dQ, dK, dV). D = rowsum(dO * O) is computed
    here, in PyTorch (one pass over two (B, H, Q, d) tensors).

    Raises:
        TypeError, ValueError: as :func:`check_kernel_inputs`; and if output
            or grad_output is not (B, H, Q, d_v) of the queries' dtype, or
            lse not (B, H, Q) of the forward's dtype, or one of them is on
            another device: all before any launch (the kernels would read a
            short lse out of bounds).
    """
    _check_triton_flash_backward(
        queries, keys, values, output, lse, grad_output, valid_lens, causal,
        block_q, block_k,
    )
    keys, values = _hide_padding(keys, values, valid_lens, causal, queries)
    keys, values = keys.contiguous(), values.contiguous()
    grad_output, lse = grad_output.contiguous(), lse.contiguous()
    B, H, num_queries, width = queries.shape
    num_keys = keys.shape[2]
    acc, lens = _launch_setup(queries, keys, valid_lens)
    delta = (grad_output.to(lse.dtype) * output.to(lse.dtype)).sum(-1)
    grad_q = torch.empty_like(queries)
    grad_k, grad_v = torch.empty_like(keys), torch.empty_like(values)
    sizes = dict(
        D=width, BLOCK_Q=block_q, BLOCK_K=block_k, CAUSAL=causal, ACC=acc
    )
    flash_backward_dkdv_kernel[(triton.cdiv(num_keys, block_k), B * H)](
        queries, keys, values, grad_output, lse, delta, grad_k, grad_v, lens,
        num_queries, num_keys, **sizes,
    )
    flash_backward_dq_kernel[(triton.cdiv(num_queries, block_q), B * H)](
        queries, keys, values, grad_output, lse, delta, grad_q, lens,
        num_queries, num_keys, **sizes,
    )
    return grad_q, grad_k, grad_v


def _check_triton_flash_backward(
    queries: object,
    keys: object,
    values: object,
    output: object,
    lse: object,
    grad_output: object,
    valid_lens: object,
    causal: object,
    block_q: object,
    block_k: object,
) -> None:
    """The inputs as :func:`check_kernel_inputs`; output, grad_output
    (B, H, Q, d_v) and lse (B, H, Q) as :func:`_check_backward_inputs`."""
    check_kernel_inputs(
        queries, keys, values, valid_lens, causal, block_q, block_k
    )
    _check_backward_inputs(queries, values, output, lse, grad_output)


def triton_flash_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 32,
    block_k: int = 32,
) -> torch.Tensor:
    """Scaled dot-product attention by the Triton kernels, with autograd
    (:class:`course_pkg.kernels.flash.FlashAttention` with the kernels' passes).

    Args:
        queries: (B, H, Q, d). keys, values: (B, H, K, d). valid_lens:
            None, (B,) or (B, Q) numbers of valid keys. causal: hide later
            keys (K >= Q). block_q, block_k: tile heights.
    Returns:
        (B, H, Q, d); zeros for a query that sees no key.
    Raises:
        TypeError, ValueError: as :func:`check_kernel_inputs`, before any
            launch.
    """
    check_kernel_inputs(
        queries, keys, values, valid_lens, causal, block_q, block_k
    )
    return FlashAttention.apply(
        queries, keys, values, valid_lens, causal, block_q, block_k,
        (triton_flash_forward, triton_flash_backward),
    )


# ------------------------------------------------- compiling without a GPU


def compile_kernels(
    capability: int,
    dtype: torch.dtype,
    head_width: int = 64,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = True,
) -> dict:
    """Compile the three kernels for a CUDA architecture, no GPU needed.

    Runs Triton's whole pipeline (its IR, LLVM, PTX, then the bundled
    ``ptxas`` to a cubin), which is where a GPU would first fail on an
    operation the hardware cannot do; the compiled kernel's ``metadata``
    says what it asks of the GPU (``shared``: bytes of shared memory).

    Args:
        capability: e.g. 80 (A100) or 90 (H100).
        dtype: float16, bfloat16, float32 or float64.
        head_width, block_q, block_k, causal: the constants compiled in.
    Returns:
        {kernel name: Triton's compiled kernel}: ``.asm["cubin"]`` the GPU
        binary (an ELF file), ``.asm["ttir"]`` Triton's IR, ``.metadata``.
    Raises:
        RuntimeError: under TRITON_INTERPRET=1 (nothing is compiled there).
    """
    if INTERPRETED:
        raise RuntimeError("compile_kernels needs TRITON_INTERPRET unset")
    from triton.backends.compiler import GPUTarget

    element = "*" + {torch.float16: "fp16", torch.bfloat16: "bf16",
                     torch.float32: "fp32", torch.float64: "fp64"}[dtype]
    stat = "*fp64" if dtype == torch.float64 else "*fp32"
    acc = tl.float64 if dtype == torch.float64 else tl.float32
    constants = dict(
        D=head_width, BLOCK_Q=block_q, BLOCK_K=block_k, CAUSAL=causal, ACC=acc
    )
    scalars = {"num_queries": "i32", "num_keys": "i32"}
    pointers = {
        flash_forward_kernel: "Q K V OUT".split() + ["LSE:s", "LENS:i"],
        flash_backward_dkdv_kernel: "Q K V DO".split()
        + ["LSE:s", "DELTA:s", "DK", "DV", "LENS:i"],
        flash_backward_dq_kernel: "Q K V DO".split()
        + ["LSE:s", "DELTA:s", "DQ", "LENS:i"],
    }
    compiled = {}
    for kernel, names in pointers.items():
        signature = {}
        for name in names:
            name, _, kind = name.partition(":")
            signature[name] = {"": element, "s": stat, "i": "*i32"}[kind]
        signature.update(scalars)
        signature.update(dict.fromkeys(constants, "constexpr"))
        source = triton.compiler.ASTSource(
            kernel, signature, constexprs=constants
        )
        compiled[kernel.__name__] = triton.compile(
            source, target=GPUTarget("cuda", capability, 32)
        )
    return compiled
