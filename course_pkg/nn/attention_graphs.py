"""Attention as message passing on a graph: the mask is the adjacency.

Chapter: "Beyond softmax attention". A layer of attention sends a message
(a value) along every edge j -> i that the mask allows, and each token
averages the messages it receives, weighted by the softmax of its scores.
Full attention is the complete graph, T^2 edges; a decoder's causal mask
keeps T (T + 1) / 2 of them. The sparse attentions of long-context models
keep O(T) edges instead: a band of neighbours (a sliding window, as in
Mistral and Longformer), a few global tokens linked to everything
(Longformer, BigBird), a few random edges (BigBird). What one layer cannot
reach, stacked layers can: token i hears from token j after as many layers
as the shortest path from j to i (:func:`receptive_field`; residual
connections keep each token's own message, a self-loop).

The builders return (T, T) bool masks, True where query i may attend to
key j (an edge j -> i); :func:`graph_attention` is the exact masked
softmax over any of them, the reference the other attentions of the
chapter are compared with.

Shape letters (see the package docstring): ``B`` batch, ``H`` heads, ``T``
sequence length (``num_tokens``), ``Q`` queries, ``K`` key-value pairs;
here also ``d`` the width of a query or key, ``d_v`` of a value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from course_pkg.checks import (
    check_axes,
    check_bool,
    check_device,
    check_generator,
    check_head_qkv,
    check_int,
    check_positive_int,
    check_same_device,
)
from course_pkg.nn.masks import _masked_softmax


def _offsets(num_tokens: int, device: torch.device | None) -> torch.Tensor:
    """(T, T) int64 i - j: how far key j lies before query i."""
    positions = torch.arange(num_tokens, device=device)
    return positions[:, None] - positions[None, :]


def full_graph(
    num_tokens: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Every token attends to every token: T^2 edges.

    Returns:
        (T, T) bool, all True.
    Raises:
        TypeError, ValueError: if num_tokens is not an int >= 1 or device
            is unknown.
    """
    device = _check_full_graph(num_tokens, device)
    return torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device)


def _check_full_graph(
    num_tokens: object, device: object
) -> torch.device | None:
    """num_tokens T an int >= 1; device None or a usable device, returned
    as a torch.device (or None). Also :func:`causal_graph`'s checks."""
    check_positive_int("num_tokens", num_tokens)
    return check_device("device", device)


def causal_graph(
    num_tokens: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Token i attends to tokens j <= i: T (T + 1) / 2 edges.

    Returns:
        (T, T) bool, lower triangular.
    Raises:
        TypeError, ValueError: as :func:`full_graph`.
    """
    device = _check_full_graph(num_tokens, device)
    return _offsets(num_tokens, device) >= 0


def window_graph(
    num_tokens: int,
    window: int,
    causal: bool = True,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """A band: token i attends to the tokens at most window - 1 positions
    away, itself included; causal (the mask of
    :func:`course_pkg.nn.sliding_window.sliding_window_mask`) only to
    earlier ones.

    Args:
        num_tokens: T. window: w >= 1, the positions a token sees on one
            side, itself included (causal: i - w < j <= i; otherwise
            abs(i - j) < w).
        causal: see above. device: where to build the mask.
    Returns:
        (T, T) bool. Causal, with T >= w: T w - w (w - 1) / 2 edges;
        otherwise T (2 w - 1) - w (w - 1).
    Raises:
        TypeError, ValueError: if a size is not an int >= 1, causal is not
            a bool or device is unknown.
    """
    device = _check_window_graph(num_tokens, window, causal, device)
    offsets = _offsets(num_tokens, device)
    if causal:
        return (offsets >= 0) & (offsets < window)
    return offsets.abs() < window


def _check_window_graph(
    num_tokens: object, window: object, causal: object, device: object
) -> torch.device | None:
    """num_tokens T and window w ints >= 1, causal a bool; device None or
    a usable device, returned as a torch.device (or None)."""
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("window", window)
    check_bool("causal", causal)
    return check_device("device", device)


def global_local_graph(
    num_tokens: int,
    window: int,
    global_tokens: Sequence[int],
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Longformer's and BigBird's pattern: a band abs(i - j) < window, plus
    global tokens that attend to every token and that every token attends
    to.

    Args:
        num_tokens: T. window: w >= 1, as in :func:`window_graph` (not
            causal).
        global_tokens: the positions of the global tokens, each in [0, T)
            (e.g. [0] for a [CLS] token); may be empty.
        device: where to build the mask.
    Returns:
        (T, T) bool.
    Raises:
        TypeError, ValueError: if a size is not an int >= 1, a global
            position is not an int in [0, T), or device is unknown.
    """
    device = _check_global_local_graph(
        num_tokens, window, global_tokens, device
    )
    is_global = torch.zeros(num_tokens, dtype=torch.bool, device=device)
    is_global[list(global_tokens)] = True
    band = _offsets(num_tokens, device).abs() < window
    return band | is_global[:, None] | is_global[None, :]


def _check_global_local_graph(
    num_tokens: object, window: object, global_tokens: object, device: object
) -> torch.device | None:
    """num_tokens T and window ints >= 1; global_tokens a list, tuple or
    range of int positions in [0, T); device None or a usable device,
    returned as a torch.device (or None)."""
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("window", window)
    if not isinstance(global_tokens, (list, tuple, range)):
        raise TypeError(
            "global_tokens must be a list of int positions, got "
            f"{type(global_tokens).__name__}"
        )
    for position in global_tokens:
        check_int("global_tokens", position)
        if not 0 <= position < num_tokens:
            raise ValueError(
                f"global_tokens must hold positions in [0, {num_tokens}), "
                f"got {position}"
            )
    return check_device("device", device)


def random_graph(
    num_tokens: int,
    num_random: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """BigBird's random edges: each token attends to num_random distinct
    tokens drawn uniformly: T num_random edges.

    Args:
        num_tokens: T. num_random: r, 1 <= r <= T.
        generator: the source of randomness (None: torch's global one);
            drawn on its device (the CPU without one), then moved.
        device: where to return the mask.
    Returns:
        (T, T) bool, r True in every row.
    Raises:
        TypeError, ValueError: if a size is not an int >= 1, r > T,
            generator is not a torch.Generator or device is unknown.
    """
    device = _check_random_graph(num_tokens, num_random, generator, device)
    source = "cpu" if generator is None else generator.device
    noise = torch.rand(
        num_tokens, num_tokens, generator=generator, device=source
    )
    chosen = noise.topk(num_random, dim=-1).indices  # (T, r), distinct
    graph = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)
    return graph.to(source).scatter(1, chosen, True).to(device)


def _check_random_graph(
    num_tokens: object, num_random: object, generator: object, device: object
) -> torch.device | None:
    """num_tokens T and num_random r ints >= 1 with r <= T; generator None
    or a torch.Generator; device None or a usable device, returned as a
    torch.device (or None)."""
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("num_random", num_random)
    if num_random > num_tokens:
        raise ValueError(
            f"num_random must be <= num_tokens={num_tokens}, got {num_random}"
        )
    check_generator(generator)
    return check_device("device", device)


def num_edges(mask: torch.Tensor) -> int:
    """The number of edges of a graph: its True entries.

    Args:
        mask: (Q, K) bool.
    Returns:
        An int.
    Raises:
        TypeError, ValueError: if mask is not a 2-D bool tensor.
    """
    _check_mask(mask)
    return int(mask.sum())


def receptive_field(mask: torch.Tensor, num_layers: int) -> torch.Tensor:
    """Which tokens reach which after num_layers stacked layers of
    attention on one graph, each token keeping its own message (the
    residual stream): the graph (I or A) composed num_layers times.

    Args:
        mask: (T, T) bool, A. num_layers: L >= 1.
    Returns:
        (T, T) bool: True where token j's message reaches token i.
    Raises:
        TypeError, ValueError: if mask is not a square bool tensor or
            num_layers not an int >= 1.
    """
    _check_receptive_field(mask, num_layers)
    one_layer = mask | torch.eye(
        mask.shape[0], dtype=torch.bool, device=mask.device
    )
    step = one_layer.to(torch.float32)
    reach = step
    for _ in range(num_layers - 1):
        reach = ((reach @ step) > 0).to(torch.float32)  # one more hop
    return reach > 0


def _check_receptive_field(mask: object, num_layers: object) -> None:
    """mask (T, T) bool; num_layers an int >= 1."""
    _check_mask(mask)
    if mask.shape[0] != mask.shape[1]:
        raise ValueError(
            f"mask must have shape (T, T), got {tuple(mask.shape)}"
        )
    check_positive_int("num_layers", num_layers)


def graph_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Scaled dot-product attention along the edges of a graph: the
    softmax of q_i . k_j / sqrt(d) over the j that mask allows, exact.

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        mask: (Q, K) bool, True where query i may attend to key j.
    Returns:
        (B, H, Q, d_v); a query with no edge gets zeros.
    Raises:
        TypeError, ValueError: on shapes that do not fit, integer tensors,
            a mask that is not bool, or tensors on another device.
    """
    _check_graph_attention(queries, keys, values, mask)
    width = queries.shape[-1]
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(width)
    return _masked_softmax(scores, mask) @ values


def _check_graph_attention(
    queries: object, keys: object, values: object, mask: object
) -> None:
    """queries (B, H, Q, d), keys (B, H, K, d), values (B, H, K, d_v) of one
    float dtype; mask (Q, K) bool on the queries' device."""
    check_head_qkv(queries, keys, values)
    num_queries, num_keys = queries.shape[2], keys.shape[2]
    check_axes("mask", mask, "QK", (num_queries, num_keys))
    _check_mask(mask)
    check_same_device(queries=queries, mask=mask)


def _check_mask(mask: object) -> None:
    """A 2-D bool tensor: TypeError, ValueError."""
    check_axes("mask", mask, "QK", (None, None))
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got dtype {mask.dtype}")
