"""Shared test set-up.

- ``device`` fixture: every module test runs on the CPU, on ``meta`` (which has no data, so any
  tensor wired to the CPU inside a module makes the test fail) and on CUDA when there is one.
- hypothesis: no per-example deadline for the property tests (a model's first call is slow, and
  a shared machine slows any call), set once here as the ``course`` profile.
- nbval's set-up for the chapters is in ``book/conftest.py``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings

settings.register_profile("course", deadline=None)
settings.load_profile("course")

# The browser check of the built book runs on its own, after the build (`make browser`).
collect_ignore = ["browser"]

DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)
