"""What a computation costs: sequential depth, arithmetic and time.

Chapter "The Transformer" (why it trains faster than an RNN). Time depends on
the machine and on what else it is doing, so the chapter argues with two
numbers that do not: the *sequential depth* of a forward pass (the longest
chain of operations each of which needs the previous one's result, read off the
autograd graph) and its floating-point operations. Wall-clock time is measured
too, as an illustration.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode


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
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"output must be a tensor, got {type(output)}")
    if output.grad_fn is None:
        raise ValueError("output has no grad_fn: compute it with autograd on")
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


def count_flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of the matrix products that ``fn()`` runs.

    Uses PyTorch's ``FlopCounterMode``, which counts matrix multiplications
    and convolutions (the bulk of a network's arithmetic), forward and
    backward, by their shapes: the same count on every machine.
    """
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def fastest_seconds(fn: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of ``repeats`` timed calls of ``fn()``, after a warm-up.

    The minimum is the run least disturbed by other work on the machine; it
    still varies from machine to machine, so use it as an illustration only.

    Raises:
        ValueError: if repeats < 1.
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
