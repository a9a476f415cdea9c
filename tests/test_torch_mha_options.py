"""The claims of the multi-head chapter about torch.nn.MultiheadAttention's options.

Peer nobody here wrote: torch.nn.MultiheadAttention with add_zero_attn, add_bias_kv and float
masks. Ours (MultiHeadAttention with copied weights and valid_lens) must agree with it where the
chapter says it does, for every drawn batch, widths and lengths. torch's masks are built here from
index comparisons, never with our sequence_mask, so a wrong mask of ours cannot cancel out.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_pkg.nn.attention import (
    MultiHeadAttention,
    copy_weights_from_torch,
    transpose_output,
    transpose_qkv,
)

F64 = torch.float64


def padding_mask(valid_lens: torch.Tensor, num_keys: int) -> torch.Tensor:
    """torch's key_padding_mask (B, K): True where a key is padding."""
    return torch.arange(num_keys) >= valid_lens[:, None]


@st.composite
def problems(draw):
    """A copied pair of layers, inputs and lengths (some 0) in float64."""
    num_heads = draw(st.integers(1, 3))
    num_hiddens = num_heads * draw(st.integers(1, 4))
    batch, num_queries, num_keys = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 5)),
    )
    valid_lens = torch.tensor(
        draw(
            st.lists(st.integers(0, num_keys), min_size=batch, max_size=batch)
        )
    )
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    queries = torch.randn(batch, num_queries, num_hiddens, generator=generator)
    keys = torch.randn(batch, num_keys, num_hiddens, generator=generator)
    return num_hiddens, num_heads, queries.to(F64), keys.to(F64), valid_lens


def _pair(num_hiddens, num_heads, **options):
    """torch's layer with random biases and ours with its weights, in float64."""
    theirs = nn.MultiheadAttention(
        num_hiddens, num_heads, batch_first=True, dtype=F64, **options
    )
    nn.init.normal_(theirs.in_proj_bias)
    nn.init.normal_(theirs.out_proj.bias)
    ours = MultiHeadAttention(num_hiddens, num_heads, bias=True).to(F64)
    copy_weights_from_torch(ours, theirs)
    return theirs, ours


@settings(max_examples=30, deadline=None)
@given(problems())
def test_float_mask_is_the_bool_mask_and_ours(problem):
    """torch's 0/-inf float key_padding_mask gives exactly its bool mask's outputs and weights
    (a statement about torch that the chapter makes and relies on), and both equal ours with
    valid_lens."""
    num_hiddens, num_heads, queries, keys, valid_lens = problem
    valid_lens = valid_lens.clamp(min=1)  # a bool mask with no key gives NaN
    theirs, ours = _pair(num_hiddens, num_heads)
    ignore = padding_mask(valid_lens, keys.shape[1])  # (B, K)
    additive = torch.zeros(ignore.shape, dtype=F64).masked_fill(
        ignore, float("-inf")
    )
    out_bool, w_bool = theirs(queries, keys, keys, key_padding_mask=ignore)
    out_float, w_float = theirs(queries, keys, keys, key_padding_mask=additive)
    assert torch.equal(out_bool, out_float) and torch.equal(w_bool, w_float)
    out_ours = ours(queries, keys, keys, valid_lens)
    torch.testing.assert_close(out_ours, out_float)
    torch.testing.assert_close(
        ours.attention_weights.reshape(-1, num_heads, *w_float.shape[1:]).mean(
            1
        ),
        w_float,
    )


@settings(max_examples=30, deadline=None)
@given(problems())
def test_add_zero_attn_vs_ours(problem):
    """Rows with no valid key: torch's output is ours exactly (out_proj.bias).

    Other rows: torch's weights on the real keys, renormalised, are ours.
    """
    num_hiddens, num_heads, queries, keys, valid_lens = problem
    theirs, ours = _pair(num_hiddens, num_heads, add_zero_attn=True)
    num_keys = keys.shape[1]
    out_theirs, w_theirs = theirs(
        queries,
        keys,
        keys,
        key_padding_mask=padding_mask(valid_lens, num_keys),
        average_attn_weights=False,
    )
    out_ours = ours(queries, keys, keys, valid_lens)
    assert w_theirs.shape[-1] == num_keys + 1
    assert not out_theirs.isnan().any()
    empty = valid_lens == 0
    torch.testing.assert_close(out_theirs[empty], out_ours[empty])
    torch.testing.assert_close(
        out_theirs[empty],
        theirs.out_proj.bias.expand_as(out_theirs[empty]),
    )
    real = w_theirs[~empty][..., :num_keys]
    torch.testing.assert_close(
        real / real.sum(-1, keepdim=True), ours.attention_weights[~empty]
    )
    # the zero key always takes some weight, so other outputs change
    assert (w_theirs[~empty][..., num_keys] > 0).all()


@settings(max_examples=30, deadline=None)
@given(problems())
def test_add_bias_kv_rebuilt_from_our_pieces(problem):
    num_hiddens, num_heads, queries, keys, valid_lens = problem
    theirs, ours = _pair(num_hiddens, num_heads, add_bias_kv=True)
    batch, num_keys = keys.shape[:2]
    allowed = ~padding_mask(valid_lens, num_keys)  # (B, K)
    out_theirs, w_theirs = theirs(
        queries,
        keys,
        keys,
        key_padding_mask=~allowed,
        average_attn_weights=False,
    )
    K_plus = torch.cat([ours.W_k(keys), theirs.bias_k.expand(batch, 1, -1)], 1)
    V_plus = torch.cat([ours.W_v(keys), theirs.bias_v.expand(batch, 1, -1)], 1)
    allowed = torch.cat([allowed, torch.ones(batch, 1, dtype=torch.bool)], 1)
    scores = transpose_qkv(ours.W_q(queries), num_heads) @ transpose_qkv(
        K_plus, num_heads
    ).transpose(1, 2)
    scores = (scores / (num_hiddens // num_heads) ** 0.5).masked_fill(
        ~allowed.repeat_interleave(num_heads, 0)[:, None], float("-inf")
    )
    weights = scores.softmax(-1)
    rebuilt = ours.W_o(
        transpose_output(weights @ transpose_qkv(V_plus, num_heads), num_heads)
    )
    torch.testing.assert_close(rebuilt, out_theirs)
    torch.testing.assert_close(weights.reshape(w_theirs.shape), w_theirs)
    # the learned key is never masked: no NaN even with every key masked
    assert not out_theirs.isnan().any()


def test_byte_masks_are_refused():
    """The chapter says the installed torch rejects uint8 masks."""
    theirs = nn.MultiheadAttention(4, 2, batch_first=True)
    X = torch.randn(1, 3, 4)
    mask = torch.tensor([[0, 0, 1]], dtype=torch.uint8)
    with pytest.raises(AssertionError, match="bool and floating"):
        theirs(X, X, X, key_padding_mask=mask)
