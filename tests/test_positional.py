"""Tests of course_pkg.nn.positional against d2l.torch and the properties the chapter relies on."""

from __future__ import annotations

import d2l.torch as d2l
import pytest
import torch

from course_pkg.nn.positional import (
    LearnedPositionalEncoding,
    PositionalEncoding,
    sinusoidal_table,
)

# tests/measure_tolerances.py, float32 against float64 (paths default/avx2, with and without MKL_CBWR=COMPATIBLE, 1/2/4 threads):
# our table and d2l's each err by at most 4.5e-6 (positions to 199; they agree bit for bit here),
# a row off by one moves it by 1.9; the rotation's two sides err by at most 1.1e-6 and 9.8e-7,
# rotating by delta + 1 instead is off by 0.96. Bounds = 10 x the sum of the errors, rounded up.
D2L_TABLE_FLOAT32_BOUND = 1e-4
ROTATION_FLOAT32_BOUND = 5e-5


@pytest.mark.numerics
def test_table_matches_d2l_and_the_formula():
    ours = PositionalEncoding(32, 0.0, max_len=200)
    assert torch.allclose(
        ours.P,
        d2l.PositionalEncoding(32, 0.0, max_len=200).P,
        rtol=0,
        atol=D2L_TABLE_FLOAT32_BOUND,
    )
    i, j = 17, 5  # column 2j is sin(i / 10000^(2j/D)), column 2j+1 its cos
    angle = i / 10000 ** (2 * j / 32)
    assert ours.P[0, i, 2 * j].item() == pytest.approx(
        torch.sin(torch.tensor(angle, dtype=torch.float64)).item(), abs=1e-6
    )
    assert ours.P[0, i, 2 * j + 1].item() == pytest.approx(
        torch.cos(torch.tensor(angle, dtype=torch.float64)).item(), abs=1e-6
    )


def test_forward_matches_d2l_in_float64():
    X = torch.randn(2, 9, 16, dtype=torch.float64)
    ours = PositionalEncoding(16, 0.0)(X)
    theirs = d2l.PositionalEncoding(16, 0.0)(X)
    assert torch.allclose(ours, theirs, atol=1e-12)


def test_table_is_a_buffer_that_travels_with_the_module():
    module = PositionalEncoding(8, 0.0, max_len=10)
    assert "P" in module.state_dict()
    assert module.to(torch.float64).P.dtype == torch.float64
    assert module.to("meta").P.device.type == "meta"


def test_offset_continues_the_positions():
    module = PositionalEncoding(8, 0.0, max_len=20)
    X = torch.zeros(1, 6, 8)
    whole = module(X)
    assert torch.allclose(module(X[:, 4:], offset=4), whole[:, 4:])


@pytest.mark.numerics
def test_relative_position_is_a_rotation():
    """P[i + delta] = M_delta P[i] with one 2x2 rotation per frequency, the same for every i."""
    D, delta = 16, 3
    table = sinusoidal_table(60, D).double()
    freqs = 1 / torch.pow(
        torch.tensor(10000.0, dtype=torch.float64),
        torch.arange(0, D, 2, dtype=torch.float64) / D,
    )
    for j, w in enumerate(freqs):
        c, s = torch.cos(delta * w), torch.sin(delta * w)
        rotation = torch.stack(
            [torch.stack([c, s]), torch.stack([-s, c])]
        )  # acts on (sin, cos)
        pairs = table[:, 2 * j : 2 * j + 2]
        assert torch.allclose(
            pairs[:-delta] @ rotation.T,
            pairs[delta:],
            rtol=0,
            atol=ROTATION_FLOAT32_BOUND,
        )


def test_learned_encoding_shapes_and_gradient(device):
    module = LearnedPositionalEncoding(8, 0.1, max_len=12).to(device)
    X = torch.randn(3, 5, 8, device=device, requires_grad=True)
    out = module(X, offset=2)
    assert out.shape == (3, 5, 8) and out.device.type == device.type
    out.sum().backward()
    assert module.embedding.weight.grad is not None


def test_sinusoidal_on_device(device):
    module = PositionalEncoding(8, 0.1).to(device)
    X = torch.randn(2, 4, 8, device=device, requires_grad=True)
    out = module(X)
    out.sum().backward()
    assert out.device.type == device.type and X.grad.shape == X.shape


def test_bad_input():
    with pytest.raises(
        ValueError, match="num_hiddens must be a positive even number"
    ):
        PositionalEncoding(7, 0.0)
    module = PositionalEncoding(8, 0.0, max_len=5)
    with pytest.raises(ValueError, match=r"X must have shape \(B, T, 8\)"):
        module(torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match="max_len=5"):
        module(torch.zeros(1, 6, 8))
    with pytest.raises(TypeError, match="X must be a torch.Tensor"):
        LearnedPositionalEncoding(8, 0.0)([[0.0] * 8])


@pytest.mark.parametrize(
    "make, error, name",
    [
        (lambda: sinusoidal_table(-1, 8), ValueError, "max_len"),
        (
            lambda: PositionalEncoding(8, 0.0, max_len=-3),
            ValueError,
            "max_len",
        ),
        (lambda: PositionalEncoding(8, 1.5), ValueError, "dropout"),
        (lambda: PositionalEncoding(8, "0.1"), TypeError, "dropout"),
        (lambda: LearnedPositionalEncoding(8, -0.1), ValueError, "dropout"),
        (
            lambda: LearnedPositionalEncoding(8, 0.0, max_len=0),
            ValueError,
            "max_len",
        ),
        (
            lambda: LearnedPositionalEncoding(8.0, 0.0),
            TypeError,
            "num_hiddens",
        ),
    ],
)
def test_constructors_check_their_arguments_up_front(make, error, name):
    with pytest.raises(error, match=name):
        make()


def test_bad_offset():
    for module in (
        PositionalEncoding(8, 0.0, max_len=10),
        LearnedPositionalEncoding(8, 0.0, max_len=10),
    ):
        with pytest.raises(ValueError, match="offset must be >= 0"):
            module(torch.zeros(1, 1, 8), offset=-1)
        with pytest.raises(
            ValueError,
            match=r"offset \+ T = 7 \+ 5 positions, more than max_len=10",
        ):
            module(torch.zeros(1, 5, 8), offset=7)
