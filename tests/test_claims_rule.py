"""The floor rule of ``bench/claims.py`` (README, "Floors"), on made-up values.

The sweep itself trains every chapter ten times and stays out of ``make test``;
the rule that judges its numbers is plain arithmetic and is checked here.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parent.parent / "bench")
)
import claims  # noqa: E402

# ten seeds: mean 0.9, sample std 0.011547, min 0.88, max 0.92
TIGHT = [0.88, 0.89, 0.89, 0.90, 0.90, 0.90, 0.90, 0.91, 0.91, 0.92]


def verdict(kind, bound, values, chance=None, null=None):
    return claims.rule(
        claims.Bound("x", "x", kind, bound, null=null), values, chance
    )


def test_statistics_are_those_of_the_seeds():
    row = verdict(">", 0.8, TIGHT)
    assert row["n"] == 10 and row["min"] == 0.88 and row["max"] == 0.92
    assert row["mean"] == pytest.approx(0.9)
    assert row["std"] == pytest.approx(0.011547, abs=1e-6)  # n - 1
    assert row["limit"] == pytest.approx(0.88 - 3 * 0.011547, abs=1e-6)


def test_a_floor_must_lie_three_stds_below_the_least_seed():
    assert verdict(">", 0.84, TIGHT)["verdict"] == "ok"
    # below every seed, but inside min - 3 std: a thin floor
    assert verdict(">", 0.87, TIGHT)["verdict"] == "move the bound"


def test_a_ceiling_is_the_mirror_image():
    assert verdict("<", 0.96, TIGHT)["verdict"] == "ok"
    assert verdict("<", 0.93, TIGHT)["verdict"] == "move the bound"


def test_chance_bounds_the_floor_from_below_at_the_midpoint():
    # chance 0.5: midpoint 0.7; a floor at 0.6 says less than half the effect
    assert verdict(">", 0.75, TIGHT, chance=0.5)["verdict"] == "ok"
    assert verdict(">", 0.6, TIGHT, chance=0.5)["verdict"] == "move the bound"


def test_a_spread_as_wide_as_the_effect_has_no_margin():
    # 37-78 % with chance 10 %: min - 3 std falls below the midpoint
    wide = [0.37, 0.45, 0.5, 0.55, 0.6, 0.62, 0.66, 0.7, 0.75, 0.78]
    row = verdict(">", 0.3, wide, chance=0.1)
    assert row["verdict"].startswith("NO MARGIN")
    # an ordering claim whose limit crosses its null value
    row = verdict(">", 0.01, [0.05, 0.1, 0.2, 0.3] * 3, null=0)
    assert row["verdict"].startswith("NO MARGIN")


def test_a_yes_no_claim_holds_on_every_seed_or_fails():
    assert verdict("true", None, [1.0] * 10)["verdict"] == "ok"
    assert verdict("true", None, [1.0] * 9 + [0.0])["verdict"] == "FAILS"


def test_every_assert_reads_claims_the_chapter_records():
    # each Bound names a recorded claim (or a function of them), and its
    # chapter is one that claims.py runs
    for chapter, bounds in claims.BOUNDS.items():
        assert chapter in claims.CHAPTERS
        names = claims.CLAIMS.get(chapter)
        for bound in bounds:
            assert bound.kind in {">", "<", "true", "info"}
            if names is not None and isinstance(bound.of, str):
                assert bound.of in names, (chapter, bound.of)
