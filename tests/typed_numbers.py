"""Result-looking numbers typed into the chapters' prose.

A number that a sentence of the book states as a result (a loss, a BLEU, an
accuracy, a time, a ratio, a count measured from data) must be glued from the
cell that computed it (myst-nb ``{glue:text}``), so that it changes when the
code does. This module finds the numbers that are still typed: in every
markdown cell of the notebooks that ``_toc.yml`` lists, outside math, code,
roles (``{glue:text}`...```, ``{cite:t}`...```) and link targets, it counts

- decimals: ``0.93``, ``2.04``;
- percentages: ``85 %``, ``40%``;
- multipliers: ``3×``, ``1.5x``;
- numbers with a unit of measurement: ``43 min``, ``680 MFLOP``, ``12 points``.

Whole numbers without a unit ("8,000 pairs", "10 seeds", "3 epochs") are
mostly settings and are not counted. What may stay typed is listed, per
chapter, in ``tests/typed_numbers_allowed/<chapter>.yaml``: a setting the
chapter chooses, a figure of a cited paper, a date, a constant of a formula,
each with the reason.

Run it to see a chapter's typed numbers in context::

    python tests/typed_numbers.py bahdanau
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALLOWLISTS = ROOT / "tests" / "typed_numbers_allowed"

UNITS = (
    r"s|ms|µs|min|minutes?|seconds?|hours?|h|points?|bits?|bytes?|B|KiB|MiB|GiB|"
    r"KB|MB|GB|TB|kB|tokens?/s|MFLOPs?|GFLOPs?|TFLOPs?|FLOPs?|GFLOP/s|TFLOP/s|"
    r"nats?|BLEU|dB"
)
NUMBER = re.compile(
    r"(?<![\w.,])("
    r"\d[\d,]*\.\d+(?:\s?(?:%|×|x(?![\w])))?"  # a decimal, maybe % or x
    r"|\d[\d,]*\s?(?:%|×|x(?![\w]))"  # a whole percentage or multiplier
    rf"|\d[\d,]*(?:\.\d+)?\s(?:{UNITS})(?![\w/])"  # with a unit
    r")"
)
# What is not prose: fenced code and directives' options, math, inline code,
# roles with their content, link targets, HTML comments.
NOT_PROSE = [
    r"```.*?```",
    r"<!--.*?-->",
    r"\$\$.*?\$\$",
    r"\$[^$\n]+\$",
    r"\{[\w:-]+\}`[^`]*`",
    r"`[^`]*`",
    r"\]\([^)]*\)",
    r"^:[\w-]+:.*$",
]


def prose(markdown: str) -> str:
    """A markdown cell with everything that is not prose blanked out."""
    for pattern in NOT_PROSE:
        markdown = re.sub(
            pattern,
            lambda m: " " * len(m.group()),
            markdown,
            flags=re.S | re.M,
        )
    return markdown


def prose_cells(notebook: pathlib.Path) -> list[str]:
    """Each markdown cell's prose, whitespace collapsed to single spaces."""
    return [
        " ".join(prose("".join(cell["source"])).split())
        for cell in json.loads(notebook.read_text())["cells"]
        if cell["cell_type"] == "markdown"
    ]


def typed_numbers(notebook: pathlib.Path) -> list[tuple[str, str, int]]:
    """(number, the cell's prose, where the number starts in it)."""
    return [
        (match.group(1), text, match.start())
        for text in prose_cells(notebook)
        for match in NUMBER.finditer(text)
    ]


def allowlist(chapter: str) -> list[dict[str, str]]:
    """The chapter's typed numbers that are not results, each {"text",
    "why"}: "text" is a piece of the prose that contains the number, long
    enough to say which occurrence is meant; "why" the reason it stays."""
    path = ALLOWLISTS / f"{chapter}.yaml"
    return (yaml.safe_load(path.read_text()) or []) if path.exists() else []


def unexplained(
    chapter: str, notebook: pathlib.Path
) -> tuple[list[tuple[str, str]], list[str]]:
    """The chapter's typed numbers that no allowlist entry covers (each with
    the words around it), and the entries that cover nothing (stale)."""
    entries = allowlist(chapter)
    used = set()
    missing = []
    for number, text, start in typed_numbers(notebook):
        covering = [
            i
            for i, entry in enumerate(entries)
            if number in entry["text"]
            and any(
                at <= start and start + len(number) <= at + len(entry["text"])
                for at in _occurrences(text, entry["text"])
            )
        ]
        used.update(covering)
        if not covering:
            context = text[max(0, start - 60) : start + len(number) + 40]
            missing.append((number, context))
    stale = [e["text"] for i, e in enumerate(entries) if i not in used]
    return missing, stale


def _occurrences(text: str, piece: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(piece), text)]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from tests.toc_notebooks import toc_notebooks

    wanted = set(sys.argv[1:])
    for path in toc_notebooks():
        if wanted and path.stem not in wanted:
            continue
        missing, stale = unexplained(path.stem, path)
        print(f"{path.stem}: {len(typed_numbers(path))} typed, "
              f"{len(missing)} not allowlisted")  # fmt: skip
        for number, context in missing:
            print(f"   {number!r:>12}  ... {context} ...")
        for entry in stale:
            print(f"   stale allowlist entry: {entry!r}")
