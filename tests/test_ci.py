"""The test set-up itself: what CI means (tests/ci.py) and the hypothesis profile of
tests/conftest.py."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.ci import in_ci, missing


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("false", False),
        ("", False),
    ],
)
def test_in_ci_reads_the_ci_variable(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected


def test_in_ci_is_false_without_the_variable(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert in_ci() is False


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail), ("false", pytest.skip)]
)
def test_a_missing_input_fails_under_ci_and_skips_elsewhere(
    monkeypatch, ci, outcome
):
    monkeypatch.setenv("CI", ci)
    # caught as BaseException: a skip where a failure is due must fail this test, not skip it
    with pytest.raises(BaseException, match="the data") as raised:
        missing("the data is missing")
    assert raised.type is outcome.Exception


def test_the_course_profile_keeps_hypothesis_own_profile_for_the_place():
    parent = settings.get_profile("ci" if in_ci() else "default")
    active = settings()  # what a @given test without its own @settings gets
    assert active.deadline is None
    for name in ("derandomize", "database", "suppress_health_check"):
        assert getattr(active, name) == getattr(parent, name), name
    if in_ci():
        assert active.derandomize and active.database is None
