"""nbval set-up for the chapters: applies to any ``pytest --nbval book/x.ipynb``.

stderr (warnings, progress bars) is not compared, through nbval's documented hook; see
``tests/nbval_sanitize.cfg`` for the rest.
"""

from __future__ import annotations

import pytest


def pytest_collectstart(collector: pytest.Collector) -> None:
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)
