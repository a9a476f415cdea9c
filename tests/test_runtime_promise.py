"""The intro's promise of how long a notebook runs holds for the book's stored runs.

Each notebook keeps, in every code cell's metadata, the times its stored run started and finished
the cell (``execution``); a notebook's run time is the sum of its cells' times. The intro
promises "Every notebook runs in under N minutes on a 2-core CPU, and most in under S seconds";
both are read from ``book/intro.md`` and compared with those stored times. No timing is taken
here: the test reads stored metadata, so its verdict is the same on every run.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re

import yaml

from tests.toc_notebooks import toc_files

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROMISE = re.compile(
    r"Every notebook runs in under (\d+) minutes on a 2-core CPU, and most in\s+under (\d+) seconds"
)


def stored_seconds(path: pathlib.Path) -> float:
    """The stored run's time of a notebook: the sum over its code cells of
    each cell's start to finish (a cell merged in from another run keeps its
    own times, so the sum, unlike first start to last finish, stays right)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    times = [
        c["metadata"]["execution"]
        for c in cells
        if "execution" in c.get("metadata", {})
    ]
    assert times, f"{path.name} has no stored execution times"

    def parse(stamp: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return sum(
        (
            parse(t["shell.execute_reply"])
            - parse(t.get("iopub.execute_input", t["iopub.status.busy"]))
        ).total_seconds()
        for t in times
    )


def notebooks() -> list[pathlib.Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    paths = [ROOT / f"{name}.ipynb" for name in toc_files(toc)]
    return [p for p in paths if p.exists()]


def promise() -> tuple[float, float]:
    """(limit for every notebook, limit for most), in seconds, as the intro states them."""
    found = PROMISE.search(
        (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    )
    assert found, (
        "book/intro.md no longer states its runtime promise in the tested words"
    )
    return 60 * float(found.group(1)), float(found.group(2))


def test_the_intro_promise_holds_for_the_stored_runs():
    every, most = promise()
    seconds = {p.name: stored_seconds(p) for p in notebooks()}
    assert len(seconds) == 20
    over = {name: round(s, 1) for name, s in seconds.items() if s >= every}
    assert not over, f"stored runs over {every:.0f} s: {over}"
    under = [name for name, s in seconds.items() if s < most]
    assert len(under) > len(seconds) / 2, sorted(
        seconds.items(), key=lambda x: x[1]
    )


def test_a_broken_promise_is_caught(tmp_path):
    """The check can fail: a notebook whose stored run took 11 minutes breaks a 10-minute promise."""
    cell = {
        "cell_type": "code",
        "metadata": {
            "execution": {
                "iopub.execute_input": "2026-01-01T00:00:00.000000Z",
                "iopub.status.busy": "2026-01-01T00:00:00.000000Z",
                "shell.execute_reply": "2026-01-01T00:11:00.000000Z",
            }
        },
        "source": "",
    }
    path = tmp_path / "slow.ipynb"
    path.write_text(json.dumps({"cells": [cell]}), encoding="utf-8")
    assert stored_seconds(path) == 660.0
    assert stored_seconds(path) >= promise()[0]
