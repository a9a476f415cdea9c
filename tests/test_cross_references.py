"""Cross-references between chapters name the chapter ({doc} links), never its position.

"The next chapter" went wrong in eleven places when chapters moved (issue 29): a position is only
right for one chapter order, a {doc} link is checked by the book build (-n) and by the test below.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "book").glob("*.ipynb")) + sorted(
    (ROOT / "book").glob("*.md")
)
RELATIVE = re.compile(r"\b(next|previous)\s+chapters?\b", re.IGNORECASE)
DOC = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")


def page_text(path: pathlib.Path) -> str:
    """Every cell's source (markdown and code) of a notebook, or a page's text."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n".join("".join(cell["source"]) for cell in cells)
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_chapter_is_named_by_its_position(path):
    found = [m.group(0) for m in RELATIVE.finditer(page_text(path))]
    assert not found, (
        f"{path.name}: name the chapter with {{doc}}, not {found}"
    )


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_doc_link_has_a_page(path):
    for target in DOC.findall(page_text(path)):
        page = (path.parent / target).resolve()
        assert any(page.with_suffix(s).exists() for s in (".ipynb", ".md")), (
            path.name,
            target,
        )


def test_the_pattern_catches_what_it_must():
    """The check above can fail: the wording of issue 29 is caught, {doc} links are not."""
    assert RELATIVE.search("the subject of the next chapter.")
    assert RELATIVE.search(
        "the encoder of the previous\nchapter"
    )  # line break
    assert RELATIVE.search("The Previous Chapters")
    assert not RELATIVE.search("the subject of {doc}`bahdanau`.")
