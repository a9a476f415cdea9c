"""The input checks that modules share: one rule for all of them.

Here are the shared primitives (a tensor, a dtype, a size, a length, a
device); checks that belong to one chapter live beside its code, as
private functions built from these.

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
import os
from collections.abc import Collection
from typing import Any

import numpy as np
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


# The integer dtypes an index tensor may have: those nn.Embedding and
# indexing accept (uint8 would be read as a mask, int16 is refused).
INDEX_DTYPES = (torch.int64, torch.int32)


def check_integer_dtype(
    name: str, tensor: torch.Tensor, what: str = "integers"
) -> None:
    """Refuse a tensor whose dtype is not int64 or int32 (ids and lengths).

    Args:
        what: what the tensor holds, for the message.

    Raises:
        TypeError: if tensor holds floats, complex numbers, booleans or
            integers of another width (uint8, int8, int16).
    """
    if tensor.dtype not in INDEX_DTYPES:
        raise TypeError(
            f"{name} must hold {what} (dtype torch.int64 or torch.int32), "
            f"got dtype {tensor.dtype}"
        )


def check_float_dtype(name: str, tensor: torch.Tensor) -> None:
    """Refuse a tensor whose dtype is not a floating-point type.

    Raises:
        TypeError: if tensor does not hold floats.
    """
    if not tensor.dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {tensor.dtype}"
        )


def check_float_dtype_arg(name: str, dtype: Any) -> None:
    """Refuse a dtype argument (the dtype a function will build its output
    in) that is not a floating-point ``torch.dtype``, with TypeError."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating-point torch.dtype (e.g. "
            f"torch.float32), got {dtype!r}"
        )


def check_float_tensor(name: str, tensor: Any, rank: int, shape: str) -> None:
    """Refuse anything but a floating-point tensor of the given rank (an
    integer tensor is refused, never cast): TypeError, ValueError."""
    check_tensor(name, tensor, rank, shape)
    check_float_dtype(name, tensor)


def check_same_device(**tensors: Any) -> None:
    """Refuse tensors (by argument name; None is skipped) that are not all on
    one device, with ValueError naming each and its device."""
    given = {n: t for n, t in tensors.items() if isinstance(t, torch.Tensor)}
    devices = {t.device for t in given.values()}
    if len(devices) > 1:
        listed = ", ".join(f"{n} on {t.device}" for n, t in given.items())
        raise ValueError(
            f"{', '.join(given)} must be on one device, got {listed}"
        )


def check_on_device(name: str, tensor: torch.Tensor, device: Any) -> None:
    """Refuse a tensor that is not on ``device`` (e.g. a module's parameters'
    device) with ValueError."""
    if device is not None and tensor.device != torch.device(device):
        raise ValueError(
            f"{name} must be on {torch.device(device)} (where the model is), "
            f"got a tensor on {tensor.device}"
        )


def check_module_input(
    name: str, tensor: torch.Tensor, module: Any, *, dtype: bool = True
) -> None:
    """Refuse a tensor on another device than ``module``'s first parameter or
    buffer (ValueError), or, when ``dtype``, a floating-point tensor of
    another dtype than its floating-point parameters outside autocast
    (TypeError): torch's own errors would not name the argument."""
    first = next(iter(module.parameters()), None)
    if first is None:
        first = next(iter(module.buffers()), None)
    if first is None:
        return
    check_on_device(name, tensor, first.device)
    if (
        dtype
        and tensor.dtype.is_floating_point
        and first.dtype.is_floating_point
        and tensor.dtype != first.dtype
        and not torch.is_autocast_enabled(tensor.device.type)
    ):
        raise TypeError(
            f"{name} must have the model's dtype {first.dtype}, "
            f"got {tensor.dtype}"
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
    name: str, X: Any, vocab_size: Any, *, min_steps: int = 0
) -> None:
    """Refuse anything but (B, T) integer token ids in ``[0, V)``.

    Args:
        name: the argument's name. X: the ids. vocab_size: V, or the
            ``nn.Embedding`` that will read the ids (V is its size, and X
            must be on its device), or None to leave the range unchecked
            (the model checks it).
        min_steps: the fewest time steps T accepted (a GRU needs 1).
    Raises:
        TypeError: if X is not a tensor of dtype int64 or int32 (uint8,
            int16 and floats are refused).
        ValueError: if X is not 2-D, has fewer than ``min_steps`` steps, is
            not on the embedding's device, or (on the CPU) holds an id
            outside ``[0, V)``.
    """
    check_tensor(name, X, 2, "(B, T)")
    check_integer_dtype(name, X, "integer token ids")
    if isinstance(vocab_size, torch.nn.Embedding):
        check_on_device(name, X, vocab_size.weight.device)
        vocab_size = vocab_size.num_embeddings
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
    like: tuple[str, torch.Tensor] | None = None,
    values: bool = True,
) -> None:
    """Refuse lengths that cannot describe B sequences of at most max_len.

    Args:
        name: the argument's name. valid_lens: None (nothing to check),
            (B,) or, when ``num_queries`` is given, (B, Q) integer lengths.
        batch_size: B. max_len: the longest length allowed (K for
            attention), or None for no upper bound.
        num_queries: Q, to also accept one length per query.
        like: (name, tensor) of the tensor the lengths describe: lengths
            off the CPU must be on its device (lengths on the CPU serve any
            device, they are moved), or None for any device.
        values: whether to read the lengths (on the CPU) for the range
            check; False checks the type, dtype, shape and device only.
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
    if like is not None and valid_lens.device.type != "cpu":
        check_same_device(**{like[0]: like[1], name: valid_lens})
    if tuple(valid_lens.shape) not in shapes:
        raise ValueError(
            f"{name} must have shape {expected}, got {tuple(valid_lens.shape)}"
        )
    if values:
        check_range(name, valid_lens, 0, max_len)


def check_causal(causal: Any, num_queries: int, num_keys: int) -> None:
    """Refuse a causal flag that is not a bool (TypeError), or True with
    fewer keys than queries (ValueError): the Q queries are the last Q of the
    K positions, so a causal mask needs K >= Q."""
    check_bool("causal", causal)
    if causal and num_keys < num_queries:
        raise ValueError(
            f"causal attention needs K >= Q, got Q={num_queries}, K={num_keys}"
        )


def check_masks(
    valid_lens: Any, causal: Any, num_keys: int, like: tuple[str, torch.Tensor]
) -> None:
    """Refuse attention's two masks where they do not fit the queries and K.

    Args:
        valid_lens: None, (B,) or (B, Q) lengths in [0, K], checked by
            :func:`check_valid_lens`. causal: a bool; True needs K >= Q (the
            queries are the last Q of the K positions). num_keys: K.
        like: (name, tensor) of a checked tensor shaped (B, ..., Q, last):
            queries (B, Q, d) or (B, H, Q, d), or scores (B, Q, K).
    Raises:
        TypeError: if causal is not a bool, or valid_lens not integer.
        ValueError: if causal with K < Q, or the lengths do not fit.
    """
    batch_size, num_queries = like[1].shape[0], like[1].shape[-2]
    check_causal(causal, num_queries, num_keys)
    check_valid_lens(
        "valid_lens",
        valid_lens,
        batch_size,
        num_keys,
        num_queries=num_queries,
        like=like,
    )


def check_qkv(queries: Any, keys: Any, values: Any) -> None:
    """Refuse queries (B, Q, D_q), keys (B, K, D_k), values (B, K, d_v) that
    do not fit each other.

    Raises:
        TypeError: if one is not a tensor, is not floating point, or (outside
            autocast) their dtypes differ.
        ValueError: if one is not 3-D, or B or K differ.
    """
    check_tensor("queries", queries, 3, "(B, Q, D_q)")
    check_tensor("keys", keys, 3, "(B, K, D_k)")
    check_tensor("values", values, 3, "(B, K, d_v)")
    check_same_float_dtype(queries=queries, keys=keys, values=values)
    if not queries.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            "queries, keys and values must share the batch size B, got "
            f"{queries.shape[0]}, {keys.shape[0]}, {values.shape[0]}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            "keys (B, K, D_k) and values (B, K, d_v) must have the same K, "
            f"got {keys.shape[1]} and {values.shape[1]}"
        )


def check_head_qkv(queries: Any, keys: Any, values: Any) -> None:
    """Refuse queries (B, H, Q, d), keys (B, H, K, d), values (B, H, K, d_v)
    that do not fit each other: the inputs of the attentions that keep the
    heads as their own axis.

    Raises:
        TypeError: if one is not a tensor, is not floating point, or (outside
            autocast) their dtypes differ.
        ValueError: if one is not 4-D, B, H, d or K differ, or they are on
            different devices.
    """
    check_axes("queries", queries, "BHQd", (None,) * 4)
    batch, heads, _, width = queries.shape
    check_axes("keys", keys, "BHKd", (batch, heads, None, width))
    num_keys = keys.shape[2]
    check_axes("values", values, "BHKd", (batch, heads, num_keys, None))
    check_same_float_dtype(queries=queries, keys=keys, values=values)


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
    check_masks(valid_lens, causal, keys.shape[1], like=("queries", queries))


def check_shape(
    name: str, tensor: Any, shape: tuple[int, ...], letters: str
) -> None:
    """Refuse anything but a tensor of exactly ``shape`` (``letters``, e.g.
    ``"(L, B, D)"``, for the message): TypeError, ValueError."""
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


def check_axes(
    name: str, tensor: object, letters: str, sizes: tuple[int | None, ...]
) -> None:
    """TypeError if not a tensor, ValueError unless its shape is sizes
    (None: any size); letters name the axes, e.g. "BHQd"."""
    named = (a if n is None else f"{a}={n}" for a, n in zip(letters, sizes))
    shape = f"({', '.join(named)})"
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}, "
            f"got {type(tensor).__name__}"
        )
    if tensor.dim() != len(sizes) or any(
        n is not None and actual != n for actual, n in zip(tensor.shape, sizes)
    ):
        raise ValueError(
            f"{name} must have shape {shape}, got {tuple(tensor.shape)}"
        )


def check_images(
    name: str, images: Any, channels: int, size: int, module: Any
) -> None:
    """Refuse anything but a float (B, C, H, W) batch of ``size`` x ``size``
    images with ``channels`` channels, on ``module``'s device and of its
    dtype: TypeError, ValueError."""
    check_float_tensor(name, images, 4, "(B, C, H, W)")
    check_axes(name, images, "BCHW", (None, channels, size, size))
    check_module_input(name, images, module)


def check_positive_int(name: str, value: Any) -> None:
    """Refuse anything but a Python int >= 1 (a size or a count; see
    :func:`check_size`).

    Raises:
        TypeError: if value is not a Python int (bool excluded).
        ValueError: if it is < 1.
    """
    check_size(name, value, 1)


def check_bool(name: str, value: Any) -> None:
    """Refuse anything but True or False (a flag) with TypeError."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def check_int(name: str, value: Any) -> None:
    """Refuse anything but an int (bool excluded) with TypeError. For ids,
    indices and ranks, which often come out of arrays and are only read:
    NumPy integers pass. Sizes use :func:`check_size` (or
    :func:`check_positive_int`, :func:`check_nonnegative_int`), seeds
    :func:`check_seed`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def check_nonnegative_int(name: str, value: Any) -> None:
    """Refuse anything but a Python int >= 0 (a count or an offset that may
    be 0; see :func:`check_size`).

    Raises:
        TypeError: if value is not a Python int (bool excluded).
        ValueError: if it is < 0.
    """
    check_size(name, value, 0)


def check_seed(name: str, value: Any) -> None:
    """Refuse a seed that is not a Python int (bool and NumPy integers
    refused: ``random.Random`` refuses them) with TypeError."""
    _check_python_int(name, value)


def check_size(name: str, value: Any, least: int) -> None:
    """The one rule for sizes, counts and offsets: a Python int >= least.

    Not a bool, and not a NumPy integer: a size is kept in modules and configs
    and used in shapes, where a NumPy integer fails later and far from the
    call. Seeds follow the same rule (:func:`check_seed`); ids and indices,
    which are only read, may be NumPy integers (:func:`check_int`).

    Raises:
        TypeError: if value is not a Python int.
        ValueError: if it is < least.
    """
    _check_python_int(name, value)
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")


def _check_python_int(name: str, value: Any) -> None:
    """The type rule of sizes and seeds: an int, not a bool, not a NumPy
    integer (TypeError)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def check_same_float_dtype(**tensors: torch.Tensor) -> None:
    """Refuse tensors (by argument name) that are not floating point or,
    outside autocast, do not share one dtype (torch's own error would not
    name them), with TypeError; under autocast mixed float dtypes are
    normal. Tensors on different devices: ValueError."""
    for name, tensor in tensors.items():
        check_float_dtype(name, tensor)
    check_same_device(**tensors)
    dtypes = {name: tensor.dtype for name, tensor in tensors.items()}
    first = next(iter(tensors.values()))
    if len(set(dtypes.values())) > 1 and not torch.is_autocast_enabled(
        first.device.type
    ):
        listed = ", ".join(f"{n} {d}" for n, d in dtypes.items())
        raise TypeError(
            f"{', '.join(tensors)} must share one dtype, got {listed}"
        )


def check_sizes(**sizes: Any) -> None:
    """Refuse sizes (vocabulary, widths, layers, heads; by argument name)
    that are not ints >= 1: TypeError for a non-int, ValueError for < 1."""
    for name, value in sizes.items():
        check_positive_int(name, value)


def check_stack_args(*sizes: Any, dropout: Any) -> None:
    """A Transformer stack's vocab_size, num_hiddens, ffn_num_hiddens,
    num_heads, num_blks, max_len (ints >= 1, in order) and dropout."""
    names = ("vocab_size", "num_hiddens", "ffn_num_hiddens", "num_heads")
    check_sizes(**dict(zip((*names, "num_blks", "max_len"), sizes)))
    check_probability("dropout", dropout)


def check_generator(generator: Any) -> None:
    """Refuse anything but a ``torch.Generator`` or None (TypeError)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            "generator must be a torch.Generator or None, "
            f"got {type(generator).__name__}"
        )


def check_sentences(name: str, sentences: Any) -> None:
    """Refuse anything but a list/tuple of str (a str is not N sentences)
    with TypeError."""
    if not isinstance(sentences, (list, tuple)) or not all(
        isinstance(sentence, str) for sentence in sentences
    ):
        raise TypeError(
            f"{name} must be a list of str (one sentence each), got "
            f"{type(sentences).__name__}"
        )


def check_ids(**ids: Any) -> None:
    """Refuse token ids (bos, eos, pad) that are not ints >= 0.

    Raises:
        TypeError: if one is not an int. ValueError: if one is negative.
    """
    for name, value in ids.items():
        check_int(name, value)
        if value < 0:
            raise ValueError(f"{name} must be an id >= 0, got {value}")


def _check_number(name: str, value: Any, ok: Any, expected: str) -> None:
    """Refuse a non-number (bool excluded) with TypeError, a number for
    which ``ok(value)`` is false with ValueError; both say ``expected``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be {expected}, got {type(value).__name__}"
        )
    if not ok(value):
        raise ValueError(f"{name} must be {expected}, got {value}")


def check_finite_number(name: str, value: Any) -> None:
    """Refuse anything but a finite int or float (NaN and inf are refused).

    Raises:
        TypeError: if value is not a number. ValueError: if not finite.
    """
    _check_number(name, value, math.isfinite, "a finite number")


def check_positive_number(name: str, value: Any) -> None:
    """Refuse anything but a finite int or float > 0 (a rate, a timeout).

    Raises:
        TypeError: if value is not a number. ValueError: if not finite > 0.
    """
    _check_number(
        name, value, lambda v: 0 < v < math.inf, "a positive finite number"
    )


def check_rates(name: str, rates: Any) -> None:
    """Refuse anything but a non-empty list or tuple of finite numbers > 0
    (one learning rate per epoch).

    Raises:
        TypeError: if rates is not a list or tuple, or holds a non-number.
        ValueError: if it is empty, or a rate is not finite > 0.
    """
    if not isinstance(rates, (list, tuple)):
        raise TypeError(
            f"{name} must be a list of learning rates, one per epoch, got "
            f"{type(rates).__name__}"
        )
    if len(rates) == 0:
        raise ValueError(f"{name} must hold one learning rate per epoch")
    for rate in rates:
        check_positive_number(name, rate)


def check_nonnegative_number(name: str, value: Any) -> None:
    """Refuse anything but a finite int or float >= 0.

    Raises:
        TypeError: if value is not a number. ValueError: if not finite >= 0.
    """
    _check_number(
        name, value, lambda v: 0 <= v < math.inf, "a finite number >= 0"
    )


def check_probability(name: str, value: Any) -> None:
    """Refuse anything but a number in [0, 1) (a dropout probability).

    Raises:
        TypeError: if value is not a number. ValueError: if outside [0, 1).
    """
    _check_number(name, value, lambda v: 0 <= v < 1, "a number in [0, 1)")


def check_path(name: str, path: Any) -> None:
    """Refuse anything but a ``str`` or ``os.PathLike`` path (an int file
    descriptor, bytes or None included) with TypeError."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a str or os.PathLike path, got {type(path).__name__}"
        )


def device_available(device: torch.device) -> bool:
    """Whether this machine has ``device`` (cpu and meta always exist)."""
    if device.type in ("cpu", "meta"):
        return True
    if device.type == "mps":
        return torch.backends.mps.is_available()
    backend = getattr(torch, device.type, None)  # torch.cuda, torch.xpu, ...
    is_available = getattr(backend, "is_available", None)
    if is_available is None or not is_available():
        return False
    if device.index is None:
        return True
    count = getattr(backend, "device_count", lambda: 1)()
    return device.index < count


def check_device(name: str, device: Any) -> torch.device | None:
    """Refuse a device that is not a ``torch.device`` or str, or that this
    machine does not have; return it as a ``torch.device`` (None stays None).

    Raises:
        TypeError: if device is neither None, a str nor a ``torch.device``.
        ValueError: if torch does not know it, or it is not available here
            (e.g. ``"cuda"`` without a GPU, ``"cuda:3"`` with one GPU).
    """
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"{name} must be a torch.device or str, got {type(device).__name__}"
        )
    try:
        parsed = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"{name}={device!r} is not a torch device") from err
    if not device_available(parsed):
        raise ValueError(f"{name}={device!r} is not available on this machine")
    return parsed


def check_callable(name: str, value: Any) -> None:
    """Refuse anything that cannot be called (a function is expected) with
    TypeError."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")


def check_features(
    name: str,
    X: Any,
    trailing: int | tuple[int, ...],
    module: Any = None,
    *,
    dtype: bool = True,
    shape: str | None = None,
) -> None:
    """Refuse anything but a floating-point tensor whose last dimensions are
    ``trailing`` (a width D, or a layer norm's shape), on the device and of
    the dtype of ``module``'s parameters when given (the dtype only if
    ``dtype``): TypeError for a non-tensor, an integer tensor (never cast) or
    another float dtype; ValueError for another shape or device."""
    trailing = (trailing,) if isinstance(trailing, int) else tuple(trailing)
    if shape is None:  # the letters of the message, e.g. "(B, T, 16)"
        shape = "(..., " + ", ".join(map(str, trailing)) + ")"
    if not isinstance(X, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}, "
            f"got {type(X).__name__}"
        )
    check_float_dtype(name, X)
    if X.dim() < len(trailing) or tuple(X.shape[-len(trailing) :]) != trailing:
        raise ValueError(
            f"{name} must have shape {shape}, got {tuple(X.shape)}"
        )
    if module is not None:
        check_module_input(name, X, module, dtype=dtype)


def check_logits(name: str, scores: Any, rank: int, shape: str) -> None:
    """Refuse anything but floating-point scores of the given rank over at
    least one class (V >= 1 in the last dimension): TypeError, ValueError."""
    check_float_tensor(name, scores, rank, shape)
    if scores.shape[-1] < 1:
        raise ValueError(
            f"{name} must have shape {shape} with at least one class in the "
            f"last dimension, got {tuple(scores.shape)}"
        )


def check_block_sizes(
    num_hiddens: Any,
    ffn_num_hiddens: Any,
    num_heads: Any,
    dropout: Any,
    num_kv_heads: Any = None,
    head_width: Any = None,
) -> None:
    """A block's or a layer's widths, checked before any layer is built (so
    a refused call draws no random weights): ints >= 1 (ffn_num_hiddens may
    be None for a block without FFN), num_hiddens divisible by num_heads
    unless a head_width is given, num_heads by num_kv_heads (when given),
    dropout in [0, 1).

    Raises:
        TypeError: naming a size that is not an int, or dropout.
        ValueError: naming a size < 1 or one that does not divide.
    """
    check_sizes(num_hiddens=num_hiddens, num_heads=num_heads)
    if ffn_num_hiddens is not None:
        check_sizes(ffn_num_hiddens=ffn_num_hiddens)
    check_probability("dropout", dropout)
    if head_width is not None:
        check_sizes(head_width=head_width)
    else:
        _check_divisible("num_hiddens", num_hiddens, "num_heads", num_heads)
    if num_kv_heads is not None:
        check_sizes(num_kv_heads=num_kv_heads)
        _check_divisible("num_heads", num_heads, "num_kv_heads", num_kv_heads)


def _check_divisible(
    name: str, value: int, divisor_name: str, divisor: int
) -> None:
    """ValueError unless value is divisible by divisor (an int >= 1)."""
    if value % divisor:
        raise ValueError(
            f"{name}={value} must be divisible by {divisor_name}={divisor}"
        )


def check_source_target(
    model: Any,
    enc_X: Any,
    dec_X: Any,
    enc_valid_lens: Any = None,
    *,
    names: tuple[str, str, str] = ("enc_X", "dec_X", "enc_valid_lens"),
) -> None:
    """An encoder-decoder's inputs, by their own ``names``: enc_X (B, T) and
    dec_X (B, Q) integer ids on the model's device, enc_valid_lens None or
    (B,) in [0, T] on that device too (TypeError, ValueError)."""
    src, tgt, lens = names
    for name, X in ((src, enc_X), (tgt, dec_X)):
        check_token_ids(name, X, None)
        check_module_input(name, X, model)
    if enc_X.shape[0] != dec_X.shape[0]:
        raise ValueError(
            f"{src} (B, T) and {tgt} (B, Q) must have the same B, got "
            f"{tuple(enc_X.shape)} and {tuple(dec_X.shape)}"
        )
    check_valid_lens(lens, enc_valid_lens, *enc_X.shape, like=(src, enc_X))


def check_floats(name: str, X: Any) -> None:
    """Refuse anything but a floating-point tensor of any shape (an integer
    tensor is refused, never cast): TypeError."""
    check_tensor_type(name, X)
    check_float_dtype(name, X)


def check_cpu_or_on(device: Any, **tensors: Any) -> None:
    """Refuse tensors (by argument name) that are on neither the CPU (data
    kept there is moved batch by batch) nor ``device`` (the model's), with
    ValueError: a tensor elsewhere cannot be copied to the model."""
    device = torch.device(device)
    for name, tensor in tensors.items():
        if tensor.device.type != "cpu" and tensor.device != device:
            raise ValueError(
                f"{name} must be on the CPU or on the model's device "
                f"{device}, got a tensor on {tensor.device}"
            )


def check_bert_batch(
    model: Any, tokens: Any, segments: Any, valid_lens: Any, **labels: Any
) -> None:
    """A data set for a BERT model: tokens and segments (N, T) integer ids,
    valid_lens (N,) in [0, T], labels (by name) (N,) integer classes, each on
    the CPU or on the model's device (TypeError, ValueError)."""
    check_token_ids("tokens", tokens, None)
    check_token_ids("segments", segments, None)
    if segments.shape != tokens.shape:
        raise ValueError(
            f"segments must have the shape of tokens {tuple(tokens.shape)}, "
            f"got {tuple(segments.shape)}"
        )
    check_valid_lens("valid_lens", valid_lens, *tokens.shape)
    for name, label in labels.items():
        check_tensor(name, label, 1, "(N,)")
        check_integer_dtype(name, label, "class ids")
    device = next(iter(model.parameters())).device
    check_cpu_or_on(
        device,
        tokens=tokens,
        segments=segments,
        valid_lens=valid_lens,
        **labels,
    )


def check_str(name: str, value: Any) -> None:
    """Refuse anything but a str (a sentence, a label, a choice) with
    TypeError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")


def check_choice(name: str, value: Any, choices: Collection[str]) -> None:
    """Refuse anything but one of the str ``choices`` (a named option).

    Raises:
        TypeError: if value is not a str.
        ValueError: if it is not among choices.
    """
    check_str(name, value)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_grad_clip(grad_clip: Any) -> None:
    """Refuse a grad_clip that is neither None nor a finite number > 0."""
    if grad_clip is not None:
        check_positive_number("grad_clip", grad_clip)
