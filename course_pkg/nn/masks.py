"""Masks and the masked softmax: which keys a query may see.

Chapter: "Attention scoring functions" (padding masks, the masked softmax);
"The Transformer" adds the causal mask; "Attention at inference time"
measures sliding windows and ALiBi's distances with
:func:`query_key_distance`. Every attention module in the
package masks through :func:`masked_softmax` (explicit path) or
:func:`attention_mask` (fused path, :mod:`course_pkg.nn.scoring`).

Shape letters (see the package docstring): ``B`` batch, ``Q`` queries, ``K``
key–value pairs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_pkg.checks import (
    check_device,
    check_float_dtype,
    check_integer_dtype,
    check_masks,
    check_nonnegative_int,
    check_positive_int,
    check_range,
    check_same_device,
    check_tensor,
    check_tensor_type,
)


def sequence_mask(valid_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean mask that is True where a position holds a real token.

    Args:
        valid_lens: (B,) or (B, Q) integer lengths, each in [0, max_len].
        max_len: K, the number of key positions.
    Returns:
        (B, 1, K) or (B, Q, K) bool tensor on valid_lens' device.
    Raises:
        TypeError: if valid_lens is not an integer tensor, or max_len not an
            int.
        ValueError: if valid_lens is not 1-D or 2-D, max_len < 0, or (on the
            CPU; see :mod:`course_pkg.checks`) a length is outside
            [0, max_len].
    """
    _check_sequence_mask(valid_lens, max_len)
    return _length_mask(valid_lens, max_len)


def _check_sequence_mask(valid_lens: object, max_len: object) -> None:
    """valid_lens a (B,) or (B, Q) integer tensor of lengths in [0, max_len]
    (range checked on the CPU only); max_len an int >= 0."""
    if not isinstance(valid_lens, torch.Tensor):
        raise TypeError(
            "valid_lens must be a torch.Tensor of shape (B,) or (B, Q), "
            f"got {type(valid_lens).__name__}"
        )
    if valid_lens.dim() not in (1, 2):
        raise ValueError(
            "valid_lens must have shape (B,) or (B, Q), "
            f"got {tuple(valid_lens.shape)}"
        )
    check_integer_dtype("valid_lens", valid_lens)
    check_nonnegative_int("max_len", max_len)
    check_range("valid_lens", valid_lens, 0, max_len)


def _length_mask(valid_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """:func:`sequence_mask` without its checks, for callers that checked
    (a length outside [0, max_len] acts as if clamped)."""
    positions = torch.arange(max_len, device=valid_lens.device)
    lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens
    return positions < lens[..., None]  # (B, 1, K) or (B, Q, K)


def causal_mask(
    num_queries: int, num_keys: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean mask that lets query i see keys 0..i + (K - Q), i.e. never a
    later position.

    When Q < K (decoding one step with a cache of past keys) the queries are
    the *last* Q positions.

    Args:
        num_queries: Q.
        num_keys: K, with K >= Q.
        device: where to build the mask.
    Returns:
        (1, Q, K) bool tensor.
    Raises:
        TypeError: if num_queries or num_keys is not an int.
        ValueError: if Q < 0 or K < Q.
    """
    device = _check_causal_mask(num_queries, num_keys, device)
    return _causal_mask(num_queries, num_keys, device)


def _check_causal_mask(
    num_queries: object, num_keys: object, device: object
) -> torch.device | None:
    """num_keys K an int, num_queries an int in [0, K]; device None or a
    usable device. Returns the device as a torch.device (or None)."""
    check_nonnegative_int("num_keys", num_keys)
    _check_causal_sizes(num_queries, num_keys)
    return check_device("device", device)


def _check_causal_sizes(num_queries: object, num_keys: int) -> None:
    """Refuse a query count that is not an int in [0, K] (a causal mask
    needs K >= Q); num_keys is an int already."""
    check_nonnegative_int("num_queries", num_queries)
    if num_keys < num_queries:
        raise ValueError(
            "num_keys must be >= num_queries (a causal mask needs K >= Q), "
            f"got Q={num_queries}, K={num_keys}"
        )


def _causal_mask(
    num_queries: int, num_keys: int, device: torch.device | None
) -> torch.Tensor:
    """:func:`causal_mask` without its checks: (1, Q, K) bool."""
    query_pos = torch.arange(num_queries, device=device)[:, None] + (
        num_keys - num_queries
    )
    key_pos = torch.arange(num_keys, device=device)[None, :]
    return (key_pos <= query_pos)[None]


def query_key_distance(
    num_queries: int, num_keys: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """How far back each key lies from each query, the queries being the
    last Q of the K positions (query i at position K - Q + i).

    Args:
        num_queries: Q >= 1. num_keys: K >= Q. device: where to build it.
    Returns:
        (Q, K) int64 tensor, K - Q + i - j: 0 at the query's own position,
        positive for earlier keys, negative for later ones.
    Raises:
        TypeError, ValueError: if a size is not an int >= 1 or K < Q.
    """
    device = _check_query_key_distance(num_queries, num_keys, device)
    query_positions = torch.arange(
        num_keys - num_queries, num_keys, device=device
    )
    key_positions = torch.arange(num_keys, device=device)
    return query_positions[:, None] - key_positions[None, :]


def _check_query_key_distance(
    num_queries: object, num_keys: object, device: object
) -> torch.device | None:
    """num_queries Q and num_keys K ints >= 1 with K >= Q; device None or a
    usable device. Returns the device as a torch.device (or None)."""
    check_positive_int("num_queries", num_queries)
    check_positive_int("num_keys", num_keys)
    if num_keys < num_queries:
        raise ValueError(
            f"num_keys must be >= num_queries, got K={num_keys}, "
            f"Q={num_queries}"
        )
    return check_device("device", device)


def attention_mask(
    valid_lens: torch.Tensor | None,
    num_queries: int,
    num_keys: int,
    causal: bool,
    device: torch.device,
) -> torch.Tensor | None:
    """Combine a padding mask and a causal mask (True = may attend).

    Args:
        valid_lens: None, (B,) or (B, Q) numbers of valid keys.
        num_queries: Q. num_keys: K. causal: also hide later keys.
        device: the scores' device (lengths kept on the CPU are moved).
    Returns:
        None when nothing is masked, else a bool tensor broadcastable to
        (B, Q, K).
    Raises:
        TypeError, ValueError: as :func:`sequence_mask` (except the range
            of the lengths, which its callers check) and :func:`causal_mask`.
    """
    device = _check_attention_mask(
        valid_lens, num_queries, num_keys, causal, device
    )
    return _attention_mask(valid_lens, num_queries, num_keys, causal, device)


def _check_attention_mask(
    valid_lens: object,
    num_queries: object,
    num_keys: object,
    causal: object,
    device: object,
) -> torch.device | None:
    """num_keys K an int >= 0; device None or usable; valid_lens None or a
    (B,) or (B, Q) integer tensor; with causal, num_queries an int in [0, K].
    Returns the device as a torch.device (or None)."""
    check_nonnegative_int("num_keys", num_keys)
    device = check_device("device", device)
    if valid_lens is not None:
        check_tensor_type("valid_lens", valid_lens)
        if valid_lens.dim() not in (1, 2):
            raise ValueError(
                "valid_lens must have shape (B,) or (B, Q), "
                f"got {tuple(valid_lens.shape)}"
            )
        check_integer_dtype("valid_lens", valid_lens)
    if causal:
        _check_causal_sizes(num_queries, num_keys)
    return device


def _attention_mask(
    valid_lens: torch.Tensor | None,
    num_queries: int,
    num_keys: int,
    causal: bool,
    device: torch.device | None,
) -> torch.Tensor | None:
    """:func:`attention_mask` without its checks, for the layers that
    checked their inputs at their door."""
    if valid_lens is not None and valid_lens.device != device:
        # lengths are often kept on the CPU next to GPU scores
        valid_lens = valid_lens.to(device)
    mask = None if valid_lens is None else _length_mask(valid_lens, num_keys)
    if causal:
        no_future = _causal_mask(num_queries, num_keys, device)
        mask = no_future if mask is None else mask & no_future
    return mask


def masked_softmax(
    X: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Softmax over the last axis that gives weight 0 to masked key positions.

    A row with no valid position returns all zeros (never NaN), so a padded
    query contributes nothing.

    Args:
        X: (B, Q, K) scores.
        valid_lens: None, (B,) one length per example, or (B, Q) one per query.
        causal: also hide keys that come after each query (see
            :func:`causal_mask`).
    Returns:
        (B, Q, K) weights; each row sums to 1 over its valid positions, or is
        all 0.
    Raises:
        TypeError: if X or valid_lens is not a tensor, X is not floating
            point, or valid_lens is not integer.
        ValueError: if X is not 3-D or valid_lens does not fit it (see
            :mod:`course_pkg.checks`).
    """
    _check_masked_softmax(X, valid_lens, causal)
    batch_size, num_queries, num_keys = X.shape
    mask = _attention_mask(valid_lens, num_queries, num_keys, causal, X.device)
    return _masked_softmax(X, mask)


def _check_masked_softmax(
    X: object, valid_lens: object, causal: object
) -> None:
    """X (B, Q, K) float; valid_lens None, (B,) or (B, Q) ints fitting X;
    causal a bool (see :func:`course_pkg.checks.check_masks`)."""
    check_tensor("X", X, 3, "(B, Q, K)")
    check_float_dtype("X", X)
    check_masks(valid_lens, causal, X.shape[-1], like=("X", X))


def _masked_softmax(
    X: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """The softmax of scores X (B, Q, K) over the keys ``mask`` allows (None:
    all; else bool, broadcastable to X, True = may attend); a row with nothing
    allowed gives zeros."""
    if mask is None:
        return F.softmax(X, dim=-1)
    # The most negative finite number, not -inf: a fully masked row then stays
    # finite, and the multiplication below turns it into zeros.
    X = X.masked_fill(~mask, torch.finfo(X.dtype).min)
    return F.softmax(X, dim=-1) * mask


def hide_unseen(X: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the non-finite entries of keys or values that no query may see.

    A weight of 0 times a NaN (or inf) value is NaN, so a NaN in padding
    would otherwise reach every row; an infinite key in padding makes the
    fused kernel's masked score ``inf - inf``. Finite entries are returned
    bit for bit, so results on finite inputs do not change. A key that some
    query sees is real data and is left as it is.

    Args:
        X: (B, K, d) or (B, H, K, d) keys or values.
        mask: None, or (B, Q, K) / (1, Q, K) bool, True where a query may
            attend (as from :func:`attention_mask`).
    Returns:
        X with the non-finite entries at keys no query sees replaced by 0.
    Raises:
        TypeError: if X is not a float tensor or mask not None or a bool
            tensor.
        ValueError: if X is not 3-D or 4-D, or mask is on another device.
    """
    _check_hide_unseen(X, mask)
    return _hide_unseen(X, mask)


def _check_hide_unseen(X: object, mask: object) -> None:
    """X (B, K, d) or (B, H, K, d) float; mask None or a bool tensor on X's
    device."""
    check_tensor_type("X", X)
    check_float_dtype("X", X)
    if X.dim() not in (3, 4):
        raise ValueError(
            f"X must have shape (B, K, d) or (B, H, K, d), got {tuple(X.shape)}"
        )
    if mask is not None:
        check_tensor_type("mask", mask)
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor, got {mask.dtype}")
        check_same_device(X=X, mask=mask)


def _hide_unseen(X: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`hide_unseen` without its checks."""
    # On the CPU, reading values is cheap: finite X is returned as it is,
    # which also keeps the autograd graph (and its depth) unchanged.
    if mask is None or (X.device.type == "cpu" and bool(X.isfinite().all())):
        return X
    seen = mask.any(dim=-2)  # (B, K) or (1, K)
    if X.dim() == 4:
        seen = seen[:, None]  # broadcast over the heads
    return torch.where(seen[..., None] | torch.isfinite(X), X, 0.0)
