"""Tests of course_pkg.evaluation.memory: the peak memory of a call, from the allocator's own events."""

from __future__ import annotations

import pytest
import torch

from course_pkg.evaluation.memory import MemoryUse, peak_memory

MIB = 2**20


def _two_at_once():
    first = torch.ones(MIB // 4)  # 1 MiB of float32
    second = torch.ones(MIB // 4)
    return first + second  # a third MiB while both are live


def _one_after_another():
    for _ in range(3):
        block = torch.ones(MIB // 4)
        del block


def test_a_single_tensor_is_counted_exactly():
    use = peak_memory(lambda: torch.empty(1000, 1000))
    assert isinstance(use, MemoryUse)
    assert use.largest == 4_000_000
    assert 4_000_000 <= use.peak < 4_000_000 + 4096


def test_peak_counts_what_is_live_at_once_not_what_was_ever_allocated():
    together, apart = (
        peak_memory(_two_at_once),
        peak_memory(_one_after_another),
    )
    assert 3 * MIB <= together.peak < 3 * MIB + 4096
    assert MIB <= apart.peak < MIB + 4096
    assert together.largest == apart.largest == MIB


def test_the_explicit_score_matrix_is_the_largest_allocation():
    q = torch.randn(1, 2, 300, 8)
    use = peak_memory(lambda: torch.softmax(q @ q.transpose(2, 3), dim=-1) @ q)
    assert use.largest == 2 * 300 * 300 * 4


@pytest.mark.cuda  # the CPU path is tested above
def test_cuda_peak():
    use = peak_memory(lambda: torch.empty(1000, 1000, device="cuda"), "cuda")
    assert use.peak >= 4_000_000


def test_refuses_bad_input():
    with pytest.raises(TypeError, match="fn"):
        peak_memory(torch.ones(3))
    with pytest.raises(ValueError, match="device"):
        peak_memory(lambda: None, "meta")
