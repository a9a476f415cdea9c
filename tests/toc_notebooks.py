"""Print the notebooks that _toc.yml lists, one path a line (used by `make test` for nbval)."""

from __future__ import annotations

import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


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


if __name__ == "__main__":
    notebooks = toc_notebooks()
    if not notebooks:
        sys.exit("no notebook listed in _toc.yml")
    print("\n".join(str(p.relative_to(ROOT)) for p in notebooks))
