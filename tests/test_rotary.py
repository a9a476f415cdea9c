"""Tests of course_pkg.nn.rotary: rotary position embedding.

The peer is the complex-number form of RoPE in Su et al. (2021): pair i of a vector at position m,
read as x[2i] + 1j x[2i+1], is multiplied by exp(1j m theta_i); written here with torch.polar.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.nn.rotary import RotaryEmbedding

F64 = torch.float64


def _rotate_at(rope, vector, position):
    """Rotate one (d,) vector as if it stood at ``position``."""
    return rope(vector[None], offset=position)[0]


POSITIONS = st.integers(0, 2000)


@settings(max_examples=80)
@given(
    half_width=st.integers(1, 32),
    m=POSITIONS,
    n=POSITIONS,
    shift=POSITIONS,
    seed=st.integers(0, 2**16),
)
def test_score_depends_only_on_the_relative_position(
    half_width, m, n, shift, seed
):
    """(R_m q) . (R_n k) = (R_{m+s} q) . (R_{n+s} k) = q . R_{n-m} k for every shift s."""
    rope = RotaryEmbedding(2 * half_width)
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 2 * half_width, dtype=F64, generator=generator)
    score = _rotate_at(rope, q, m) @ _rotate_at(rope, k, n)
    shifted = _rotate_at(rope, q, m + shift) @ _rotate_at(rope, k, n + shift)
    scale = q.norm() * k.norm()
    assert abs(score - shifted) <= 1e-9 * scale
    if (
        n >= m
    ):  # only the difference is left: the query unrotated, the key rotated by n - m
        assert abs(score - q @ _rotate_at(rope, k, n - m)) <= 1e-9 * scale


def test_matches_the_complex_form():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, base=500.0)
    X = torch.randn(2, 3, 6, 8, dtype=F64)  # (B, H, T, d)
    theta = 500.0 ** (-torch.arange(0, 8, 2, dtype=F64) / 8)
    positions = torch.arange(4, 10, dtype=F64)
    phases = torch.polar(
        torch.ones(6, 4, dtype=F64), positions[:, None] * theta
    )  # (T, d/2)
    expected = torch.view_as_real(
        torch.view_as_complex(X.reshape(2, 3, 6, 4, 2)) * phases
    ).reshape(2, 3, 6, 8)
    assert (rope(X, offset=4) - expected).abs().max() <= 1e-12


@pytest.mark.usefixtures("float64")
def test_rotation_keeps_lengths_and_position_zero_is_the_identity():
    torch.manual_seed(0)
    rope = RotaryEmbedding(16)
    X = torch.randn(3, 50, 16)
    rotated = rope(X)
    assert torch.allclose(
        rotated.norm(dim=-1), X.norm(dim=-1), rtol=1e-12, atol=0
    )
    assert torch.equal(rotated[:, 0], X[:, 0])
    assert not torch.allclose(rotated[:, 1:], X[:, 1:])


@pytest.mark.usefixtures("float64")
def test_offset_continues_the_positions():
    """Rotating a whole sequence equals rotating each position alone with its offset (cached decoding)."""
    torch.manual_seed(0)
    rope = RotaryEmbedding(6)
    X = torch.randn(2, 4, 7, 6)
    whole = rope(X)
    one_by_one = torch.cat(
        [rope(X[:, :, t : t + 1], offset=t) for t in range(7)], dim=2
    )
    assert torch.allclose(whole, one_by_one, rtol=0, atol=1e-12)


def test_half_precision_keeps_far_positions_apart():
    rope = RotaryEmbedding(4)
    X = torch.ones(1, 2, 4, dtype=torch.float16)
    rotated = rope(X, offset=2049)
    assert rotated.dtype == torch.float16
    assert not torch.equal(
        rotated[0, 0], rotated[0, 1]
    )  # positions 2049 and 2050 differ


def test_gradcheck():
    rope = RotaryEmbedding(4)
    X = torch.randn(2, 5, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: rope(x, offset=3), (X,))


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((5,), ValueError, "head_width"),
        ((0,), ValueError, "head_width"),
        ((4.0,), TypeError, "head_width"),
        ((4, 1.0), ValueError, "base"),
    ],
)
def test_refuses_bad_construction(args, error, match):
    with pytest.raises(error, match=match):
        RotaryEmbedding(*args)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda rope: rope([[1.0] * 4]), TypeError, "X"),
        (lambda rope: rope(torch.randn(4)), ValueError, "X"),
        (lambda rope: rope(torch.randn(3, 6)), ValueError, "X"),
        (
            lambda rope: rope(torch.randn(3, 4), offset=-1),
            ValueError,
            "offset",
        ),
        (
            lambda rope: rope(torch.randn(3, 4), offset=1.5),
            TypeError,
            "offset",
        ),
    ],
)
def test_refuses_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(RotaryEmbedding(4))


def test_the_kept_angles_are_those_of_the_positions_asked_for():
    """_cos_sin keeps the last (cos, sin): a call with other positions, another dtype or
    inside inference_mode must not reuse them."""
    rope = RotaryEmbedding(8)
    X = torch.randn(2, 5, 8, dtype=torch.float64)

    def fresh(X, offset):
        return RotaryEmbedding(8)(X, offset)

    assert torch.equal(rope(X, 3), fresh(X, 3))
    assert torch.equal(rope(X, 3), fresh(X, 3))  # kept, the same
    assert torch.equal(rope(X, 4), fresh(X, 4))  # another offset
    assert torch.equal(rope(X[:, :2], 4), fresh(X[:, :2], 4))  # another length
    assert torch.equal(
        rope(X.float(), 4), fresh(X.float(), 4)
    )  # another dtype
    with torch.inference_mode():
        rope(X, 4)
    # angles made under inference_mode are not reused where autograd records
    leaf = X.clone().requires_grad_()
    rope(leaf, 4).sum().backward()
    assert leaf.grad is not None
    rope.position_scale = 2.0  # a changed setting is not served stale angles
    assert torch.equal(
        rope(X, 4), RotaryEmbedding(8, position_scale=2.0)(X, 4)
    )
