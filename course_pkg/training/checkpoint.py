"""Checkpoints that are verified before anything is loaded.

Used by :mod:`course_pkg.training.loop` (which re-exports both functions). A file is
the magic line ``course_pkg checkpoint v2``, the SHA-256 of the body as 64
lowercase hex digits and a newline, then the body written by ``torch.save``.
The header is parsed strictly, byte by byte. Loading reads the body with
``weights_only=True`` (a checkpoint cannot run code), refuses a file whose
header or digest differs (a flipped byte, a truncated copy), and checks the
whole saved state against the model and optimizer before it copies a single
value.

Extra values round-trip: numbers, strings, bytes, None, tensors, lists,
tuples and dicts of them, and also NumPy scalars, ``pathlib`` paths and the
package's own settings dataclasses, which are stored as tagged dicts of
plain values and rebuilt on load. Anything else is refused at save time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import os
import pathlib
import pickle
from typing import Any

import numpy as np
import torch
from torch import nn

from course_pkg.checks import check_device
from course_pkg.files import write_atomically

_MAGIC = b"course_pkg checkpoint v2\n"
_DIGEST_LEN = 64  # hex SHA-256
_HEX = frozenset(b"0123456789abcdef")
_TAG = "__course_pkg_type__"


def _encode(name: str, value: Any) -> Any:
    """Plain data that ``torch.load(weights_only=True)`` reads back."""
    # exact types: a subclass (np.float64, an IntEnum) would be pickled as a
    # global that weights_only loading refuses
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, bytes):  # weights_only refuses pickled bytes
        return {_TAG: "bytes", "value": value.hex()}
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {_TAG: "numpy", "dtype": value.dtype.str, "value": value.item()}
    if isinstance(value, pathlib.PurePath):
        return {_TAG: "path", "value": str(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if not cls.__module__.startswith("course_pkg."):
            raise TypeError(
                f"{name} is a dataclass of {cls.__module__}; only the "
                "package's own settings dataclasses can be saved"
            )
        fields = {
            f.name: _encode(f"{name}.{f.name}", getattr(value, f.name))
            for f in dataclasses.fields(value)
        }
        return {
            _TAG: "dataclass",
            "class": f"{cls.__module__}:{cls.__qualname__}",
            "fields": fields,
        }
    if type(value) in (list, tuple):
        items = [_encode(f"{name}[{i}]", v) for i, v in enumerate(value)]
        return items if type(value) is list else tuple(items)
    if type(value) is dict:
        if _TAG in value:
            raise ValueError(f"{name} must not use the key {_TAG!r}")
        for key in value:
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise TypeError(
                    f"{name} keys must be str or int, got {type(key).__name__}"
                )
        return {k: _encode(f"{name}[{k!r}]", v) for k, v in value.items()}
    raise TypeError(
        f"{name} must be None, a number, str, bytes, tensor, NumPy scalar, "
        "path, package settings dataclass, or a list/tuple/dict of those; "
        f"got {type(value).__name__}"
    )


def _decode(value: Any) -> Any:
    """Undo :func:`_encode`."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_decode(v) for v in value)
    if not isinstance(value, dict):
        return value
    kind = value.get(_TAG)
    if kind is None:
        return {k: _decode(v) for k, v in value.items()}
    if kind == "numpy":
        return np.dtype(value["dtype"]).type(value["value"])
    if kind == "bytes":
        return bytes.fromhex(value["value"])
    if kind == "path":
        return pathlib.Path(value["value"])
    if kind == "dataclass":
        module, _, qualname = value["class"].partition(":")
        if not module.startswith("course_pkg."):
            raise ValueError(f"checkpoint names a foreign class {module}")
        cls = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if not dataclasses.is_dataclass(cls):
            raise ValueError(
                f"checkpoint class {value['class']} is no dataclass"
            )
        return cls(**{k: _decode(v) for k, v in value["fields"].items()})
    raise ValueError(f"checkpoint holds an unknown tagged value {kind!r}")


def _check_model_and_optimizer(model: Any, optimizer: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module, got {type(model).__name__}"
        )
    if optimizer is not None and not isinstance(
        optimizer, torch.optim.Optimizer
    ):
        raise TypeError(
            "optimizer must be None or a torch.optim.Optimizer, got "
            f"{type(optimizer).__name__}"
        )


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    **extra: Any,
) -> None:
    """Write model and optimizer state and ``extra`` to ``path``, atomically,
    with a SHA-256 digest.

    Written with :func:`course_pkg.files.write_atomically`, so a crash never
    leaves a half-written checkpoint where a good one was.

    Args:
        path: destination file. model: its ``state_dict`` is saved.
        optimizer: saved too if given.
        extra: values to store with it: None, numbers, str, bytes, tensors,
            NumPy scalars, paths, the package's settings dataclasses, and
            lists/tuples/dicts (str or int keys) of those. Each comes back
            from :func:`load_checkpoint` with its type.
    Raises:
        TypeError: if model, optimizer, path or an extra value has a type
            that cannot be saved (nothing is written).
    """
    _check_save_checkpoint(path, model, optimizer)
    payload = {
        "model": model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "extra": _encode("extra", extra),
    }
    body = io.BytesIO()
    torch.save(payload, body)
    body = body.getvalue()
    digest = hashlib.sha256(body).hexdigest().encode()
    write_atomically(
        path, lambda handle: handle.write(_MAGIC + digest + b"\n" + body)
    )


def _check_save_checkpoint(
    path: object, model: object, optimizer: object
) -> None:
    """path a str or os.PathLike; model an nn.Module; optimizer None or a
    torch.optim.Optimizer."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path must be a str or path, got {type(path).__name__}"
        )
    _check_model_and_optimizer(model, optimizer)


def _split_header(path: Any, data: bytes) -> tuple[bytes, bytes]:
    """The stored digest and the body of a checkpoint file's bytes.

    The header is read byte by byte, nothing in it is skipped: the exact
    magic line, then exactly 64 lowercase hex digits, then a newline. Any
    other byte is refused with its offset.
    """
    if not data.startswith(_MAGIC):
        raise ValueError(
            f"{path} is not a course_pkg checkpoint (empty, foreign or "
            "written by an older version: save it again with save_checkpoint)"
        )
    start = len(_MAGIC)
    digest = data[start : start + _DIGEST_LEN]
    for offset, byte in enumerate(digest, start):
        if byte not in _HEX:
            raise ValueError(
                f"{path} is corrupted: byte {offset} of its header is "
                f"{bytes([byte])!r}, where the digest must be "
                f"{_DIGEST_LEN} lowercase hex digits"
            )
    end = start + _DIGEST_LEN
    if len(data) <= end:
        raise ValueError(
            f"{path} is corrupted or truncated: it ends at byte {len(data)}, "
            f"inside its header of {end + 1} bytes"
        )
    if data[end] != ord("\n"):
        raise ValueError(
            f"{path} is corrupted: byte {end} of its header is "
            f"{data[end : end + 1]!r}, where the newline after the digest "
            "must be"
        )
    return digest, data[end + 1 :]


def _read_verified(
    path: str | os.PathLike, map_location: torch.device | str | None
) -> dict[str, Any]:
    """The payload of a checkpoint file, after its header and digest are
    checked."""
    data = pathlib.Path(path).read_bytes()
    digest, body = _split_header(path, data)
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise ValueError(
            f"{path} is corrupted or truncated: its SHA-256 does not match "
            "the digest stored in it"
        )
    try:
        payload = torch.load(
            io.BytesIO(body), map_location=map_location, weights_only=True
        )
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"{path} holds values that weights_only loading refuses"
        ) from err
    if not isinstance(payload, dict) or set(payload) != {
        "model",
        "optimizer",
        "extra",
    }:
        raise ValueError(f"{path} does not hold model, optimizer and extra")
    return payload


def _check_state(path: Any, model: nn.Module, state: Any) -> None:
    """Refuse a saved model state that does not fit ``model`` exactly."""
    own = model.state_dict()
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds no model state dict")
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"{path} does not fit the model: missing keys {missing[:5]}, "
            f"unexpected keys {unexpected[:5]}"
        )
    for key, tensor in own.items():
        saved = state[key]
        if not isinstance(saved, torch.Tensor) or (
            saved.shape != tensor.shape or saved.dtype != tensor.dtype
        ):
            got = (
                (tuple(saved.shape), saved.dtype)
                if isinstance(saved, torch.Tensor)
                else type(saved).__name__
            )
            raise ValueError(
                f"{path}: {key} must have shape {tuple(tensor.shape)} and "
                f"dtype {tensor.dtype} to fit the model, got {got}"
            )


def _check_optimizer_state(
    path: Any, optimizer: torch.optim.Optimizer, state: Any
) -> None:
    """Refuse a saved optimizer state whose parameter groups do not fit."""
    if state is None:
        raise ValueError(f"{path} holds no optimizer state")
    groups = state.get("param_groups") if isinstance(state, dict) else None
    sizes = [len(g.get("params", ())) for g in groups or ()]
    own = [len(g["params"]) for g in optimizer.param_groups]
    if groups is None or sizes != own:
        raise ValueError(
            f"{path}: the saved optimizer has parameter groups of sizes "
            f"{sizes}, the optimizer given has {own}"
        )


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    map_location: torch.device | str | None = None,
) -> dict[str, Any]:
    """Load a :func:`save_checkpoint` file into ``model`` (and ``optimizer``).

    The digest, the model's keys, shapes and dtypes, and the optimizer's
    presence and parameter groups are all checked before anything is copied:
    on any error the model and optimizer are unchanged.

    Args:
        path: the file. model: receives the saved state (every key, shape
            and dtype must match).
        optimizer: receives the saved optimizer state if given. map_location:
            as in ``torch.load``.
    Returns:
        The ``extra`` values given to :func:`save_checkpoint`, with their
        types.
    Raises:
        TypeError: if model or optimizer has the wrong type, or
            map_location is not a device.
        ValueError: if map_location is not a device of this machine, the
            file is empty, truncated, corrupted, not a
            checkpoint, does not fit the model, or holds no optimizer state
            when one is asked for.
        OSError: if the file cannot be read.
    """
    map_location = _check_load_checkpoint(path, model, optimizer, map_location)
    payload = _read_verified(path, map_location)
    _check_state(path, model, payload["model"])
    if optimizer is not None:
        _check_optimizer_state(path, optimizer, payload["optimizer"])
    extra = _decode(payload["extra"])
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    return extra


def _check_load_checkpoint(
    path: object, model: object, optimizer: object, map_location: object
) -> torch.device | None:
    """path, model, optimizer as :func:`_check_save_checkpoint`; map_location
    None or a device of this machine. Returns map_location as a device."""
    _check_save_checkpoint(path, model, optimizer)
    return check_device("map_location", map_location)
