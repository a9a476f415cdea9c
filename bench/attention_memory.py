"""Benchmark: peak memory and time of explicit, blockwise and fused attention as T grows.

Three ways to compute the same self-attention softmax(q k^T / sqrt(d)) v of (B, H, T, d) tensors,
forward only, under ``torch.no_grad()`` (inference; the outputs are checked to agree first):

- ``explicit``   the course's teaching path, ``DotProductAttention`` with ``need_weights=True``
                 on heads folded into the batch: it builds the (B*H, T, T) scores and weights.
- ``blockwise``  ``course_pkg.kernels.blockwise.blockwise_attention``: FlashAttention's online
                 softmax in plain PyTorch, keys in blocks of ``--block-size``; the largest score
                 tensor is (B, H, T, block_size).
- ``sdpa``       ``torch.nn.functional.scaled_dot_product_attention``: torch's fused kernel (on the
                 CPU a blocked C++ kernel; on CUDA FlashAttention or memory-efficient attention).

Targets (ratios against ``explicit`` measured in the same run): blockwise peak memory at T = 4096
at most 1/10 of explicit; blockwise time within 3x of explicit on the CPU. The blockwise loop is
Python-level tiling: each block is a separate matmul, exp and matmul that write their results to
memory and read them back. A fused kernel (FlashAttention, or ``sdpa``) keeps a block's scores in
registers/on-chip memory, never writes them out, and launches one kernel for the whole loop, which
is where its speed over both other paths comes from.

How memory is measured (``course_pkg.evaluation.memory.peak_memory``, tested in tests/test_memory.py). On
CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus what was
allocated before the call. On the CPU there is no such counter, and process-level numbers (RSS)
are useless here: glibc returns big blocks to the system lazily and small ones never, so RSS
neither rises nor falls with one tensor. ``tracemalloc`` sees only Python's allocator, not
torch's. What does see every tensor is the CPU allocator's own reporting hook, which
``torch.profiler.profile(profile_memory=True)`` records: one ``[memory]`` event per allocation
(+bytes) and per free (-bytes), with a timestamp. Sorting those events by time and taking the
maximum of their running sum gives the peak of bytes live during the call (above what existed
before it), exactly as the allocator saw it; the largest single positive event is the largest
intermediate. Memory the BLAS library allocates for itself is not torch's and is not counted (it
is small and the same for the three paths' matrix products). The profiled call is separate from
the timed calls, so profiling overhead does not enter the times.

With ``--record`` it also writes one row per T (the settings, each path's peak memory, largest
allocation and time) to the record ``attention_memory``
(``course_pkg/experiments/records/bench/attention_memory.jsonl``, through
:func:`course_pkg.experiments.bench_records.write`, stamped with the fingerprint of the code), from
which the chapter "Attention at scale" quotes the time ratios. Without ``--record`` nothing is
written, so a quick check at a toy size leaves the chapter's record alone.

Usage:
    python bench/attention_memory.py                  # B=1, H=4, d=64, T = 256 ... 8192, 1 thread
    python bench/attention_memory.py --record         # the same, written to the chapter's record
    python bench/attention_memory.py --threads 2 --block-size 256
    python bench/attention_memory.py --device cuda

``--width`` is d, the width of one head.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from course_pkg.device import seed_everything
from course_pkg.evaluation.cost import median_seconds
from course_pkg.evaluation.memory import peak_memory
from course_pkg.experiments import bench_records
from course_pkg.kernels.blockwise import blockwise_attention
from course_pkg.nn.scoring import DotProductAttention

from _common import (
    attention_parser,
    begin,
    print_ratio_table,
    record_option,
    verdict,
)

# The profiler's C++ layer (Kineto) writes a profiler_start/profiler_stop line to stderr for
# every profiled call, dozens here. Level 6 silences it; Kineto reads the level once, at the
# first profiled call, so it is set before any (an explicit KINETO_LOG_LEVEL is kept).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

PEER = "explicit"
MEMORY_TARGET_T, MEMORY_TARGET = 4096, 0.1
TIME_TARGET = 3.0


def make_paths(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int
) -> dict[str, Callable[[], torch.Tensor]]:
    """The three ways to attend, as argument-free callables returning (B, H, T, d)."""
    batch_size, heads, steps, width = q.shape
    explicit = DotProductAttention(0.0).eval()

    def explicit_path() -> torch.Tensor:
        folded = [
            t.reshape(batch_size * heads, steps, width) for t in (q, k, v)
        ]
        out = explicit(*folded, need_weights=True)
        explicit.attention_weights = None  # the module keeps the weights; do not carry them to the next call
        return out.view(batch_size, heads, steps, width)

    return {
        PEER: explicit_path,
        "blockwise": lambda: blockwise_attention(q, k, v, block_size),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
    }


def bench_one(
    steps: int, args: argparse.Namespace, device: torch.device
) -> dict[str, dict[str, float]]:
    seed_everything(0)
    q, k, v = (
        torch.randn(args.batch, args.heads, steps, args.width, device=device)
        for _ in range(3)
    )
    results: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        paths = make_paths(q, k, v, args.block_size)
        reference = paths["sdpa"]()
        for name, fn in paths.items():
            error = (fn() - reference).abs().max().item()
            if error > 1e-4:
                raise AssertionError(
                    f"{name} differs from sdpa by {error:.2e} at T={steps}"
                )
            peak, largest = peak_memory(fn, device)
            seconds = median_seconds(
                fn, args.repeats, device, warmup=args.warmup
            )
            results[name] = {
                "peak": peak,
                "largest": largest,
                "time": seconds,
                "error": error,
            }
        del reference
    return results


def main() -> None:
    options = attention_parser(
        __doc__,
        {"block-size": 128},
        lengths=[256, 512, 1024, 2048, 4096, 8192],
    )
    record_option(options, "attention_memory")
    args, start, device = begin(options)
    print(
        f"B={args.batch}, H={args.heads}, d={args.width}, float32, block_size={args.block_size}; forward under no_grad; "
        f"time = median of {args.repeats} after {args.warmup} warm-up"
    )
    results = {steps: bench_one(steps, args, device) for steps in args.lengths}
    names = list(next(iter(results.values())))

    print("\npeak memory above the inputs, MiB (ratio to explicit)")
    print_ratio_table(
        results,
        "peak",
        PEER,
        lambda peak, peer: f"{peak / 2**20:10.2f} ({peak / peer:6.3f}x)",
        (
            f"{'T*T*B*H*4 B':>12}  ",
            lambda T: f"{T * T * args.batch * args.heads * 4 / 2**20:12.2f}  ",
        ),
    )
    if device.type != "cuda":
        print("\nlargest single allocation, MiB")
        print(f"{'T':>6}  " + "  ".join(f"{name:>10}" for name in names))
        for steps, row in results.items():
            print(
                f"{steps:>6}  "
                + "  ".join(
                    f"{row[n]['largest'] / 2**20:10.2f}" for n in names
                )
            )

    print("\ntime, ms (ratio to explicit)")
    print_ratio_table(
        results,
        "time",
        PEER,
        lambda seconds, peer: (
            f"{seconds * 1e3:10.1f} ({seconds / peer:5.2f}x)"
        ),
    )

    worst_error = max(
        row[n]["error"] for row in results.values() for n in names
    )
    print(
        f"\nlargest difference from sdpa over all T and paths: {worst_error:.1e}"
    )
    if MEMORY_TARGET_T in results:
        row = results[MEMORY_TARGET_T]
        ratio = row["blockwise"]["peak"] / row[PEER]["peak"]
        memory_verdict = "meets" if ratio <= MEMORY_TARGET else "MISSES"
        print(
            f"blockwise / explicit peak memory at T={MEMORY_TARGET_T}: {ratio:.3f} (target <= {MEMORY_TARGET}) -> {memory_verdict}"
        )
    time_ratios = {
        steps: row["blockwise"]["time"] / row[PEER]["time"]
        for steps, row in results.items()
    }
    print(
        "blockwise / explicit time: "
        + "  ".join(
            f"T={steps}: {ratio:.2f}" for steps, ratio in time_ratios.items()
        )
        + f" (target <= {TIME_TARGET:.0f}; {'CPU' if device.type == 'cpu' else device.type}) -> {verdict(time_ratios, TIME_TARGET)}"
    )
    if args.record:
        rows = [
            {
                "T": steps,
                "batch": args.batch,
                "heads": args.heads,
                "width": args.width,
                "block size": args.block_size,
                "threads": torch.get_num_threads(),
                "device": device.type,
                **{
                    f"{name} {measure}": row[name][measure]
                    for name in names
                    for measure in ("peak", "largest", "time")
                },
            }
            for steps, row in results.items()
        ]
        minutes = (time.perf_counter() - start) / 60
        path = bench_records.write("attention_memory", __file__, rows, minutes)
        print(f"record: {path} ({minutes:.1f} min)")


if __name__ == "__main__":
    main()
