"""Benchmark: time and peak memory of exact and approximate attention as T grows, and where
(if anywhere) the approximations overtake exact attention on this machine.

One self-attention of (B, H, T, d) float32 tensors, forward only, under ``torch.no_grad()``,
four ways:

- ``exact``      ``course_pkg.kernels.blockwise.blockwise_attention``: exact softmax attention
                 without the T x T matrix (keys in blocks of ``--block-size``), the peer;
- ``linear``     ``course_pkg.nn.linear_attention.linear_attention``: the elu + 1 kernel in the
                 associative order, O(T d^2);
- ``features``   ``course_pkg.nn.random_features.performer_attention``: FAVOR+ with
                 ``--features`` positive orthogonal random features, O(T m d);
- ``low-rank``   ``course_pkg.nn.low_rank.linformer_attention``: keys and values projected along
                 the sequence to ``--rank`` rows, O(T P d).

For each T it prints each path's time and peak memory above the inputs (measured as
``bench/attention_memory.py`` measures it: the allocator's events, ``peak_memory``) and their
ratios to ``exact`` in the same run; then the slope of log time and of log memory against log T,
fitted over the lengths from ``--fit-from`` on (2 for quadratic, 1 for linear); and the
crossover: the first T from which a path stays faster than ``exact`` at every longer length
measured. Also, as a check that each path computes what it claims, each approximation's largest
difference from exact attention at the shortest length (the approximations are not exact: these
numbers are their error, not a bug). No target: this script measures.

With ``--record`` it also writes one row per T (each path's time and peak) and one summary row
(each path's slopes and crossover) to the record ``subquadratic``
(``course_pkg/experiments/records/bench/subquadratic.jsonl``), from which the chapter "Beyond
softmax attention" quotes them; without it nothing is written.

Usage:
    python bench/subquadratic.py                         # T = 256 ... 16384, 1 thread
    python bench/subquadratic.py --record                # the same, written to the chapter's record
    python bench/subquadratic.py --lengths 512 2048 --repeats 1
"""

from __future__ import annotations

import math
import os
import time

import torch

from course_pkg.device import seed_everything
from course_pkg.evaluation.cost import median_seconds
from course_pkg.evaluation.memory import peak_memory
from course_pkg.experiments import bench_records
from course_pkg.kernels.blockwise import blockwise_attention
from course_pkg.nn.linear_attention import linear_attention
from course_pkg.nn.low_rank import linformer_attention
from course_pkg.nn.random_features import (
    draw_orthogonal_features,
    performer_attention,
)

from _common import (
    attention_parser,
    begin,
    print_ratio_table,
    record_option,
)

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # as bench/attention_memory.py

PEER = "exact"


def paths(q, k, v, args, generator):
    """name -> argument-free callable returning (B, H, T, d)."""
    T, d = q.shape[-2], q.shape[-1]
    W = draw_orthogonal_features(
        args.features, d, generator=generator, device=q.device
    )
    rank = min(args.rank, T)
    E, F = (
        torch.randn(rank, T, generator=generator).to(q.device)
        / math.sqrt(rank)
        for _ in range(2)
    )
    return {
        PEER: lambda: blockwise_attention(q, k, v, args.block_size),
        "linear": lambda: linear_attention(q, k, v),
        "features": lambda: performer_attention(q, k, v, W),
        "low-rank": lambda: linformer_attention(q, k, v, E, F),
    }


def fit_slope(lengths: list[int], values: list[float]) -> float:
    """Least-squares slope of log(values) against log(lengths)."""
    xs = [math.log(n) for n in lengths]
    ys = [math.log(max(v, 1e-12)) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    den = sum((x - mx) ** 2 for x in xs)
    return num / den if den else float("nan")


def main() -> None:
    options = attention_parser(
        __doc__,
        {
            "block-size": 256,
            "features": 256,
            "rank": 256,
            "fit-from": 2048,
        },
        lengths=[256, 512, 1024, 2048, 4096, 8192, 16384],
    )
    record_option(options, "subquadratic")
    args, start, device = begin(options)
    print(
        f"B={args.batch}, H={args.heads}, d={args.width}, float32, forward under no_grad; "
        f"exact: blocks of {args.block_size}; features m={args.features}; rank P={args.rank}; "
        f"time = median of {args.repeats} after {args.warmup} warm-up"
    )
    results: dict[int, dict[str, dict[str, float]]] = {}
    errors: dict[str, float] = {}
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for T in args.lengths:
            seed_everything(0)
            q, k, v = (
                torch.randn(
                    args.batch, args.heads, T, args.width, device=device
                )
                / args.width**0.25
                for _ in range(3)
            )
            row = {}
            for name, fn in paths(q, k, v, args, generator).items():
                if T == args.lengths[0]:
                    if name == PEER:
                        reference = fn()
                    else:
                        errors[name] = (fn() - reference).abs().max().item()
                peak, _ = peak_memory(fn, device)
                seconds = median_seconds(
                    fn, args.repeats, device, warmup=args.warmup
                )
                row[name] = {"time": seconds, "peak": peak}
            results[T] = row
    names = list(next(iter(results.values())))

    for measure, unit, scale in (("time", "ms", 1e3), ("peak", "MiB", 2**-20)):
        print(f"\n{measure}, {unit} (ratio to {PEER})")
        print_ratio_table(
            results,
            measure,
            PEER,
            lambda value, peer, scale=scale: (
                f"{value * scale:10.2f} ({value / max(peer, 1e-12):6.3f}x)"
            ),
        )

    fitted = [T for T in results if T >= args.fit_from] or list(results)
    print(
        f"\nslope of log time and log memory against log T, fitted over T = "
        f"{fitted[0]} ... {fitted[-1]}"
    )
    print(
        f"| {'path':<9} | {'time slope':>10} | {'memory slope':>12} | crossover |"
    )
    print(f"|{'-' * 11}|{'-' * 12}|{'-' * 14}|-----------|")
    summary = {}
    for name in names:
        slopes = [
            fit_slope(fitted, [results[T][name][m] for T in fitted])
            for m in ("time", "peak")
        ]
        crossover = "—"
        if name != PEER:
            faster = [
                results[T][name]["time"] < results[T][PEER]["time"]
                for T in results
            ]
            for i, T in enumerate(results):
                if all(faster[i:]):
                    crossover = f"T={T}"
                    break
            else:
                crossover = "none"
        print(
            f"| {name:<9} | {slopes[0]:>10.2f} | {slopes[1]:>12.2f} | {crossover:>9} |"
        )
        summary |= {
            f"{name} time slope": slopes[0],
            f"{name} memory slope": slopes[1],
            f"{name} crossover": crossover,
        }
    print(
        f"\nlargest difference from exact attention at T={args.lengths[0]} (their error): "
        + ", ".join(f"{n} {e:.2e}" for n, e in errors.items())
    )
    minutes = (time.perf_counter() - start) / 60
    print(f"({minutes:.1f} min)")
    if args.record:
        sizes = {
            "batch": args.batch, "heads": args.heads, "width": args.width,
            "block size": args.block_size, "features": args.features,
            "rank": args.rank, "threads": torch.get_num_threads(),
            "device": device.type,
        }  # fmt: skip
        rows = [
            {
                "T": T,
                **sizes,
                **{
                    f"{name} {measure}": row[name][measure]
                    for name in names
                    for measure in ("time", "peak")
                },
            }  # fmt: skip
            for T, row in results.items()
        ]
        rows.append({"T": "fit", "fit from": fitted[0], **sizes, **summary})
        path = bench_records.write("subquadratic", __file__, rows, minutes)
        print(f"record: {path}")


if __name__ == "__main__":
    main()
