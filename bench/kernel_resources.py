"""Compile the Triton FlashAttention kernels for sm80 and sm90 and record what each asks of the GPU.

Triton's interpreter, which runs the kernels on a CPU, knows nothing of a
GPU's limits: a tile that needs more shared memory than the chip has runs
there and fails at launch on the GPU. This script compiles each kernel
(forward, dK/dV, dQ) for each configuration, ahead of time, no GPU needed
(:func:`course_pkg.kernels.flash_triton.compile_kernels`), and records the
shared memory, warps and pipeline stages Triton chose. Configurations: each
dtype the kernels take, d in {16, 32, 64, 128}, block_q and block_k in
:data:`~course_pkg.kernels.flash_triton.BLOCKS`, causal (the causal kernels
hold the most code). The record decides which tiles the kernels take
(:func:`~course_pkg.kernels.flash_triton.tile_fits`): those whose three
kernels fit an A100's and an H100's shared memory.

With ``--record`` the rows go to ``course_pkg/kernels/flash_resources.jsonl``,
each with Triton's version and the digest of the kernels' syntax trees
(:func:`course_pkg.experiments.provenance.jit_digest`), which
``tests/test_flash_triton.py`` holds against the kernels of today: every accepted configuration in the
record, within the device's limit, from today's kernels. The compiles are
slow on a CPU (seconds to a minute each, 864 in all: 143 minutes on the
loaded 2-core machine the course is written on):
finished ones are kept in ``_build/kernel_resources.jsonl``, so an
interrupted run resumes.

Usage:
    python bench/kernel_resources.py --record      # every configuration; writes the record
    python bench/kernel_resources.py --dtypes float16 --widths 16  # some, printed
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import time

import torch

from course_pkg.experiments.provenance import jit_digest
from course_pkg.kernels import flash_triton
from course_pkg.kernels.flash_triton import BLOCKS, compile_kernels

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / "kernel_resources.jsonl"
RECORD = ROOT / "course_pkg" / "kernels" / "flash_resources.jsonl"
DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
WIDTHS = [16, 32, 64, 128]


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--dtypes", nargs="+", default=list(DTYPES))
    options.add_argument("--widths", nargs="+", type=int, default=WIDTHS)
    options.add_argument(
        "--capabilities", nargs="+", type=int, default=[80, 90]
    )
    options.add_argument(
        "--record",
        action="store_true",
        help=f"write {RECORD.relative_to(ROOT)} (every configuration)",
    )
    args = options.parse_args()
    import triton

    start = time.perf_counter()
    today = (triton.__version__, jit_digest(flash_triton))
    done = {}
    if CACHE.exists():
        for line in CACHE.read_text().splitlines():
            row = json.loads(line)
            if (row["triton"], row.get("kernels_digest")) == today:
                key = (row["capability"], row["dtype"], row["d"],
                       row["block_q"], row["block_k"])  # fmt: skip
                done.setdefault(key, []).append(row)
    configurations = sorted(
        itertools.product(
            args.capabilities, args.dtypes, args.widths, BLOCKS, BLOCKS
        ),
        key=lambda c: (c[3] * c[4] * c[2], c),  # small tiles first
    )
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    for capability, dtype, d, block_q, block_k in configurations:
        key = (capability, dtype, d, block_q, block_k)
        if key not in done:
            began = time.perf_counter()
            compiled = compile_kernels(
                capability, DTYPES[dtype], d, block_q, block_k, True
            )
            seconds = time.perf_counter() - began
            done[key] = [
                {
                    "capability": capability,
                    "dtype": dtype,
                    "d": d,
                    "block_q": block_q,
                    "block_k": block_k,
                    "kernel": name,
                    "shared": kernel.metadata.shared,
                    "num_warps": kernel.metadata.num_warps,
                    "num_stages": kernel.metadata.num_stages,
                    "triton": triton.__version__,
                    "kernels_digest": today[1],
                }  # fmt: skip
                for name, kernel in compiled.items()
            ]
            with CACHE.open("a") as f:
                for row in done[key]:
                    f.write(json.dumps(row) + "\n")
            print(
                f"sm{capability} {dtype:>8} d={d:<3} {block_q:>3} x "
                f"{block_k:<3} "
                + "  ".join(
                    f"{r['kernel']} {r['shared']:>7,} B" for r in done[key]
                )
                + f"  ({seconds:.0f} s)",
                flush=True,
            )
    if args.record:
        rows = [row for key in configurations for row in done[key]]
        RECORD.write_text("".join(json.dumps(row) + "\n" for row in rows))
        minutes = (time.perf_counter() - start) / 60
        print(f"{len(rows)} rows written to {RECORD} ({minutes:.0f} min)")


if __name__ == "__main__":
    main()
