"""Every sweep's record comes from today's code, and every stored chapter is its seed 0.

A chapter's prose quotes ranges over seeds and its asserts use bounds, both
read from the record of its sweep (``course_pkg/experiments/records``, written
by ``make claims``). Each record line carries the fingerprint of the code that
ran (:mod:`course_pkg.experiments.provenance`: the notebook's code cells, the
``course_pkg`` modules the run imported, the torch version), and the stored
notebook glues the same for its own run (its last cell,
:func:`course_pkg.experiments.claims.report`). Here, for every chapter with a
sweep:

1. today's code has the record's fingerprint (else the code changed since the
   sweep: re-run it, or restamp it if the change cannot alter a result);
2. the stored notebook ran that same code;
3. the stored notebook's claims are the record's seed-0 row, exactly: the book
   shows the sweep's own seed-0 run, so no sentence quotes a run that the
   ranges beside it do not contain.

The records of ``bench/`` scripts that chapters quote
(:mod:`course_pkg.experiments.bench_records`) are checked the same way against
the script and modules they came from. The last tests show the check failing
on deliberately stale records.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from course_pkg.experiments.bench_records import (
    BENCH_RECORDS,
    read,
    script_source,
    stamp_of,
)
from course_pkg.experiments.claims import (
    RECORDS,
    Run,
    chapter_claims,
    stored_run,
)
from course_pkg.experiments.provenance import fingerprint, notebook_code
from tests.toc_notebooks import toc_notebooks

ROOT = pathlib.Path(__file__).resolve().parent.parent


def swept() -> list[str]:
    chapters = []
    for path in toc_notebooks():
        try:
            chapter_claims(path.stem)
        except ValueError:
            continue
        chapters.append(path.stem)
    return chapters


def stored_record(notebook: pathlib.Path) -> dict | None:
    """The run record the stored notebook glued (None if it glued none)."""
    return stored_run(json.loads(notebook.read_text())["cells"])


def provenance_problems(
    chapter: str, book: pathlib.Path, records: pathlib.Path
) -> list[str]:
    """What ties the chapter's record, its code and its stored run apart."""
    notebook = book / f"{chapter}.ipynb"
    path = records / f"{chapter}.jsonl"
    fix = f"run `make claims CHAPTERS={chapter}`"
    if not path.exists():
        return [f"{chapter}: no sweep recorded; {fix}"]
    runs = [Run.from_json(line) for line in path.read_text().splitlines()]
    prints = {(run.fingerprint, run.modules) for run in runs}
    if len(prints) != 1:
        return [f"{chapter}: the record mixes runs of different code; {fix}"]
    ((recorded, modules),) = prints
    problems = []
    now = fingerprint(notebook_code(notebook), list(modules))
    if now != recorded:
        problems.append(
            f"{chapter}: the code changed since its sweep (record "
            f"{recorded[:12]}, code now {now[:12]}): {fix} (about "
            f"{sum(r.minutes or 0 for r in runs):.0f} CPU-minutes), or, if "
            "the change cannot alter a result, re-execute the notebook and "
            f"run `.venv/bin/python bench/claims.py --restamp --chapters "
            f"{chapter}`, which checks that seed 0 is reproduced exactly"
        )
    stored = stored_record(notebook)
    if stored is None:
        return problems + [
            f"{chapter}: the stored notebook glues no claims_record: its "
            "last cell must call course_pkg.experiments.claims.report"
        ]
    if stored["fingerprint"] != recorded:
        problems.append(
            f"{chapter}: the stored notebook ran other code than its sweep: "
            f"re-execute book/{chapter}.ipynb (after the sweep)"
        )
    seed0 = [r for r in runs if r.seed == 0 and r.path == "native"]
    if not seed0 or seed0[0].claims != stored["claims"]:
        problems.append(
            f"{chapter}: the stored run is not the sweep's seed 0 (native "
            f"path): re-execute book/{chapter}.ipynb on the machine that ran "
            f"the sweep, or {fix}"
        )
    return problems


@pytest.mark.parametrize("chapter", swept())
def test_the_record_the_code_and_the_stored_run_agree(chapter):
    problems = provenance_problems(chapter, ROOT / "book", RECORDS)
    assert not problems, "\n".join(problems)


def bench_problems(
    name: str, folder: pathlib.Path = BENCH_RECORDS
) -> list[str]:
    """What ties a bench script's record apart from today's code."""
    record = read(name, folder)
    script = ROOT / record.script
    if not script.exists():
        return [f"{name}: {record.script}, which wrote it, is gone"]
    now = stamp_of(record.stamp, script_source(script), list(record.modules))
    if now != record.fingerprint:
        return [
            f"{name}: the code changed since {record.script} wrote this "
            f"record ({record.minutes:.0f} min on {record.machine}): run it "
            "again (its docstring gives the command), then re-execute the "
            "chapter that quotes it"
        ]
    return []


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in BENCH_RECORDS.glob("*.jsonl"))
)
def test_every_bench_record_comes_from_todays_code(name):
    problems = bench_problems(name)
    assert not problems, "\n".join(problems)


# ------------------------------------------- the check on stale records

CHAPTER = "bahdanau"


@pytest.fixture
def copies(tmp_path):
    """A copy of one chapter's notebook and record, to make stale."""
    book, records = tmp_path / "book", tmp_path / "records"
    book.mkdir()
    records.mkdir()
    shutil.copy(ROOT / "book" / f"{CHAPTER}.ipynb", book)
    shutil.copy(RECORDS / f"{CHAPTER}.jsonl", records)
    return book, records


def _rewrite(path: pathlib.Path, change) -> None:
    runs = [Run.from_json(line) for line in path.read_text().splitlines()]
    path.write_text("".join(change(r).to_json() + "\n" for r in runs))


def test_the_copies_start_fresh(copies):
    assert provenance_problems(CHAPTER, *copies) == []


def test_a_change_of_the_code_makes_the_record_stale(copies):
    book, records = copies
    notebook = book / f"{CHAPTER}.ipynb"
    nb = json.loads(notebook.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["source"] = "".join(cell["source"]) + "\nSEED_OFFSET = 1\n"
    notebook.write_text(json.dumps(nb))
    problems = provenance_problems(CHAPTER, book, records)
    assert any("the code changed since its sweep" in p for p in problems)
    assert any(f"make claims CHAPTERS={CHAPTER}" in p for p in problems)


def test_a_record_of_other_code_is_stale(copies):
    book, records = copies
    _rewrite(
        records / f"{CHAPTER}.jsonl",
        lambda r: Run(r.seed, r.path, r.claims, "0" * 64, r.modules,
                      r.machine, r.minutes),
    )  # fmt: skip
    problems = provenance_problems(CHAPTER, book, records)
    assert any("the code changed since its sweep" in p for p in problems)
    assert any("ran other code than its sweep" in p for p in problems)


def test_a_record_whose_seed_0_is_not_the_stored_run_is_stale(copies):
    book, records = copies

    def shift(run: Run) -> Run:
        claims = dict(run.claims)
        if run.seed == 0:
            name = next(iter(claims))
            claims[name] += 1e-12  # the last digits are enough
        return Run(run.seed, run.path, claims, run.fingerprint, run.modules,
                   run.machine, run.minutes)  # fmt: skip

    _rewrite(records / f"{CHAPTER}.jsonl", shift)
    problems = provenance_problems(CHAPTER, book, records)
    assert problems == [
        f"{CHAPTER}: the stored run is not the sweep's seed 0 (native path): "
        f"re-execute book/{CHAPTER}.ipynb on the machine that ran the sweep, "
        f"or run `make claims CHAPTERS={CHAPTER}`"
    ]


def test_a_bench_scripts_source_covers_the_helper_module_it_imports(tmp_path):
    # recipe.py's training loop lives in bench/_common.py: a change there must
    # make recipe's record stale too.
    common = (ROOT / "bench" / "_common.py").read_text()
    assert script_source(ROOT / "bench" / "recipe.py").endswith(common)
    (tmp_path / "_common.py").write_text("x = 1\n")
    alone = tmp_path / "alone.py"
    alone.write_text("import math\n")
    assert script_source(alone) == "import math\n"
    user = tmp_path / "user.py"
    user.write_text("from _common import x\n")
    assert script_source(user) == "from _common import x\n\nx = 1\n"
