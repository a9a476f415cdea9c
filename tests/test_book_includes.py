"""The book shows the package's own code: every ``literalinclude`` names a file and a
``:pyobject:`` that exists there, prints at most 60 lines (what the book prints reads like
the math), and the reference page documents every module."""

from __future__ import annotations

import ast
import json
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
INCLUDE = re.compile(
    r"\{literalinclude\} (?P<path>[^\s`]+)\n"
    r"(?P<options>(?:[ \t]*:[a-z-]+:[^\n]*\n)*)"
)
# The longest listing the book may print (GUIDE: <= 40 lines where the concept
# allows, never over 60).
MAX_PRINTED_LINES = 60


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
                re.findall(r":([a-z-]+): ([^\n]*)", match["options"])
            )
            found.append((name, match["path"], options.get("pyobject", "")))
    return found


def _includes_with_lines() -> list[tuple[str, str, str, str]]:
    found = []
    for name, text in _book_texts().items():
        for match in INCLUDE.finditer(text):
            options = dict(
                re.findall(r":([a-z-]+): ([^\n]*)", match["options"])
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


def _select(source: list[str], lines: str) -> list[str]:
    """The lines a ``:lines:`` option (e.g. "1-8,40,44,65-") keeps."""
    chosen = []
    for part in lines.split(","):
        first, _, last = part.partition("-")
        stop = len(source) if part.endswith("-") else int(last or first)
        chosen += source[int(first) - 1 : stop]
    return chosen


def _cut(source: list[str], options: dict[str, str]) -> list[str]:
    """The lines that ``:start-at:``/``:start-after:`` and
    ``:end-at:``/``:end-before:`` keep (first match, as Sphinx cuts them
    after ``:pyobject:``); a text that is not there fails the test."""
    for option, after in (("start-at", 0), ("start-after", 1)):
        if option in options:
            found = [
                i for i, line in enumerate(source) if options[option] in line
            ]
            assert found, f"{option}: {options[option]!r} is not in the object"
            source = source[found[0] + after :]
    for option, keep in (("end-at", 1), ("end-before", 0)):
        if option in options:
            found = [
                i for i, line in enumerate(source) if options[option] in line
            ]
            assert found, f"{option}: {options[option]!r} is not in the object"
            source = source[: found[0] + keep]
    return source


def printed_listings() -> list[tuple[int, str, str, str]]:
    """(lines printed, chapter, file, pyobject) of every ``literalinclude``
    in the book, longest first (``python tests/test_book_includes.py``
    prints them)."""
    found = []
    for name, text in _book_texts().items():
        for match in INCLUDE.finditer(text):
            options = dict(
                re.findall(r":([a-z-]+): ([^\n]*)", match["options"])
            )
            path = (ROOT / "book" / match["path"]).resolve()
            pyobject = options.get("pyobject", "")
            if not path.is_file() or (
                pyobject and pyobject not in _defined(path)
            ):
                continue  # test_every_literalinclude_points_at_... fails
            source = (
                _object_lines(path, pyobject)
                if pyobject
                else path.read_text(encoding="utf-8").splitlines()
            )
            source = _cut(source, options)
            if "lines" in options:
                source = _select(source, options["lines"])
            found.append((len(source), name, match["path"], pyobject))
    return sorted(found, reverse=True)


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
    fragment = textwrap.dedent("\n".join(_select(source, lines)))
    try:
        ast.parse(fragment)
    except SyntaxError as error:
        pytest.fail(f"{chapter}: {target} {pyobject} :lines: {lines}: {error}")


def test_every_printed_listing_has_at_most_60_lines():
    listings = printed_listings()
    assert len(listings) == len(_includes())
    too_long = [
        f"{chapter}: {target} {pyobject or '(whole file)'}: {n} lines"
        for n, chapter, target, pyobject in listings
        if n > MAX_PRINTED_LINES
    ]
    assert not too_long, "\n".join(too_long)


def _package_modules() -> set[str]:
    """Every module and subpackage of course_pkg, dotted, without the
    package itself: "device", "nn", "nn.attention", ..."""
    found = set()
    for path in (ROOT / "course_pkg").rglob("*.py"):
        parts = path.relative_to(ROOT / "course_pkg").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found.add(".".join(parts))
    return found


def test_the_reference_page_documents_every_module():
    api = (ROOT / "book" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"automodule:: course_pkg\.([\w.]+)", api))
    assert documented == _package_modules()


if __name__ == "__main__":
    for n, chapter, target, pyobject in printed_listings():
        print(f"{n:4d}  {chapter:28s} {target.split('/')[-1]:22s} {pyobject}")


def printed_by_module() -> dict[str, dict[str, list[str]]]:
    """module -> chapter -> the objects it prints, in order of appearance."""
    table: dict[str, dict[str, list[str]]] = {}
    for name, text in _book_texts().items():
        for match in INCLUDE.finditer(text):
            pyobject = dict(
                re.findall(r":([a-z-]+): ([^\n]*)", match["options"])
            ).get("pyobject", "(whole file)")
            # kernels/flash_triton.py -> "kernels.flash_triton"
            module = ".".join(
                (ROOT / "book" / match["path"])
                .resolve()
                .relative_to(ROOT / "course_pkg")
                .with_suffix("")
                .parts
            )
            chapter = name.rsplit(".", 1)[0]
            objects = table.setdefault(module, {}).setdefault(chapter, [])
            if pyobject not in objects:
                objects.append(pyobject)
    return table


def _readme_module_rows() -> list[tuple[list[str], str]]:
    """(modules, "Printed in the book" cell) of each row of the README's
    module table."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    modules = _package_modules()
    rows = []
    for line in readme.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        names = re.findall(r"`([\w.]+)`", parts[0])
        if len(parts) == 3 and names and set(names) <= modules:
            rows.append((names, parts[2]))
    return rows


def printed_column(modules: list[str]) -> set[tuple[str, str]]:
    """What the README row of these modules must list: (chapter, object),
    the object written `module.Object` in a row of several modules or of a
    subpackage (`flash_triton.Object` in the row of `kernels`)."""
    return {
        (
            chapter,
            pyobject
            if printed == modules[0] and len(modules) == 1
            else f"{printed.removeprefix(row + '.')}.{pyobject}",
        )
        for row in modules
        for printed, chapters in printed_by_module().items()
        if printed == row or printed.startswith(row + ".")
        for chapter, objects in chapters.items()
        for pyobject in objects
    }


def test_the_readme_says_which_chapter_prints_which_object():
    # A change to a printed object is a change to the book: the module
    # table's last column lists, row by row, "chapter: `Object`, ...; ...".
    rows = _readme_module_rows()
    listed_modules = {m for modules, _ in rows for m in modules}
    unlisted = {
        m
        for m in printed_by_module()
        if m not in listed_modules and m.split(".")[0] not in listed_modules
    }
    assert not unlisted, (
        f"modules the book prints, not in the README: {unlisted}"
    )
    for modules, cell in rows:
        listed = {
            (chapter.strip(), shown)
            for chapter, names in re.findall(r"(\w+): ([^;]*)", cell)
            for shown in re.findall(r"`([\w.]+)`", names)
        }
        assert listed == printed_column(modules), (
            f"README row {', '.join(modules)}: lists {sorted(listed)}, the "
            f"book prints {sorted(printed_column(modules))}"
        )
