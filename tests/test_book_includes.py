"""The book shows the package's own code: every ``literalinclude`` names a file and a
``:pyobject:`` that exists there, and the reference page documents every module."""

from __future__ import annotations

import ast
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
INCLUDE = re.compile(
    r"\{literalinclude\} (?P<path>[^\s`]+)\n(?P<options>(?::[a-z]+:[^\n]*\n)*)"
)


def _book_texts() -> dict[str, str]:
    texts = {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts[path.name] = "\n".join(
            "".join(c["source"]) + "\n"
            for c in cells
            if c["cell_type"] == "markdown"
        )
    for path in sorted((ROOT / "book").glob("*.md")):
        texts[path.name] = path.read_text(encoding="utf-8")
    return texts


def _includes() -> list[tuple[str, str, str]]:
    found = []
    for name, text in _book_texts().items():
        for match in INCLUDE.finditer(text):
            options = dict(
                re.findall(r":([a-z]+): ([^\n]*)", match["options"])
            )
            found.append((name, match["path"], options.get("pyobject", "")))
    return found


def _defined(path: pathlib.Path) -> set[str]:
    """Top-level functions and classes, and Class.method names, of a module."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef)
            )
    return names


def test_the_book_includes_package_code():
    assert len(_includes()) >= 30


@pytest.mark.parametrize("chapter, target, pyobject", _includes())
def test_every_literalinclude_points_at_an_existing_object(
    chapter, target, pyobject
):
    path = (ROOT / "book" / target).resolve()
    assert path.is_file(), f"{chapter}: {target} does not exist"
    if pyobject:
        assert pyobject in _defined(path), (
            f"{chapter}: no {pyobject} in {target}"
        )


def test_the_reference_page_documents_every_module():
    api = (ROOT / "book" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"automodule:: course_pkg\.(\w+)", api))
    modules = {p.stem for p in (ROOT / "course_pkg").glob("*.py")} - {
        "__init__"
    }
    assert documented == modules
