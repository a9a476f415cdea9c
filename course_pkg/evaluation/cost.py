"""What a computation costs: sequential depth, arithmetic and time.

Chapters "Self-attention" (the cost of convolution, GRU and self-attention as
the sequence grows) and "The Transformer" (why it trains faster than an RNN);
the timing helpers also serve the timing tables of other chapters and
``bench/``. Time depends on
the machine and on what else it is doing, so the chapter argues with two
numbers that do not: the *sequential depth* of a forward pass (the longest
chain of operations each of which needs the previous one's result, read off the
autograd graph) and its floating-point operations. Wall-clock time is measured
too, as an illustration.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from course_pkg.checks import check_callable, check_device, check_positive_int


def sequential_depth(output: torch.Tensor) -> int:
    """Length of the longest chain of operations that produced ``output``.

    Every node of the autograd graph is one operation; an operation can start
    only when all its inputs exist, so however many processors there are, a
    forward pass takes at least this many operations one after another.

    Args:
        output: any tensor with a ``grad_fn`` (computed with autograd on).
    Returns:
        The number of operations on the longest path from a leaf to output.
    Raises:
        TypeError: if output is not a tensor.
        ValueError: if output was not computed with autograd.
    """
    _check_sequential_depth(output)
    # Iterative post-order walk: recurrent graphs are thousands of nodes deep.
    depth: dict[object, int] = {}
    stack = [(output.grad_fn, False)]
    while stack:
        node, children_done = stack.pop()
        if node in depth:
            continue
        children = [c for c, _ in node.next_functions if c is not None]
        if children_done:
            depth[node] = 1 + max((depth[c] for c in children), default=0)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if c not in depth)
    return depth[output.grad_fn]


def _check_sequential_depth(output: object) -> None:
    """output a tensor with a grad_fn (computed with autograd on)."""
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"output must be a tensor, got {type(output)}")
    if output.grad_fn is None:
        raise ValueError("output has no grad_fn: compute it with autograd on")


def count_flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of the matrix products that ``fn()`` runs.

    Uses PyTorch's ``FlopCounterMode``, which counts matrix multiplications
    and convolutions (the bulk of a network's arithmetic), forward and
    backward, by their shapes: the same count on every machine. A multiply
    and an add count as two operations; biases, softmax and other
    elementwise work are not counted.

    Args:
        fn: a callable with no arguments; it is run once.
    Returns:
        The number of floating-point operations, an int.
    Raises:
        TypeError: if fn is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def call_seconds(
    fn: Callable[[], object],
    repeats: int = 3,
    device: torch.device | str | None = None,
    *,
    warmup: int = 1,
) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn()``, after
    ``warmup`` untimed calls.

    Args:
        fn: a callable with no arguments. repeats: how many timed calls.
        device: when it is a CUDA device, wait for it before and after each
            call, so that a call's time is its own.
        warmup: untimed calls first, >= 0.
    Returns:
        A list of ``repeats`` durations in seconds.
    Raises:
        TypeError: if repeats or warmup is not an int.
        ValueError: if repeats < 1 or warmup < 0.
    """
    device = _check_call_seconds(fn, repeats, device, warmup)
    cuda = device is not None and torch.device(device).type == "cuda"
    for _ in range(warmup):
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


def _check_call_seconds(
    fn: object, repeats: object, device: object, warmup: object
) -> torch.device | None:
    """fn callable; repeats an int >= 1; device None or a device of this
    machine; warmup an int >= 0. Returns device as a torch.device or None."""
    check_callable("fn", fn)
    check_positive_int("repeats", repeats)
    device = check_device("device", device)
    if isinstance(warmup, bool) or not isinstance(warmup, int):
        raise TypeError(f"warmup must be an int, got {type(warmup).__name__}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    return device


def fastest_seconds(
    fn: Callable[[], object],
    repeats: int = 3,
    device: torch.device | str | None = None,
) -> float:
    """The fastest of ``repeats`` timed calls of ``fn()``, after a warm-up
    (see :func:`call_seconds`).

    The minimum is the run least disturbed by other work on the machine; it
    still varies from machine to machine, so use it as an illustration only.
    """
    return min(call_seconds(fn, repeats, device))


def median_seconds(
    fn: Callable[[], object],
    repeats: int = 5,
    device: torch.device | str | None = None,
    *,
    warmup: int = 1,
) -> float:
    """The median of :func:`call_seconds` (the middle call for an odd
    ``repeats``): an illustration, like :func:`fastest_seconds`."""
    return statistics.median(call_seconds(fn, repeats, device, warmup=warmup))
