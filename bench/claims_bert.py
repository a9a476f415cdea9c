"""The margins behind the BERT chapter's assertions, over seeds and CPU paths.

The chapter "Pretraining an encoder: BERT" runs ``compare_pretraining(seed=0)``: pretrained
(MLM, MLM + pair task) against from scratch, tense accuracy on the test split. Training results
differ across CPUs (SIMD paths change float sums), so a claim the notebook asserts must hold over
seeds and paths; this measures them with the same function, for seeds 0, 1, 2, each in a fresh
process under

- ``default``: ``ATEN_CPU_CAPABILITY=default`` (no SIMD kernels) and ``MKL_CBWR=COMPATIBLE``,
- ``native``: the native path (avx2 on the course's machine) and ``MKL_CBWR=COMPATIBLE``,
- ``plain``: the native path with neither variable set, as the notebook runs.

It prints every accuracy, the gains over scratch, the pair task's accuracy, and the minimum and
maximum of each.

Usage:
    python bench/claims_bert.py                 # 9 runs, one at a time
    python bench/claims_bert.py --jobs 2        # two at a time
    python bench/claims_bert.py --one SEED      # one run in this process (used by the above)
    python bench/claims_bert.py --collect 0:default:out.json ...   # table from saved runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from course_pkg.pretrain import compare_pretraining, pair_task_accuracy

ROOT = Path(__file__).resolve().parents[1]

# Each path: the environment variables it sets (the others of these two are unset).
PATHS = {
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
    "native": {"MKL_CBWR": "COMPATIBLE"},
    "plain": {},  # native, MKL free to pick its kernels: how the notebook runs in CI
}


def one(seed: int) -> dict:
    torch.set_num_threads(1)  # as the notebook
    result = compare_pretraining(seed)
    pair_accuracy = pair_task_accuracy(
        result["models"]["MLM + pair"], result["vocab"]
    )
    return {
        "accuracy": result["accuracy"],
        "pair_accuracy": pair_accuracy,
        "capability": torch.backends.cpu.get_cpu_capability(),
    }


def run(seed: int, path: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")
    }
    env.update(PATHS[path], PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(seed)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def table(cases: list[tuple[int, str]], results: list[dict]) -> None:
    """Print one row per (seed, path), then the minimum and maximum of each gain."""
    names = ["scratch", "MLM", "MLM + pair"]
    print(
        f"{'seed':>4} {'path':>8} {'cpu':>8} "
        + " ".join(f"{n:>10}" for n in names)
        + f" {'MLM-scr':>8} {'pair-scr':>8} {'pair-MLM':>8} {'pair task':>9}"
    )
    gains: dict[str, list[float]] = {
        "MLM-scr": [],
        "pair-scr": [],
        "pair-MLM": [],
        "pair task": [],
    }
    for (seed, path), result in zip(cases, results):
        acc = result["accuracy"]
        row = {
            "MLM-scr": acc["MLM"] - acc["scratch"],
            "pair-scr": acc["MLM + pair"] - acc["scratch"],
            "pair-MLM": acc["MLM + pair"] - acc["MLM"],
            "pair task": result["pair_accuracy"],
        }
        for key, value in row.items():
            gains[key].append(value)
        print(
            f"{seed:>4} {path:>8} {result['capability']:>8} "
            + " ".join(f"{acc[n]:>10.3f}" for n in names)
            + " "
            + " ".join(
                f"{row[k]:>8.3f}" for k in ("MLM-scr", "pair-scr", "pair-MLM")
            )
            + f" {row['pair task']:>9.3f}"
        )
    for key, values in gains.items():
        print(f"{key:>9}: min {min(values):.3f}  max {max(values):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--one",
        type=int,
        default=None,
        help="run one seed here, print its JSON",
    )
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--collect",
        nargs="+",
        default=None,
        metavar="SEED:PATH:FILE",
        help="print the table from --one outputs saved in files",
    )
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one)))
        return
    if args.collect:
        cases, results = [], []
        for item in args.collect:
            seed, path, file = item.split(":", 2)
            cases.append((int(seed), path))
            results.append(
                json.loads(Path(file).read_text().strip().splitlines()[-1])
            )
        table(cases, results)
        return
    cases = [(seed, path) for seed in args.seeds for path in PATHS]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda case: run(*case), cases))
    table(cases, results)


if __name__ == "__main__":
    main()
