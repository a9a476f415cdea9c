"""What a chapter claims from training, and the sweep over seeds behind it.

A chapter that trains prints numbers that differ from CPU to CPU, so the prose
does not rest on its one run: ``make claims`` runs the chapter's notebook for
seeds 0-9 (``bench/claims.py``) and records every run's claims, one JSON line
each, in ``course_pkg/experiments/records/<chapter>.jsonl``. This module is
the one reader of those records, so that the three places a claim appears
cannot disagree:

- the prose quotes the range over seeds, glued from :meth:`Sweep.span`;
- the assert checks this run against :meth:`Sweep.floor` (or
  :meth:`Sweep.ceiling`), the README's rule applied to the record;
- the table of every claim (``bench/claims_table.md``, and the last cell of
  each chapter, :func:`report`) shows the record's statistics.

The rule (README, "Floors"): over the seeds, a floor lies at or below
``min - 3 std`` (a ceiling at or above ``max + 3 std``); where the value has a
chance level, that limit must not lie past the midpoint between the mean and
chance; an ordering ("A beats B") needs its limit on the claim's side of the
null value (0, or 1 for a ratio). A claim that fails this has no margin: it is
stated with its range (:attr:`Claim.side` ``"range"``), never asserted.

What each chapter claims is listed beside its experiments, in
``course_pkg.experiments.<chapter>.CLAIMS``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

from course_pkg.experiments.provenance import (
    fingerprint,
    loaded_modules,
    notebook_code,
)

RECORDS = Path(__file__).resolve().parent / "records"
SIDES = (">", "<", "<>", "true", "range")


@dataclasses.dataclass(frozen=True)
class Claim:
    """How a chapter uses one value it measures after training.

    Attributes:
        side: ``">"`` the value is asserted above a floor, ``"<"`` below a
            ceiling, ``"<>"`` both; ``"true"`` a yes/no claim (1 or 0) that
            must hold in every seed; ``"range"`` stated with its range over
            the seeds, not asserted (no margin under the rule).
        chance: the value with no skill, where one is defined: a number, or
            the name of another claim of the chapter that records it per
            run (a chance that depends on the run's test set).
        null: the value an ordering rules out (0 for "A beats B", 1 for a
            ratio), where no chance level is defined.
    """

    side: str
    chance: float | str | None = None
    null: float | None = None

    def __post_init__(self) -> None:
        if self.side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {self.side!r}")

    def chance_in(self, claims: dict[str, float]) -> float | None:
        if isinstance(self.chance, str):
            return claims[self.chance]
        return self.chance


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A claim's values over the seeds and what the rule makes of them.

    ``floor``/``ceiling``: the rule's limits (None where not asserted);
    ``verdict``: ``"ok"``, ``"NO MARGIN"``, ``"stated"`` or ``"FAILS"``.
    """

    n: int
    min: float
    mean: float
    std: float
    max: float
    floor: float | None
    ceiling: float | None
    midpoint: float | None
    verdict: str


def rule(claim: Claim, values: list[float], chance: float | None) -> Verdict:
    """The README's floor rule for one claim over its seeds' values.

    Args:
        claim: how the chapter uses the value.
        values: one value per run (n >= 2 for a standard deviation).
        chance: the chance level (the mean over runs of
            ``Claim.chance_in``), or None.
    Returns:
        the statistics, the limits and the verdict.
    """
    n = len(values)
    mean = sum(values) / n
    std = (
        math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        if n > 1
        else 0.0
    )
    low, high = min(values), max(values)
    floor = low - 3 * std if claim.side in (">", "<>") else None
    ceiling = high + 3 * std if claim.side in ("<", "<>") else None
    midpoint = None if chance is None else (mean + chance) / 2
    if claim.side == "range":
        verdict = "stated"
    elif claim.side == "true":
        verdict = "ok" if all(v == 1 for v in values) else "FAILS"
    else:
        margin = True
        if floor is not None:
            if midpoint is not None:
                margin &= floor >= midpoint
            elif claim.null is not None:
                margin &= floor > claim.null
        if ceiling is not None and claim.side == "<":
            if midpoint is not None:
                margin &= ceiling <= midpoint
            elif claim.null is not None:
                margin &= ceiling < claim.null
        verdict = "ok" if margin else "NO MARGIN"
    return Verdict(n, low, mean, std, high, floor, ceiling, midpoint, verdict)


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a sweep, as its record line holds it."""

    seed: int
    path: str
    claims: dict[str, float]
    fingerprint: str
    modules: tuple[str, ...]
    machine: str
    minutes: float

    @classmethod
    def from_json(cls, line: str) -> Run:
        record = json.loads(line)
        return cls(
            record["seed"],
            record["path"],
            record["claims"],
            record["fingerprint"],
            tuple(record["modules"]),
            record["machine"],
            record["minutes"],
        )

    def to_json(self) -> str:
        record = dataclasses.asdict(self)
        record["modules"] = list(self.modules)
        return json.dumps(record)


# bench/claims.py sets this to the chapter it sweeps, in each run's process.
SWEEP_RUN = "COURSE_SWEEP_RUN"


class Sweep:
    """The record of one chapter's sweep: its runs, and what they support.

    Args:
        chapter: the notebook's name (``"bahdanau"``), whose claims are
            ``course_pkg.experiments.<chapter>.CLAIMS``.
        records: the folder of the records (default: the package's).
    Raises:
        ValueError: if the chapter lists no claims, or has no record.
    """

    def __init__(self, chapter: str, records: str | Path = RECORDS) -> None:
        claims = chapter_claims(chapter)
        path = Path(records) / f"{chapter}.jsonl"
        if not path.exists():
            raise ValueError(
                f"no sweep recorded for {chapter!r} ({path}): run "
                f"`make claims CHAPTERS={chapter}`"
            )
        self.chapter = chapter
        self.claims = claims
        self.runs = [
            Run.from_json(line)
            for line in path.read_text().splitlines()
            if line.strip()
        ]

    def values(self, name: str) -> list[float]:
        """The claim's value in every run of the sweep, in record order."""
        self._claim(name)
        return [float(run.claims[name]) for run in self.runs]

    def verdict(self, name: str) -> Verdict:
        """The rule's verdict on the claim over the sweep's runs."""
        claim = self._claim(name)
        chances = [claim.chance_in(run.claims) for run in self.runs]
        chance = None if chances[0] is None else sum(chances) / len(chances)
        return rule(claim, self.values(name), chance)

    def floor(self, name: str) -> float:
        """The bound a run's value must stay above: the rule's floor.

        Raises:
            ValueError: if the chapter does not assert the claim from below,
                or the sweep leaves it no margin.
        """
        return self._limit(name, ">", "floor")

    def ceiling(self, name: str) -> float:
        """The bound a run's value must stay below: the rule's ceiling.

        Raises:
            ValueError: as :meth:`floor`, for a claim asserted from above.
        """
        return self._limit(name, "<", "ceiling")

    def span(
        self, name: str, digits: int = 2, scale: float = 1.0, sep: str = "–"
    ) -> str:
        """The range over the seeds as prose quotes it: ``"0.41–0.49"``.

        Args:
            name: the claim.
            digits: decimals shown.
            scale: a factor applied first (100 for a percentage).
            sep: what stands between the two ends.
        """
        values = [scale * v for v in self.values(name)]
        return f"{min(values):.{digits}f}{sep}{max(values):.{digits}f}"

    def count(self, name: str, holds: Callable[[float], bool]) -> str:
        """In how many runs the claim's value satisfies ``holds``: "7 of 10"."""
        values = self.values(name)
        return f"{sum(bool(holds(v)) for v in values)} of {len(values)}"

    def _claim(self, name: str) -> Claim:
        if name not in self.claims:
            raise ValueError(
                f"{self.chapter} claims no {name!r}; its claims: "
                f"{sorted(self.claims)}"
            )
        return self.claims[name]

    def _limit(self, name: str, side: str, which: str) -> float:
        claim = self._claim(name)
        if side not in claim.side:
            raise ValueError(
                f"{self.chapter}: {name!r} is listed with side "
                f"{claim.side!r}, not asserted with a {which}"
            )
        if os.environ.get(SWEEP_RUN) == self.chapter:
            # A run of this chapter's sweep measures the values its bounds
            # will come from; the record it replaces does not judge it.
            return -math.inf if side == ">" else math.inf
        verdict = self.verdict(name)
        if verdict.verdict != "ok":
            raise ValueError(
                f"{self.chapter}: {name!r} has no margin over its "
                f"{verdict.n} seeds ({verdict.min:.3g} to {verdict.max:.3g},"
                f" std {verdict.std:.2g}): state its range instead"
            )
        return getattr(verdict, which)


def chapter_claims(chapter: str) -> dict[str, Claim]:
    """The claims a chapter lists: ``course_pkg.experiments.<chapter>.CLAIMS``.

    Raises:
        ValueError: if there is no such module, or it lists no claims.
    """
    if not isinstance(chapter, str) or not chapter.isidentifier():
        raise ValueError(f"chapter must be a notebook's name, got {chapter!r}")
    try:
        module = importlib.import_module(f"course_pkg.experiments.{chapter}")
    except ModuleNotFoundError:
        module = None
    claims = getattr(module, "CLAIMS", None)
    if not claims:
        raise ValueError(
            f"course_pkg.experiments.{chapter} lists no CLAIMS: chapter "
            f"{chapter!r} has no sweep"
        )
    return claims


def report(
    sweep: Sweep, claims: dict[str, float], notebook: str | Path
) -> str:
    """A chapter's last cell: this run's claims beside the sweep's.

    Glues (myst-nb, hidden) the run's record, which ``bench/claims.py``
    reads from a sweep's runs and ``tests/test_claims_provenance.py`` from
    the stored notebook: the claims, the fingerprint of the code that ran
    and the modules it used. Returns a Markdown table, one row per claim:
    this run's value, the sweep's range, and the bound asserted.

    Args:
        sweep: the chapter's sweep.
        claims: every claim the chapter lists, measured in this run.
        notebook: the path of this notebook (for its fingerprint).
    Raises:
        ValueError: if ``claims`` misses a listed claim or adds one.
    """
    if set(claims) != set(sweep.claims):
        raise ValueError(
            f"claims must be the {len(sweep.claims)} claims listed for "
            f"{sweep.chapter}: missing {sorted(set(sweep.claims) - set(claims))}"
            f", not listed {sorted(set(claims) - set(sweep.claims))}"
        )
    modules = loaded_modules()
    record = {
        "claims": {name: float(value) for name, value in claims.items()},
        "fingerprint": fingerprint(notebook_code(notebook), modules),
        "modules": modules,
    }
    try:
        from myst_nb import glue
    except ImportError:  # outside the book's environment: nothing to glue
        pass
    else:
        glue("claims_record", json.dumps(record), display=False)
    return claims_table(sweep, claims)


def glued_values(cells: list[dict]) -> dict[str, str]:
    """What a stored notebook glued: name -> the value's text (the repr
    myst-nb stores), from the outputs of ``cells`` (a notebook's cells, as
    JSON dicts or nbformat nodes)."""
    values = {}
    for cell in cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                values[name] = next(
                    v
                    for k, v in output["data"].items()
                    if k.endswith("text/plain")
                )
    return values


def stored_run(cells: list[dict]) -> dict | None:
    """The run record :func:`report` glued in a stored notebook's cells
    (None if there is none)."""
    text = glued_values(cells).get("claims_record")
    return None if text is None else json.loads(ast.literal_eval(text))


def claims_table(sweep: Sweep, claims: dict[str, float] | None = None) -> str:
    """The sweep's claims as a Markdown table (with this run's, if given)."""
    head = "| claim | " + ("this run | " if claims is not None else "")
    head += (
        f"{len(sweep.runs)} runs: min – max | mean ± std | bound | verdict |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, claim in sweep.claims.items():
        v = sweep.verdict(name)
        bound = {
            ">": f"> {_g(v.floor)}",
            "<": f"< {_g(v.ceiling)}",
            "<>": f"{_g(v.floor)} < · < {_g(v.ceiling)}",
            "true": "in every run",
            "range": "stated",
        }[claim.side]
        shown = name.replace("|", "\\|")  # a bar would end the cell
        row = f"| {shown} | "
        if claims is not None:
            row += f"{_g(claims[name])} | "
        row += (
            f"{_g(v.min)} – {_g(v.max)} | {_g(v.mean)} ± {_g(v.std)} | "
            f"{bound} | {v.verdict} |"
        )
        lines.append(row)
    return "\n".join(lines)


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"
