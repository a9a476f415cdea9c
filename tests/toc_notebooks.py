"""Print the notebooks that _toc.yml lists, one path a line (used by `make test` for nbval).

`--part 1` prints only the notebooks that train longest (LONGEST), `--part 2` the others: `make
test` runs the portable pass as these two parts, so that its two parallel slots take about the
same time. Without `--part`, every notebook.
"""

from __future__ import annotations

import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The notebooks that take longest, chosen so that make test's two slots end together. Slot 1 runs
# this part on the portable path, then the unit tests, the numerics and the browser check (about 7
# min); slot 2 runs the native pass (about 12 min), then the other notebooks on the portable path.
# With only the first four, slot 1 ran both portable parts while slot 2 idled for its last 5 min:
# make test took 27 min 34 s. Clean clones on 2026-11-29: with the first six, 23 min 55 s (this
# part 13:13, the native pass 12:48, the other part 8:55: slot 2 about 1 min the longer); with
# modern_training added, 22 min 56 s (14:15, 12:21 and 7:33: slot 1 about 2 min the longer).
LONGEST = (
    "book/bert",
    "book/transformer_training",
    "book/bahdanau",
    "book/gpt",
    "book/beyond_softmax",
    "book/pretraining",
    "book/modern_training",
)


def toc_files(node) -> list[str]:
    """Every `file:` entry of a (nested) _toc.yml structure, in order."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("file", "root") and isinstance(value, str):
                found.append(value)
            else:
                found.extend(toc_files(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(toc_files(item))
    return found


def toc_notebooks() -> list[pathlib.Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [
        ROOT / f"{name}.ipynb"
        for name in toc_files(toc)
        if (ROOT / f"{name}.ipynb").exists()
    ]


def toc_part(part: int) -> list[pathlib.Path]:
    """Part 1: the notebooks of LONGEST; part 2: the others (both in _toc order)."""
    if part not in (1, 2):
        raise ValueError(f"part must be 1 or 2, got {part!r}")
    longest = {ROOT / f"{name}.ipynb" for name in LONGEST}
    return [p for p in toc_notebooks() if (p in longest) == (part == 1)]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--part"] and len(sys.argv) == 3:
        notebooks = toc_part(int(sys.argv[2]))
    elif len(sys.argv) == 1:
        notebooks = toc_notebooks()
    else:
        sys.exit("usage: toc_notebooks.py [--part 1|2]")
    if not notebooks:
        sys.exit("no notebook listed in _toc.yml")
    print("\n".join(str(p.relative_to(ROOT)) for p in notebooks))
