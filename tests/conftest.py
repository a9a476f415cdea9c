"""Shared test set-up.

- ``device`` fixture: every module test runs on the CPU, on ``meta`` (which has no data, so any
  tensor wired to the CPU inside a module makes the test fail) and on CUDA when there is one.
- nbval's set-up for the chapters is in ``book/conftest.py``.
"""

from __future__ import annotations

import pytest
import torch

# The browser check of the built book runs on its own, after the build (`make browser`).
collect_ignore = ["browser"]

DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)
