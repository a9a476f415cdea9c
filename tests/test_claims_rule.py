"""The floor rule of :mod:`course_pkg.experiments.claims` (README, "Floors"), on made-up values.

The sweeps train every chapter ten times and stay out of ``make test``; the rule
that turns their records into the asserts' bounds is plain arithmetic, checked
here, as is the reading of a record.
"""

from __future__ import annotations

import json

import pytest

from course_pkg.experiments.claims import Claim, Run, Sweep, rule

# ten seeds: mean 0.9, sample std 0.011547, min 0.88, max 0.92
TIGHT = [0.88, 0.89, 0.89, 0.90, 0.90, 0.90, 0.90, 0.91, 0.91, 0.92]
STD = 0.0115470053837925


def test_statistics_are_those_of_the_seeds():
    row = rule(Claim(">"), TIGHT, None)
    assert row.n == 10 and row.min == 0.88 and row.max == 0.92
    assert row.mean == pytest.approx(0.9)
    assert row.std == pytest.approx(STD)  # n - 1
    assert row.floor == pytest.approx(0.88 - 3 * STD) and row.ceiling is None
    assert row.verdict == "ok"


def test_a_ceiling_is_the_mirror_image():
    row = rule(Claim("<"), TIGHT, None)
    assert row.ceiling == pytest.approx(0.92 + 3 * STD) and row.floor is None
    both = rule(Claim("<>"), TIGHT, None)
    assert both.ceiling == row.ceiling
    assert both.floor == pytest.approx(0.88 - 3 * STD)


def test_chance_bounds_the_floor_from_below_at_the_midpoint():
    # chance 0.5: midpoint 0.7, the floor 0.845 is above it
    row = rule(Claim(">", chance=0.5), TIGHT, 0.5)
    assert row.midpoint == pytest.approx(0.7) and row.verdict == "ok"
    # chance 0.85: midpoint 0.875 lies above the floor 0.845
    assert rule(Claim(">", chance=0.85), TIGHT, 0.85).verdict == "NO MARGIN"


def test_a_spread_as_wide_as_the_effect_has_no_margin():
    # 37-78 % with chance 10 %: min - 3 std falls below the midpoint
    wide = [0.37, 0.45, 0.5, 0.55, 0.6, 0.62, 0.66, 0.7, 0.75, 0.78]
    assert rule(Claim(">", chance=0.1), wide, 0.1).verdict == "NO MARGIN"
    # an ordering claim whose limit crosses its null value
    spread = [0.05, 0.1, 0.2, 0.3] * 3
    assert rule(Claim(">", null=0), spread, None).verdict == "NO MARGIN"
    assert rule(Claim(">", null=0), TIGHT, None).verdict == "ok"
    # a ceiling below a null of 1 (a ratio that must stay under 1)
    assert rule(Claim("<", null=1), TIGHT, None).verdict == "ok"
    assert rule(Claim("<", null=0.93), TIGHT, None).verdict == "NO MARGIN"


def test_a_yes_no_claim_holds_on_every_seed_or_fails():
    assert rule(Claim("true"), [1.0] * 10, None).verdict == "ok"
    assert rule(Claim("true"), [1.0] * 9 + [0.0], None).verdict == "FAILS"
    assert rule(Claim("range"), TIGHT, None).verdict == "stated"


def test_a_side_must_be_known():
    with pytest.raises(ValueError, match="side must be one of"):
        Claim(">=")


def _record(tmp_path, values):
    lines = [
        Run(s, "native", {"share": v, "chance": 0.1}, "f", (), "m", 1.0)
        for s, v in enumerate(values)
    ]
    (tmp_path / "bahdanau.jsonl").write_text(
        "".join(run.to_json() + "\n" for run in lines)
    )
    return tmp_path


def test_a_sweep_reads_its_record_and_applies_the_rule(tmp_path, monkeypatch):
    from course_pkg.experiments import bahdanau

    claims = {
        "share": Claim(">", chance="chance"),
        "chance": Claim("range"),
    }
    monkeypatch.setattr(bahdanau, "CLAIMS", claims)
    sweep = Sweep("bahdanau", _record(tmp_path, TIGHT))
    assert sweep.values("share") == TIGHT
    assert sweep.floor("share") == pytest.approx(0.88 - 3 * STD)
    assert sweep.span("share", 1, 100) == "88.0–92.0"
    assert sweep.count("share", lambda v: v >= 0.9) == "7 of 10"
    with pytest.raises(ValueError, match="not asserted with a ceiling"):
        sweep.ceiling("share")
    with pytest.raises(ValueError, match="claims no 'other'"):
        sweep.floor("other")
    wide = [0.37, 0.45, 0.5, 0.55, 0.6, 0.62, 0.66, 0.7, 0.75, 0.78]
    with pytest.raises(ValueError, match="has no margin"):
        Sweep("bahdanau", _record(tmp_path, wide)).floor("share")


def test_a_chapter_without_claims_or_record_is_refused(tmp_path):
    with pytest.raises(ValueError, match="lists no CLAIMS"):
        Sweep("scoring_functions")
    with pytest.raises(ValueError, match="no sweep recorded"):
        Sweep("bahdanau", tmp_path)


def test_every_record_line_has_its_provenance():
    from course_pkg.experiments.claims import RECORDS

    for path in RECORDS.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert set(record) == {
                "seed", "path", "claims", "fingerprint", "modules",
                "machine", "minutes",
            }, path  # fmt: skip


def test_a_run_of_the_chapters_own_sweep_is_not_judged_by_the_old_record(
    tmp_path, monkeypatch
):
    from course_pkg.experiments import bahdanau
    from course_pkg.experiments.claims import SWEEP_RUN

    monkeypatch.setattr(bahdanau, "CLAIMS", {"share": Claim(">", null=0.5)})
    wide = [0.37, 0.45, 0.5, 0.55, 0.6, 0.62, 0.66, 0.7, 0.75, 0.78]
    sweep = Sweep("bahdanau", _record(tmp_path, wide))
    monkeypatch.setenv(SWEEP_RUN, "gpt")  # another chapter's sweep: judged
    with pytest.raises(ValueError, match="has no margin"):
        sweep.floor("share")
    monkeypatch.setenv(SWEEP_RUN, "bahdanau")
    assert sweep.floor("share") == -float("inf")
    assert sweep.span("share") == "0.37–0.78"  # the prose still reads it
    with pytest.raises(ValueError, match="not asserted with a ceiling"):
        sweep.ceiling("share")


def _bench_claims():
    import importlib.util
    import pathlib
    import sys

    bench = pathlib.Path(__file__).resolve().parent.parent / "bench"
    sys.path.insert(0, str(bench))  # claims.py imports _common beside it
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_claims", bench / "claims.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    return module


def test_the_seed_reaches_every_cell_that_reads_it():
    import nbformat

    claims = _bench_claims()
    cells = [
        "from course_pkg.models.seq2seq import SETTINGS\nseed_everything(0)",
        "loader(seed=SETTINGS.seed)",
        "from course_pkg.models.gpt import (\n    SETTINGS,\n)",
        "model(seed=SETTINGS.seed)",
    ]
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in cells]
    )
    sources = [c.source for c in claims.seeded(nb, "x", 7).cells]
    assert sources[0] == cells[0]
    assert "SEED = 7" in sources[1] and "seed=7" in sources[1]
    assert sources[2:4] == cells[1:3]
    assert "seed=7" in sources[4] and sources[5] == cells[3]
    # a cell that binds SETTINGS and reads its seed would run with seed 0
    late = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("import torch"),
            nbformat.v4.new_code_cell(
                "from course_pkg.models.seq2seq import SETTINGS\n"
                "loader(seed=SETTINGS.seed)"
            ),
        ]
    )
    with pytest.raises(RuntimeError, match="cell 1 binds SETTINGS"):
        claims.seeded(late, "x", 7)
