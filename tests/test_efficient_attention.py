"""Tests of course_pkg.nn.grouped_query: blockwise attention and grouped-query attention.

Peers nobody here wrote: torch.nn.functional.scaled_dot_product_attention (with a boolean mask,
and with enable_gqa=True); the course's own MultiHeadAttention and masked_softmax for the
conventions (a query with no valid key gets a zero output).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

from course_pkg.kernels.blockwise import blockwise_attention
from course_pkg.nn.attention import MultiHeadAttention
from course_pkg.nn.grouped_query import GroupedQueryAttention
from course_pkg.nn.masks import masked_softmax
from course_pkg.nn.rotary import RotaryEmbedding

F64 = torch.float64


def _mask(valid_lens, batch, queries, keys, causal):
    """(B, Q, K) bool mask built independently of the package: True = may attend."""
    key_pos = torch.arange(keys)
    mask = torch.ones(batch, queries, keys, dtype=torch.bool)
    if valid_lens is not None:
        lens = (
            valid_lens
            if valid_lens.dim() == 2
            else valid_lens[:, None].expand(batch, queries)
        )
        mask &= key_pos[None, None, :] < lens[:, :, None]
    if causal:
        query_pos = torch.arange(queries) + keys - queries
        mask &= key_pos[None, :] <= query_pos[:, None]
    return mask


def _sdpa_reference(q, k, v, valid_lens, causal):
    """torch's SDPA with the course's convention for rows with nothing valid (zero output)."""
    batch, _, queries, _ = q.shape
    mask = _mask(valid_lens, batch, queries, k.shape[2], causal)[
        :, None
    ]  # (B, 1, Q, K)
    has_any = mask.any(-1, keepdim=True)
    return (
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_any)
        * has_any
    )


def _lens(kind, batch, queries, keys, generator):
    if kind == "none":
        return None
    shape = (batch,) if kind == "per_example" else (batch, queries)
    return torch.randint(0, keys + 1, shape, generator=generator)


# ----------------------------------------------------------------------------- blockwise attention


@settings(max_examples=80)
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 3),
    queries=st.integers(1, 9),
    keys=st.integers(1, 13),
    width=st.sampled_from([1, 4, 8]),
    value_width=st.sampled_from([1, 3, 8]),
    block_size=st.integers(1, 16),
    causal=st.booleans(),
    lens_kind=st.sampled_from(["none", "per_example", "per_query"]),
    seed=st.integers(0, 2**16),
)
def test_blockwise_equals_sdpa_float64(
    batch,
    heads,
    queries,
    keys,
    width,
    value_width,
    block_size,
    causal,
    lens_kind,
    seed,
):
    """Any block size (K a multiple of it or not), causal or not, any padding: within 1e-10."""
    if causal and keys < queries:
        causal = False
    generator = torch.Generator().manual_seed(seed)
    q = (
        torch.randn(
            batch, heads, queries, width, dtype=F64, generator=generator
        )
        * 3
    )
    k = (
        torch.randn(batch, heads, keys, width, dtype=F64, generator=generator)
        * 3
    )
    v = torch.randn(
        batch, heads, keys, value_width, dtype=F64, generator=generator
    )
    valid_lens = _lens(lens_kind, batch, queries, keys, generator)
    ours = blockwise_attention(
        q, k, v, block_size, causal=causal, valid_lens=valid_lens
    )
    theirs = _sdpa_reference(q, k, v, valid_lens, causal)
    assert ours.shape == (batch, heads, queries, value_width)
    assert ours.dtype == F64
    assert torch.isfinite(ours).all()
    assert (ours - theirs).abs().max() <= 1e-10


BLOCK_SIZES = [1, 7, 16, 50, 64, 200]
CAUSAL = [False, True]
LENS_KINDS = ["none", "per_example", "per_query"]
# tests/measure_tolerances.py, float32 against float64 (paths default/avx2, with and without MKL_CBWR=COMPATIBLE, 1/2/4 threads):
# blockwise errs by at most 5.5e-7, sdpa by 6.5e-7, they differ by at most 8.3e-7; bound = 10 x
# the sum of the errors, rounded up. Dropping the last key moves an output by 0.26 at least.
BLOCKWISE_FLOAT32_BOUND = 2e-5


def blockwise_and_sdpa(
    block_size, causal, lens_kind, dtype=torch.float32, drop_last=False
):
    """(blockwise, sdpa) on inputs drawn in float32 and cast to ``dtype``. ``drop_last``: a
    deliberate bug, the blockwise side never sees the last key (an off-by-one at a block end)."""
    generator = torch.Generator().manual_seed(block_size)
    q = torch.randn(2, 3, 37, 16, generator=generator).to(dtype)
    k = torch.randn(2, 3, 50, 16, generator=generator).to(dtype)
    v = torch.randn(2, 3, 50, 8, generator=generator).to(dtype)
    valid_lens = _lens(lens_kind, 2, 37, 50, generator)
    keys = 49 if drop_last else 50
    ours = blockwise_attention(
        q,
        k[:, :, :keys],
        v[:, :, :keys],
        block_size,
        causal=causal,
        valid_lens=None if valid_lens is None else valid_lens.clamp(max=keys),
    )
    theirs = _sdpa_reference(q, k, v, valid_lens, causal)
    return ours, theirs


@pytest.mark.numerics
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("lens_kind", LENS_KINDS)
def test_blockwise_equals_sdpa_float32(block_size, causal, lens_kind):
    ours, theirs = blockwise_and_sdpa(block_size, causal, lens_kind)
    assert ours.dtype == torch.float32
    assert (ours - theirs).abs().max() <= BLOCKWISE_FLOAT32_BOUND


def test_blockwise_matches_the_courses_masked_softmax():
    """Same numbers as the explicit path of the course, per-query lengths and causal mask included."""
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 2, 6, 4, dtype=F64),
        torch.randn(2, 2, 9, 4, dtype=F64),
        torch.randn(2, 2, 9, 3, dtype=F64),
    )
    valid_lens = torch.tensor([[0, 9, 4, 2, 7, 1], [3, 3, 0, 8, 9, 5]])
    weights = masked_softmax(
        (q @ k.transpose(2, 3) / 2).reshape(4, 6, 9),
        valid_lens.repeat_interleave(2, dim=0),
        causal=True,
    )
    explicit = weights.reshape(2, 2, 6, 9) @ v
    ours = blockwise_attention(q, k, v, 4, causal=True, valid_lens=valid_lens)
    assert (ours - explicit).abs().max() <= 1e-12


def test_blockwise_rows_with_nothing_valid_are_zero_and_finite_even_in_half():
    q = torch.full(
        (1, 1, 3, 4), 120.0, dtype=torch.float16
    )  # scores near the float16 maximum
    k = torch.full((1, 1, 5, 4), 120.0, dtype=torch.float16)
    v = torch.ones(1, 1, 5, 2, dtype=torch.float16)
    out = blockwise_attention(q, k, v, 2, valid_lens=torch.tensor([[0, 3, 0]]))
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, 0, 0], torch.zeros(2, dtype=torch.float16))
    assert torch.equal(out[0, 0, 1], torch.ones(2, dtype=torch.float16))


class _LargestTensor(TorchFunctionMode):
    """Records the largest number of elements of any tensor a torch function returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for item in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(item, torch.Tensor):
                self.largest = max(self.largest, item.numel())
        return result


@pytest.mark.parametrize("poison", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_padding_never_reaches_the_output(poison, causal):
    # NaN/inf in padded keys and values: the output is that of clean padding,
    # finite, and equal to torch's attention on the valid keys alone.
    torch.manual_seed(0)
    B, H, Q, K, d = 2, 2, 4, 7, 8
    q = torch.randn(B, H, Q, d, dtype=torch.float64)
    k = torch.randn(B, H, K, d, dtype=torch.float64)
    v = torch.randn(B, H, K, d, dtype=torch.float64)
    lens = torch.tensor([5, 6])
    clean = blockwise_attention(q, k, v, 3, causal=causal, valid_lens=lens)
    k_bad, v_bad = k.clone(), v.clone()
    for b, n in enumerate(lens.tolist()):
        k_bad[b, :, n:], v_bad[b, :, n:] = poison, poison
    dirty = blockwise_attention(
        q, k_bad, v_bad, 3, causal=causal, valid_lens=lens
    )
    assert torch.isfinite(dirty).all()
    assert torch.equal(dirty, clean)
    for b, n in enumerate(lens.tolist()):
        # causal with K > Q: query i sees keys up to i + K - Q, then padding
        keep = torch.ones(Q, n, dtype=torch.bool)
        if causal:
            keep = torch.arange(n)[None] <= torch.arange(Q)[:, None] + K - Q
        reference = F.scaled_dot_product_attention(
            q[b : b + 1],
            k[b : b + 1, :, :n],
            v[b : b + 1, :, :n],
            attn_mask=keep,
        )
        torch.testing.assert_close(dirty[b : b + 1], reference)


@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_never_builds_more_than_a_block_of_scores(causal):
    """Every intermediate has at most B*H*Q*max(block_size, d_v) elements; explicit attention has B*H*Q*K."""
    batch, heads, queries, keys, width, block_size = 2, 2, 64, 256, 8, 16
    q, k = (
        torch.randn(batch, heads, queries, width),
        torch.randn(batch, heads, keys, width),
    )
    v = torch.randn(batch, heads, keys, width)
    with _LargestTensor() as blockwise:
        blockwise_attention(
            q,
            k,
            v,
            block_size,
            causal=causal,
            valid_lens=torch.tensor([200, 256]),
        )
    with _LargestTensor() as explicit:
        torch.softmax(q @ k.transpose(2, 3), dim=-1) @ v
    assert blockwise.largest <= batch * heads * queries * max(
        block_size, width
    )
    assert (
        explicit.largest == batch * heads * queries * keys
    )  # the mode does see the big matrix


def test_blockwise_gradcheck():
    torch.manual_seed(0)
    q = torch.randn(2, 2, 4, 3, dtype=F64, requires_grad=True)
    k = torch.randn(2, 2, 7, 3, dtype=F64, requires_grad=True)
    v = torch.randn(2, 2, 7, 2, dtype=F64, requires_grad=True)
    lens = torch.tensor([[7, 0, 3, 5], [1, 2, 6, 4]])
    assert torch.autograd.gradcheck(
        lambda q, k, v: blockwise_attention(q, k, v, 3, True, lens), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: blockwise_attention(q, k, v, 2), (q, k, v)
    )


def test_blockwise_forward_and_backward_on_device(device):
    q = torch.randn(2, 2, 4, 3, device=device, requires_grad=True)
    kv = torch.randn(2, 2, 6, 3, device=device, requires_grad=True)
    out = blockwise_attention(
        q,
        kv,
        kv,
        4,
        causal=True,
        valid_lens=torch.tensor([6, 2], device=device),
    )
    assert out.shape == (2, 2, 4, 3) and out.device.type == device.type
    out.sum().backward()
    assert q.grad.shape == q.shape


# Each case: the positional arguments made from good (q, k, v), the keyword
# arguments, the error and a word of its message.
BAD_BLOCKWISE_CALLS = [
    (lambda q, k, v: (q.numpy(), k, v, 2), {}, TypeError, "queries"),
    (lambda q, k, v: (q[0], k, v, 2), {}, ValueError, "queries"),
    (lambda q, k, v: (q, k[..., :2], v, 2), {}, ValueError, "keys"),
    (lambda q, k, v: (q, k[:1], v, 2), {}, ValueError, "keys"),
    (lambda q, k, v: (q, k, v[:, :, :3], 2), {}, ValueError, "values"),
    (lambda q, k, v: (q, k.double(), v, 2), {}, TypeError, "dtype"),
    (lambda q, k, v: (q.long(), k, v, 2), {}, TypeError, "queries"),
    (lambda q, k, v: (q, k, v.int(), 2), {}, TypeError, "values"),
    (lambda q, k, v: (q, k, v, 0), {}, ValueError, "block_size"),
    (lambda q, k, v: (q, k, v, 2.0), {}, TypeError, "block_size"),
    (
        lambda q, k, v: (q, k[:, :, :3], v[:, :, :3], 2),
        {"causal": True},
        ValueError,
        "K >= Q",
    ),
]


@pytest.mark.parametrize("args, kwargs, error, match", BAD_BLOCKWISE_CALLS)
def test_blockwise_refuses_bad_input(args, kwargs, error, match):
    q, k, v = (
        torch.randn(2, 2, 4, 3),
        torch.randn(2, 2, 6, 3),
        torch.randn(2, 2, 6, 5),
    )
    with pytest.raises(error, match=match):
        blockwise_attention(*args(q, k, v), **kwargs)


@pytest.mark.parametrize(
    "valid_lens, error",
    [
        (torch.tensor([1.0, 2.0]), TypeError),  # not integers
        (torch.tensor([1, 2, 3]), ValueError),  # not (B,)
        (torch.tensor([1, 7]), ValueError),  # above K = 6
        (torch.tensor([-1, 2]), ValueError),  # negative
        ([1, 2], TypeError),  # not a tensor
    ],
)
def test_blockwise_refuses_bad_valid_lens(valid_lens, error):
    q, k = torch.randn(2, 2, 4, 3), torch.randn(2, 2, 6, 3)
    with pytest.raises(error, match="valid_lens"):
        blockwise_attention(q, k, k, 2, valid_lens=valid_lens)


# ----------------------------------------------------------------------------- grouped-query attention


def _split(X, heads):
    batch, steps, width = X.shape
    return X.view(batch, steps, heads, width // heads).transpose(
        1, 2
    )  # (B, heads, T, d)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_matches_sdpa_enable_gqa(num_kv_heads, causal):
    torch.manual_seed(num_kv_heads)
    gqa = GroupedQueryAttention(
        32, 8, bias=True, num_kv_heads=num_kv_heads, key_size=5, value_size=6
    ).double()
    queries = torch.randn(3, 7, 32, dtype=F64)
    keys, values = (
        torch.randn(3, 9, 5, dtype=F64),
        torch.randn(3, 9, 6, dtype=F64),
    )
    valid_lens = torch.tensor(
        [9, 4, 3]
    )  # every query keeps a valid key, so SDPA has no NaN row
    ours = gqa(queries, keys, values, valid_lens, causal=causal)
    mask = _mask(valid_lens, 3, 7, 9, causal)[:, None]
    heads = F.scaled_dot_product_attention(
        _split(gqa.W_q(queries), 8),
        _split(gqa.W_k(keys), num_kv_heads),
        _split(gqa.W_v(values), num_kv_heads),
        attn_mask=mask,
        enable_gqa=True,
    )  # (B, H, Q, d)
    theirs = gqa.W_o(heads.transpose(1, 2).reshape(3, 7, 32))
    assert ours.shape == (3, 7, 32)
    assert (ours - theirs).abs().max() <= 1e-12
    assert gqa.attention_weights.shape == (3, 8, 7, 9)


@pytest.mark.parametrize("head_width", [3, 8, 12])
@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_gqa_heads_need_not_be_as_wide_as_the_model(head_width, num_kv_heads):
    # Gemma and Qwen3: H d != D. W_q (D -> H d), W_k and W_v (D -> G d),
    # W_o (H d -> D); the attention between them is SDPA's with enable_gqa.
    torch.manual_seed(head_width)
    gqa = GroupedQueryAttention(
        20, 4, num_kv_heads=num_kv_heads, head_width=head_width
    ).double()
    assert gqa.W_q.weight.shape == (4 * head_width, 20)
    assert gqa.W_k.weight.shape == (num_kv_heads * head_width, 20)
    assert gqa.W_o.weight.shape == (20, 4 * head_width)
    queries, keys = (
        torch.randn(2, 5, 20, dtype=F64),
        torch.randn(2, 7, 20, dtype=F64),
    )
    ours = gqa(queries, keys, keys, causal=True)
    heads = F.scaled_dot_product_attention(
        _split(gqa.W_q(queries), 4),
        _split(gqa.W_k(keys), num_kv_heads),
        _split(gqa.W_v(keys), num_kv_heads),
        attn_mask=_mask(None, 2, 5, 7, True)[:, None],
        enable_gqa=True,
    )  # (B, H, Q, d)
    theirs = gqa.W_o(heads.transpose(1, 2).reshape(2, 5, 4 * head_width))
    assert ours.shape == (2, 5, 20)
    assert (ours - theirs).abs().max() <= 1e-12
    assert gqa.kv_cache_numel(2, 7) == 2 * 2 * 7 * num_kv_heads * head_width


def test_gqa_without_a_head_width_still_needs_heads_that_divide_the_width():
    with pytest.raises(ValueError, match="divisible"):
        GroupedQueryAttention(20, 3)
    with pytest.raises(ValueError, match="head_width"):
        GroupedQueryAttention(20, 3, head_width=0)
    assert GroupedQueryAttention(20, 3, head_width=4).W_q.out_features == 12


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_with_as_many_kv_heads_is_the_courses_multihead_attention(causal):
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 4, bias=True).eval()
    gqa = GroupedQueryAttention(24, 4, bias=True, num_kv_heads=4).eval()
    gqa.load_state_dict(mha.state_dict())  # same parameter names and shapes
    queries, keys = torch.randn(2, 5, 24), torch.randn(2, 6, 24)
    valid_lens = torch.tensor([[6, 0, 2, 5, 1], [3, 3, 6, 4, 2]])
    ours = gqa(queries, keys, keys, valid_lens, causal=causal)
    theirs = mha(queries, keys, keys, valid_lens, causal=causal)
    assert ours.dtype == torch.float64
    assert (ours - theirs).abs().max() <= 1e-12
    assert (gqa.attention_weights - mha.attention_weights).abs().max() <= 1e-12


def test_gqa_kv_cache_shrinks_by_heads_over_kv_heads():
    batch, steps, width, heads = 2, 11, 64, 8
    keys = torch.randn(batch, steps, width)
    full = GroupedQueryAttention(width, heads).kv_cache_numel(batch, steps)
    assert (
        full == 2 * batch * steps * width
    )  # multi-head attention caches K and V of width D
    for num_kv_heads in (8, 4, 2, 1):
        gqa = GroupedQueryAttention(width, heads, num_kv_heads=num_kv_heads)
        cached_keys, cached_values = gqa.cache(keys, keys)
        assert cached_keys.shape == (
            batch,
            num_kv_heads,
            steps,
            width // heads,
        )
        assert (
            cached_keys.numel() + cached_values.numel()
            == gqa.kv_cache_numel(batch, steps)
        )
        assert full / gqa.kv_cache_numel(batch, steps) == heads / num_kv_heads
        assert gqa.W_k.weight.numel() == width * width * num_kv_heads // heads


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_gqa_step_by_step_with_a_cache_equals_one_causal_call(num_kv_heads):
    torch.manual_seed(1)
    gqa = GroupedQueryAttention(16, 4, num_kv_heads=num_kv_heads).double()
    X = torch.randn(2, 6, 16, dtype=F64)
    whole = gqa(X, X, X, causal=True)
    cached_keys, cached_values = gqa.cache(X, X)
    steps = [
        gqa.attend(
            X[:, t : t + 1],
            (cached_keys[:, :, : t + 1], cached_values[:, :, : t + 1]),
            causal=True,
        )
        for t in range(6)
    ]
    assert (torch.cat(steps, dim=1) - whole).abs().max() <= 1e-12


def test_gqa_masked_query_is_finite():
    gqa = GroupedQueryAttention(8, 4, num_kv_heads=2)
    X = torch.randn(2, 3, 8)
    out = gqa(X, X, X, torch.tensor([[0, 1, 3], [2, 0, 0]]))
    assert torch.isfinite(out).all()
    assert torch.equal(gqa.attention_weights[0, :, 0], torch.zeros(4, 3))


def test_gqa_gradcheck():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(8, 4, num_kv_heads=2, bias=True).double()
    q = torch.randn(2, 3, 8, dtype=F64, requires_grad=True)
    k = torch.randn(2, 5, 8, dtype=F64, requires_grad=True)
    v = torch.randn(2, 5, 8, dtype=F64, requires_grad=True)
    lens = torch.tensor([5, 2])
    assert torch.autograd.gradcheck(
        lambda q, k, v: gqa(q, k, v, lens, causal=True), (q, k, v)
    )


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_hiddens": 10, "num_heads": 4}, ValueError, "num_hiddens"),
        (
            {"num_hiddens": 16, "num_heads": 4, "num_kv_heads": 3},
            ValueError,
            "num_kv_heads",
        ),
        (
            {"num_hiddens": 16, "num_heads": 4, "num_kv_heads": 0},
            ValueError,
            "num_kv_heads",
        ),
        (
            {"num_hiddens": 16, "num_heads": 4, "num_kv_heads": 2.0},
            TypeError,
            "num_kv_heads",
        ),
        ({"num_hiddens": 16, "num_heads": 0}, ValueError, "num_heads"),
    ],
)
def test_gqa_refuses_bad_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        GroupedQueryAttention(**kwargs)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, X: m(X.tolist(), X, X), TypeError, "queries"),
        (lambda m, X: m(X[..., :4], X, X), ValueError, "queries"),
        (lambda m, X: m(X, X[0], X), ValueError, "keys"),
        (lambda m, X: m(X, X[:1], X[:1]), ValueError, "keys"),
        (lambda m, X: m(X, X, X[:, :2]), ValueError, "values"),
        (
            lambda m, X: m(X, X, X, torch.tensor([1, 4])),
            ValueError,
            "valid_lens",
        ),
        (
            lambda m, X: m(X, X, X, torch.tensor([[1, 2]])),
            ValueError,
            "valid_lens",
        ),
        (
            lambda m, X: m(X, X[:, :2], X[:, :2], causal=True),
            ValueError,
            "K >= Q",
        ),
    ],
)
def test_gqa_refuses_bad_input_before_computing(call, error, match):
    gqa = GroupedQueryAttention(8, 4, num_kv_heads=2)
    X = torch.randn(2, 3, 8)
    with pytest.raises(error, match=match):
        call(gqa, X)
    assert gqa.attention_weights is None  # nothing ran


@pytest.mark.parametrize(
    "call, error, match",
    [
        # queries of the wrong width (torch: a RuntimeError in W_q)
        (lambda m, X, c: m.attend(X[..., :4], c), ValueError, "queries"),
        (lambda m, X, c: m.attend(X.tolist(), c), TypeError, "queries"),
        (lambda m, X, c: m.attend(X, c.keys), TypeError, "cache"),
        (
            lambda m, X, c: m.attend(X, (c.keys[:1], c.values)),
            ValueError,
            "B=2",
        ),
        (
            lambda m, X, c: m.attend(X, (c.keys, c.values[:, :1])),
            ValueError,
            "G=2",
        ),
        (
            lambda m, X, c: m.attend(X, (c.keys, c.values[:, :, :2])),
            ValueError,
            "K=3",
        ),
        (lambda m, X, c: m.attend(X.double(), c), TypeError, "dtype"),
        # B is the caller's, not B * H after repeating the lengths per head
        (
            lambda m, X, c: m.attend(X, c, torch.tensor([1, 2, 3])),
            ValueError,
            r"\(B,\)=\(2,\)",
        ),
        (
            lambda m, X, c: m.attend(X, c, torch.tensor([1, 4])),
            ValueError,
            "valid_lens",
        ),
        (
            lambda m, X, c: m.attend(X, c, torch.tensor([1.0, 2.0])),
            TypeError,
            "valid_lens",
        ),
        (
            lambda m, X, c: m.attend(torch.cat([X, X], 1), c, causal=True),
            ValueError,
            "K >= Q",
        ),
    ],
)
def test_gqa_attend_checks_its_inputs_before_computing(call, error, match):
    gqa = GroupedQueryAttention(8, 4, num_kv_heads=2)
    X = torch.randn(2, 3, 8)
    cache = gqa.cache(X, X)  # keys and values (2, 2, 3, 2)
    with pytest.raises(error, match=match):
        call(gqa, X, cache)
    assert gqa.attention_weights is None  # nothing ran


def test_scale_is_one_over_sqrt_head_width():
    """A 1-key-per-block run of a single query against two keys gives softmax(q.k / sqrt(d)) exactly."""
    q = torch.tensor([[[[2.0, 0.0, 0.0, 0.0]]]], dtype=F64)
    k = torch.tensor(
        [[[[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]], dtype=F64
    )
    v = torch.tensor([[[[1.0], [0.0]]]], dtype=F64)
    expected = math.exp(1.0) / (math.exp(1.0) + 1.0)  # q.k / sqrt(4) = 1
    assert abs(blockwise_attention(q, k, v, 1).item() - expected) <= 1e-15


# ----------------------------------------------------------------------------- rotary positions inside GQA


def test_gqa_with_rotary_matches_sdpa_on_rotated_queries_and_keys():
    torch.manual_seed(3)
    gqa = GroupedQueryAttention(32, 8, num_kv_heads=2, rotary=True).double()
    X = torch.randn(3, 7, 32, dtype=F64)
    rope = RotaryEmbedding(4)
    queries = rope(_split(gqa.W_q(X), 8))
    keys, values = rope(_split(gqa.W_k(X), 2)), _split(gqa.W_v(X), 2)
    heads = F.scaled_dot_product_attention(
        queries, keys, values, is_causal=True, enable_gqa=True
    )
    expected = gqa.W_o(heads.transpose(1, 2).reshape(3, 7, 32))
    assert (gqa(X, X, X, causal=True) - expected).abs().max() <= 1e-12
    plain = GroupedQueryAttention(32, 8, num_kv_heads=2).double()
    plain.load_state_dict(
        gqa.state_dict()
    )  # RotaryEmbedding has no parameters
    assert (
        plain(X, X, X, causal=True) - expected
    ).abs().max() > 1e-3  # the rotation does something
    # A single position is position 0, where the rotation is the identity.
    assert (
        plain(X[:, :1], X[:, :1], X[:, :1]) - gqa(X[:, :1], X[:, :1], X[:, :1])
    ).abs().max() <= 1e-12


def test_gqa_with_rotary_step_by_step_with_a_growing_cache_equals_one_causal_call():
    torch.manual_seed(4)
    gqa = GroupedQueryAttention(16, 4, num_kv_heads=2, rotary=True).double()
    X = torch.randn(2, 6, 16, dtype=F64)
    cache = None
    outputs = []
    for t in range(6):
        cache = gqa.cache(X[:, t : t + 1], X[:, t : t + 1], past=cache)
        assert cache.keys.shape == (2, 2, t + 1, 4)
        outputs.append(gqa.attend(X[:, t : t + 1], cache, causal=True))
    assert (
        torch.cat(outputs, dim=1) - gqa(X, X, X, causal=True)
    ).abs().max() <= 1e-12


def test_gqa_with_rotary_forward_and_backward_on_device(device):
    gqa = GroupedQueryAttention(8, 4, num_kv_heads=2, rotary=True).to(device)
    X = torch.randn(2, 5, 8, device=device, requires_grad=True)
    out = gqa(X, X, X, torch.tensor([5, 2], device=device), causal=True)
    assert out.shape == (2, 5, 8) and out.device.type == device.type
    out.sum().backward()
