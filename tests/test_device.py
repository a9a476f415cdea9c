"""Tests of course_pkg.device."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from course_pkg.device import get_device, seed_everything


def test_course_device_overrides(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.setenv("COURSE_DEVICE", "meta")
    assert get_device() == torch.device("meta")


def test_default_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    expected = (
        "cuda"
        if torch.cuda.is_available()
        else "mps"
        if torch.backends.mps.is_available()
        else "cpu"
    )
    assert get_device().type == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert get_device() == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert get_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_device() == torch.device("cuda")


def test_bad_course_device(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "gpu-please")
    with pytest.raises(ValueError, match="COURSE_DEVICE"):
        get_device()
    if not torch.cuda.is_available():
        monkeypatch.setenv("COURSE_DEVICE", "cuda")
        with pytest.raises(ValueError, match="CUDA is not available"):
            get_device()


def test_seed_everything_repeats_every_generator():
    def draw():
        return random.random(), float(np.random.rand()), torch.rand(3).tolist()

    seed_everything(7)
    first = draw()
    seed_everything(7)
    assert draw() == first
    seed_everything(8)
    assert draw() != first


def test_seed_everything_refuses_bad_seeds():
    with pytest.raises(TypeError, match="seed must be an int"):
        seed_everything(1.5)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        seed_everything(-1)


def test_course_device_index_beyond_the_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("COURSE_DEVICE", "cuda:7")
    with pytest.raises(ValueError, match=r"cuda:7.*1 CUDA device"):
        get_device()
    for accepted in ("cuda:0", "cuda"):
        monkeypatch.setenv("COURSE_DEVICE", accepted)
        assert get_device() == torch.device(accepted)
