"""Longer than trained: copy-back accuracy at 1, 2, 4 and 8 times the trained length, per position scheme, over seeds.

Each seed trains one :class:`course_pkg.toy_tasks.CopyBack` per scheme on
lengths up to L (learned table, sinusoidal table, RoPE, ALiBi); the RoPE
model is also tested with position interpolation and NTK-aware scaling by
the factor T' / L, without fine-tuning
(:func:`course_pkg.toy_tasks.copy_back_at_lengths`). It prints the mean,
standard deviation, minimum and maximum of the accuracy over seeds, and
the floor min - 3 std the chapter's assertions may use.

With ``--record`` it writes every (scheme, seed, length) accuracy to the
record ``long_context`` (:mod:`course_pkg.experiments.bench_records`,
stamped with the fingerprint of the code that ran), which the chapter
"Attention at inference time and at long context" reads for its table,
its figure and its floors. Only the chapter's settings (the defaults)
belong in that record; after a change to the code it uses, re-run::

    .venv/bin/python bench/long_context.py --threads 1 --record

(10 seeds x 6 schemes: under 2 minutes on one thread of the machine that
wrote the record, 12 minutes on an older one; the record holds the
minutes of its run.)
"""

from __future__ import annotations

import statistics
import time

import torch

from course_pkg.experiments import bench_records
from course_pkg.toy_tasks import LENGTH_VARIANTS, copy_back_at_lengths

import _common


def main() -> None:
    options = _common.parser(
        __doc__, threads=1, sizes={"seeds": 10, "train-len": 16, "steps": 400}
    )
    options.add_argument(
        "--record",
        action="store_true",
        help="write the rows to the chapter's record (bench_records 'long_context')",
    )
    args = options.parse_args()
    _common.device_of(args)
    train_len = args.train_len
    test_lens = tuple(train_len * factor for factor in (1, 2, 4, 8))
    rows = []
    start = time.perf_counter()
    for seed in range(args.seeds):
        rope_model = None
        for variant in LENGTH_VARIANTS:
            reuse = rope_model if variant.startswith("rope-") else None
            accuracy, model = copy_back_at_lengths(
                variant, seed, test_lens, train_len, reuse, args.steps
            )
            if variant == "rope":
                rope_model = model
            rows += [
                {"variant": variant, "seed": seed, "length": n, "accuracy": a}
                for n, a in accuracy.items()
            ]
    print(
        f"copy-back (shift 2), trained on lengths <= L = {train_len}, "
        f"{args.seeds} seeds, {time.perf_counter() - start:.0f} s"
    )
    print(f"{'variant':20s} {'length':>6} {'mean':>6} {'std':>6} "
          f"{'min':>6} {'max':>6} {'min-3std':>8}")  # fmt: skip
    for variant in LENGTH_VARIANTS:
        for length in test_lens:
            values = [
                r["accuracy"]
                for r in rows
                if r["variant"] == variant and r["length"] == length
            ]
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            print(
                f"{variant:20s} {length:6d} {statistics.mean(values):6.3f} "
                f"{std:6.3f} {min(values):6.3f} {max(values):6.3f} "
                f"{min(values) - 3 * std:8.3f}"
            )
    print(f"chance: {1 / 10:.3f}; torch {torch.__version__}")
    if args.record:
        path = bench_records.write(
            "long_context",
            __file__,
            [
                {**row, "train_len": train_len, "steps": args.steps}
                for row in rows
            ],
            (time.perf_counter() - start) / 60,
        )
        print(f"record written: {path}")


if __name__ == "__main__":
    main()
