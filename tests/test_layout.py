"""The package reads as a map, and its imports go one way.

The top level of ``course_pkg`` holds the few modules every other one uses;
everything else lives in a subpackage named for what it is. The library
(every subpackage but ``experiments``, and the top-level modules) never
imports ``experiments``; inside the library, the layers (``nn``) import no
model, and nothing imports upwards from ``nn`` to ``models``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "course_pkg"
SHARED = {"__init__", "device", "checks", "files", "plotting"}
SUBPACKAGES = {
    "nn",
    "models",
    "kernels",
    "data",
    "training",
    "inference",
    "evaluation",
    "experiments",
}


def _imports(path: Path) -> set[str]:
    """The course_pkg modules a file imports (anywhere in it, lazy imports
    included), dotted without the package: "nn.attention", "checks"."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "course_pkg":
                names = [f"course_pkg.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {
            n.removeprefix("course_pkg.")
            for n in names
            if n.startswith("course_pkg.")
        }
    return found


def _modules() -> dict[str, Path]:
    return {
        ".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
        for p in PACKAGE.rglob("*.py")
    }


def test_the_top_level_holds_only_shared_modules_and_subpackages():
    files = {p.stem for p in PACKAGE.glob("*.py")}
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert files == SHARED
    assert folders == SUBPACKAGES


@pytest.mark.parametrize("name", sorted(_modules()))
def test_the_library_never_imports_the_experiments(name):
    if name.startswith("experiments"):
        return
    upward = {
        m for m in _imports(_modules()[name]) if m.startswith("experiments")
    }
    assert not upward, f"course_pkg.{name} imports {sorted(upward)}"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_layers_and_shared_modules_import_no_model(name):
    # nn holds the pieces models are built from, and the shared modules sit
    # below everything: neither may reach up into models or training.
    if not (name.startswith("nn.") or name.split(".")[0] in SHARED):
        return
    upward = {
        m
        for m in _imports(_modules()[name])
        if m.split(".")[0]
        in {"models", "training", "inference", "experiments"}
    }
    assert not upward, f"course_pkg.{name} imports {sorted(upward)}"


def test_the_direction_test_sees_an_upward_import(tmp_path):
    # The check is not vacuous: a file importing an experiment is caught.
    path = tmp_path / "bad.py"
    path.write_text(
        "from course_pkg.experiments.toy_tasks import CopyBack\n"
        "def f():\n    import course_pkg.models.gpt\n"
    )
    assert _imports(path) == {"experiments.toy_tasks", "models.gpt"}
