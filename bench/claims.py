"""Sweep the chapters' training claims over seeds, and record them with their provenance.

A chapter that trains prints numbers that differ from CPU to CPU, so its prose
and its asserts rest on a sweep, not on one run: this script runs the
chapter's notebook, exactly as the book does but with the seed injected, for
seeds 0-9, and writes every run to ``course_pkg/experiments/records/<chapter>
.jsonl`` (one JSON line a run: the claims, the fingerprint of the code that
ran, the modules it used, the machine, the minutes it took). The notebook
itself measures its claims: its last cell calls
:func:`course_pkg.experiments.claims.report`, which glues the run's record
into the notebook's outputs, where this script reads it. The prose, the
asserts and ``bench/claims_table.md`` all read the records through
:class:`course_pkg.experiments.claims.Sweep`.

How a run differs from the book's: one cell after the first sets the seed
(``SEED``, ``SETTINGS.seed`` where the chapter has it, and
``seed_everything``), and the kernel runs with ``PYTHONOPTIMIZE=1`` so that a
claim below its floor is measured instead of stopping the notebook. Seed 0 on
the native path is therefore the book's own run: on the machine that ran
both, the sweep's seed-0 row and the stored notebook's claims are the same
numbers, bit for bit, which ``tests/test_claims_provenance.py`` checks.

``--restamp``: after a change of the code that should not change any result
(a refactoring, a moved function), re-execute the notebook and run this with
``--restamp``: if the stored notebook's claims equal the record's seed-0 row
exactly, the record takes the new fingerprint; otherwise the results did
change and the whole sweep must run again.

CPU paths: ``native`` (whatever PyTorch picks here), ``default``
(``ATEN_CPU_CAPABILITY=default``), ``avx2``, ``avx512``, ``mkl-compatible``
(``MKL_CBWR=COMPATIBLE``) and ``portable`` (both of the last, as ``make
notebooks-portable`` runs the notebooks). Seeds are the samples; paths only
change rounding (``distributed`` draws nothing seeded and is swept over paths).

Usage::

    python bench/claims.py --chapters bahdanau            # seeds 0-9, native: a new record
    python bench/claims.py --chapters distributed --seeds 0 --paths native default
    python bench/claims.py --restamp --chapters bahdanau  # same results, new code
    python bench/claims.py --table bench/claims_table.md  # the table of every record
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import importlib
import json
import os
import pathlib
import subprocess
import sys
import time

from course_pkg.experiments.claims import (
    RECORDS,
    SWEEP_RUN,
    Run,
    Sweep,
    chapter_claims,
    claims_table,
    stored_run,
)
from course_pkg.experiments.provenance import machine

ROOT = pathlib.Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
PARTIAL = ROOT / "_build" / "claims"  # finished runs of an unfinished sweep

PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
    "portable": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}

# A chapter's SETTINGS may have no seed (BERT's: its experiment takes the seed
# as an argument, from SEED): then it is left as it is.
SEED_CELL = """import dataclasses as _dataclasses
SEED = {seed}
if "SETTINGS" in globals() and hasattr(SETTINGS, "seed"):
    SETTINGS = _dataclasses.replace(SETTINGS, seed={seed})
seed_everything({seed})"""
SETTINGS_CELL = """import dataclasses as _dataclasses
if hasattr(SETTINGS, "seed"):
    SETTINGS = _dataclasses.replace(SETTINGS, seed={seed})"""
# "SETTINGS = ...", "from x import SETTINGS" or a line "    SETTINGS," of an
# import in parentheses: the seed goes into SETTINGS again after each.
REBINDS_SETTINGS = (
    r"^\s*SETTINGS\s*=[^=]|^from \S+ import .*\bSETTINGS\b|^\s+SETTINGS,?$"
)


def swept_chapters() -> list[str]:
    """The chapters of the book that list claims (have a sweep)."""
    found = []
    for path in sorted(BOOK.glob("*.ipynb")):
        try:
            chapter_claims(path.stem)
        except ValueError:
            continue
        found.append(path.stem)
    return found


def glued_record(nb) -> dict:
    """The run's record that the notebook's last cell glued (see report)."""
    record = stored_run(nb.cells)
    if record is None:
        raise RuntimeError("the notebook glued no claims_record (report())")
    return record


def seeded(nb, chapter: str, seed: int):
    """The notebook with the seed injected: a cell after the first code cell
    (SEED, SETTINGS.seed, seed_everything) and one after each later cell
    that binds SETTINGS. Changes nb in place and returns it.

    Raises:
        RuntimeError: if a cell binds SETTINGS and then reads SETTINGS.seed
            (the seed would reach it only after it ran).
    """
    import re

    import nbformat

    first_code = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code"
    )
    rebinds = re.compile(REBINDS_SETTINGS, re.MULTILINE)
    for i in reversed(range(first_code + 1, len(nb.cells))):
        cell = nb.cells[i]
        if cell.cell_type == "code" and rebinds.search(cell.source):
            *_, last = rebinds.finditer(cell.source)
            if "SETTINGS.seed" in cell.source[last.end() :]:
                # The seed goes in after the cell: this cell would run
                # with the default seed in every run of the sweep.
                raise RuntimeError(
                    f"{chapter}: cell {i} binds SETTINGS and reads "
                    "SETTINGS.seed after it; import SETTINGS in the first "
                    "cell (or bind it in a cell of its own)"
                )
            nb.cells.insert(
                i + 1,
                nbformat.v4.new_code_cell(SETTINGS_CELL.format(seed=seed)),
            )
    nb.cells.insert(
        first_code + 1, nbformat.v4.new_code_cell(SEED_CELL.format(seed=seed))
    )
    return nb


def run_one(chapter: str, seed: int) -> dict:
    """Run one chapter's notebook with one seed in this process's environment."""
    import nbformat
    from nbclient import NotebookClient

    nb = seeded(
        nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4), chapter, seed
    )
    client = NotebookClient(
        nb,
        timeout=1800,
        startup_timeout=300,  # a loaded machine can take over a minute
        kernel_name="python3",
        resources={"metadata": {"path": str(BOOK)}},
    )
    client.execute()
    return glued_record(nb)


def run_in_subprocess(chapter: str, seed: int, path: str) -> Run:
    """Run one (chapter, seed) under one CPU path, in a fresh process."""
    chosen = {"ATEN_CPU_CAPABILITY", "MKL_CBWR"}  # set by the path alone
    env = {
        **{k: v for k, v in os.environ.items() if k not in chosen},
        **PATHS[path],
        "PYTHONOPTIMIZE": "1",
        "PYTHONHASHSEED": "0",
        # the run measures: Sweep's floors and ceilings do not judge it by
        # the record it will replace (the asserts on exact values still do)
        SWEEP_RUN: chapter,
    }
    start = time.perf_counter()
    for attempt in range(3):
        result = subprocess.run(
            [sys.executable, __file__, "--worker", chapter, str(seed)],
            env=env,
            capture_output=True,
            text=True,
        )
        # Kernels started at the same moment may pick the same free port;
        # that failure happens before the notebook runs: start it again.
        if result.returncode == 0 or "Address already in use" not in (
            result.stderr
        ):
            break
        start = time.perf_counter()
    result.check_returncode()
    record = json.loads(result.stdout.strip().splitlines()[-1])
    return Run(
        seed,
        path,
        record["claims"],
        record["fingerprint"],
        tuple(record["modules"]),
        record["machine"],
        round((time.perf_counter() - start) / 60, 2),
    )


def plan(chapter: str, seeds, paths) -> tuple[list[int], list[str]]:
    """The seeds and CPU paths to run: those asked for, else the chapter's
    own (``SWEEP_SEEDS``, ``SWEEP_PATHS`` beside its claims), else seeds
    0-9 on the native path."""
    module = importlib.import_module(f"course_pkg.experiments.{chapter}")
    return (
        seeds or getattr(module, "SWEEP_SEEDS", list(range(10))),
        paths or getattr(module, "SWEEP_PATHS", ["native"]),
    )


def sweep(chapters: list[str], seeds, paths, jobs: int):
    """Run every (chapter, seed, path) not yet finished; write each chapter's
    record once all its runs are done."""
    PARTIAL.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[str, int, str], Run] = {}
    for chapter in chapters:
        partial = PARTIAL / f"{chapter}.jsonl"
        if partial.exists():
            for line in partial.read_text().splitlines():
                run = Run.from_json(line)
                done[chapter, run.seed, run.path] = run
    plans = {c: plan(c, seeds, paths) for c in chapters}
    todo = [
        (c, s, p)
        for c in chapters
        for s in plans[c][0]
        for p in plans[c][1]
        if (c, s, p) not in done
    ]
    failed = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(run_in_subprocess, *job): job for job in todo}
        for future in concurrent.futures.as_completed(futures):
            chapter, seed, path = futures[future]
            try:
                run = future.result()
            except subprocess.CalledProcessError as error:
                failed.append((chapter, seed, path))
                print(
                    f"FAILED: {chapter} seed {seed} {path}:\n"
                    + error.stderr[-3000:],
                    file=sys.stderr,
                    flush=True,
                )
                continue
            done[chapter, seed, path] = run
            with (PARTIAL / f"{chapter}.jsonl").open("a") as f:
                f.write(run.to_json() + "\n")
            print(
                f"done: {chapter} seed {seed} {path} ({run.minutes} min)",
                file=sys.stderr,
                flush=True,
            )
    for chapter in chapters:
        chapter_seeds, chapter_paths = plans[chapter]
        runs = [
            done[chapter, s, p]
            for p in chapter_paths
            for s in chapter_seeds
            if (chapter, s, p) in done
        ]
        if len(runs) < len(chapter_seeds) * len(chapter_paths):
            continue
        prints = {run.fingerprint for run in runs}
        if len(prints) != 1:
            sys.exit(
                f"{chapter}: the code changed during the sweep "
                f"({len(prints)} fingerprints); run it again"
            )
        (RECORDS / f"{chapter}.jsonl").write_text(
            "".join(run.to_json() + "\n" for run in runs)
        )
        (PARTIAL / f"{chapter}.jsonl").unlink()
        minutes = sum(run.minutes for run in runs)
        print(
            f"{chapter}: {len(runs)} runs recorded, {minutes:.0f} "
            "CPU-minutes (one thread each)",
            flush=True,
        )
    if failed:
        sys.exit(f"{len(failed)} runs failed (above); the others are kept")


def restamp(chapter: str) -> None:
    """Give the record the stored notebook's fingerprint if the notebook's
    claims (its own seed-0 run) equal the record's seed-0 row exactly."""
    import nbformat

    nb = nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4)
    stored = glued_record(nb)
    path = RECORDS / f"{chapter}.jsonl"
    runs = [Run.from_json(line) for line in path.read_text().splitlines()]
    seed0 = next(r for r in runs if r.seed == 0 and r.path == "native")
    if stored["claims"] != seed0.claims:
        differ = sorted(
            name
            for name in stored["claims"].keys() | seed0.claims.keys()
            if stored["claims"].get(name) != seed0.claims.get(name)
        )
        sys.exit(
            f"{chapter}: the stored run's claims differ from the record's "
            f"seed 0 ({', '.join(differ)}): the results changed, run "
            f"`make claims CHAPTERS={chapter}`"
        )
    path.write_text(
        "".join(
            Run(
                r.seed,
                r.path,
                r.claims,
                stored["fingerprint"],
                tuple(stored["modules"]),
                r.machine,
                r.minutes,
            ).to_json()
            + "\n"
            for r in runs
        )
    )
    print(f"{chapter}: seed 0 reproduced exactly; record restamped")


def write_table(path: pathlib.Path, chapters: list[str]) -> None:
    """``bench/claims_table.md``: every chapter's claims over its sweep."""
    parts = [
        "# The chapters' training claims over their sweeps\n\n"
        "Written by `bench/claims.py --table` from the records in "
        "`course_pkg/experiments/records/` (one line a run: seed, CPU path, "
        "claims, the fingerprint of the code, the machine). Bounds are the "
        'rule\'s limits (README, "Floors"): a floor at min - 3 std, a '
        "ceiling at max + 3 std, never past the midpoint between the mean "
        "and chance, and on the claim's side of 0 (or 1) for an ordering; a "
        "claim without that margin is stated with its range, not asserted.\n"
    ]
    for chapter in chapters:
        record = Sweep(chapter)
        machines = sorted({run.machine for run in record.runs})
        minutes = [r.minutes for r in record.runs if r.minutes is not None]
        took = f", {sum(minutes):.0f} CPU-minutes in all" if minutes else ""
        parts.append(
            f"\n## {chapter}\n\n{len(record.runs)} runs (seeds "
            f"{sorted({r.seed for r in record.runs})}, paths "
            f"{sorted({r.path for r in record.runs})}) on "
            f"{'; '.join(machines)}{took}.\n\n{claims_table(record)}\n"
        )
    path.write_text("".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--chapters", nargs="+", help="default: every swept chapter"
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, help="default: the chapter's, or 0-9"
    )
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=list(PATHS),
        help="default: the chapter's, or native",
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument(
        "--restamp",
        action="store_true",
        help="new fingerprint for a record whose seed 0 the stored notebook reproduces",
    )
    parser.add_argument("--table", help="write the table of every record here")
    parser.add_argument(
        "--worker",
        nargs=2,
        metavar=("CHAPTER", "SEED"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.worker:
        record = run_one(args.worker[0], int(args.worker[1]))
        record["machine"] = machine()
        print(json.dumps(record))
        return
    known = swept_chapters()
    chapters = args.chapters or known
    unknown = sorted(set(chapters) - set(known))
    if unknown:
        parser.error(f"no sweep for {unknown}; chapters with one: {known}")
    if args.restamp:
        for chapter in chapters:
            restamp(chapter)
    elif not args.table or args.chapters:
        print(f"{datetime.datetime.now():%H:%M} on {machine()}", flush=True)
        sweep(chapters, args.seeds, args.paths, args.jobs)
    if args.table:
        recorded = [c for c in known if (RECORDS / f"{c}.jsonl").exists()]
        write_table(pathlib.Path(args.table), recorded)


if __name__ == "__main__":
    main()
