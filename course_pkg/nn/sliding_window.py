"""Sliding-window attention and its rolling key/value cache.

Chapter: "Attention at inference time". With a window of w positions, the
query at position i sees the keys at positions i - w + 1, ..., i and no
others (a band of the causal mask, as in Mistral 7B). A decoder then never
needs more than the last w keys and values: a rolling cache of w slots
writes position i into slot i mod w, over the position that just left the
window. Its memory is fixed by w, however long the generation. Stacked
layers still pass information further back, w positions per layer.

The order of the slots does not matter to a single query: the softmax
weights a set of keys, whatever order they come in (a key carries its
position through the rotary embedding it got before it was cached).

Shape letters (see the package docstring): ``B`` batch, ``H`` query heads,
``G`` key/value heads (dividing H), ``Q`` queries, ``K`` keys, ``d`` width of
a query or key, ``d_v`` of a value.
"""

from __future__ import annotations

import math

import torch

from course_pkg.checks import (
    check_axes,
    check_device,
    check_positive_int,
    check_same_float_dtype,
)
from course_pkg.nn.masks import query_key_distance


def sliding_window_mask(
    num_queries: int,
    num_keys: int,
    window: int | None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Where each query may look: causal, and at most window positions back.

    The queries are the last Q of the K positions: query i sits at position
    p = K - Q + i and sees keys j with p - window < j <= p (window None: all
    j <= p, the plain causal mask).

    Returns:
        (Q, K) bool tensor, True where the query may attend.
    Raises:
        TypeError, ValueError: if a size is not an int >= 1, window <= 0,
            or K < Q.
    """
    if window is not None:
        check_positive_int("window", window)
    distance = query_key_distance(num_queries, num_keys, device)  # (Q, K)
    visible = distance >= 0
    if window is not None:
        visible = visible & (distance < window)
    return visible


def sliding_window_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    window: int | None,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) on the band) v, query heads grouped over G
    key/value heads (head h reads key/value head h // (H / G)).

    Args:
        queries: (B, H, Q, d), the last Q of the K positions.
        keys: (B, G, K, d). values: (B, G, K, d_v).
        window: the positions each query sees (itself included), or None
            for plain causal attention.
    Returns:
        (B, H, Q, d_v).
    Raises:
        TypeError, ValueError: on shapes that do not fit, H not a multiple
            of G, K < Q, or window <= 0.
    """
    _check_sliding_window_attention(queries, keys, values)
    batch, heads, num_queries, width = queries.shape
    groups, num_keys = keys.shape[1:3]
    visible = sliding_window_mask(
        num_queries, num_keys, window, queries.device
    )
    grouped = queries.view(batch, groups, heads // groups, num_queries, width)
    scores = grouped @ keys[:, :, None].transpose(-1, -2) / math.sqrt(width)
    weights = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)
    output = weights @ values[:, :, None]  # (B, G, H / G, Q, d_v)
    return output.reshape(batch, heads, num_queries, values.shape[-1])


def _check_sliding_window_attention(
    queries: object, keys: object, values: object
) -> None:
    """queries (B, H, Q, d), keys (B, G, K, d), values (B, G, K, d_v) of one
    float dtype and device, H a multiple of G."""
    check_axes("queries", queries, "BHQd", (None,) * 4)
    batch, heads, num_queries, width = queries.shape
    check_axes("keys", keys, "BGKd", (batch, None, None, width))
    groups, num_keys = keys.shape[1:3]
    check_axes("values", values, "BGKd", (batch, groups, num_keys, None))
    check_same_float_dtype(queries=queries, keys=keys, values=values)
    if heads % groups:
        raise ValueError(
            f"queries' heads ({heads}) must be a multiple of keys' ({groups})"
        )


class RollingKVCache:
    """The last ``window`` keys and values of B sequences, in w fixed slots.

    Args:
        batch_size: B. num_kv_heads: G. head_width: d. value_width: d_v
            (default d).
        window: w, the number of positions kept.
        dtype, device: of the two buffers (B, G, w, d), allocated once.
    Attributes:
        length: positions appended so far (may exceed w).
    Raises:
        TypeError, ValueError: if a size is not an int >= 1 (window <= 0
            included).
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_width: int,
        window: int,
        *,
        value_width: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        value_width, device = _check_rolling_kv_cache_args(
            batch_size, num_kv_heads, head_width, window, value_width, device
        )
        shape = (batch_size, num_kv_heads, window)
        self.keys = torch.zeros(*shape, head_width, dtype=dtype, device=device)
        self.values = torch.zeros(
            *shape, value_width, dtype=dtype, device=device
        )
        self.window, self.length = window, 0

    def _check_queries(self, queries: torch.Tensor) -> None:
        """Refuse queries that are not (B, H, 1, d), H a multiple of G, of
        the cache's dtype and device: TypeError, ValueError."""
        batch, groups, _, width = self.keys.shape
        check_axes("queries", queries, "BHQd", (batch, None, 1, width))
        if queries.shape[1] % groups:
            raise ValueError(
                f"queries' heads ({queries.shape[1]}) must be a multiple of "
                f"the cache's G={groups}"
            )
        check_same_float_dtype(queries=queries, cache=self.keys)

    @property
    def nbytes(self) -> int:
        """Bytes held by the two buffers: fixed by the window."""
        return sum(
            t.numel() * t.element_size() for t in (self.keys, self.values)
        )

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Write one position's keys (B, G, 1, d) and values (B, G, 1, d_v)
        into slot length mod w.

        Raises:
            TypeError, ValueError: if keys or values do not have the shape,
                float dtype and device of the cache (nothing is written).
        """
        _check_rolling_kv_cache_append(self, keys, values)
        slot = self.length % self.window
        self.keys[:, :, slot] = keys[:, :, 0]
        self.values[:, :, slot] = values[:, :, 0]
        self.length += 1

    def step(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        """Append one position and attend from its queries (B, H, 1, d) over
        the at most w positions kept (itself included): (B, H, 1, d_v).
        Bad queries (TypeError, ValueError) are refused before appending."""
        self._check_queries(queries)
        self.append(keys, values)
        kept = min(self.length, self.window)
        return sliding_window_attention(
            queries, self.keys[:, :, :kept], self.values[:, :, :kept], None
        )


def _check_rolling_kv_cache_args(
    batch_size: object,
    num_kv_heads: object,
    head_width: object,
    window: object,
    value_width: object,
    device: object,
) -> tuple[int, torch.device | None]:
    """The sizes ints >= 1 (value_width None: head_width); device None or a
    usable device. Returns value_width and the device as a torch.device."""
    value_width = head_width if value_width is None else value_width
    for name, size in (
        ("batch_size", batch_size),
        ("num_kv_heads", num_kv_heads),
        ("head_width", head_width),
        ("value_width", value_width),
        ("window", window),
    ):
        check_positive_int(name, size)
    device = check_device("device", device)
    return value_width, device


def _check_rolling_kv_cache_append(
    cache: RollingKVCache, keys: object, values: object
) -> None:
    """keys (B, G, 1, d) and values (B, G, 1, d_v) of the cache's sizes,
    float dtype and device."""
    # every check before the first write, widths included: a refused
    # call leaves the cache as it was (check_same_float_dtype also
    # checks the device)
    check_axes(
        "keys", keys, "BG1d", (*cache.keys.shape[:2], 1, cache.keys.shape[3])
    )
    check_axes(
        "values",
        values,
        "BG1d",
        (*cache.values.shape[:2], 1, cache.values.shape[3]),
    )
    check_same_float_dtype(keys=keys, values=values, cache=cache.keys)
