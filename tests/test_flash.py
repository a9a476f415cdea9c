"""course_pkg.kernels.flash: FlashAttention's forward, backward and byte count, in
PyTorch.

- gradcheck in float64 of the autograd Function, with every mask;
- parity with torch's scaled_dot_product_attention (SDPA), forward and
  backward, in float32: masks, causal, odd lengths, T not a multiple of the
  block, fully masked rows (SDPA gives them 0, the course's rule too);
- hypothesis over shapes, blocks and masks (derandomized) against the
  explicit float64 path built on course_pkg.nn.masks.masked_softmax;
- the byte counter against its formulas, causal block skipping counted;
- what the Function saves (Q, K, V, O, LSE, nothing T x T);
- meta device, bad input.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.kernels.flash import (
    IOCounter,
    flash_attention,
    flash_backward,
    flash_forward,
    flash_forward_bytes,
    standard_attention,
    standard_attention_bytes,
)
from course_pkg.nn.masks import masked_softmax

# float32 bounds, from the float64 reference: over PARITY_CASES the largest
# errors were, forward and gradients, ours 4.0e-7 and 1.3e-6, SDPA's 5.5e-7
# and 2.8e-6, alike on the native path and ATEN_CPU_CAPABILITY=default, on 1
# and 2 threads (AVX2 CPU). About x10 room:
FORWARD_BOUND = 1e-5
GRADIENT_BOUND = 3e-5


def reference(queries, keys, values, valid_lens=None, causal=False):
    """Explicit attention through the course's masked softmax (float64 in,
    float64 out): softmax(Q K^T / sqrt(d)) V with masked rows all 0."""
    B, H, num_queries, d = queries.shape
    scores = queries @ keys.transpose(2, 3) / math.sqrt(d)
    lens = None
    if valid_lens is not None:
        lens = valid_lens.repeat_interleave(H, dim=0)
    weights = masked_softmax(
        scores.reshape(B * H, num_queries, -1), lens, causal
    )
    return weights.view(B, H, num_queries, -1) @ values


def sdpa_mask(valid_lens, num_queries, num_keys, causal):
    """(B or 1, 1, Q, K) bool mask for SDPA, True = may attend."""
    mask = torch.ones(1, 1, num_queries, num_keys, dtype=torch.bool)
    if valid_lens is not None:
        lens = valid_lens.reshape(valid_lens.shape[0], -1)
        mask = torch.arange(num_keys) < lens[:, None, :, None]
    if causal:
        offset = num_keys - num_queries
        rows = torch.arange(num_queries)[:, None] + offset
        mask = mask & (torch.arange(num_keys) <= rows)
    return mask


def inputs(B, H, num_queries, num_keys, d, d_v, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(B, H, num_queries, d), (B, H, num_keys, d)]
    shapes.append((B, H, num_keys, d_v))
    return [
        torch.randn(shape, generator=generator, dtype=dtype).requires_grad_()
        for shape in shapes
    ]


# (B, H, Q, K, d, d_v, valid_lens, causal, block_q, block_k)
PARITY_CASES = {
    "plain": (2, 2, 64, 64, 16, 16, None, False, 16, 16),
    "T not a multiple": (2, 3, 37, 37, 8, 8, None, False, 16, 8),
    "causal": (1, 2, 50, 50, 16, 16, None, True, 16, 16),
    "causal, Q < K": (2, 1, 19, 45, 8, 4, None, True, 8, 16),
    "lengths (B,)": (
        3,
        2,
        30,
        41,
        8,
        8,
        torch.tensor([41, 7, 1]),
        False,
        8,
        8,
    ),
    "lengths with 0": (2, 2, 17, 17, 8, 8, torch.tensor([0, 9]), True, 4, 8),
    "lengths (B, Q)": (
        2,
        1,
        5,
        9,
        4,
        4,
        torch.tensor([[0, 1, 2, 9, 3], [9, 0, 0, 4, 2]]),
        False,
        2,
        4,
    ),  # fmt: skip
    "one block": (1, 1, 7, 11, 8, 8, None, False, 64, 64),
    "blocks of 1": (1, 2, 6, 6, 4, 4, torch.tensor([4]), True, 1, 1),
}


@pytest.mark.numerics
@pytest.mark.parametrize("case", PARITY_CASES)
def test_float32_parity_with_sdpa_and_the_float64_reference(case):
    B, H, Tq, Tk, d, d_v, lens, causal, bq, bk = PARITY_CASES[case]
    ours = inputs(B, H, Tq, Tk, d, d_v, torch.float32)
    peer = [x.detach().clone().requires_grad_() for x in ours]
    exact = [x.detach().double().requires_grad_() for x in ours]
    out = flash_attention(*ours, lens, causal, bq, bk)
    mask = sdpa_mask(lens, Tq, Tk, causal)
    out_sdpa = F.scaled_dot_product_attention(*peer, attn_mask=mask)
    out_exact = reference(*exact, lens, causal)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, ours, grad)
    grads_sdpa = torch.autograd.grad(out_sdpa, peer, grad)
    grads_exact = torch.autograd.grad(out_exact, exact, grad.double())
    assert torch.isfinite(out).all() and all(g.isfinite().all() for g in grads)
    for result in (out, out_sdpa):
        error = (result.double() - out_exact).abs().max().item()
        assert error < FORWARD_BOUND, error
    for result in (grads, grads_sdpa):
        for got, want in zip(result, grads_exact):
            error = (got.double() - want).abs().max().item()
            assert error < GRADIENT_BOUND, error


def test_the_bound_catches_probabilities_rounded_to_half_precision():
    # A real kernel bug: P cast to float16 before P V in a float32 kernel.
    q, k, v = (x.detach() for x in inputs(2, 2, 64, 64, 16, 16, torch.float32))
    weights = torch.softmax(q @ k.transpose(2, 3) / 4.0, dim=-1)
    buggy = weights.half().float() @ v
    exact = reference(q.double(), k.double(), v.double())
    assert (buggy.double() - exact).abs().max().item() > FORWARD_BOUND
    assert (flash_attention(q, k, v).double() - exact).abs().max() < 1e-6


GRADCHECK_CASES = [
    (None, False, 3, 2),
    (None, True, 2, 3),
    (torch.tensor([5, 0]), False, 4, 4),
    (torch.tensor([[1, 2, 0, 6], [6, 6, 3, 2]]), True, 2, 5),
]


@pytest.mark.parametrize("lens, causal, bq, bk", GRADCHECK_CASES)
def test_gradcheck_float64(lens, causal, bq, bk):
    q, k, v = inputs(2, 1, 4, 6, 3, 2, torch.float64, seed=3)
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, lens, causal, bq, bk),
        (q, k, v),
    )


@settings(derandomize=True, max_examples=30)
@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 2),
    num_queries=st.integers(1, 20),
    extra_keys=st.integers(0, 12),
    width=st.integers(1, 9),
    block_q=st.integers(1, 24),
    block_k=st.integers(1, 24),
    causal=st.booleans(),
    lens_kind=st.sampled_from(["none", "per example", "per query"]),
    seed=st.integers(0, 2**16),
)
def test_matches_the_explicit_path_for_any_shape(
    batch, heads, num_queries, extra_keys, width, block_q, block_k, causal,
    lens_kind, seed,
):  # fmt: skip
    num_keys = num_queries + extra_keys
    q, k, v = inputs(batch, heads, num_queries, num_keys, width, width,
                     torch.float64, seed)  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    lens = None
    if lens_kind != "none":
        shape = (
            (batch,) if lens_kind == "per example" else (batch, num_queries)
        )
        lens = torch.randint(0, num_keys + 1, shape, generator=generator)
    out = flash_attention(q, k, v, lens, causal, block_q, block_k)
    want = reference(q, k, v, lens, causal)
    assert (out - want).abs().max() < 1e-12
    grad = torch.randn(out.shape, generator=generator, dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), grad)
    expected = torch.autograd.grad(want, (q, k, v), grad)
    for a, b in zip(got, expected):
        assert (a - b).abs().max() < 1e-12


def test_a_query_that_sees_nothing_gets_zero_output_and_gradient():
    q, k, v = inputs(1, 1, 3, 4, 2, 2, torch.float32)
    lens = torch.tensor([[0, 2, 0]])
    out = flash_attention(q, k, v, lens, False, 2, 2)
    out.sum().backward()
    assert out[0, 0, 0].eq(0).all() and out[0, 0, 2].eq(0).all()
    assert q.grad[0, 0, 0].eq(0).all() and q.grad.isfinite().all()
    _, lse = flash_forward(q.detach(), k.detach(), v.detach(), lens)
    assert lse[0, 0, 0] == math.inf and lse[0, 0, 1].isfinite()


# ------------------------------------------------------------------- counts


@pytest.mark.parametrize(
    "T, d, block_q, block_k",
    [(64, 16, 16, 16), (100, 8, 32, 8), (128, 32, 128, 32), (33, 4, 1, 33)],
)
def test_the_byte_count_is_the_formula(T, d, block_q, block_k):
    q, k, v = (torch.randn(1, 1, T, d) for _ in range(3))
    counter = IOCounter()
    flash_forward(q, k, v, block_q=block_q, block_k=block_k, counter=counter)
    assert counter.total == flash_forward_bytes(T, T, d, block_q, 4)
    counter = IOCounter()
    standard_attention(q, k, v, counter)
    assert counter.total == standard_attention_bytes(T, T, d, 4)


@pytest.mark.parametrize("blocks", [1, 2, 5, 8])
def test_causal_skips_the_blocks_above_the_diagonal(blocks):
    T, size = 16 * blocks, 16
    q = torch.randn(1, 1, T, 8)
    counter = IOCounter()
    flash_forward(q, q, q, None, True, size, size, counter)
    assert counter.skipped_blocks == blocks * (blocks - 1) // 2
    assert counter.visited_blocks == blocks * (blocks + 1) // 2
    out, lse = flash_forward(q, q, q, None, True, size, size)
    grad_counter = IOCounter()
    flash_backward(q, q, q, out, lse, out, None, True, size, size,
                   grad_counter)  # fmt: skip
    assert grad_counter.skipped_blocks == counter.skipped_blocks


def test_the_function_saves_q_k_v_o_and_lse_only():
    q, k, v = inputs(2, 2, 64, 64, 8, 8, torch.float32)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(tuple(t.shape)) or t, lambda t: t
    ):
        flash_attention(q, k, v, None, True, 16, 16)
    assert sorted(saved) == sorted([(2, 2, 64, 8)] * 4 + [(2, 2, 64)]), saved


def test_meta_device_forward_and_backward():
    meta = torch.device("meta")
    q = torch.randn(2, 3, 10, 8, device=meta, requires_grad=True)
    k = torch.randn(2, 3, 12, 8, device=meta, requires_grad=True)
    v = torch.randn(2, 3, 12, 4, device=meta, requires_grad=True)
    lens = torch.tensor([3, 12], device=meta)
    out = flash_attention(q, k, v, lens, True, 4, 5)
    assert out.shape == (2, 3, 10, 4) and out.device == meta
    out.sum().backward()
    assert q.grad.shape == q.shape and v.grad.device == meta


def flash_arguments(
    num_queries: int, num_keys: int, width: int, block: int, **change
) -> dict:
    """Valid arguments of a flash attention (one batch of 2 heads, random, no lengths, not
    causal, square blocks of block), then change."""
    arguments = dict(
        queries=torch.randn(1, 2, num_queries, width),
        keys=torch.randn(1, 2, num_keys, width),
        values=torch.randn(1, 2, num_keys, width),
        valid_lens=None, causal=False, block_q=block, block_k=block,
    )  # fmt: skip
    arguments.update(change)
    return arguments


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(queries=torch.randn(2, 4, 8)), ValueError, "queries"),
        (dict(keys=torch.randn(1, 2, 5, 4)), ValueError, "keys"),
        (dict(values=torch.randn(1, 2, 6, 8)), ValueError, "values"),
        (dict(values=torch.randn(1, 2, 5, 8).double()), TypeError, "dtype"),
        (
            dict(queries=torch.ones(1, 2, 4, 8, dtype=torch.long)),
            TypeError,
            "queries",
        ),  # fmt: skip
        (
            dict(values=torch.randn(1, 2, 5, 8, device="meta")),
            ValueError,
            "one device",
        ),  # fmt: skip
        (dict(causal=1), TypeError, "causal"),
        (
            dict(queries=torch.randn(1, 2, 6, 8), causal=True),
            ValueError,
            "K >= Q",
        ),  # fmt: skip
        (dict(valid_lens=torch.tensor([6])), ValueError, "valid_lens"),
        (dict(valid_lens=torch.tensor([2.0])), TypeError, "valid_lens"),
        (dict(block_q=0), ValueError, "block_q"),
        (dict(block_k=2.0), TypeError, "block_k"),
        (dict(queries=[[1.0]]), TypeError, "queries"),
    ],
)
def test_bad_input_is_refused_with_the_argument_named(change, error, message):
    with pytest.raises(error, match=message):
        flash_attention(**flash_arguments(4, 5, 8, 4, **change))


# ------------------------------------------------ non-finite numbers in padding


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "lens, causal",
    [
        (torch.tensor([3, 5]), False),
        (torch.tensor([[2, 3, 1, 3], [5, 1, 0, 2]]), False),
        (torch.tensor([4, 6]), True),
    ],
)
def test_non_finite_padding_gives_the_result_of_zero_padding(
    bad, lens, causal
):
    # keys no query may see (past every query's length) hold NaN or inf:
    # the output, lse and gradients are those with zeros there, bit for bit
    q, k, v = (x.detach() for x in inputs(2, 2, 4, 6, 8, 8, torch.float32))
    seen = torch.arange(6) < lens.reshape(2, -1).amax(-1, keepdim=True)
    if causal:  # query i sees keys up to i + (K - Q) = i + 2, at most 5
        seen &= torch.arange(6) <= 3 + 2
    padding = ~seen[:, None, :, None]  # (B, 1, K, 1)
    zero_k, zero_v = k.masked_fill(padding, 0.0), v.masked_fill(padding, 0.0)
    bad_k, bad_v = k.masked_fill(padding, bad), v.masked_fill(padding, bad)
    assert not bad_v.isfinite().all()
    want = flash_forward(q, zero_k, zero_v, lens, causal, 2, 4)
    got = flash_forward(q, bad_k, bad_v, lens, causal, 2, 4)
    assert torch.equal(got.output, want.output)
    assert torch.equal(got.lse, want.lse)
    grad = torch.randn(2, 2, 4, 8, generator=torch.Generator().manual_seed(3))
    grads = []
    for keys, values in ((zero_k, zero_v), (bad_k, bad_v)):
        leaves = [x.clone().requires_grad_() for x in (q, keys, values)]
        out = flash_attention(*leaves, lens, causal, 2, 4)
        grads.append((out, *torch.autograd.grad(out, leaves, grad)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
