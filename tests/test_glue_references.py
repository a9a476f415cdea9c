"""Every glued name the prose uses is glued by the stored run of its notebook.

The book builds from the stored outputs with execution off: a ``{glue:text}`name``` whose name
no stored output carries is left out of the page with a warning only, and the sentence reads
with a hole. This test reads each chapter's markdown for glue roles and directives and its
stored outputs for the names glue recorded (``metadata.scrapbook.name``).
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from course_pkg.experiments.claims import glued_values

ROOT = pathlib.Path(__file__).resolve().parent.parent
# {glue}`name`, {glue:text}`name:.2f`, ```{glue:figure} name, :::{glue:md} name
USES = re.compile(
    r"\{glue(?::\w+)?\}`([^`:]+)(?::[^`]*)?`"
    r"|(?:```|:::)\{glue(?::\w+)?\}\s+(\S+)"
)


def used_names(cells: list[dict]) -> set[str]:
    return {
        next(g for g in m.groups() if g)
        for c in cells
        if c["cell_type"] == "markdown"
        for m in USES.finditer("".join(c["source"]))
    }


def glued_names(cells: list[dict]) -> set[str]:
    return set(glued_values(cells))


@pytest.mark.parametrize(
    "path", sorted((ROOT / "book").glob("*.ipynb")), ids=lambda p: p.stem
)
def test_every_glued_name_in_the_prose_is_in_the_stored_outputs(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    missing = sorted(used_names(cells) - glued_names(cells))
    assert not missing, (
        f"{path.name}: the prose uses glued names that no stored output "
        f"carries (execute the notebook, or glue them): {missing}"
    )


def test_the_patterns_find_roles_and_directives():
    prose = (
        "a {glue:text}`loss:.2f` and {glue}`n` here\n"
        "```{glue:figure} curve\n:name: fig\n```\n:::{glue:md} table\n:::\n"
    )
    cells = [{"cell_type": "markdown", "source": [prose]}]
    assert used_names(cells) == {"loss", "n", "curve", "table"}
    stored = {
        "metadata": {"scrapbook": {"name": "loss"}},
        "data": {"application/papermill.record/text/plain": "'0.25'"},
    }
    assert glued_names([{"cell_type": "code", "outputs": [stored]}]) == {
        "loss"
    }
