"""Tests of course_pkg.nn.modern_blocks: RMSNorm, the SwiGLU feed-forward network, the pre-norm block.

Peers nobody here wrote: torch.nn.RMSNorm and torch.nn.TransformerEncoderLayer(norm_first=True),
with copied weights; torch.nn.functional.silu for the gate.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_pkg.nn.modern_blocks import PreNormEncoderBlock, RMSNorm, SwiGLUFFN

F64 = torch.float64


# ----------------------------------------------------------------------------- RMSNorm


# tests/measure_tolerances.py, float32 against float64 (paths default/avx2, with and without MKL_CBWR=COMPATIBLE, 1/2/4 threads):
# ours and torch's each err by at most 4.5e-7 (they agree bit for bit here); bound = 10 x the sum,
# rounded up. The mean square over D - 1 instead of D moves an output by 0.15.
RMSNORM_FLOAT32_BOUND = 1e-5
RMSNORM_EPS = [None, 1e-5, 0.5]


def rmsnorm_and_torch(dtype, eps):
    """(ours, torch's) on the same weight and input, both drawn in float32 and cast."""
    torch.manual_seed(0)
    theirs = nn.RMSNorm(12, eps=eps, dtype=dtype)
    ours = RMSNorm(12, eps=eps).to(dtype)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(12).to(dtype))
        ours.weight.copy_(theirs.weight)
    X = (torch.randn(3, 5, 12) * 4).to(dtype)
    return ours(X), theirs(X)


@pytest.mark.parametrize(
    "dtype, tolerance",
    [
        pytest.param(
            torch.float32, RMSNORM_FLOAT32_BOUND, marks=pytest.mark.numerics
        ),
        (F64, 1e-12),
    ],
)
@pytest.mark.parametrize("eps", RMSNORM_EPS)
def test_rmsnorm_matches_torch(dtype, tolerance, eps):
    ours, theirs = rmsnorm_and_torch(dtype, eps)
    assert (ours - theirs).abs().max() <= tolerance


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_matches_torch_in_half_precision_with_large_inputs(dtype):
    # |x| > 256: x**2 overflows float16, and a naive mean square is inf.
    torch.manual_seed(0)
    theirs = nn.RMSNorm(12, dtype=dtype)
    ours = RMSNorm(12).to(dtype)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(12, dtype=dtype))
        ours.weight.copy_(theirs.weight)
    X = (torch.randn(3, 5, 12) * 2000).to(dtype)
    expected = theirs(X)
    assert expected.abs().amax() > 0.1 and torch.isfinite(expected).all()
    got = ours(X)
    assert got.dtype == dtype
    assert torch.allclose(got.float(), expected.float(), atol=2e-2, rtol=1e-2)


def test_rmsnorm_rows_have_unit_root_mean_square_and_ignore_scale():
    X = torch.randn(4, 16, dtype=F64) * 7
    Y = RMSNorm(16, eps=0.0).double()(X)
    assert torch.allclose(Y.pow(2).mean(-1), torch.ones(4, dtype=F64))
    assert torch.allclose(RMSNorm(16, eps=0.0).double()(X * 3), Y)
    assert not torch.allclose(
        Y.mean(-1), torch.zeros(4, dtype=F64)
    )  # unlike layer norm, no centring


def test_rmsnorm_gradcheck():
    norm = RMSNorm(5, eps=1e-3).double()
    with torch.no_grad():
        norm.weight.copy_(torch.randn(5, dtype=F64))
    X = torch.randn(3, 5, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(norm, (X,))


# ----------------------------------------------------------------------------- SwiGLU


def test_swiglu_is_silu_gate_times_linear_unit():
    torch.manual_seed(0)
    ffn = SwiGLUFFN(10, 6, input_size=4).double()
    X = torch.randn(2, 3, 4, dtype=F64)
    gate = X @ ffn.gate.weight.T
    expected = (
        gate * torch.sigmoid(gate) * (X @ ffn.up.weight.T)
    ) @ ffn.down.weight.T
    assert (ffn(X) - expected).abs().max() <= 1e-12
    assert ffn(X).shape == (2, 3, 6)


def test_swiglu_bias_and_parameter_count():
    assert sum(p.numel() for p in SwiGLUFFN(12, 8).parameters()) == 3 * 12 * 8
    with_bias = SwiGLUFFN(12, 8, bias=True)
    assert (
        sum(p.numel() for p in with_bias.parameters())
        == 3 * 12 * 8 + 2 * 12 + 8
    )
    # A closed gate (zero gate projection) gives silu(0) * up = 0.
    with torch.no_grad():
        with_bias.gate.weight.zero_()
        with_bias.gate.bias.zero_()
    assert torch.allclose(
        with_bias(torch.randn(2, 8)), with_bias.down.bias.expand(2, 8)
    )


def test_swiglu_gradcheck():
    ffn = SwiGLUFFN(6, 4, bias=True).double()
    X = torch.randn(2, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(ffn, (X,))


# ----------------------------------------------------------------------------- pre-norm block


def _copy_from_torch(
    ours: PreNormEncoderBlock, theirs: nn.TransformerEncoderLayer
) -> None:
    width = theirs.self_attn.embed_dim
    with torch.no_grad():
        attention = ours.attention
        for k, linear in enumerate(
            (attention.W_q, attention.W_k, attention.W_v)
        ):
            linear.weight.copy_(
                theirs.self_attn.in_proj_weight[k * width : (k + 1) * width]
            )
            linear.bias.copy_(
                theirs.self_attn.in_proj_bias[k * width : (k + 1) * width]
            )
        attention.W_o.load_state_dict(theirs.self_attn.out_proj.state_dict())
        ours.ffn.dense1.load_state_dict(theirs.linear1.state_dict())
        ours.ffn.dense2.load_state_dict(theirs.linear2.state_dict())
        ours.norm1.load_state_dict(theirs.norm1.state_dict())
        ours.norm2.load_state_dict(theirs.norm2.state_dict())


def test_pre_norm_block_matches_torch_norm_first_layer():
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.0, batch_first=True, norm_first=True
    ).double()
    ours = PreNormEncoderBlock(16, 32, 4, 0.0, use_bias=True).double()
    with torch.no_grad():  # non-trivial norm gains and biases
        for norm in (theirs.norm1, theirs.norm2):
            norm.weight.copy_(torch.rand(16, dtype=F64) + 0.5)
            norm.bias.copy_(torch.randn(16, dtype=F64))
    _copy_from_torch(ours, theirs)
    X = torch.randn(
        3, 6, 16, dtype=F64, requires_grad=True
    )  # grad on: torch takes its reference path
    valid_lens = torch.tensor([6, 2, 4])
    padding = torch.arange(6)[None] >= valid_lens[:, None]
    expected = theirs(X, src_key_padding_mask=padding)
    assert (ours(X, valid_lens) - expected).abs().max() <= 1e-12
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=F64)
    expected = theirs(X, src_mask=causal, is_causal=True)
    assert (ours(X, causal=True) - expected).abs().max() <= 1e-12


def test_pre_norm_residual_path_is_the_identity_when_sublayers_are_silent():
    block = PreNormEncoderBlock(
        8, 16, 2, 0.0, norm="rms", ffn="swiglu", num_kv_heads=1
    )
    with torch.no_grad():
        block.attention.W_o.weight.zero_()
        block.ffn.down.weight.zero_()
    X = torch.randn(2, 5, 8) * 30
    assert torch.equal(
        block(X), X
    )  # a post-norm block would still normalise X


@pytest.mark.parametrize(
    "norm, ffn, num_kv_heads, rotary",
    [
        ("layer", "relu", None, False),
        ("rms", "swiglu", 2, True),
        ("rms", "relu", 1, False),
    ],
)
def test_pre_norm_block_options_gradcheck(norm, ffn, num_kv_heads, rotary):
    torch.manual_seed(0)
    block = PreNormEncoderBlock(
        8,
        12,
        4,
        0.0,
        norm=norm,
        ffn=ffn,
        num_kv_heads=num_kv_heads,
        rotary=rotary,
    ).double()
    X = torch.randn(2, 4, 8, dtype=F64, requires_grad=True)
    lens = torch.tensor([4, 1])
    assert torch.autograd.gradcheck(
        lambda x: block(x, lens, causal=True), (X,)
    )
    assert block.attention.num_kv_heads == (num_kv_heads or 4)
    assert (block.attention.rotary is not None) == rotary


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: PreNormEncoderBlock(8, 16, 2, 0.0, norm="batch"),
            ValueError,
            "norm",
        ),
        (
            lambda: PreNormEncoderBlock(8, 16, 2, 0.0, ffn="gelu"),
            ValueError,
            "ffn",
        ),
        (
            lambda: PreNormEncoderBlock(8, 16, 3, 0.0),
            ValueError,
            "num_hiddens",
        ),
        (
            lambda: PreNormEncoderBlock(8, 16, 4, 0.0, num_kv_heads=3),
            ValueError,
            "num_kv_heads",
        ),
        (lambda: RMSNorm(0), ValueError, "num_hiddens"),
        (lambda: RMSNorm(4, eps=-1.0), ValueError, "eps"),
        (lambda: RMSNorm("4"), TypeError, "num_hiddens"),
        (lambda: RMSNorm(2.5), TypeError, "num_hiddens"),
        (lambda: RMSNorm(4, eps="0.1"), TypeError, "eps"),
    ],
)
def test_refuses_bad_construction(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: RMSNorm(4)([1.0, 2.0]), TypeError, "X"),
        (lambda: RMSNorm(4)(torch.randn(2, 5)), ValueError, "X"),
        (lambda: SwiGLUFFN(8, 4)(torch.randn(2, 5)), ValueError, "X"),
        (
            lambda: PreNormEncoderBlock(8, 16, 2, 0.0)(torch.randn(2, 8)),
            ValueError,
            "X",
        ),
        (
            lambda: PreNormEncoderBlock(8, 16, 2, 0.0)(torch.randn(2, 3, 6)),
            ValueError,
            "X",
        ),
        (
            lambda: PreNormEncoderBlock(8, 16, 2, 0.0)(
                torch.randn(2, 3, 8), torch.tensor([3])
            ),
            ValueError,
            "valid_lens",
        ),
    ],
)
def test_refuses_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
