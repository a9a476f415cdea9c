"""Measuring the memory a computation allocates.

Chapter: "Attention at scale" (and ``bench/attention_memory.py``).

On CUDA the allocator keeps a peak counter (``torch.cuda.max_memory_allocated``).
The CPU has none, and process-level numbers do not help: the resident set
size rises and falls with the C library's own caching, not with one tensor,
and ``tracemalloc`` sees only Python's allocator, not torch's. What does see
every tensor is the reporting hook of torch's CPU allocator, which
``torch.profiler.profile(profile_memory=True)`` records: one ``[memory]``
event per allocation (+bytes) and per free (-bytes), with a timestamp. The
running sum of those events, in time order, is the number of bytes live at
each moment; its maximum is the peak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.profiler import ProfilerActivity, profile

from course_pkg.checks import check_device


class MemoryUse(NamedTuple):
    """What one call allocated, in bytes, above what was live before it.

    Two fields: ``peak``, the most bytes live at one moment during the call,
    and ``largest``, the largest single allocation (on CUDA, where single
    allocations are not listed, the peak again).
    """

    peak: int
    largest: int


def peak_memory(
    fn: Callable[[], object], device: torch.device | str = "cpu"
) -> MemoryUse:
    """Run fn() once and measure the memory it allocates on device.

    The result of fn is dropped inside the measurement, so a returned tensor
    counts in the peak but is not kept.

    Args:
        fn: a callable without arguments.
        device: "cpu" (torch.profiler's allocator events) or a CUDA device
            (the allocator's peak counter).
    Returns:
        A :class:`MemoryUse` of byte counts.
    Raises:
        TypeError: if fn is not callable.
        ValueError: on a device other than cpu or cuda.
    """
    device = _check_peak_memory(fn, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        del result
        peak = torch.cuda.max_memory_allocated(device) - base
        return MemoryUse(peak, peak)
    if device.type != "cpu":
        raise ValueError(f"device must be cpu or cuda, got {device}")
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        result = fn()
        del result
    events = sorted(  # stable: simultaneous events keep their order
        (
            (event.start_ns(), event.nbytes())
            for event in prof.profiler.kineto_results.events()
            if event.name() == "[memory]"
        ),
        key=lambda event: event[0],
    )
    live = peak = largest = 0
    for _, nbytes in events:
        live += nbytes
        peak, largest = max(peak, live), max(largest, nbytes)
    return MemoryUse(peak, largest)


def _check_peak_memory(fn: object, device: object) -> torch.device | None:
    """fn callable; device a device of this machine (cpu or cuda: the
    caller refuses others). Returns device as a torch.device."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    return check_device("device", device)
