"""The book shows the package's own code: every ``literalinclude`` names a file and a
``:pyobject:`` that exists there, and the reference page documents every module."""

from __future__ import annotations

import ast
import json
import pathlib
import re
import textwrap

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


def _includes_with_lines() -> list[tuple[str, str, str, str]]:
    found = []
    for name, text in _book_texts().items():
        for match in INCLUDE.finditer(text):
            options = dict(
                re.findall(r":([a-z]+): ([^\n]*)", match["options"])
            )
            if "lines" in options:
                found.append(
                    (
                        name,
                        match["path"],
                        options.get("pyobject", ""),
                        options["lines"],
                    )
                )
    return found


def _object_lines(path: pathlib.Path, pyobject: str) -> list[str]:
    """The source lines of a top-level object or Class.method, as
    ``:pyobject:`` selects them (from the def or class line)."""
    source = path.read_text(encoding="utf-8")
    body = ast.parse(source).body
    *outer, last = pyobject.split(".")
    for name in outer:
        body = next(n.body for n in body if getattr(n, "name", "") == name)
    node = next(n for n in body if getattr(n, "name", "") == last)
    return source.splitlines()[node.lineno - 1 : node.end_lineno]


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


@pytest.mark.parametrize(
    "chapter, target, pyobject, lines", _includes_with_lines()
)
def test_every_lines_option_cuts_the_object_where_python_still_parses(
    chapter, target, pyobject, lines
):
    # ``:lines:`` counts from the object's first line; a range that no longer
    # fits the code after an edit shows a stray bracket or half a call, and
    # the fragment stops parsing.
    source = _object_lines((ROOT / "book" / target).resolve(), pyobject)
    chosen = []
    for part in lines.split(","):
        first, _, last = part.partition("-")
        stop = len(source) if part.endswith("-") else int(last or first)
        chosen += source[int(first) - 1 : stop]
    fragment = textwrap.dedent("\n".join(chosen))
    try:
        ast.parse(fragment)
    except SyntaxError as error:
        pytest.fail(f"{chapter}: {target} {pyobject} :lines: {lines}: {error}")


def test_the_reference_page_documents_every_module():
    api = (ROOT / "book" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"automodule:: course_pkg\.(\w+)", api))
    modules = {p.stem for p in (ROOT / "course_pkg").glob("*.py")} - {
        "__init__"
    }
    # subpackages (course_pkg.kernels) and their modules
    for init in (ROOT / "course_pkg").glob("*/__init__.py"):
        modules.add(init.parent.name)
        for module in init.parent.glob("*.py"):
            if module.stem != "__init__":
                assert (
                    f"automodule:: course_pkg.{init.parent.name}.{module.stem}"
                    in api
                )
    assert documented == modules
