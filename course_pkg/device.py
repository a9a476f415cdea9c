"""Where tensors live and how runs are made repeatable (used by every chapter).

The device is chosen once, here: CUDA if present, then Apple's MPS, then the
CPU. Setting the environment variable ``COURSE_DEVICE`` (``cpu``, ``cuda``,
``cuda:1``, ``mps``, ``meta``; any device this machine has) overrides the choice, which is how a reader with
a GPU forces a CPU run that matches the stored outputs. Everything else in the
package creates tensors on the device of its inputs.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from course_pkg.checks import check_device, check_size, device_available


def get_device() -> torch.device:
    """The device the course runs on: ``COURSE_DEVICE`` if set, else cuda > mps
    > cpu.

    Returns:
        A ``torch.device``.
    Raises:
        ValueError: if ``COURSE_DEVICE`` names a device torch does not know or
            cannot use (e.g. a CUDA index beyond the GPUs there are).
    """
    requested = os.environ.get("COURSE_DEVICE", "").strip()
    if requested:
        return _check_get_device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _check_get_device(requested: str) -> torch.device:
    """requested (COURSE_DEVICE's value) a torch device that this machine
    has (a CUDA index below the GPU count). Returns it as a torch.device."""
    try:
        device = torch.device(requested)
    except RuntimeError as err:
        raise ValueError(
            f"COURSE_DEVICE={requested!r} is not a torch device"
        ) from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"COURSE_DEVICE={requested!r} but CUDA is not available"
        )
    if device.type == "cuda" and device.index is not None:
        count = torch.cuda.device_count()
        if device.index >= count:
            raise ValueError(
                f"COURSE_DEVICE={requested!r} but this machine has "
                f"{count} CUDA device(s) (indices 0..{count - 1})"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(
            f"COURSE_DEVICE={requested!r} but MPS is not available"
        )
    if not device_available(device):  # xpu, hpu, ...: checked the same way
        raise ValueError(
            f"COURSE_DEVICE={requested!r} but this machine has no "
            f"{device.type} device"
        )
    return device


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and torch's random generators (all devices) with
    ``seed``.

    Args:
        seed: an integer in [0, 2**32).
    Raises:
        TypeError: if seed is not an int.
        ValueError: if seed is outside [0, 2**32) (no generator is touched).
    """
    _check_seed_everything(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def _check_seed_everything(seed: object) -> None:
    """seed a Python int in [0, 2**32)."""
    check_size("seed", seed, 0)
    if seed >= 2**32:  # NumPy's limit, checked before any reseeding
        raise ValueError(f"seed must be < 2**32, got {seed}")


def describe_device(device: torch.device | str) -> str:
    """One line that says what runs the code: torch's version, the device,
    the GPU's name or the number of CPU threads (for benchmark headers).

    Args:
        device: the device the code runs on.
    Returns:
        E.g. ``"torch 2.14.1, device cpu, 2 threads"``.
    """
    device = _check_describe_device(device)
    if device.type == "cuda":
        where = f" ({torch.cuda.get_device_name(device)})"
    else:
        where = f", {torch.get_num_threads()} threads"
    return f"torch {torch.__version__}, device {device}{where}"


def _check_describe_device(device: object) -> torch.device:
    """device a torch.device or str (not None) that this machine has.
    Returns it as a torch.device."""
    if device is None:
        raise TypeError("device must be a torch.device or str, got NoneType")
    return check_device("device", device)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's parameters (the first one's: the course's
    models keep all of theirs on one device).

    Raises:
        TypeError: if model is not an ``nn.Module``.
        ValueError: if it has no parameters.
    """
    parameter = _check_model_device(model)
    return parameter.device


def _check_model_device(model: object) -> torch.nn.Parameter:
    """model an nn.Module with at least one parameter. Returns its first
    parameter."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be an nn.Module, got {type(model).__name__}"
        )
    parameter = next(model.parameters(), None)
    if parameter is None:
        raise ValueError("model must have parameters, got a model with none")
    return parameter
