"""ALiBi, position interpolation and NTK-aware RoPE: formulas by hand, the
options inside the attention layer, shapes, the meta device, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from course_pkg.experiments.toy_tasks import (
    LENGTH_VARIANTS,
    CopyBack,
    copy_back_at_lengths,
)
from course_pkg.nn.grouped_query import GroupedQueryAttention
from course_pkg.nn.masks import query_key_distance
from course_pkg.nn.position_scaling import (
    alibi_bias,
    alibi_slopes,
    ntk_scaled_base,
    scaled_rotary,
)
from course_pkg.nn.rotary import RotaryEmbedding


def test_slopes_by_hand():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    assert alibi_slopes(2).tolist() == [2.0**-4, 2.0**-8]
    # 6 heads: the 4 of a power of two, then slopes 1 and 3 of 8 heads.
    assert alibi_slopes(6).tolist() == [
        2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3,
    ]  # fmt: skip


def test_bias_by_hand():
    bias = alibi_bias(2, 2, 4, dtype=torch.float64)
    assert bias.shape == (2, 2, 4)
    # Query positions 2 and 3; head 0 has slope 1/16.
    expected = (
        -torch.tensor([[2, 1, 0, 1], [3, 2, 1, 0]], dtype=torch.float64) / 16
    )
    assert torch.equal(bias[0], expected)
    assert torch.equal(bias[1], expected / 16)


def test_alibi_inside_the_layer_equals_the_formula():
    torch.manual_seed(0)
    layer = GroupedQueryAttention(16, 4, num_kv_heads=2, alibi=True).double()
    X = torch.randn(2, 5, 16, dtype=torch.float64)
    layer(X, X, X, causal=True)
    plain = GroupedQueryAttention(16, 4, num_kv_heads=2).double()
    plain.load_state_dict(layer.state_dict())
    plain(X, X, X, causal=True)
    # Inside the softmax the bias is added to the scores, so on every
    # visible entry log(w_alibi) - log(w_plain) - bias is constant in a row.
    bias = alibi_bias(4, 5, 5, dtype=torch.float64)
    diff = layer.attention_weights.log() - plain.attention_weights.log() - bias
    row_constant = diff.diagonal(dim1=-2, dim2=-1)[..., None]  # (B, H, Q, 1)
    visible = torch.ones(5, 5).tril().bool()
    gap = (diff - row_constant)[..., visible]
    assert gap.abs().max() < 1e-12
    assert (bias[:, ~visible] < 0).all() and bias[0, 4, 0] == -4 * 2.0**-2


def test_ntk_base_and_interpolation():
    assert ntk_scaled_base(10000.0, 1.0, 64) == 10000.0
    assert ntk_scaled_base(10000.0, 4.0, 4) == 10000.0 * 4.0**2
    # NTK: the slowest pair turns factor times slower, the fastest not at all.
    factor, width = 8.0, 32
    plain = RotaryEmbedding(width).angles(torch.tensor([1.0]), torch.float64)[
        0
    ]
    ntk = scaled_rotary(width, "ntk", factor).angles(
        torch.tensor([1.0]), torch.float64
    )[0]
    assert ntk[0] == plain[0]
    assert math.isclose(plain[-1] / ntk[-1], factor, rel_tol=1e-12)
    # Interpolation: position m under factor s has the angles of m / s.
    pi = scaled_rotary(width, "interpolation", factor)
    torch.testing.assert_close(
        pi.angles(torch.tensor([16.0]), torch.float64),
        RotaryEmbedding(width).angles(torch.tensor([2.0]), torch.float64),
    )
    assert scaled_rotary(width, "none", factor).base == 10000.0


def test_scaled_rotary_in_a_layer_and_on_meta():
    rope = scaled_rotary(8, "ntk", 2.0)
    layer = GroupedQueryAttention(16, 2, rotary=rope, alibi=True).to("meta")
    X = torch.randn(2, 5, 16, device="meta")
    out = layer(X, X, X, causal=True)
    assert out.shape == (2, 5, 16) and out.device.type == "meta"
    assert alibi_bias(4, 3, 6, device="meta").shape == (4, 3, 6)
    model = CopyBack(None, alibi=True).to("meta")
    assert model(torch.randint(0, 10, (2, 7)).to("meta")).shape == (2, 7, 10)


def test_experiment_runs_at_a_toy_size():
    accuracy, model = copy_back_at_lengths(
        "rope", 0, (8, 16), max_train_len=8, num_steps=50
    )
    assert set(accuracy) == {8, 16} and all(
        0 <= a <= 1 for a in accuracy.values()
    )
    again, _ = copy_back_at_lengths("rope-ntk", 0, (8, 16), 8, model=model)
    assert again[8] == accuracy[8]  # factor 1 at the trained length


def test_bad_input():
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)
    with pytest.raises(ValueError, match="num_keys"):
        alibi_bias(2, 5, 3)
    with pytest.raises(ValueError, match="scaling"):
        scaled_rotary(8, "yarn", 2.0)
    with pytest.raises(ValueError, match="factor"):
        scaled_rotary(8, "ntk", 0.5)
    with pytest.raises(ValueError, match="head_width"):
        ntk_scaled_base(10000.0, 2.0, 3)
    with pytest.raises(ValueError, match="position_scale"):
        RotaryEmbedding(8, position_scale=0.0)
    with pytest.raises(ValueError, match="variant"):
        copy_back_at_lengths("nope", 0, (8,))
    assert "alibi" in LENGTH_VARIANTS


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.bool, "float32"]
)
def test_alibi_bias_refuses_a_dtype_that_is_not_floating_point(dtype):
    with pytest.raises(TypeError, match="dtype"):
        alibi_bias(2, 3, 4, dtype=dtype)


def test_alibi_bias_in_float16_at_70000_keys_does_not_overflow():
    # 70,000 > 65,504, float16's largest number: the distance is multiplied
    # by the slope in float32 first, then the product is cast
    bias = alibi_bias(8, 2, 70_000, dtype=torch.float16)
    assert bias.dtype == torch.float16 and bias.isfinite().all()
    expected = alibi_bias(8, 2, 70_000, dtype=torch.float32).half()
    assert torch.equal(bias, expected)
    assert abs(bias[-1, 0, 0].item() + 69_998 / 256) <= 0.125  # slope 2^-8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_alibi_bias_in_float32_and_float64_is_the_formula_bit_for_bit(dtype):
    distance = query_key_distance(7, 300, None).abs().to(dtype)
    slopes = alibi_slopes(12).to(dtype)
    expected = -slopes[:, None, None] * distance
    assert torch.equal(alibi_bias(12, 7, 300, dtype=dtype), expected)
