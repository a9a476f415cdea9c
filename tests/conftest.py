"""Shared test set-up.

- ``device`` fixture: every module test runs on the CPU, on ``meta`` (which has no data, so any
  tensor wired to the CPU inside a module makes the test fail) and on CUDA when there is one.
- nbval: stderr (warnings, tqdm bars) is not compared; see ``nbval_sanitize.cfg`` for the rest.
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


try:  # nbval is a test-only dependency; tests/ must still import without it.
    from nbval.plugin import IPyNbCell
except ImportError:  # pragma: no cover
    IPyNbCell = None

if IPyNbCell is not None:
    _compare_outputs = IPyNbCell.compare_outputs

    def _compare_without_stderr(self, test, ref, skip_compare=None):
        def keep(outputs):
            return [o for o in outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]

        return _compare_outputs(self, keep(test), keep(ref), skip_compare)

    # nbval has no switch to ignore stderr; warnings and progress bars must not fail a notebook.
    IPyNbCell.compare_outputs = _compare_without_stderr
