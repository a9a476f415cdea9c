"""Which code a measurement came from: a fingerprint of the code that ran.

A chapter's prose quotes ranges over seeds that a sweep measured (``make
claims``), and its asserts use bounds from the same sweep
(:mod:`course_pkg.experiments.claims`). Those numbers are only worth quoting
while the code that made them is the code of the book. So every run of a
sweep, and the book's own run of the notebook, records a *fingerprint*: a
digest of the notebook's code cells (or the script's source), of every
module of ``course_pkg`` the run had imported, and of the PyTorch version.

The digest is taken over each file's syntax tree with docstrings removed
(:func:`code_digest`), so a comment, a docstring or a reformatting does not
change it, while any change to what the code does, however small, does. A
test (``tests/test_claims_provenance.py``) recomputes the fingerprint of every
record from today's files and says which sweep to re-run.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import torch

PACKAGE = "course_pkg"
# The machinery that reads and stamps records: it computes no result, so a
# change to it leaves every measurement as it was and is not fingerprinted.
NOT_MEASURED = frozenset(
    f"{PACKAGE}.experiments.{name}"
    for name in ("claims", "provenance", "bench_records")
)


def code_digest(source: str) -> str:
    """SHA-256 of what a piece of Python code does, not how it is written.

    Args:
        source: Python source text.
    Returns:
        64 hex digits over the syntax tree without docstrings: the same for
        two sources that differ only in comments, docstrings or layout.
    Raises:
        SyntaxError: if ``source`` is not Python.
    """
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def notebook_code(path: str | Path) -> str:
    """The code cells of a notebook, in order, as one Python source."""
    cells = json.loads(Path(path).read_text())["cells"]
    return "\n\n".join(
        "".join(cell["source"])
        for cell in cells
        if cell["cell_type"] == "code"
    )


def loaded_modules() -> list[str]:
    """The modules of ``course_pkg`` this process has imported, sorted,
    without the record machinery (``NOT_MEASURED``)."""
    return sorted(
        name
        for name in sys.modules
        if (name == PACKAGE or name.startswith(PACKAGE + "."))
        and name not in NOT_MEASURED
    )


def module_source(name: str) -> str | None:
    """The source of module ``name`` as it is on disk now (None if gone)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text()


def fingerprint(source: str, modules: list[str]) -> str:
    """The fingerprint of a run: its own code, the package code it used, torch.

    Args:
        source: the run's own code (a notebook's code cells, a script).
        modules: the ``course_pkg`` modules the run imported
            (:func:`loaded_modules` at its end).
    Returns:
        64 hex digits; ``"missing: <module>"`` if a module no longer exists.
    """
    parts = [f"torch {torch.__version__}", code_digest(source)]
    for name in modules:
        text = module_source(name)
        if text is None:
            return f"missing: {name}"
        parts.append(f"{name} {code_digest(text)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def jit_digest(module: object) -> str:
    """SHA-256 of what a module's Triton kernels do: the syntax tree of
    every ``@triton.jit`` function in it, docstrings and comments left out.

    It names the kernels of a measurement made elsewhere (a GPU's timings,
    the compiled tiles' shared memory), whatever the Triton version and
    wherever the module lives, so that a record can be held against the
    kernels of today.
    """
    import inspect

    import triton

    parts = sorted(
        f"{name} {code_digest(inspect.getsource(value.fn))}"
        for name, value in vars(module).items()
        # compiled (JITFunction) or, under TRITON_INTERPRET=1, interpreted
        if isinstance(value, triton.runtime.jit.KernelInterface)
    )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def machine() -> str:
    """The CPU, PyTorch's CPU path and version: where a run's digits come from."""
    import platform

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{name}, {torch.backends.cpu.get_cpu_capability()}, "
        f"torch {torch.__version__}"
    )
