"""Longer than trained: copy-back accuracy at 1, 2, 4 and 8 times the trained length, per position scheme, over seeds.

Each seed trains one :class:`course_pkg.toy_tasks.CopyBack` per scheme on
lengths up to L (learned table, sinusoidal table, RoPE, ALiBi); the RoPE
model is also tested with position interpolation and NTK-aware scaling by
the factor T' / L, without fine-tuning
(:func:`course_pkg.toy_tasks.copy_back_at_lengths`). It prints the mean,
standard deviation, minimum and maximum of the accuracy over seeds, and
the floor min - 3 std the chapter's assertions may use, and writes the
per-seed table to --out (CSV) when given.

    .venv/bin/python bench/long_context.py --seeds 10 --out bench/long_context.csv
"""

from __future__ import annotations

import csv
import statistics
import time

import torch

from course_pkg.toy_tasks import LENGTH_VARIANTS, copy_back_at_lengths

import _common


def main() -> None:
    options = _common.parser(
        __doc__, threads=1, sizes={"seeds": 10, "train-len": 16, "steps": 400}
    )
    options.add_argument("--out", help="CSV file for the per-seed accuracies")
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
    if args.out:
        with open(args.out, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "accuracy": f"{row['accuracy']:.4f}"})


if __name__ == "__main__":
    main()
