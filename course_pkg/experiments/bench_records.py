"""Results of the ``bench/`` scripts that a chapter quotes, with their provenance.

Some measurements are too long for a notebook: the recipe table of "Training
the Transformer" (30 trainings per seed), the long-context sweep of the
inference chapter, the longer pretraining run. Their scripts write a record,
``course_pkg/experiments/records/bench/<name>.jsonl``, one JSON line a row of
results, each with the fingerprint of the code that ran (the script, the
``course_pkg`` modules it imported, torch; see :mod:`.provenance`), the
machine and the minutes it took. The chapter reads the rows with
:func:`read` and glues what it quotes; ``tests/test_claims_provenance.py``
checks that every record still matches today's code.

A record measured on a GPU cannot be made again where the tests run, and its
PyTorch is the GPU machine's: it is stamped with ``kernels``, the digest of
the script and of the Triton kernels it times
(:func:`course_pkg.experiments.provenance.jit_digest`), which says whether
the kernels it measured are still today's wherever their module lives.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from course_pkg.experiments.provenance import (
    fingerprint,
    loaded_modules,
    machine,
)

BENCH_RECORDS = Path(__file__).resolve().parent / "records" / "bench"


@dataclasses.dataclass(frozen=True)
class BenchRecord:
    """The rows a bench script wrote, and the code they came from.

    Attributes:
        script: the script's path from the repository's root
            (``"bench/recipe.py"``).
        rows: the results, one dict a row, as the script wrote them.
        fingerprint, modules, machine: the provenance, the same for all
            rows.
        minutes: the wall time of the whole run.
        stamp: what the fingerprint covers: ``"code"`` (the script, the
            modules, torch) or ``"kernels"`` (the script and the Triton
            kernels).
    """

    script: str
    rows: list[dict]
    fingerprint: str
    modules: tuple[str, ...]
    machine: str
    minutes: float
    stamp: str = "code"


def script_source(script: str | Path) -> str:
    """The code a bench script runs: its own text, then that of the helper
    module ``_common`` beside it when it imports it (the bench scripts'
    shared options, timing and training loops).

    Args:
        script: the script's path.
    Returns:
        Python source text.
    """
    script = Path(script)
    source = script.read_text()
    common = script.parent / "_common.py"
    if common.exists() and re.search(
        r"^\s*(import|from) _common\b", source, re.M
    ):
        source += "\n" + common.read_text()
    return source


def stamp_of(stamp: str, source: str, modules: list[str]) -> str:
    """The fingerprint of a script's run (``source``: its
    :func:`script_source`): ``"code"``, its source with the
    modules it imported and torch's version; ``"kernels"``, its source with
    the digest of the Triton kernels."""
    if stamp == "code":
        return fingerprint(source, modules)
    if stamp == "kernels":
        import hashlib

        from course_pkg.experiments.provenance import code_digest, jit_digest
        from course_pkg.kernels import flash_triton

        both = f"{code_digest(source)} {jit_digest(flash_triton)}"
        return hashlib.sha256(both.encode()).hexdigest()
    raise ValueError(f"stamp must be 'code' or 'kernels', got {stamp!r}")


def write(
    name: str,
    script: str | Path,
    rows: list[dict],
    minutes: float,
    folder: str | Path = BENCH_RECORDS,
    stamp: str = "code",
) -> Path:
    """Write a script's rows as record ``name``, stamped with the code that ran.

    Call it at the end of the run, so that every module the run used is
    imported and counted.

    Args:
        name: the record's name (a file name without ``.jsonl``).
        script: the running script's file (``__file__``).
        rows: one dict of JSON values a row.
        minutes: the wall time of the run.
        folder: where records go (default: the package's).
        stamp: what the fingerprint covers (:func:`stamp_of`).
    Returns:
        the path written.
    """
    script = Path(script).resolve()
    root = Path(__file__).resolve().parents[2]
    shown = (
        script.relative_to(root).as_posix()
        if script.is_relative_to(root)
        else script.name
    )
    modules = loaded_modules()
    provenance = {
        "script": shown,
        "fingerprint": stamp_of(stamp, script_source(script), modules),
        "stamp": stamp,
        "modules": modules,
        "machine": machine(),
        "minutes": round(minutes, 2),
    }
    path = Path(folder) / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({**provenance, "row": row}) + "\n" for row in rows)
    )
    return path


def read(name: str, folder: str | Path = BENCH_RECORDS) -> BenchRecord:
    """The record ``name`` as a script wrote it.

    Raises:
        ValueError: if there is no such record, or its rows disagree on
            their provenance.
    """
    path = Path(folder) / f"{name}.jsonl"
    if not isinstance(name, str) or not path.exists():
        raise ValueError(
            f"no bench record {name!r} in {folder}: run the script that "
            "writes it (its docstring says which)"
        )
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    stamps = {
        (r["script"], r["fingerprint"], tuple(r["modules"]), r["machine"],
         r["minutes"], r.get("stamp", "code"))
        for r in lines
    }  # fmt: skip
    if len(stamps) != 1:
        raise ValueError(f"{path} mixes rows of different runs")
    ((script, stamp, modules, where, minutes, kind),) = stamps
    return BenchRecord(
        script, [r["row"] for r in lines], stamp, modules, where, minutes, kind
    )
