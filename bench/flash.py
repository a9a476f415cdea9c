"""Benchmark: FlashAttention (ours, PyTorch and Triton) against SDPA and explicit attention.

Time and peak memory of the forward pass (under no_grad) and of forward + backward, for
self-attention on (B, H, T, d) tensors, as T grows. The paths:

- ``explicit``      softmax(q k^T / sqrt(d)) v as written, under autograd (keeps the T x T
                    weights for the backward pass);
- ``sdpa``          ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's own choice
                    of kernel, and ``sdpa-<backend>`` with one backend forced (math, flash,
                    efficient, cudnn: those that run on the device for these inputs);
- ``ours-pytorch``  ``course_pkg.kernels.flash.flash_attention``: the chapter's tiled algorithm in
                    PyTorch, a Python loop over tiles (a reference, not a fast path);
- ``ours-triton``   ``course_pkg.kernels.flash_triton.triton_flash_attention``, on CUDA only.
                    On the CPU the Triton kernels run only in Triton's interpreter, which is for
                    correctness (NumPy, one program at a time) and is not timed here.

Every path is first checked against ``sdpa-math`` (outputs and gradients) and the script stops
if one disagrees. Times are medians of ``--repeats`` calls taken in turns after ``--warmup``;
ratios are against ``sdpa`` measured in the same run. Peak memory is
``course_pkg.evaluation.memory.peak_memory`` of one call (profiler allocator events on the CPU, the
allocator's peak counter on CUDA), above the inputs.

Targets, on a GPU only: at T = 4096, d = 64, bfloat16, ours-triton within 1.3x of
``sdpa-flash`` forward and 1.5x forward + backward, at a size where the GPU is busy (B = 4,
H = 16: 64 heads of 4096 queries); with B * H = 4 every call lasts a fraction of a
millisecond and the ratios measure launch overheads, not the kernels.

Usage:
    python bench/flash.py                                  # CPU: float32, T = 512 ... 4096
    python bench/flash.py --device cuda --batch 4 --heads 16 --lengths 1024 4096 \
        --skip explicit ours-pytorch                        # the targets; add --causal
    python bench/flash.py --lengths 64 128 --heads 2 --width 16 --block 32   # a toy size
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_pkg.device import describe_device, seed_everything
from course_pkg.evaluation.memory import peak_memory
from course_pkg.kernels.flash import flash_attention

from _common import attention_parser, begin, interleaved_medians

# Silence the profiler's per-call start/stop lines (see bench/attention_memory.py).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

PEER = "sdpa"
TARGETS = {
    "forward": 1.3,
    "forward+backward": 1.5,
}  # ours-triton / sdpa-flash, GPU
BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
_NOT_RUN: set[str] = set()  # paths reported as not run (printed once)
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def explicit_with(causal: bool) -> Callable:
    def attend(q, k, v):
        scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])
        if causal:
            T = q.shape[2]
            hidden = torch.ones(T, T, dtype=torch.bool, device=q.device)
            scores = scores.masked_fill(hidden.triu(1), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    return attend


def sdpa_with(backend: SDPBackend | None, causal: bool) -> Callable:
    def attend(q, k, v):
        context = (
            contextlib.nullcontext()
            if backend is None
            else sdpa_kernel(backend)
        )
        with context:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return attend


def candidate_paths(
    device: torch.device, block: int, causal: bool
) -> dict[str, Callable]:
    paths = {"explicit": explicit_with(causal), PEER: sdpa_with(None, causal)}
    paths.update(
        {f"sdpa-{n}": sdpa_with(b, causal) for n, b in BACKENDS.items()}
    )
    paths["ours-pytorch"] = lambda q, k, v: flash_attention(
        q, k, v, None, causal, block, block
    )
    if device.type == "cuda":
        from course_pkg.kernels.flash_triton import triton_flash_attention

        paths["ours-triton"] = lambda q, k, v: triton_flash_attention(
            q, k, v, None, causal, block, block
        )
    return paths


def forward_backward(path, q, k, v, grad):
    out = path(q, k, v)
    out.backward(grad)
    grads = [x.grad for x in (q, k, v)]
    q.grad = k.grad = v.grad = None
    return [out.detach(), *grads]


def check_and_keep(paths, q, k, v, grad, tolerance):
    """The paths that run here and agree with sdpa-math (raise if one
    disagrees); those that cannot run (a backend absent) are dropped."""
    reference = forward_backward(paths["sdpa-math"], q, k, v, grad)
    kept, largest = {}, 0.0
    for name, path in paths.items():
        try:
            result = forward_backward(path, q, k, v, grad)
        except RuntimeError as error:  # no such kernel for these inputs
            if name not in _NOT_RUN:
                _NOT_RUN.add(name)
                print(f"{name}: not run here ({str(error)[:60]}...)")
            continue
        gap = max(
            ((a.float() - b.float()).abs().max().item())
            for a, b in zip(result, reference)
        )
        if gap > tolerance:
            raise AssertionError(f"{name} differs from sdpa-math by {gap:.2e}")
        kept[name], largest = path, max(largest, gap)
    return kept, largest


def bench_one(steps, args, device, dtype):
    seed_everything(0)
    shape = (args.batch, args.heads, steps, args.width)
    q, k, v = (
        torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(shape, device=device, dtype=dtype)
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2
    paths = candidate_paths(device, args.block, args.causal)
    if args.skip:
        paths = {n: p for n, p in paths.items() if n not in args.skip}
    paths, gap = check_and_keep(paths, q, k, v, grad, tolerance)
    modes = {
        "forward": {
            n: (lambda p=p: _no_grad(p, q, k, v)) for n, p in paths.items()
        },
        "forward+backward": {
            n: (lambda p=p: forward_backward(p, q, k, v, grad))
            for n, p in paths.items()
        },
    }
    results = {}
    for mode, calls in modes.items():
        times = interleaved_medians(calls, device, args.warmup, args.repeats)
        peaks = {n: peak_memory(fn, device).peak for n, fn in calls.items()}
        results[mode] = {n: (times[n], peaks[n]) for n in calls}
    return results, gap


def _no_grad(path, q, k, v):
    with torch.no_grad():
        return path(q, k, v)


def main() -> None:
    options = attention_parser(
        __doc__, {"block": 64}, lengths=[512, 1024, 2048, 4096]
    )
    options.add_argument("--dtype", choices=list(DTYPES), default=None)
    options.add_argument(
        "--causal", action="store_true", help="causal self-attention"
    )
    options.add_argument(
        "--skip",
        nargs="+",
        default=[],
        help="paths not to time (e.g. ours-pytorch at large T: a Python loop)",
    )
    options.add_argument(
        "--record",
        metavar="NAME",
        help="also write the timings as the bench record NAME "
        "(course_pkg/experiments/records/bench/NAME.jsonl) or, with "
        "--record-to, into that folder",
    )
    options.add_argument("--record-to", help=argparse.SUPPRESS)
    args, start, device = begin(options)
    dtype = DTYPES[
        args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    ]
    print(
        f"B={args.batch}, H={args.heads}, d={args.width}, {dtype}, "
        f"{'causal' if args.causal else 'not causal'}, ours' tiles "
        f"{args.block} x {args.block}; time = median of {args.repeats} after "
        f"{args.warmup} warm-up; ratios to {PEER} measured in the same run"
    )
    if device.type != "cuda":
        print(
            "ours-triton not timed: without a GPU the Triton kernels run only "
            "in Triton's interpreter, for correctness (tests/test_flash_triton.py)"
        )
    results, worst = {}, 0.0
    for steps in args.lengths:
        results[steps], gap = bench_one(steps, args, device, dtype)
        worst = max(worst, gap)
    print(f"all paths agree with sdpa-math: largest difference {worst:.1e}")
    for mode in ("forward", "forward+backward"):
        names = list(results[args.lengths[0]][mode])
        for what, unit, index in (
            ("time", "ms", 0),
            ("peak memory", "MiB", 1),
        ):
            print(f"\n{mode}: {what}, {unit} (ratio to {PEER})")
            print(f"{'T':>6}  " + "  ".join(f"{n:>20}" for n in names))
            for steps, row in results.items():
                peer = row[mode][PEER][index]
                scale = 1e3 if index == 0 else 1 / 2**20
                cells = [
                    f"{row[mode][n][index] * scale:9.2f} "
                    f"({row[mode][n][index] / peer:6.2f}x)"
                    for n in names
                ]
                print(f"{steps:>6}  " + "  ".join(f"{c:>20}" for c in cells))
    if device.type == "cuda" and 4096 in results:
        for mode, target in TARGETS.items():
            row = results[4096][mode]
            if "ours-triton" in row and "sdpa-flash" in row:
                ratio = row["ours-triton"][0] / row["sdpa-flash"][0]
                met = "meets" if ratio <= target else "MISSES"
                print(
                    f"{mode}: ours-triton / sdpa-flash at T=4096: {ratio:.2f} "
                    f"(target <= {target}) -> {met}"
                )
    if args.record:
        from course_pkg.experiments import bench_records

        setting = dict(
            device=describe_device(device), dtype=str(dtype).split(".")[-1],
            batch=args.batch, heads=args.heads, d=args.width,
            block=args.block, causal=args.causal, repeats=args.repeats,
        )  # fmt: skip
        rows = [
            {**setting, "T": steps, "mode": mode, "path": name,
             "ms": 1e3 * seconds, "peak_mib": peak / 2**20}
            for steps, row in results.items()
            for mode, paths in row.items()
            for name, (seconds, peak) in paths.items()
        ]  # fmt: skip
        path = bench_records.write(
            args.record,
            __file__,
            rows,
            (time.perf_counter() - start) / 60,
            **({"folder": args.record_to} if args.record_to else {}),
            # a GPU's record: stamped with the kernels it timed, which a
            # machine without a GPU can check (bench_records' docstring)
            stamp="kernels" if device.type == "cuda" else "code",
        )
        print(f"{len(rows)} rows written to {path}")


if __name__ == "__main__":
    main()
