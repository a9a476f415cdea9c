"""Shared test set-up.

- ``device`` fixture: every module test runs on the CPU, on ``meta`` (which has no data, so any
  tensor wired to the CPU inside a module makes the test fail) and on CUDA when there is one.
- hypothesis: no per-example deadline for the property tests (a model's first call is slow, and
  a shared machine slows any call), set once here as the ``course`` profile, on top of
  hypothesis' ``ci`` profile under CI (:func:`tests.ci.in_ci`) and its default profile elsewhere.
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

from tests.ci import in_ci

# Built on hypothesis' own profile for the place it runs: under CI its "ci" profile
# (derandomised, no example database, no too_slow health check), elsewhere its default.
settings.register_profile(
    "course",
    parent=settings.get_profile("ci" if in_ci() else "default"),
    deadline=None,
)
settings.load_profile("course")

# The browser check of the built book runs on its own, after the build (`make browser`).
collect_ignore = ["browser"]


def pytest_configure(config: pytest.Config) -> None:
    if "COURSE_CACHE_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="course-cache-")
        os.environ["COURSE_CACHE_DIR"] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)
