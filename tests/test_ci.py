"""The test set-up itself: what CI means (tests/ci.py) and the hypothesis profile of
tests/conftest.py."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import HealthCheck, settings

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


def test_the_course_profile_is_derandomised_everywhere():
    """In CI or not: the same examples on every run, no database, time decides nothing."""
    ci = settings.get_profile("ci")
    active = settings()  # what a @given test without its own @settings gets
    assert active.deadline is None
    assert active.derandomize and active.database is None
    for name in ("derandomize", "database", "suppress_health_check"):
        assert getattr(active, name) == getattr(ci, name), name
    assert HealthCheck.too_slow in active.suppress_health_check


def test_a_test_with_its_own_settings_stays_derandomised():
    # what @settings(max_examples=..., deadline=None) on a test builds: the rest is the profile's
    own = settings(max_examples=5, deadline=None)
    assert own.derandomize and own.database is None


def test_no_property_test_turns_randomness_back_on():
    """No test file undoes the profile: no derandomize=False, no example database."""
    folder = pathlib.Path(__file__).parent
    for path in folder.glob("test_*.py"):
        if path.name == "test_ci.py":
            continue
        text = path.read_text().replace(" ", "")
        assert "derandomize=False" not in text, path.name
        assert text.count("database=") == text.count("database=None"), (
            f"{path.name} sets an example database"
        )
