"""Input checks shared by every module: one place, one rule.

The rule: a wrong *type* (not a tensor, a float where integers are needed)
raises ``TypeError``; a wrong *value or shape* raises ``ValueError``. Both
name the argument and what was expected, and are raised before any
computation or state change.

Values are read only from CPU tensors. On a GPU, reading a value forces a
device-to-host synchronisation on every call, and a ``meta`` tensor has no
values at all; there only types and shapes are checked. An out-of-range
length off the CPU then behaves as if clamped to ``[0, K]`` (a negative
length masks every key, a too-long one masks none), so results stay finite.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def check_tensor_type(name: str, tensor: Any) -> None:
    """Refuse anything but a tensor.

    Raises:
        TypeError: if tensor is not a ``torch.Tensor``.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(tensor).__name__}"
        )


def check_tensor(name: str, tensor: Any, rank: int, shape: str) -> None:
    """Refuse anything but a tensor of the given rank.

    Args:
        name: the argument's name, for the message.
        tensor: the value to check.
        rank: the number of dimensions expected.
        shape: the expected shape in letters, e.g. ``"(B, Q, K)"``.
    Raises:
        TypeError: if tensor is not a ``torch.Tensor``.
        ValueError: if it does not have ``rank`` dimensions.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}, "
            f"got {type(tensor).__name__}"
        )
    if tensor.dim() != rank:
        raise ValueError(
            f"{name} must have shape {shape}, got {tuple(tensor.shape)}"
        )


def check_integer_dtype(
    name: str, tensor: torch.Tensor, what: str = "integers"
) -> None:
    """Refuse a tensor whose dtype is not an integer type (bool excluded).

    Args:
        what: what the tensor holds, for the message.

    Raises:
        TypeError: if tensor holds floats, complex numbers or booleans.
    """
    dtype = tensor.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"{name} must hold {what}, got dtype {dtype}")


def check_float_dtype(name: str, tensor: torch.Tensor) -> None:
    """Refuse a tensor whose dtype is not a floating-point type.

    Raises:
        TypeError: if tensor does not hold floats.
    """
    if not tensor.dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {tensor.dtype}"
        )


def check_last_dim(
    name: str, tensor: torch.Tensor, expected: int, shape: str
) -> None:
    """Refuse a tensor whose last dimension is not ``expected``.

    Raises:
        ValueError: if ``tensor.shape[-1] != expected`` (or it has no axis).
    """
    if tensor.dim() < 1 or tensor.shape[-1] != expected:
        raise ValueError(
            f"{name} must have shape {shape} with last dim {expected}, "
            f"got {tuple(tensor.shape)}"
        )


def check_range(
    name: str, tensor: torch.Tensor, low: int, high: int | None
) -> None:
    """On the CPU, refuse integer values outside ``[low, high]``.

    Args:
        high: the largest value allowed, or None for no upper bound.
    Raises:
        ValueError: if a value is out of range (CPU tensors only).
    """
    if tensor.device.type != "cpu" or tensor.numel() == 0:
        return
    smallest, largest = int(tensor.min()), int(tensor.max())
    if smallest < low:
        raise ValueError(f"{name} must be >= {low}, got {smallest}")
    if high is not None and largest > high:
        raise ValueError(f"{name} must be <= {high}, got {largest}")


def check_token_ids(
    name: str, X: Any, vocab_size: int | None, *, min_steps: int = 0
) -> None:
    """Refuse anything but (B, T) integer token ids in ``[0, V)``.

    Args:
        name: the argument's name. X: the ids. vocab_size: V, or None to
            leave the range unchecked (the model checks it).
        min_steps: the fewest time steps T accepted (a GRU needs 1).
    Raises:
        TypeError: if X is not a tensor of an integer dtype.
        ValueError: if X is not 2-D, has fewer than ``min_steps`` steps, or
            (on the CPU) holds an id outside ``[0, V)``.
    """
    check_tensor(name, X, 2, "(B, T)")
    check_integer_dtype(name, X, "integer token ids")
    if X.shape[1] < min_steps:
        raise ValueError(
            f"{name} must have at least {min_steps} time step(s), "
            f"got shape {tuple(X.shape)}"
        )
    if vocab_size is None or X.device.type != "cpu" or X.numel() == 0:
        return
    low, high = int(X.min()), int(X.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} must hold ids in [0, {vocab_size}), "
            f"got values in [{low}, {high}]"
        )


def check_valid_lens(
    name: str,
    valid_lens: Any,
    batch_size: int,
    max_len: int | None,
    *,
    num_queries: int | None = None,
) -> None:
    """Refuse lengths that cannot describe B sequences of at most max_len.

    Args:
        name: the argument's name. valid_lens: None (nothing to check),
            (B,) or, when ``num_queries`` is given, (B, Q) integer lengths.
        batch_size: B. max_len: the longest length allowed (K for
            attention), or None for no upper bound.
        num_queries: Q, to also accept one length per query.
    Raises:
        TypeError: if valid_lens is not a tensor of an integer dtype.
        ValueError: if its shape does not fit, or (on the CPU) a length is
            negative or above max_len.
    """
    if valid_lens is None:
        return
    shapes = [(batch_size,)]
    expected = f"(B,)=({batch_size},)"
    if num_queries is not None:
        shapes.append((batch_size, num_queries))
        expected += f" or (B, Q)=({batch_size}, {num_queries})"
    if not isinstance(valid_lens, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {expected}, "
            f"got {type(valid_lens).__name__}"
        )
    check_integer_dtype(name, valid_lens)
    if tuple(valid_lens.shape) not in shapes:
        raise ValueError(
            f"{name} must have shape {expected}, got {tuple(valid_lens.shape)}"
        )
    check_range(name, valid_lens, 0, max_len)


def check_qkv(queries: Any, keys: Any, values: Any) -> None:
    """Refuse queries (B, Q, d_q), keys (B, K, d_k), values (B, K, d_v) that
    do not fit each other.

    Raises:
        TypeError: if one is not a tensor.
        ValueError: if one is not 3-D, or B or K differ.
    """
    check_tensor("queries", queries, 3, "(B, Q, d_q)")
    check_tensor("keys", keys, 3, "(B, K, d_k)")
    check_tensor("values", values, 3, "(B, K, d_v)")
    if not queries.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            "queries, keys and values must share the batch size B, got "
            f"{queries.shape[0]}, {keys.shape[0]}, {values.shape[0]}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            "keys (B, K, d_k) and values (B, K, d_v) must have the same K, "
            f"got {keys.shape[1]} and {values.shape[1]}"
        )


def check_attention_inputs(
    queries: Any,
    keys: Any,
    values: Any,
    valid_lens: Any,
    *,
    query_size: int | None = None,
    key_size: int | None = None,
    value_size: int | None = None,
    causal: bool = False,
) -> None:
    """Everything an attention layer checks before it computes anything.

    Args:
        queries: (B, Q, query_size). keys: (B, K, key_size).
        values: (B, K, value_size). valid_lens: None, (B,) or (B, Q), each
            in [0, K].
        query_size, key_size, value_size: the widths the layer expects (None:
            any width).
        causal: whether the layer will hide later keys, which needs K >= Q
            (the queries are the last Q of the K positions).
    Raises:
        TypeError: if an argument is not a tensor, or valid_lens is not
            integer.
        ValueError: if a shape does not fit the others or the layer, a
            length is outside [0, K] (on the CPU), or causal with K < Q.
    """
    check_qkv(queries, keys, values)
    for name, tensor, size, shape in (
        ("queries", queries, query_size, "(B, Q, query_size)"),
        ("keys", keys, key_size, "(B, K, key_size)"),
        ("values", values, value_size, "(B, K, value_size)"),
    ):
        if size is not None:
            check_last_dim(name, tensor, size, shape)
    batch_size, num_queries = queries.shape[:2]
    num_keys = keys.shape[1]
    check_valid_lens(
        "valid_lens", valid_lens, batch_size, num_keys, num_queries=num_queries
    )
    if causal and num_keys < num_queries:
        raise ValueError(
            f"causal attention needs K >= Q, got Q={num_queries}, K={num_keys}"
        )


def check_shape(
    name: str, tensor: Any, shape: tuple[int, ...], letters: str
) -> None:
    """Refuse anything but a tensor of exactly ``shape``.

    Args:
        letters: the shape in letters, e.g. ``"(L, B, D)"``.
    Raises:
        TypeError: if tensor is not a tensor.
        ValueError: if its shape differs.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {letters}, "
            f"got {type(tensor).__name__}"
        )
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(
            f"{name} must have shape {letters}={tuple(shape)}, "
            f"got {tuple(tensor.shape)}"
        )


def check_positive_number(name: str, value: Any) -> None:
    """Refuse anything but a finite int or float > 0 (bool excluded).

    Raises:
        TypeError: if value is not an int or float.
        ValueError: if it is not finite and > 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a positive number, got {type(value).__name__}"
        )
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"{name} must be a positive finite number, got {value}"
        )


def check_positive_int(name: str, value: Any) -> None:
    """Refuse anything but an int >= 1 (bool excluded).

    Raises:
        TypeError: if value is not an int.
        ValueError: if it is < 1.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
