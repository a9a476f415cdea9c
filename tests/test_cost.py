"""Sequential depth, FLOP-free cost helpers of the Transformer chapter."""

from __future__ import annotations

import time

import pytest
import torch

from course_pkg.cost import (
    call_seconds,
    fastest_seconds,
    median_seconds,
    sequential_depth,
)
from course_pkg.seq2seq import seq2seq_model
from course_pkg.transformer import Transformer


def chain(x: torch.Tensor, length: int) -> torch.Tensor:
    for _ in range(length):
        x = x * 1.5
    return x


@pytest.mark.parametrize("length", [1, 2, 7, 300])
def test_depth_of_a_chain_counts_its_operations(length):
    leaf = torch.ones(3, requires_grad=True)
    # one node per multiplication, plus the leaf's AccumulateGrad node
    assert sequential_depth(chain(leaf, length)) == length + 1


def test_parallel_branches_do_not_add_depth():
    leaf = torch.ones(3, requires_grad=True)
    wide = chain(leaf, 5)
    for _ in range(9):  # 10 chains joined by 9 additions
        wide = wide + chain(leaf, 5)
    deep = chain(leaf, 5)
    assert sequential_depth(wide) == sequential_depth(deep) + 9
    # the longest branch decides, not the number of branches
    assert sequential_depth(chain(leaf, 5) + chain(leaf, 2)) == 5 + 1 + 1


def test_rnn_depth_grows_with_length_transformer_depth_does_not():
    torch.manual_seed(0)
    gru = seq2seq_model(False, 20, 30)
    transformer = Transformer(20, 30, 16, 32, 4, 2, 0.0)
    depths = {"gru": [], "transformer": []}
    for T in (4, 8, 16):
        src = torch.randint(4, 20, (2, T))
        tgt = torch.randint(4, 30, (2, T))
        lens = torch.full((2,), T)
        depths["gru"].append(sequential_depth(gru(src, tgt, lens)))
        depths["transformer"].append(
            sequential_depth(transformer(src, tgt, lens))
        )
    g = depths["gru"]
    assert g[2] - g[1] == 2 * (g[1] - g[0]) > 0  # linear in T
    assert len(set(depths["transformer"])) == 1


def test_depth_refuses_what_autograd_did_not_build():
    with pytest.raises(TypeError, match="output"):
        sequential_depth([1.0])
    with pytest.raises(ValueError, match="grad_fn"):
        sequential_depth(torch.ones(2))


def test_fastest_seconds_warms_up_then_times_each_repeat():
    calls = []
    seconds = fastest_seconds(lambda: calls.append(1), repeats=4)
    assert len(calls) == 5 and seconds >= 0.0
    for bad in (0, -1):
        with pytest.raises(ValueError, match="repeats"):
            fastest_seconds(lambda: None, repeats=bad)
    with pytest.raises(TypeError, match="repeats"):
        fastest_seconds(lambda: None, repeats=2.0)


@pytest.mark.parametrize("warmup", [0, 3])
def test_call_seconds_makes_warmup_untimed_calls_first(warmup):
    calls = []
    seconds = call_seconds(lambda: calls.append(1), 2, warmup=warmup)
    assert len(calls) == warmup + 2 and len(seconds) == 2
    with pytest.raises(ValueError, match="warmup"):
        call_seconds(lambda: None, warmup=-1)
    with pytest.raises(TypeError, match="warmup"):
        call_seconds(lambda: None, warmup=1.0)


def test_median_seconds_is_the_middle_call():
    durations = iter([0.0, 0.03, 0.01, 0.02])  # the warm-up, then three calls

    def sleep_next():
        time.sleep(next(durations))

    assert 0.015 <= median_seconds(sleep_next, repeats=3) < 0.03
