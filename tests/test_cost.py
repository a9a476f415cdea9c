"""Sequential depth, operation counts and timing helpers (course_pkg.evaluation.cost)."""

from __future__ import annotations

import pytest
import torch

from course_pkg.evaluation import cost
from course_pkg.evaluation.cost import (
    call_seconds,
    count_flops,
    fastest_seconds,
    median_seconds,
    sequential_depth,
)
from course_pkg.models.seq2seq import seq2seq_model
from course_pkg.models.transformer import Transformer
from course_pkg.nn.attention import MultiHeadAttention


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


@pytest.mark.parametrize(
    "batch, n_in, n_out", [(1, 1, 1), (3, 5, 7), (8, 64, 32)]
)
def test_a_linear_layer_costs_two_operations_per_weight_and_row(
    batch, n_in, n_out
):
    layer = torch.nn.Linear(n_in, n_out)
    x = torch.randn(batch, n_in)
    with torch.no_grad():
        assert count_flops(lambda: layer(x)) == 2 * batch * n_in * n_out
    # backward: one product for the weight's gradient, and one more for the
    # input's when the input needs one
    assert count_flops(lambda: layer(x).sum().backward()) == (
        2 * 2 * batch * n_in * n_out
    )
    x.requires_grad_()
    assert count_flops(lambda: layer(x).sum().backward()) == (
        3 * 2 * batch * n_in * n_out
    )


@pytest.mark.parametrize("T", [1, 5, 16, 40])
def test_counts_of_the_self_attention_chapter_layers(T):
    # the formulas the chapter checks: convolution 2kBTD^2, GRU (CPU) 12BTD^2
    # (two products per gate per step), self-attention 8BTD^2 + 4BT^2D
    torch.manual_seed(0)
    B, D, k = 2, 8, 3
    X = torch.randn(B, T, D)
    conv = torch.nn.Conv1d(D, D, k, padding=1)
    gru = torch.nn.GRU(D, D, batch_first=True)
    attention = MultiHeadAttention(D, 2)
    with torch.no_grad():
        assert count_flops(lambda: conv(X.transpose(1, 2))) == (
            2 * k * B * T * D**2
        )
        assert count_flops(lambda: gru(X)) == 12 * B * T * D**2
        assert count_flops(lambda: attention(X, X, X)) == (
            8 * B * T * D**2 + 4 * B * T**2 * D
        )


def test_count_flops_counts_nothing_for_elementwise_work_and_refuses_non_callables():
    x = torch.randn(100)
    assert count_flops(lambda: (x * 2 + 1).softmax(0)) == 0
    with pytest.raises(TypeError, match="fn"):
        count_flops(3)


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


def test_median_seconds_is_the_middle_call(monkeypatch):
    # A fake clock that only the timed function moves: each call takes the
    # next duration (whole seconds, exact in floating point), so the median is
    # known exactly; a real sleep would make the test depend on the machine.
    clock = [0.0]
    durations = iter([100.0, 4.0, 1.0, 2.0])  # the warm-up, then three calls

    def take_next():
        clock[0] += next(durations)

    monkeypatch.setattr(cost.time, "perf_counter", lambda: clock[0])
    assert median_seconds(take_next, repeats=3) == 2.0
