"""Timing a call: the helpers behind the chapters' (ignored-output) timing
tables and the scripts in ``bench/``.

Timings illustrate; nothing asserts them (they depend on the machine and its
load). Each helper warms up once, then times ``repeats`` calls, waiting for
the GPU when there is one so that a call's time is its own.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from course_pkg.checks import check_positive_int


def call_seconds(
    fn: Callable[[], Any],
    repeats: int = 5,
    device: torch.device | str | None = None,
) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn``, after one
    warm-up call.

    Args:
        fn: a callable with no arguments. repeats: how many timed calls.
        device: when it is a CUDA device, wait for it before and after each
            call.
    Returns:
        A list of ``repeats`` durations in seconds.
    Raises:
        TypeError, ValueError: if repeats is not an int >= 1.
    """
    check_positive_int("repeats", repeats)
    cuda = device is not None and torch.device(device).type == "cuda"
    fn()
    seconds = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def fastest_seconds(
    fn: Callable[[], Any],
    repeats: int = 5,
    device: torch.device | str | None = None,
) -> float:
    """The fastest of :func:`call_seconds`: the least disturbed call."""
    return min(call_seconds(fn, repeats, device))


def median_seconds(
    fn: Callable[[], Any],
    repeats: int = 5,
    device: torch.device | str | None = None,
) -> float:
    """The median of :func:`call_seconds` (the middle one for odd
    ``repeats``)."""
    return statistics.median(call_seconds(fn, repeats, device))
