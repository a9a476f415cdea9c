"""Whether the tests run as CI runs them, and what a missing input means then.

CI (``.ci/run``, which sets ``CI=true`` unless the environment already sets CI) must not pass by
skipping: there an input that should be present (the ``../shared`` data, the browser) is a
failure. On a reader's machine it is a skip that names what is missing.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """True when the environment variable CI is "true" (any case) or "1"."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1"}


def missing(reason: str) -> NoReturn:
    """Fail under CI, skip elsewhere, with ``reason`` (what is missing)."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this may not be skipped)")
    pytest.skip(reason)
