"""Tests of course_pkg.nn.attention: masks, scoring functions and multi-head attention.

Peers nobody here wrote: torch.nn.functional.scaled_dot_product_attention,
torch.nn.MultiheadAttention and d2l.torch (the course's reference implementation).
"""

from __future__ import annotations

import itertools

import d2l.torch as d2l
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_pkg.nn.attention import (
    KVCache,
    MultiHeadAttention,
    copy_weights_from_torch,
    transpose_output,
    transpose_qkv,
)
from course_pkg.nn.masks import (
    attention_mask,
    causal_mask,
    masked_softmax,
    query_key_distance,
    sequence_mask,
)
from course_pkg.nn.scoring import (
    AdditiveAttention,
    DotProductAttention,
    LuongAttention,
    fused_attention,
)

F64 = torch.float64


def randn(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device)


# ----------------------------------------------------------------------------- masks


def test_sequence_mask_shapes_and_values():
    mask = sequence_mask(torch.tensor([0, 2, 4]), 4)
    assert mask.shape == (3, 1, 4)
    assert mask.dtype == torch.bool
    assert mask[:, 0].tolist() == [
        [False] * 4,
        [True, True, False, False],
        [True] * 4,
    ]
    per_query = sequence_mask(torch.tensor([[1, 3]]), 3)
    assert per_query.shape == (1, 2, 3)
    assert per_query[0].tolist() == [[True, False, False], [True, True, True]]


def test_causal_mask_aligns_queries_to_the_last_positions():
    square = causal_mask(3, 3)[0]
    assert square.tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]
    # One new query over a cache of 4 earlier keys sees all 5.
    assert causal_mask(1, 5)[0].tolist() == [[True] * 5]
    with pytest.raises(ValueError, match="K >= Q"):
        causal_mask(3, 2)


def test_query_key_distance_places_the_queries_last():
    # Query i sits at position K - Q + i: its own key is at distance 0, the
    # causal mask is the distances >= 0, for every Q <= K up to 6.
    assert query_key_distance(2, 4).tolist() == [[2, 1, 0, -1], [3, 2, 1, 0]]
    for num_keys in range(1, 7):
        for num_queries in range(1, num_keys + 1):
            distance = query_key_distance(num_queries, num_keys)
            assert torch.equal(
                distance >= 0, causal_mask(num_queries, num_keys)[0]
            )
            assert (distance.diagonal(num_keys - num_queries) == 0).all()
    with pytest.raises(ValueError, match="num_keys must be >= num_queries"):
        query_key_distance(3, 2)


def test_masked_softmax_rows_with_nothing_valid_are_zero_not_nan():
    X = randn(2, 3, 4)
    weights = masked_softmax(X, torch.tensor([0, 2]))
    assert torch.isfinite(weights).all()
    assert torch.equal(weights[0], torch.zeros(3, 4))
    assert torch.allclose(weights[1].sum(-1), torch.ones(3))
    # Even in half precision and with extreme scores.
    X16 = torch.full((1, 2, 3), 6e4, dtype=torch.float16)
    out = masked_softmax(X16, torch.tensor([[0, 3]]))
    assert torch.isfinite(out).all() and out[0, 0].sum() == 0


def test_masked_softmax_without_lens_is_softmax():
    X = randn(2, 3, 5)
    assert torch.equal(masked_softmax(X, None), F.softmax(X, dim=-1))


def _every_length(batch_of: int, queries: int, per_query: bool):
    """Lengths 0..K for a batch of K + 1 examples: example b has length b, or per query
    (b + i) mod (K + 1), so every (query, length) pair occurs (rows are independent)."""
    if not per_query:
        return torch.arange(batch_of)
    return (torch.arange(batch_of)[:, None] + torch.arange(queries)) % batch_of


# Exhaustive, not sampled: every shape up to 5 queries x 6 keys, every length of every query
# row, per example and per query, causal or not, in float32 and float64. The zeros must be
# exact in both; the sums and values are compared in float64, where they are equal to 1e-12.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_query", [False, True])
def test_masked_softmax_property(per_query, causal, dtype):
    """Rows are the softmax over the valid positions (or all zero) and exactly 0 elsewhere."""
    generator = torch.Generator().manual_seed(0)
    for queries, keys in itertools.product(range(1, 6), range(1, 7)):
        if causal and keys < queries:
            continue
        valid_lens = _every_length(keys + 1, queries, per_query)
        batch = keys + 1
        X = torch.randn(batch, queries, keys, generator=generator) * 10
        X = X.to(dtype)
        weights = masked_softmax(X, valid_lens, causal=causal)
        # the positions that may be attended, from index comparisons (not our mask helpers)
        key_pos = torch.arange(keys)
        lens = valid_lens.reshape(batch, -1, 1)  # (B, 1 or Q, 1)
        mask = (key_pos < lens).expand(batch, queries, keys)
        if causal:  # query i is position i + K - Q and sees the keys up to it
            query_pos = torch.arange(queries)[:, None] + (keys - queries)
            mask = mask & (key_pos <= query_pos)
        assert torch.all(weights[~mask] == 0)
        row_sums = weights.sum(-1)
        has_valid = mask.any(-1)
        assert torch.all(row_sums[~has_valid] == 0)
        if dtype == torch.float64:
            assert torch.allclose(
                row_sums[has_valid],
                torch.ones_like(row_sums[has_valid]),
                rtol=0,
                atol=1e-12,
            )
            # and over the valid positions it is the softmax of those scores alone
            reference = (
                torch.where(mask, X, float("-inf")).softmax(-1).nan_to_num(0.0)
            )
            torch.testing.assert_close(weights, reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize("per_query", [False, True])
def test_masked_softmax_matches_d2l(per_query):
    X = randn(3, 4, 6, dtype=F64)
    valid_lens = (
        torch.tensor([[1, 2, 6, 3], [4, 4, 1, 5], [6, 2, 2, 1]])
        if per_query
        else torch.tensor([2, 6, 1])
    )
    ours = masked_softmax(X, valid_lens)
    theirs = d2l.masked_softmax(X.clone(), valid_lens)
    assert torch.allclose(ours, theirs, atol=1e-12)


def test_masked_softmax_gradcheck():
    X = randn(2, 3, 5, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: masked_softmax(x, torch.tensor([[1, 0, 5], [3, 2, 4]])), (X,)
    )
    assert torch.autograd.gradcheck(
        lambda x: masked_softmax(x, torch.tensor([2, 4]), causal=True), (X,)
    )


# ----------------------------------------------------------------------------- dot-product attention


def _torch_mask(valid_lens, queries, keys, causal=False):
    """torch's boolean attn_mask (True = may attend), built without our mask helpers."""
    mask = (
        torch.arange(keys)[None, None, :] < valid_lens[:, None, None]
    )  # (B, 1, K)
    if causal:  # the queries are the last Q of the K positions
        mask = mask & torch.ones(queries, keys, dtype=torch.bool).tril(
            diagonal=keys - queries
        )
    return mask


@pytest.mark.parametrize("causal", [False, True])
def test_explicit_dot_product_attention_matches_torch_sdpa(causal):
    """The explicit path against the fused kernel; the fused path is checked against d2l, the
    explicit path and torch.nn.MultiheadAttention, never against the kernel it calls."""
    torch.manual_seed(0)
    q, k, v = (
        randn(3, 4, 8, dtype=F64),
        randn(3, 5, 8, dtype=F64),
        randn(3, 5, 6, dtype=F64),
    )
    valid_lens = torch.tensor([5, 3, 1])
    attention = DotProductAttention(dropout=0.0).eval()
    ours = attention(q, k, v, valid_lens, causal=causal, need_weights=True)
    theirs = F.scaled_dot_product_attention(
        q, k, v, attn_mask=_torch_mask(valid_lens, 4, 5, causal)
    )
    assert ours.shape == (3, 4, 6)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert attention.attention_weights is not None


# tests/measure_tolerances.py, float32 against float64 (paths default/avx2, with and without MKL_CBWR=COMPATIBLE, 1/2/4 threads):
# explicit and fused each err by at most 1.9e-7 (they agree bit for bit here); bound = 10 x the sum,
# rounded up. Fused lengths one too long move an output by 2.8 at least.
FUSED_FLOAT32_BOUND = 5e-6


def fused_and_explicit(dtype=torch.float32, lens_shift=0):
    """[(explicit, fused)] over lengths none / per example / per query, causal or not; the
    inputs are drawn in float32 and cast, so every dtype computes the same numbers.
    ``lens_shift`` != 0 is a deliberate bug for the fused path (its lengths moved)."""
    torch.manual_seed(1)
    q, k, v = (
        t.to(dtype) for t in (randn(4, 7, 16), randn(4, 9, 16), randn(4, 9, 5))
    )
    attention = DotProductAttention(0.3).eval()
    pairs = []
    for valid_lens in (
        None,
        torch.tensor([9, 0, 4, 1]),
        torch.randint(0, 10, (4, 7)),
    ):
        for causal in (False, True):
            explicit = attention(
                q, k, v, valid_lens, causal=causal, need_weights=True
            )
            fused_lens = valid_lens
            if lens_shift and valid_lens is not None:
                fused_lens = (valid_lens + lens_shift).clamp(0, 9)
            fused = attention(
                q, k, v, fused_lens, causal=causal, need_weights=False
            )
            pairs.append((explicit, fused))
    return pairs


@pytest.mark.numerics
def test_fused_path_equals_explicit_path_float32():
    for explicit, fused in fused_and_explicit():
        assert torch.isfinite(fused).all()
        assert (explicit - fused).abs().max() <= FUSED_FLOAT32_BOUND


@pytest.mark.parametrize("need_weights", [True, False])
def test_dot_product_attention_matches_d2l(need_weights):
    q, k, v = (
        randn(2, 3, 4, dtype=F64),
        randn(2, 6, 4, dtype=F64),
        randn(2, 6, 5, dtype=F64),
    )
    valid_lens = torch.tensor([2, 6])
    ours = DotProductAttention(0.0)(
        q, k, v, valid_lens, need_weights=need_weights
    )
    reference = d2l.DotProductAttention(0.0)
    theirs = reference(q, k, v, valid_lens)
    assert torch.allclose(ours, theirs, atol=1e-12)


@pytest.mark.parametrize("need_weights", [True, False])
def test_dot_product_attention_gradcheck(need_weights):
    q, k, v = (randn(2, 3, 4, dtype=F64).requires_grad_() for _ in range(3))
    attention = DotProductAttention(0.0)

    def f(q, k, v):
        return attention(
            q,
            k,
            v,
            torch.tensor([1, 3]),
            causal=True,
            need_weights=need_weights,
        )

    assert torch.autograd.gradcheck(f, (q, k, v))


@settings(max_examples=30)
@given(
    steps=st.integers(2, 7), t=st.integers(0, 6), seed=st.integers(0, 10_000)
)
def test_causal_output_at_t_ignores_later_inputs(steps, t, seed):
    """Changing inputs after step t leaves the causal self-attention output at steps <= t unchanged."""
    t = min(t, steps - 1)
    generator = torch.Generator().manual_seed(seed)
    attention = MultiHeadAttention(8, 2, bias=True).double().eval()
    X = torch.randn(2, steps, 8, generator=generator, dtype=F64)
    changed = X.clone()
    changed[:, t + 1 :] = torch.randn(
        2, steps - t - 1, 8, generator=generator, dtype=F64
    )
    for need_weights in (True, False):
        before = attention(X, X, X, causal=True, need_weights=need_weights)
        after = attention(
            changed, changed, changed, causal=True, need_weights=need_weights
        )
        assert torch.allclose(
            before[:, : t + 1], after[:, : t + 1], atol=1e-12
        )


# ----------------------------------------------------------------------------- additive and Luong


def test_additive_attention_matches_d2l():
    torch.manual_seed(0)
    q, k, v = (
        randn(2, 1, 20, dtype=F64),
        randn(2, 10, 2, dtype=F64),
        randn(2, 10, 4, dtype=F64),
    )
    valid_lens = torch.tensor([2, 6])
    reference = d2l.AdditiveAttention(num_hiddens=8, dropout=0.0).double()
    expected = reference(q, k, v, valid_lens)  # materialises the lazy layers
    ours = AdditiveAttention(8, 0.0, query_size=20, key_size=2).double()
    ours.load_state_dict(reference.state_dict())
    assert torch.allclose(ours(q, k, v, valid_lens), expected, atol=1e-12)
    assert ours.attention_weights.shape == (2, 1, 10)
    assert torch.all(ours.attention_weights[0, :, 2:] == 0)


def test_additive_attention_gradcheck():
    module = AdditiveAttention(4, 0.0, query_size=3, key_size=5).double()
    q = randn(2, 2, 3, dtype=F64).requires_grad_()
    k = randn(2, 4, 5, dtype=F64).requires_grad_()
    v = randn(2, 4, 2, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda q, k, v: module(q, k, v, torch.tensor([3, 1])), (q, k, v)
    )


def test_luong_scores():
    q, k, v = (
        randn(2, 3, 4, dtype=F64),
        randn(2, 5, 4, dtype=F64),
        randn(2, 5, 2, dtype=F64),
    )
    dot = LuongAttention("dot", 4, 4)
    assert torch.allclose(dot.scores(q, k), q @ k.transpose(1, 2))
    general = LuongAttention("general", 4, 4).double()
    with torch.no_grad():
        general.W.weight.copy_(torch.eye(4, dtype=F64))
    assert torch.allclose(general.scores(q, k), dot.scores(q, k))
    concat = LuongAttention("concat", 4, 4, num_hiddens=6).double()
    out = concat(q, k, v, torch.tensor([5, 2]))
    assert out.shape == (2, 3, 2)
    # concat is additive attention with W split into its query and key halves.
    additive = AdditiveAttention(6, 0.0, query_size=4, key_size=4).double()
    with torch.no_grad():
        additive.W_q.weight.copy_(concat.W.weight[:, :4])
        additive.W_k.weight.copy_(concat.W.weight[:, 4:])
        additive.w_v.weight.copy_(concat.v.weight)
    assert torch.allclose(
        additive(q, k, v, torch.tensor([5, 2])), out, atol=1e-12
    )
    q_grad = q.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: general(x, k, v, torch.tensor([5, 2])), (q_grad,)
    )


# ----------------------------------------------------------------------------- multi-head attention


def test_transpose_qkv_round_trip_and_head_layout():
    X = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)
    heads = transpose_qkv(X, 4)
    assert heads.shape == (8, 3, 2)
    # Row 1 is head 1 of example 0: features 2..3 of every step.
    assert torch.equal(heads[1], X[0, :, 2:4])
    assert torch.equal(transpose_output(heads, 4), X)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_matches_torch_multiheadattention(bias, need_weights):
    torch.manual_seed(0)
    D, H = 12, 3
    theirs = nn.MultiheadAttention(
        D, H, bias=bias, batch_first=True, dtype=F64
    ).eval()
    ours = MultiHeadAttention(D, H, 0.0, bias=bias).double().eval()
    copy_weights_from_torch(ours, theirs)
    q, kv = randn(3, 4, D, dtype=F64), randn(3, 6, D, dtype=F64)
    valid_lens = torch.tensor([6, 2, 5])
    key_padding_mask = (
        torch.arange(6) >= valid_lens[:, None]
    )  # torch: True = ignore
    expected, expected_weights = theirs(
        q,
        kv,
        kv,
        key_padding_mask=key_padding_mask,
        average_attn_weights=False,
    )
    got = ours(q, kv, kv, valid_lens, need_weights=need_weights)
    assert torch.allclose(got, expected, rtol=0, atol=1e-12)
    if need_weights:
        assert torch.allclose(
            ours.attention_weights, expected_weights, rtol=0, atol=1e-12
        )
    # Causal self-attention against torch's attn_mask (True = not allowed).
    future = torch.ones(4, 4, dtype=torch.bool).triu(
        diagonal=1
    )  # torch: True = not allowed
    expected_causal, _ = theirs(q, q, q, attn_mask=future)
    assert torch.allclose(
        ours(q, q, q, causal=True, need_weights=need_weights),
        expected_causal,
        rtol=0,
        atol=1e-12,
    )


def test_multihead_matches_d2l():
    torch.manual_seed(0)
    reference = (
        d2l.MultiHeadAttention(num_hiddens=16, num_heads=4, dropout=0.0)
        .double()
        .eval()
    )
    X, Y = randn(2, 4, 16, dtype=F64), randn(2, 6, 16, dtype=F64)
    valid_lens = torch.tensor([3, 2])
    expected = reference(X, Y, Y, valid_lens)
    ours = MultiHeadAttention(16, 4, 0.0).double().eval()
    ours.load_state_dict(reference.state_dict())
    assert torch.allclose(ours(X, Y, Y, valid_lens), expected, atol=1e-12)
    assert torch.allclose(
        ours.attention_weights.reshape(8, 4, 6),
        reference.attention.attention_weights,
        atol=1e-12,
    )


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_gradcheck(need_weights):
    module = MultiHeadAttention(
        6, 2, 0.0, bias=True, key_size=4, value_size=3
    ).double()
    q = randn(2, 3, 6, dtype=F64).requires_grad_()
    k = randn(2, 4, 4, dtype=F64).requires_grad_()
    v = randn(2, 4, 3, dtype=F64).requires_grad_()

    def f(q, k, v):
        return module(
            q,
            k,
            v,
            torch.tensor([[4, 1, 0], [2, 3, 4]]),
            need_weights=need_weights,
        )

    assert torch.autograd.gradcheck(f, (q, k, v))


@settings(max_examples=30)
@given(steps=st.integers(2, 8), seed=st.integers(0, 10_000))
def test_self_attention_is_permutation_equivariant(steps, seed):
    """Without positions, permuting the tokens permutes the outputs the same way."""
    generator = torch.Generator().manual_seed(seed)
    attention = MultiHeadAttention(8, 2, bias=True).double().eval()
    X = torch.randn(1, steps, 8, generator=generator, dtype=F64)
    perm = torch.randperm(steps, generator=generator)
    out = attention(X, X, X)
    out_permuted = attention(X[:, perm], X[:, perm], X[:, perm])
    assert torch.allclose(out[:, perm], out_permuted, atol=1e-12)


# ----------------------------------------------------------------------------- devices


def _backward(out: torch.Tensor) -> None:
    out.sum().backward()


@pytest.mark.parametrize("need_weights", [True, False])
def test_modules_forward_backward_on_device(device, need_weights):
    """Forward + backward on cpu, meta (no data: catches tensors wired to the CPU) and cuda."""
    lens = torch.tensor([3, 1], device=device)
    q = randn(2, 3, 8, device=device).requires_grad_()
    kv = randn(2, 5, 8, device=device).requires_grad_()
    mha = MultiHeadAttention(8, 2, 0.1, bias=True).to(device)
    out = mha(q, kv, kv, lens, need_weights=need_weights)
    assert out.shape == (2, 3, 8) and out.device.type == device.type
    _backward(out)
    out = mha(q, q, q, causal=True, need_weights=need_weights)
    _backward(out)
    dot = DotProductAttention(0.1).to(device)
    _backward(
        dot(
            q,
            kv,
            kv,
            torch.tensor([[1, 2, 5], [0, 0, 3]], device=device),
            need_weights=need_weights,
        )
    )
    assert kv.grad is not None and kv.grad.shape == kv.shape


def test_additive_and_luong_on_device(device):
    q = randn(2, 3, 4, device=device).requires_grad_()
    kv = randn(2, 5, 6, device=device).requires_grad_()
    lens = torch.tensor([3, 5], device=device)
    for module in (
        AdditiveAttention(7, 0.1, query_size=4, key_size=6),
        LuongAttention("general", 4, 6),
        LuongAttention("concat", 4, 6),
    ):
        out = module.to(device)(q, kv, kv, lens)
        assert out.shape == (2, 3, 6) and out.device.type == device.type
        _backward(out)
    _backward(
        masked_softmax(q, torch.tensor([3, 4], device=device), causal=True)
    )


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_the_argument_named():
    q, k = randn(2, 3, 8), randn(2, 5, 8)
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="num_hiddens.*num_heads"):
        MultiHeadAttention(10, 3)
    with pytest.raises(
        ValueError, match=r"valid_lens must have shape \(B,\)=\(2,\)"
    ):
        mha(q, k, k, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="valid_lens must have shape"):
        mha(q, k, k, torch.ones(2, 3, 5, dtype=torch.long))
    with pytest.raises(
        ValueError, match=r"valid_lens must have shape .*\(2, 3\)"
    ):
        mha(q, k, k, torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="valid_lens must be >= 0"):
        mha(q, k, k, torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match="valid_lens must be <= 5"):
        mha(q, k, k, torch.tensor([6, 2]))
    with pytest.raises(TypeError, match="valid_lens must hold integers"):
        mha(q, k, k, torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="valid_lens must be a torch.Tensor"):
        mha(q, k, k, [1, 2])
    with pytest.raises(
        ValueError, match="keys .* and values .* must have the same K"
    ):
        mha(q, k, randn(2, 4, 8))
    with pytest.raises(ValueError, match="queries must have shape"):
        mha(randn(2, 3, 7), k, k)
    with pytest.raises(ValueError, match="keys must have shape"):
        DotProductAttention()(q, randn(2, 5, 6), k)
    with pytest.raises(ValueError, match="queries must have shape"):
        mha(randn(3, 8), k, k)
    with pytest.raises(ValueError, match="batch size"):
        mha(q, randn(3, 5, 8), randn(3, 5, 8))
    with pytest.raises(ValueError, match="causal attention needs K >= Q"):
        DotProductAttention()(randn(2, 6, 8), k, k, causal=True)
    with pytest.raises(ValueError, match="X must have shape"):
        masked_softmax(randn(3, 4), None)
    with pytest.raises(ValueError, match="score must be"):
        LuongAttention("cosine", 4, 4)
    with pytest.raises(ValueError, match="query_size == key_size"):
        LuongAttention("dot", 4, 3)


def test_out_of_range_lengths_are_refused_on_the_cpu_and_act_clamped_elsewhere():
    """Documented choice: lengths are range-checked only on the CPU; elsewhere they act as if
    clamped to [0, K]. The fused kernel and the masks never read the checks, so they show what
    an unchecked length does."""
    q = randn(2, 3, 4)
    with pytest.raises(ValueError, match="valid_lens must be <= 3"):
        DotProductAttention()(q, q, q, torch.tensor([7, 1]))
    out_of_range, clamped = torch.tensor([7, -1]), torch.tensor([3, 0])
    assert torch.equal(
        attention_mask(out_of_range, 3, 3, True, q.device),
        attention_mask(clamped, 3, 3, True, q.device),
    )
    unchecked = fused_attention(q, q, q, out_of_range, False, 0.0)
    assert torch.isfinite(unchecked).all() and (unchecked[1] == 0).all()
    torch.testing.assert_close(
        unchecked,
        fused_attention(q, q, q, clamped, False, 0.0),
        rtol=0,
        atol=0,
    )
    meta = randn(
        2, 3, 4, device="meta"
    )  # no values to read: accepted, shape only
    assert DotProductAttention()(
        meta, meta, meta, torch.tensor([7, -1], device="meta")
    ).shape == (2, 3, 4)


@pytest.mark.parametrize("dim", [1, 2])
def test_kv_cache_extend_appends_positions_and_keeps_both_caches(dim):
    shape = (2, 3, 4, 5)
    past = KVCache(torch.randn(shape), torch.randn(shape))
    new_shape = list(shape)
    new_shape[dim] = 2
    new = KVCache(torch.randn(new_shape), torch.randn(new_shape))
    kept = [t.clone() for t in (*past, *new)]
    both = past.extend(new, dim=dim)
    for got, first, second in zip(both, past, new):
        assert got.shape[dim] == shape[dim] + 2
        assert torch.equal(got.narrow(dim, 0, shape[dim]), first)
        assert torch.equal(got.narrow(dim, shape[dim], 2), second)
    for before, after in zip(kept, (*past, *new)):
        assert torch.equal(before, after)


@pytest.mark.parametrize(
    "kv_width, error",
    [(0, ValueError), (3, ValueError), (2.5, TypeError), ("4", TypeError)],
)
def test_kv_width_is_checked_up_front(kv_width, error):
    # D = 8, H = 2: the head width is 4, so kv_width must be a multiple of 4
    # (0 used to mean "default D", 3 built and failed in forward).
    with pytest.raises(error, match="kv_width"):
        MultiHeadAttention(8, 2, kv_width=kv_width)
    assert MultiHeadAttention(8, 2, kv_width=4).W_k.out_features == 4


@pytest.mark.parametrize(
    "ours, theirs, error, match",
    [
        (
            lambda: nn.Linear(8, 8),
            lambda: nn.MultiheadAttention(8, 2),
            TypeError,
            "ours",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda: nn.Linear(8, 8),
            TypeError,
            "theirs",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda: nn.MultiheadAttention(8, 4),
            ValueError,
            "num_heads",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda: nn.MultiheadAttention(4, 2),
            ValueError,
            "embed_dim",
        ),
        (
            lambda: MultiHeadAttention(8, 2),
            lambda: nn.MultiheadAttention(8, 2, bias=True),
            ValueError,
            "bias",
        ),
        (
            lambda: MultiHeadAttention(8, 2, key_size=5),
            lambda: nn.MultiheadAttention(8, 2, bias=False),
            ValueError,
            "key_size",
        ),
        (
            lambda: MultiHeadAttention(8, 2, kv_width=4),
            lambda: nn.MultiheadAttention(8, 2, bias=False),
            ValueError,
            "kv_width",
        ),
    ],
)
def test_copy_weights_from_torch_checks_both_layers_before_copying(
    ours, theirs, error, match
):
    ours, theirs = ours(), theirs()
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    with pytest.raises(error, match=match):
        copy_weights_from_torch(ours, theirs)
    for name, value in ours.state_dict().items():
        assert torch.equal(value, before[name])
