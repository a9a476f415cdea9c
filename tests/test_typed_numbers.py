"""No result is typed into the prose: measured numbers are glued from their cells.

``tests/typed_numbers.py`` says what counts as a result-looking number and
where it looks; ``tests/typed_numbers_allowed/<chapter>.yaml`` lists the few
typed numbers that are not results (a setting, a cited paper's figure, a
date), each with its reason. A number found in neither fails here, and so does
an allowlist entry that no longer matches the prose.
"""

from __future__ import annotations

import pytest

from tests.toc_notebooks import toc_notebooks
from tests.typed_numbers import (
    ALLOWLISTS,
    allowlist,
    typed_numbers,
    unexplained,
)

NOTEBOOKS = {path.stem: path for path in toc_notebooks()}


@pytest.mark.parametrize("chapter", sorted(NOTEBOOKS))
def test_every_typed_number_is_allowlisted_with_its_reason(chapter):
    missing, stale = unexplained(chapter, NOTEBOOKS[chapter])
    assert not missing, (
        f"{len(missing)} result-looking numbers typed into "
        f"book/{chapter}.ipynb's prose: glue them from the cell that "
        f"computes them, or allowlist them in tests/typed_numbers_allowed/"
        f"{chapter}.yaml with the reason:\n"
        + "\n".join(f"{n!r}: ...{c}..." for n, c in missing)
    )
    assert not stale, f"allowlist entries that match nothing: {stale}"


def test_every_allowlist_entry_gives_a_reason_and_a_chapter():
    for path in ALLOWLISTS.glob("*"):
        assert path.suffix == ".yaml" and path.stem in NOTEBOOKS, path
        for entry in allowlist(path.stem):
            assert set(entry) == {"text", "why"}, entry
            assert entry["why"].strip(), entry


def test_the_scanner_finds_what_it_says_and_skips_the_rest(tmp_path):
    import json

    cell = (
        "BLEU drops by 15 to 43 points, 3.08 times the loss, 85 % of rows, "
        "2× faster, 680 MFLOP. Seeds 0-9, 8,000 pairs, 3 epochs. "
        "$x = 0.5$ and `lr = 0.01` and {glue:text}`bleu:.1f` and "
        "{cite:t}`vaswani2017attention` and [v1.2](https://a.b/1.5)."
    )
    notebook = tmp_path / "x.ipynb"
    notebook.write_text(
        json.dumps({"cells": [{"cell_type": "markdown", "source": cell}]})
    )
    found = [number for number, _, _ in typed_numbers(notebook)]
    assert found == ["43 points", "3.08", "85 %", "2×", "680 MFLOP"]
