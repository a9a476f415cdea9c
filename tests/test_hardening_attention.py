"""Attention under attack (issue 15): padding that holds NaN or inf, empty
batches and sequences, on the CPU and the meta device, and bad arguments
refused with a named error before any state changes."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.nn.attention import MultiHeadAttention
from course_pkg.nn.blocks import PositionWiseFFN
from course_pkg.nn.modern_blocks import RMSNorm, SwiGLUFFN
from course_pkg.nn.positional import PositionalEncoding
from course_pkg.nn.scoring import (
    AdditiveAttention,
    DotProductAttention,
    LuongAttention,
)

POISONS = [float("nan"), float("inf"), float("-inf")]


def every_padded_input(poison, per_query, causal):
    """Exhaustive: for every Q in 0..4 and K in 1..5, a batch of K examples whose longest
    length is 0..K-1 (example b: b, or per query (b - i) mod (b + 1), so every length up to b),
    the keys and values past each example's longest length set to ``poison``, and a clean copy
    with finite numbers there. Yields q, (k, v), (poisoned k, v), lens, causal."""
    gen = torch.Generator().manual_seed(0)
    for Q, K in itertools.product(range(5), range(1, 6)):
        if causal and Q > K:
            continue
        B = K
        longest = torch.arange(B)
        if per_query:
            lens = (longest[:, None] - torch.arange(Q)) % (
                longest[:, None] + 1
            )
        else:
            lens = longest
        q, k, v = (torch.randn(B, n, 8, generator=gen) for n in (Q, K, K))
        pad = torch.arange(K)[None, :] >= longest[:, None]  # (B, K)
        poisoned_k, poisoned_v = k.clone(), v.clone()
        poisoned_k[pad] = poison
        poisoned_v[pad] = poison
        yield q, (k, v), (poisoned_k, poisoned_v), lens, causal


def run_both_paths(layer, q, k, v, lens, causal):
    kwargs = {} if causal is None else {"causal": causal}
    explicit = layer(q, k, v, lens, **kwargs)
    fused = layer(q, k, v, lens, need_weights=False, **kwargs)
    return explicit, fused


# Exhaustive (every poison, shape to 4 x 5 and longest length), in float64: the poisoned and
# the clean inputs give the same outputs to 1e-12, on both attention paths.
@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("poison", POISONS)
@pytest.mark.parametrize("per_query", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_nan_and_inf_in_padding_never_reach_the_output(
    poison, per_query, causal
):
    for q, clean, poisoned, lens, causal in every_padded_input(
        poison, per_query, causal
    ):
        torch.manual_seed(0)
        for layer in (DotProductAttention(), MultiHeadAttention(8, 2)):
            layer.eval()
            expected, _ = run_both_paths(layer, q, *clean, lens, causal)
            for out in run_both_paths(layer, q, *poisoned, lens, causal):
                assert torch.isfinite(out).all()
                torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("poison", POISONS)
@pytest.mark.parametrize("per_query", [False, True])
def test_additive_attention_ignores_poisoned_padding(poison, per_query):
    for q, clean, poisoned, lens, _ in every_padded_input(
        poison, per_query, False
    ):
        torch.manual_seed(0)
        layer = AdditiveAttention(8, 0.0)
        expected = layer(q, *clean, lens)
        out = layer(q, *poisoned, lens)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


# 40 calls, forward and backward, on cpu and meta.
@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(0, 2),
    Q=st.integers(0, 3),
    K=st.integers(0, 3),
    device=st.sampled_from(["cpu", "meta"]),
    need_weights=st.booleans(),
    with_lens=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_empty_batches_and_sequences_work(
    B, Q, K, device, need_weights, with_lens, seed
):
    # the weights from the seed, leaving the global RNG as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = MultiHeadAttention(8, 2, bias=True).to(device)
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Q, 8, generator=generator).to(device).requires_grad_()
    kv = torch.randn(B, K, 8, generator=generator).to(device)
    lens = torch.full((B,), K, device=device) if with_lens else None
    out = layer(q, kv, kv, lens, need_weights=need_weights)
    assert out.shape == (B, Q, 8)
    out.sum().backward()
    if device == "cpu":
        assert torch.isfinite(out).all()


def wrong_argument(draw, good, generator):
    """One argument made wrong (random values from ``generator``), and the error it must raise."""
    kind = draw(
        st.sampled_from(
            ["str", "list", "int dtype", "float64", "width", "rank", "batch"]
        )
    )
    if kind == "str":
        return draw(st.text(max_size=4)), TypeError
    if kind == "list":
        return good.tolist(), TypeError
    if kind == "int dtype":
        return good.long(), TypeError
    if kind == "float64":
        return good.double(), TypeError
    if kind == "width":
        shape = (*good.shape[:-1], good.shape[-1] + 1)
        return torch.randn(shape, generator=generator), ValueError
    if kind == "rank":
        return good[0], ValueError
    shape = (good.shape[0] + 1, *good.shape[1:])
    return torch.randn(shape, generator=generator), ValueError


# 60 calls.
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_wrong_argument_is_named_before_any_state_changes(data):
    seed = data.draw(st.integers(0, 10_000), label="seed")
    # the weights from the seed, leaving the global RNG as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = MultiHeadAttention(8, 2)
    generator = torch.Generator().manual_seed(seed)
    good = {
        name: torch.randn(2, 3, 8, generator=generator)
        for name in ("queries", "keys", "values")
    }
    layer(*good.values())
    weights_before = layer.attention_weights
    params_before = [p.clone() for p in layer.parameters()]
    name = data.draw(st.sampled_from(sorted(good)))
    bad, error = wrong_argument(data.draw, good[name], generator)
    arguments = {**good, name: bad}
    need_weights = data.draw(st.booleans())
    with pytest.raises(error, match=name):
        layer(**arguments, need_weights=need_weights)
    assert layer.attention_weights is weights_before
    assert all(
        torch.equal(a, b) for a, b in zip(params_before, layer.parameters())
    )


# 40 calls.
@settings(max_examples=40, deadline=None)
@given(
    lens=st.one_of(
        st.text(max_size=3),
        st.lists(st.integers(0, 3), min_size=2, max_size=2),
        st.just(torch.tensor([1.0, 2.0])),
        st.just(torch.tensor([4, 1])),
        st.just(torch.tensor([-1, 1])),
        st.just(torch.tensor([1, 1, 1])),
    ),
    need_weights=st.booleans(),
)
def test_bad_valid_lens_are_named(lens, need_weights):
    # the weights from the seed, leaving the global RNG as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = MultiHeadAttention(8, 2)
    X = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises((TypeError, ValueError), match="valid_lens"):
        layer(X, X, X, lens, need_weights=need_weights)


# 50 calls.
@settings(max_examples=50, deadline=None)
@given(
    num_hiddens=st.one_of(
        st.integers(-2, 9), st.floats(-2, 9), st.text(max_size=2)
    ),
    num_heads=st.one_of(st.integers(-2, 4), st.floats(-2, 4), st.none()),
)
def test_constructor_arguments_are_checked(num_hiddens, num_heads):
    ok = (
        type(num_hiddens) is int
        and type(num_heads) is int
        and num_hiddens >= 1
        and num_heads >= 1
        and num_hiddens % num_heads == 0
    )
    if ok:
        MultiHeadAttention(num_hiddens, num_heads)
        return
    with pytest.raises((TypeError, ValueError), match="num_hiddens|num_heads"):
        MultiHeadAttention(num_hiddens, num_heads)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: AdditiveAttention(None, 0.0), "num_hiddens"),
        (lambda: AdditiveAttention(8, 1.5), "dropout"),
        (lambda: AdditiveAttention(8, 0.0, query_size=2.0), "query_size"),
        (lambda: LuongAttention("dot", 4.0, 4.0), "query_size"),
        (lambda: DotProductAttention("0.1"), "dropout"),
        (lambda: DotProductAttention(-0.5), "dropout"),
        (lambda: PositionalEncoding(8.0, 0.0), "num_hiddens"),
        (lambda: MultiHeadAttention(8, 2, key_size=0), "key_size"),
    ],
)
def test_layer_constructors_name_a_bad_argument(make, name):
    with pytest.raises((TypeError, ValueError), match=name):
        make()


@pytest.mark.parametrize(
    "make, error, name",
    [
        # 0 used to mean "the default" (query_size 0 -> 4, a hidden width of 0 -> D_q)
        (
            lambda: AdditiveAttention(4, 0.0, query_size=0),
            ValueError,
            "query_size",
        ),
        (
            lambda: AdditiveAttention(4, 0.0, key_size=0),
            ValueError,
            "key_size",
        ),
        (
            lambda: LuongAttention("concat", 4, 4, num_hiddens=0),
            ValueError,
            "num_hiddens",
        ),
        (
            lambda: LuongAttention("concat", 4, 4, num_hiddens=2.5),
            TypeError,
            "num_hiddens",
        ),
        (lambda: LuongAttention(1, 4, 4), TypeError, "score"),
        (lambda: PositionWiseFFN(0, 4), ValueError, "ffn_num_hiddens"),
        (
            lambda: PositionWiseFFN(8, 4, input_size=0),
            ValueError,
            "input_size",
        ),
        (lambda: PositionWiseFFN(8, 4.0), TypeError, "ffn_num_outputs"),
        (lambda: SwiGLUFFN(8, 4, input_size=0), ValueError, "input_size"),
        (lambda: RMSNorm("4"), TypeError, "num_hiddens"),
        (lambda: RMSNorm(2.5), TypeError, "num_hiddens"),
    ],
)
def test_sizes_are_checked_with_the_right_error_and_zero_is_not_a_default(
    make, error, name
):
    with pytest.raises(error, match=name):
        make()
