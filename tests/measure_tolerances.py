"""Measure the float32 errors behind the float32 bounds of the tests (not run by make test).

Usage (from the repository root, a few minutes on one core)::

    PYTHONPATH=. python tests/measure_tolerances.py            # every CPU path and thread count
    PYTHONPATH=. python tests/measure_tolerances.py --worker   # this process's path only (JSON)

For each float32 comparison a test makes between two computations that are equal in exact
arithmetic, it computes both sides in float32 and in float64 (the same inputs, drawn in float32
and cast) and reports, over the configurations below:

- ``diff``: max |a32 - b32|, what the test bounds;
- ``err a``, ``err b``: max |a32 - a64| and |b32 - b64|, each side's own float32 error;
- ``f64``: max |a64 - b64| (~1e-16: the two sides are the same function);
- ``bug``: the smallest max |a32 - wrong32| over the cases, for a deliberately wrong variant
  named in the table (a bound must sit far below it).

The bound rule (tests/README.md): bound >= 10 x the worst (err a + err b) seen, and far below
``bug``. (err a + err b bounds diff on any CPU whose two sides err in opposite directions.)

Configurations: ``ATEN_CPU_CAPABILITY`` default and avx2 (this machine has no AVX-512: its
measurements are the ones CI machines with AVX-512 add), each with and without
``MKL_CBWR=COMPATIBLE``, and 1, 2 and 4 threads. Each runs in a fresh process (the CPU
capability is read once, at import).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

PATHS = [
    {"ATEN_CPU_CAPABILITY": "default"},
    {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
    {"ATEN_CPU_CAPABILITY": "avx2"},
    {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
]
THREADS = [1, 2, 4]


def _max(pairs) -> float:
    return max(
        float((a.detach().double() - b.detach().double()).abs().max())
        for a, b in pairs
    )


def _record(pairs32, pairs64, wrong32) -> dict:
    """pairs: [(a, b)]; wrong32: [(a, wrong b)] in float32."""
    return {
        "diff": _max(pairs32),
        "err a": _max(
            [(a32, a64) for (a32, _), (a64, _) in zip(pairs32, pairs64)]
        ),
        "err b": _max(
            [(b32, b64) for (_, b32), (_, b64) in zip(pairs32, pairs64)]
        ),
        "f64": _max(pairs64),
        "bug": min(_max([pair]) for pair in wrong32),
    }


def _against_a_wrong_second_side(good32, good64, wrong32, first=0) -> dict:
    """_record of the pairs good32 and good64 (the same cases), the bug: each case's first
    side in good32 against its second side in wrong32, from case ``first`` on."""
    wrong = [(a, w) for (a, _), (_, w) in zip(good32, wrong32)][first:]
    return _record(good32, good64, wrong)


def _fused_vs_explicit(F32, F64):
    from tests.test_attention import fused_and_explicit

    # the fused path given lengths one too long; the unmasked cases are left out
    return _against_a_wrong_second_side(
        fused_and_explicit(F32),
        fused_and_explicit(F64),
        fused_and_explicit(F32, lens_shift=1),
        first=2,
    )


def _blockwise_vs_sdpa(F32, F64):
    import itertools

    from tests.test_efficient_attention import (
        BLOCK_SIZES,
        CAUSAL,
        LENS_KINDS,
        blockwise_and_sdpa,
    )

    cases = list(itertools.product(BLOCK_SIZES, CAUSAL, LENS_KINDS))
    return _record(
        [blockwise_and_sdpa(*c, F32) for c in cases],
        [blockwise_and_sdpa(*c, F64) for c in cases],
        # blockwise never sees the last key
        [
            (
                blockwise_and_sdpa(*c, F32)[1],
                blockwise_and_sdpa(*c, F32, drop_last=True)[0],
            )
            for c in cases
            if c[2]
            == "none"  # with lengths the last key is often padding anyway
        ],
    )


def _gpt_vs_torch(F32, F64):
    from tests.test_gpt import gpt_and_torch_encoder

    # torch's mask lets each position see the next one
    return _against_a_wrong_second_side(
        gpt_and_torch_encoder(F32),
        gpt_and_torch_encoder(F64),
        gpt_and_torch_encoder(F32, 1),
    )


def _transformer_vs_torch(F32, F64):
    from tests.test_transformer import stacks_and_torch

    drop = lambda triples: [(a, b) for _, a, b in triples]  # noqa: E731
    # torch's target mask lets each position see the next one (the encoder stack is left out)
    return _against_a_wrong_second_side(
        drop(stacks_and_torch(F32)),
        drop(stacks_and_torch(F64)),
        drop(stacks_and_torch(F32, 1)),
        first=1,
    )


def _rmsnorm_vs_torch(F32, F64):
    import torch

    from tests.test_modern_block import RMSNORM_EPS, rmsnorm_and_torch

    def unbiased(pair):  # the mean square over D - 1 instead of D
        ours, _ = pair
        return ours * (11 / 12) ** 0.5

    good = [rmsnorm_and_torch(F32, eps) for eps in RMSNORM_EPS]
    with torch.no_grad():
        return _record(
            good,
            [rmsnorm_and_torch(F64, eps) for eps in RMSNORM_EPS],
            [(b, unbiased((a, b))) for a, b in good],
        )


def _positional_rotation(F32, F64):
    """test_positional: the float32 table rotated by delta against the table delta rows on."""
    import torch

    from course_pkg.nn.positional import sinusoidal_table

    D, delta = 16, 3

    def sides(table, shift):
        freqs = 1 / torch.pow(
            torch.tensor(10000.0, dtype=F64),
            torch.arange(0, D, 2, dtype=F64) / D,
        )
        pairs = []
        for j, w in enumerate(freqs):
            c, s = torch.cos(shift * w), torch.sin(shift * w)
            rotation = torch.stack([torch.stack([c, s]), torch.stack([-s, c])])
            cols = table[:, 2 * j : 2 * j + 2]
            pairs.append((cols[:-delta] @ rotation.T, cols[delta:]))
        return pairs

    table32 = sinusoidal_table(60, D).double()
    positions = torch.arange(60, dtype=F64)[:, None]
    angles = positions / torch.pow(
        torch.tensor(10000.0, dtype=F64), torch.arange(0, D, 2, dtype=F64) / D
    )
    table64 = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(60, D)

    def joined(pairs):  # every frequency in one pair
        return [
            tuple(torch.cat([p[i].flatten() for p in pairs]) for i in (0, 1))
        ]

    good = joined(sides(table32, delta))
    wrong = joined(sides(table32, delta + 1))
    return _record(
        good, joined(sides(table64, delta)), [(good[0][1], wrong[0][0])]
    )


def _positional_vs_d2l(F32, F64):
    """test_positional: our float32 table against d2l's (both float32 by design)."""
    import d2l.torch as d2l
    import torch

    from course_pkg.nn.positional import PositionalEncoding

    ours = PositionalEncoding(32, 0.0, max_len=200).P
    theirs = d2l.PositionalEncoding(32, 0.0, max_len=200).P
    positions = torch.arange(200, dtype=F64)[:, None]
    angles = positions / torch.pow(
        torch.tensor(10000.0, dtype=F64),
        torch.arange(0, 32, 2, dtype=F64) / 32,
    )
    exact = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(
        1, 200, 32
    )
    return _record(
        [(ours, theirs)],
        [(exact, exact)],
        [(ours, ours.roll(1, dims=1))],  # the table one position off
    )


def _distributed_sgd(F32, F64):
    """test_distributed: the float32 SGD run, one process vs 2 gloo ranks (hand and DDP)."""
    import tempfile

    import torch

    from course_pkg.training import distributed
    from tests import test_distributed as td

    flags, _ = td.RUNS["float32, SGD"]
    torch.set_num_threads(1)  # as the test and each rank run

    def states(dtype_flags):
        reference = distributed.train_data_parallel(
            distributed.parse_args([*td.ARGV, *flags, *dtype_flags]), None
        )
        with tempfile.TemporaryDirectory() as folder:
            save = os.path.join(folder, "ranks.pt")
            td._run_ranks([*flags, *dtype_flags], save)
            saved = torch.load(save, weights_only=True)
        one = reference["model"].state_dict()
        return {
            "losses": {
                "one": reference["step_loss"],
                **{s: saved[s]["step_loss"] for s in ("hand", "ddp")},
            },
            **{s: saved[s]["model"] for s in ("hand", "ddp")},
            "one": one,
        }

    def flat(state):
        return torch.cat([v.double().flatten() for v in state.values()])

    s32, s64 = states([]), states(["--dtype", "float64"])
    pairs = lambda s: [(flat(s["one"]), flat(s[k])) for k in ("hand", "ddp")]  # noqa: E731
    record = _record(
        pairs(s32),
        pairs(s64),
        # the untrained model: how far 3 SGD steps move the parameters (a lost step moves
        # them by about a third of it)
        [(flat(s32["one"]), flat(td._untrained()))],
    )
    record["loss rel"] = max(
        abs(a - b) / abs(b)
        for k in ("hand", "ddp")
        for a, b in zip(s32["losses"][k], s32["losses"]["one"])
    )
    return record


COMPARISONS = {
    "attention fused vs explicit": (
        "tests/test_attention.py",
        "FUSED_FLOAT32_BOUND",
        _fused_vs_explicit,
        "fused lengths +1",
    ),
    "blockwise vs sdpa": (
        "tests/test_efficient_attention.py",
        "BLOCKWISE_FLOAT32_BOUND",
        _blockwise_vs_sdpa,
        "last key dropped",
    ),
    "gpt vs torch encoder": (
        "tests/test_gpt.py",
        "GPT_TORCH_FLOAT32_BOUND",
        _gpt_vs_torch,
        "mask sees 1 ahead",
    ),
    "transformer vs torch": (
        "tests/test_transformer.py",
        "STACKS_FLOAT32_BOUND",
        _transformer_vs_torch,
        "mask sees 1 ahead",
    ),
    "rmsnorm vs torch": (
        "tests/test_modern_block.py",
        "RMSNORM_FLOAT32_BOUND",
        _rmsnorm_vs_torch,
        "mean over D-1",
    ),
    "positional rotation": (
        "tests/test_positional.py",
        "ROTATION_FLOAT32_BOUND",
        _positional_rotation,
        "rotated delta+1",
    ),
    "positional vs d2l": (
        "tests/test_positional.py",
        "D2L_TABLE_FLOAT32_BOUND",
        _positional_vs_d2l,
        "one row off",
    ),
    "ddp float32 SGD": (
        "tests/test_distributed.py",
        "FLOAT32_SGD_BOUND",
        _distributed_sgd,
        "untrained",
    ),
}
SLOW = {
    "ddp float32 SGD"
}  # forks 2 ranks: measured on 1 thread only (the ranks use 1)


def worker(names: list[str]) -> dict:
    import torch

    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    results = {}
    for name in names:
        torch.set_num_threads(threads)
        results[name] = COMPARISONS[name][2](torch.float32, torch.float64)
    results["_capability"] = torch.backends.cpu.get_cpu_capability()
    return results


def _bound(path: str, constant: str) -> float:
    import importlib

    module = importlib.import_module(
        path.removesuffix(".py").replace("/", ".")
    )
    return float(getattr(module, constant))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--only", nargs="*", default=list(COMPARISONS))
    parser.add_argument("--threads", nargs="*", type=int, default=THREADS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.only)))
        return
    worst: dict[str, dict] = {}
    for path in PATHS:
        for threads in args.threads:
            names = [n for n in args.only if n not in SLOW or threads == 1]
            env = {
                k: v
                for k, v in os.environ.items()
                if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")
            }
            env.update(path, OMP_NUM_THREADS=str(threads))
            out = subprocess.run(
                [sys.executable, __file__, "--worker", "--only", *names],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            results = json.loads(out.strip().splitlines()[-1])
            where = (
                " ".join(f"{k}={v}" for k, v in path.items())
                + f" threads={threads}"
            )
            print(
                f"{where} (torch reports {results.pop('_capability')})",
                flush=True,
            )
            for name, record in results.items():
                print(
                    f"    {name:28s} "
                    + " ".join(f"{k}={v:.2e}" for k, v in record.items()),
                    flush=True,
                )
                best = worst.setdefault(name, {"where": {}})
                for key, value in record.items():
                    better = min if key == "bug" else max
                    if (
                        key not in best
                        or better(value, best[key]) != best[key]
                    ):
                        best[key] = value
                        best["where"][key] = where
    print()
    print(
        f"{'comparison':28s} {'bound':>8s} {'diff':>9s} {'err a':>9s} {'err b':>9s} "
        f"{'f64':>9s} {'x10 rule':>9s} {'bug':>9s}  wrong variant / worst diff at"
    )
    for name, best in worst.items():
        path, constant, _, wrong = COMPARISONS[name]
        bound = _bound(path, constant)
        needed = 10 * (best["err a"] + best["err b"])
        ok = needed <= bound < best["bug"]
        print(
            f"{name:28s} {bound:8.1e} {best['diff']:9.2e} {best['err a']:9.2e} "
            f"{best['err b']:9.2e} {best['f64']:9.2e} {needed:9.2e} {best['bug']:9.2e}  "
            f"{wrong} / {best['where']['diff']}{'' if ok else '  <-- RULE NOT MET'}"
        )
        if "loss rel" in best:
            print(
                f"{'':28s} losses: worst relative difference {best['loss rel']:.2e}"
            )


if __name__ == "__main__":
    main()
