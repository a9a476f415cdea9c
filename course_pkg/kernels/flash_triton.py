"""FlashAttention forward and backward as Triton kernels.

Chapter: "Writing the attention kernel". The algorithm is the one of
:mod:`course_pkg.flash` (FlashAttention-2's loop order, Dao 2023): one
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
:func:`course_pkg.flash.flash_attention`.
"""

from __future__ import annotations

import math
import os

import torch

from course_pkg.flash import FlashAttention, check_flash_inputs

try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError(
        "course_pkg.kernels.flash_triton needs triton, which ships with "
        "PyTorch's Linux wheels only; course_pkg.flash runs everywhere"
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
def _tile_at(head, positions, length, D: tl.constexpr):
    """Offsets (N, D) of the rows ``positions`` (N,) of head ``head`` in a
    contiguous (B * H, length, D) tensor, and the (N, 1) mask of the rows
    that exist (position < length)."""
    dims = tl.arange(0, D)
    at = head * length * D + positions[:, None] * D + dims[None, :]
    return at, (positions < length)[:, None]


@triton.jit
def _key_end(block, num_queries, num_keys, BLOCK_Q: tl.constexpr,
             CAUSAL: tl.constexpr):  # fmt: skip
    """Where query block ``block``'s loop over keys stops: at num_keys, or,
    causal, after the last key that its last query sees."""
    end = num_keys
    if CAUSAL:
        end = tl.minimum(
            num_keys, (block + 1) * BLOCK_Q + num_keys - num_queries
        )
    return end


@triton.jit
def _key_tile(
    K, V, head, start, q, rows, lens, num_queries, num_keys, scale,
    D: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):  # fmt: skip
    """The key tile from key ``start`` on, for the query tile q at ``rows``:
    its keys and values (BLOCK_K, D), zeros past num_keys, and the scores
    q k^T * scale (BLOCK_Q, BLOCK_K), -inf where a query may not see a key
    (so that their exp() is 0)."""
    cols = start + tl.arange(0, BLOCK_K)
    kv_at, kv_real = _tile_at(head, cols, num_keys, D)
    k = tl.load(K + kv_at, mask=kv_real, other=0.0)
    v = tl.load(V + kv_at, mask=kv_real, other=0.0)
    scores = _matmul(q, tl.trans(k), ACC) * scale
    seen = _visible(rows, cols, lens, num_queries, num_keys, CAUSAL)
    return k, v, tl.where(seen, scores, float("-inf"))


@triton.jit
def flash_forward_kernel(
    Q, K, V, OUT, LSE, LENS, num_queries, num_keys, scale,
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    in_range = rows < num_queries
    q_at, q_real = _tile_at(head, rows, num_queries, D)
    q = tl.load(Q + q_at, mask=q_real, other=0.0)
    lens = tl.load(LENS + head * num_queries + rows, mask=in_range, other=0)
    row_max = tl.full([BLOCK_Q], float("-inf"), ACC)
    row_sum = tl.zeros([BLOCK_Q], ACC)
    acc = tl.zeros([BLOCK_Q, D], ACC)
    end = _key_end(block, num_queries, num_keys, BLOCK_Q, CAUSAL)
    for start in range(0, end, BLOCK_K):
        k, v, scores = _key_tile(
            K, V, head, start, q, rows, lens, num_queries, num_keys, scale,
            D, BLOCK_K, CAUSAL, ACC,
        )  # fmt: skip
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        weights = tl.exp(scores - shift[:, None])
        rescale = tl.exp(row_max - shift)
        row_sum = row_sum * rescale + tl.sum(weights, 1)
        acc = acc * rescale[:, None]
        acc += _matmul(weights.to(v.dtype), v, ACC)
        row_max = new_max
    empty = row_sum == 0.0
    safe_sum = tl.where(empty, 1.0, row_sum)
    out = acc / safe_sum[:, None]
    lse = tl.where(empty, float("inf"), row_max + tl.log(safe_sum))
    tl.store(OUT + q_at, out.to(OUT.dtype.element_ty), mask=q_real)
    tl.store(LSE + head * num_queries + rows, lse, mask=in_range)


@triton.jit
def _query_tile(Q, DO, LSE, DELTA, LENS, head, rows, num_queries,
                D: tl.constexpr):  # fmt: skip
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
def flash_backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, LENS, num_queries, num_keys, scale,
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    block, head = tl.program_id(0), tl.program_id(1)
    cols = block * BLOCK_K + tl.arange(0, BLOCK_K)
    kv_at, kv_real = _tile_at(head, cols, num_keys, D)
    k = tl.load(K + kv_at, mask=kv_real, other=0.0)
    v = tl.load(V + kv_at, mask=kv_real, other=0.0)
    grad_k = tl.zeros([BLOCK_K, D], ACC)
    grad_v = tl.zeros([BLOCK_K, D], ACC)
    begin = 0  # causal: the first query block that sees this key block
    if CAUSAL:
        first_row = tl.maximum(block * BLOCK_K - (num_keys - num_queries), 0)
        begin = first_row // BLOCK_Q * BLOCK_Q
    for start in range(begin, num_queries, BLOCK_Q):
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
    grad_k = grad_k * scale
    tl.store(DK + kv_at, grad_k.to(DK.dtype.element_ty), mask=kv_real)
    tl.store(DV + kv_at, grad_v.to(DV.dtype.element_ty), mask=kv_real)


@triton.jit
def flash_backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, LENS, num_queries, num_keys, scale,
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    CAUSAL: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    q, grad_out, lse, delta, lens = _query_tile(
        Q, DO, LSE, DELTA, LENS, head, rows, num_queries, D
    )
    grad_q = tl.zeros([BLOCK_Q, D], ACC)
    end = _key_end(block, num_queries, num_keys, BLOCK_Q, CAUSAL)
    for start in range(0, end, BLOCK_K):
        k, v, scores = _key_tile(
            K, V, head, start, q, rows, lens, num_queries, num_keys, scale,
            D, BLOCK_K, CAUSAL, ACC,
        )  # fmt: skip
        probs = tl.exp(scores - lse[:, None])  # 0 where hidden: -inf scores
        grad_probs = _matmul(grad_out, tl.trans(v), ACC)
        grad_scores = (probs * (grad_probs - delta[:, None])).to(k.dtype)
        grad_q += _matmul(grad_scores, k, ACC)
    grad_q = grad_q * scale
    q_at, q_real = _tile_at(head, rows, num_queries, D)
    tl.store(DQ + q_at, grad_q.to(DQ.dtype.element_ty), mask=q_real)


# ---------------------------------------------------------- launching them


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

    On top of :func:`course_pkg.flash.check_flash_inputs`: contiguous
    tensors; d = d_v a power of two in [16, 128] (``tl.arange`` needs a
    power of two, ``tl.dot`` at least 16); block_q and block_k powers of
    two in [16, 128]; a CUDA device, or the CPU under the interpreter;
    float16, bfloat16, float32 or float64, and no bfloat16 in the
    interpreter.

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
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(
                f"{name} must be an int, got {type(size).__name__}"
            )
        if not _power_of_two(size, 16, 128):
            raise ValueError(
                f"{name} must be a power of two in [16, 128], got {size}"
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
    """Scale, accumulator dtype and (B * H, Q) int32 lengths for a launch."""
    B, H, num_queries, width = queries.shape
    lens = torch.full((B, num_queries), keys.shape[2], dtype=torch.int32)
    if valid_lens is not None:
        lens = valid_lens.reshape(B, -1).expand(B, num_queries).to(torch.int32)
    lens = lens.to(queries.device)[:, None].expand(B, H, num_queries)
    acc = tl.float64 if queries.dtype == torch.float64 else tl.float32
    return 1.0 / math.sqrt(width), acc, lens.contiguous()


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
    B, H, num_queries, width = queries.shape
    scale, acc, lens = _launch_setup(queries, keys, valid_lens)
    output = torch.empty_like(queries)
    lse_dtype = torch.float64 if acc == tl.float64 else torch.float32
    lse = torch.empty(
        (B, H, num_queries), dtype=lse_dtype, device=queries.device
    )
    grid = (triton.cdiv(num_queries, block_q), B * H)
    flash_forward_kernel[grid](
        queries, keys, values, output, lse, lens, num_queries, keys.shape[2],
        scale, D=width, BLOCK_Q=block_q, BLOCK_K=block_k, CAUSAL=causal, ACC=acc,
    )  # fmt: skip
    return output, lse


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
    here, in PyTorch (one pass over two (B, H, Q, d) tensors)."""
    check_kernel_inputs(
        queries, keys, values, valid_lens, causal, block_q, block_k
    )
    grad_output = grad_output.contiguous()
    B, H, num_queries, width = queries.shape
    num_keys = keys.shape[2]
    scale, acc, lens = _launch_setup(queries, keys, valid_lens)
    delta = (grad_output.to(lse.dtype) * output.to(lse.dtype)).sum(-1)
    grad_q = torch.empty_like(queries)
    grad_k, grad_v = torch.empty_like(keys), torch.empty_like(values)
    sizes = dict(
        D=width, BLOCK_Q=block_q, BLOCK_K=block_k, CAUSAL=causal, ACC=acc
    )
    flash_backward_dkdv_kernel[(triton.cdiv(num_keys, block_k), B * H)](
        queries, keys, values, grad_output, lse, delta, grad_k, grad_v, lens,
        num_queries, num_keys, scale, **sizes,
    )  # fmt: skip
    flash_backward_dq_kernel[(triton.cdiv(num_queries, block_q), B * H)](
        queries, keys, values, grad_output, lse, delta, grad_q, lens,
        num_queries, num_keys, scale, **sizes,
    )  # fmt: skip
    return grad_q, grad_k, grad_v


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
    (:class:`course_pkg.flash.FlashAttention` with the kernels' passes).

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
    )  # fmt: skip


# ------------------------------------------------- compiling without a GPU


def compile_kernels(
    capability: int,
    dtype: torch.dtype,
    head_width: int = 64,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = True,
) -> dict[str, bytes]:
    """Compile the three kernels for a CUDA architecture, no GPU needed.

    Runs Triton's whole pipeline (its IR, LLVM, PTX, then the bundled
    ``ptxas`` to a cubin), which is where a GPU would first fail on an
    operation the hardware cannot do.

    Args:
        capability: e.g. 80 (A100) or 90 (H100).
        dtype: float16, bfloat16, float32 or float64.
        head_width, block_q, block_k, causal: the constants compiled in.
    Returns:
        {kernel name: its cubin, the GPU binary (an ELF file)}.
    Raises:
        RuntimeError: under TRITON_INTERPRET=1 (nothing is compiled there).
    """
    if INTERPRETED:
        raise RuntimeError("compile_kernels needs TRITON_INTERPRET unset")
    from triton.backends.compiler import GPUTarget

    element = "*" + {torch.float16: "fp16", torch.bfloat16: "bf16",
                     torch.float32: "fp32", torch.float64: "fp64"}[dtype]  # fmt: skip
    stat = "*fp64" if dtype == torch.float64 else "*fp32"
    acc = tl.float64 if dtype == torch.float64 else tl.float32
    constants = dict(
        D=head_width, BLOCK_Q=block_q, BLOCK_K=block_k, CAUSAL=causal, ACC=acc
    )
    scalars = {"num_queries": "i32", "num_keys": "i32", "scale": "fp32"}
    pointers = {
        flash_forward_kernel: "Q K V OUT".split() + ["LSE:s", "LENS:i"],
        flash_backward_dkdv_kernel: "Q K V DO".split()
        + ["LSE:s", "DELTA:s", "DK", "DV", "LENS:i"],
        flash_backward_dq_kernel: "Q K V DO".split()
        + ["LSE:s", "DELTA:s", "DQ", "LENS:i"],
    }
    cubins = {}
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
        compiled = triton.compile(
            source, target=GPUTarget("cuda", capability, 32)
        )
        cubins[kernel.__name__] = compiled.asm["cubin"]
    return cubins
