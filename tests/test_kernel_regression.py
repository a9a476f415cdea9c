"""Tests for course_pkg.models.nadaraya_watson (Nadaraya–Watson attention pooling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from course_pkg.models.nadaraya_watson import (
    KERNELS,
    NWKernelRegression,
    boxcar,
    constant,
    epanechnikov,
    gaussian,
    leave_one_out,
    make_regression_data,
    nadaraya_watson,
    target_function,
    train_nw_regression,
)

COMPACT = ("boxcar", "epanechnikov")
finite = st.floats(
    min_value=-10, max_value=10, allow_nan=False, allow_infinity=False
)


def vector(values, dtype=torch.float64, device="cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


# ----------------------------------------------------------------------------- kernels


def test_kernels_dict_holds_the_four_kernels():
    assert KERNELS == {
        "gaussian": gaussian,
        "boxcar": boxcar,
        "constant": constant,
        "epanechnikov": epanechnikov,
    }


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_is_one_at_zero_and_never_larger(name):
    u = torch.linspace(-3, 3, 601, dtype=torch.float64)
    values = KERNELS[name](u)
    assert KERNELS[name](torch.zeros(1))[0] == 1.0
    assert values.min() >= 0 and values.max() <= 1


@pytest.mark.parametrize("name", sorted(KERNELS))
@given(u=finite)
def test_every_kernel_is_symmetric(name, u):
    assert KERNELS[name](vector([u])) == KERNELS[name](vector([-u]))


@pytest.mark.parametrize("name", COMPACT)
def test_compact_kernels_vanish_outside_one_width(name):
    inside = torch.linspace(-0.999, 0.999, 101, dtype=torch.float64)
    outside = torch.cat(
        [torch.linspace(-5, -1, 50), torch.linspace(1, 5, 50)]
    ).double()
    assert (KERNELS[name](inside) > 0).all()
    assert (KERNELS[name](outside) == 0).all()


def test_gaussian_and_constant_reach_everywhere():
    u = torch.linspace(-8, 8, 161, dtype=torch.float64)
    assert (gaussian(u) > 0).all()
    assert (constant(u) == 1).all()


def test_gaussian_has_the_shape_of_the_normal_density():
    u = np.linspace(-4, 4, 81)
    np.testing.assert_allclose(
        gaussian(torch.from_numpy(u)).numpy(),
        norm.pdf(u) / norm.pdf(0),
        rtol=1e-12,
    )


def test_epanechnikov_and_boxcar_values():
    u = vector([0.0, 0.5, -0.5, 0.999, 1.0, 2.0])
    assert torch.allclose(
        epanechnikov(u), vector([1.0, 0.75, 0.75, 1 - 0.999**2, 0.0, 0.0])
    )
    assert torch.equal(boxcar(u), vector([1.0, 1.0, 1.0, 1.0, 0.0, 0.0]))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernels_keep_device_and_dtype(name, device):
    u = torch.zeros(3, 4, dtype=torch.float64, device=device)
    out = KERNELS[name](u)
    assert (
        out.shape == u.shape
        and out.dtype == u.dtype
        and out.device == u.device
    )


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernels_refuse_non_tensors(name):
    with pytest.raises(TypeError, match="u must be a torch.Tensor"):
        KERNELS[name](0.5)


# ----------------------------------------------------------------------------- nadaraya_watson


@pytest.fixture
def data():
    return make_regression_data(
        n_train=40, n_val=30, seed=1, dtype=torch.float64
    )


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("width", [0.05, 0.3, 2.0])
def test_rows_sum_to_one_where_a_key_is_in_reach_and_zero_elsewhere(
    data, name, width
):
    x_train, y_train, _, _ = data
    queries = torch.linspace(
        -1, 6, 57, dtype=torch.float64
    )  # some beyond the data
    y_hat, weights = nadaraya_watson(x_train, y_train, queries, name, width)
    assert weights.shape == (57, 40) and y_hat.shape == (57,)
    assert not torch.isnan(weights).any() and not torch.isnan(y_hat).any()
    in_reach = (KERNELS[name]((queries[:, None] - x_train) / width) > 0).any(
        dim=1
    )
    if (
        name == "gaussian"
    ):  # softmax: even an underflowing row keeps its nearest key
        in_reach = torch.ones_like(in_reach)
    sums = weights.sum(dim=1)
    assert torch.allclose(sums[in_reach], torch.ones_like(sums[in_reach]))
    assert (weights[~in_reach] == 0).all() and (y_hat[~in_reach] == 0).all()


@pytest.mark.parametrize("name", COMPACT)
def test_query_with_nothing_in_reach_gives_zeros_and_finite_gradients(name):
    x_train = vector([0.0, 1.0, 2.0]).requires_grad_()
    y_train = vector([3.0, 4.0, 5.0]).requires_grad_()
    y_hat, weights = nadaraya_watson(
        x_train, y_train, vector([10.0, 1.2]), name, width=0.5
    )
    assert y_hat[0] == 0 and (weights[0] == 0).all()
    assert y_hat[1] == 4.0 if name == "boxcar" else y_hat[1] > 0
    y_hat.sum().backward()
    assert torch.isfinite(y_train.grad).all()
    if (
        name == "epanechnikov"
    ):  # the boxcar's 0/1 weights do not depend smoothly on x_train
        assert torch.isfinite(x_train.grad).all()


def test_gaussian_far_from_every_key_takes_the_nearest_key_not_nan():
    # exp(-u^2/2) underflows to 0 for every key here; the softmax still finds the nearest one.
    x_train, y_train = vector([0.0, 1.0, 2.0]), vector([3.0, 4.0, 5.0])
    y_hat, weights = nadaraya_watson(
        x_train, y_train, vector([50.0, -50.0]), "gaussian", width=0.01
    )
    assert torch.equal(y_hat, vector([5.0, 3.0]))
    assert torch.equal(weights, vector([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))


@pytest.mark.parametrize("width", [0.01, 1.0, 100.0])
def test_constant_kernel_gives_the_mean(data, width):
    x_train, y_train, x_val, _ = data
    y_hat, weights = nadaraya_watson(
        x_train, y_train, x_val, "constant", width
    )
    assert torch.allclose(y_hat, y_train.mean().expand_as(y_hat))
    assert torch.allclose(weights, torch.full_like(weights, 1 / 40))


def test_tiny_gaussian_width_interpolates_the_training_points(data):
    x_train, y_train, _, _ = data
    y_hat, weights = nadaraya_watson(
        x_train, y_train, x_train, "gaussian", width=1e-4
    )
    assert torch.allclose(y_hat, y_train)
    assert torch.allclose(weights, torch.eye(40, dtype=torch.float64))


def test_huge_gaussian_width_gives_the_mean(data):
    x_train, y_train, x_val, _ = data
    y_hat, _ = nadaraya_watson(x_train, y_train, x_val, "gaussian", width=1e4)
    assert torch.allclose(y_hat, y_train.mean().expand_as(y_hat), atol=1e-6)


def test_boxcar_is_the_moving_average_of_the_window():
    # An independent formulation: for each query, average the targets whose input is closer than width.
    rng = np.random.default_rng(3)
    x_train, y_train, queries = (
        rng.uniform(0, 5, 60),
        rng.normal(size=60),
        rng.uniform(0, 5, 25),
    )
    width = 0.4
    expected = []
    for q in queries:
        window = [y for x, y in zip(x_train, y_train) if abs(x - q) < width]
        expected.append(sum(window) / len(window) if window else 0.0)
    y_hat, _ = nadaraya_watson(
        *(torch.from_numpy(a) for a in (x_train, y_train, queries)),
        "boxcar",
        width,
    )
    np.testing.assert_allclose(y_hat.numpy(), expected, rtol=1e-12, atol=1e-12)


training_sets = st.integers(min_value=1, max_value=12).flatmap(
    lambda k: st.tuples(
        st.lists(finite, min_size=k, max_size=k),
        st.lists(finite, min_size=k, max_size=k),
    )
)


@settings(max_examples=60)
@given(
    train=training_sets,
    queries=st.lists(finite, min_size=1, max_size=6),
    name=st.sampled_from(sorted(KERNELS)),
    width=st.floats(min_value=0.01, max_value=20),
)
def test_prediction_lies_between_the_smallest_and_largest_target(
    train, queries, name, width
):
    x_train, y_train = vector(train[0]), vector(train[1])
    y_hat, weights = nadaraya_watson(
        x_train, y_train, vector(queries), name, width
    )
    reached = weights.sum(dim=1) > 0
    assert not torch.isnan(y_hat).any()
    tol = 1e-9 * (1 + y_train.abs().max())
    assert (y_hat[reached] >= y_train.min() - tol).all() and (
        y_hat[reached] <= y_train.max() + tol
    ).all()
    assert (y_hat[~reached] == 0).all()


@settings(max_examples=40)
@given(
    train=training_sets,
    queries=st.lists(finite, min_size=1, max_size=6),
    name=st.sampled_from(sorted(KERNELS)),
    shift=finite,
    scale=st.floats(min_value=0.1, max_value=10),
)
def test_moving_or_stretching_the_inputs_with_the_width_changes_nothing(
    train, queries, name, shift, scale
):
    # The weights depend only on (q - k) / width; the gaussian rows are exact, the compact ones
    # are compared away from the edge of the support, where rounding could flip a key in or out.
    x_train, y_train, x_query = (
        vector(train[0]),
        vector(train[1]),
        vector(queries),
    )
    width = 1.5
    _, weights = nadaraya_watson(x_train, y_train, x_query, name, width)
    _, moved = nadaraya_watson(
        (x_train + shift) * scale,
        y_train,
        (x_query + shift) * scale,
        name,
        width * scale,
    )
    u = ((x_query[:, None] - x_train) / width).abs()
    safe = ~((u - 1).abs() < 1e-6).any(dim=1)
    assert torch.allclose(weights[safe], moved[safe], atol=1e-9)


@settings(max_examples=40)
@given(
    train=training_sets,
    queries=st.lists(finite, min_size=1, max_size=6),
    name=st.sampled_from(sorted(KERNELS)),
)
def test_permuting_the_training_pairs_permutes_the_weights(
    train, queries, name
):
    x_train, y_train, x_query = (
        vector(train[0]),
        vector(train[1]),
        vector(queries),
    )
    perm = torch.randperm(
        len(x_train), generator=torch.Generator().manual_seed(0)
    )
    y_hat, weights = nadaraya_watson(x_train, y_train, x_query, name, 0.7)
    y_perm, w_perm = nadaraya_watson(
        x_train[perm], y_train[perm], x_query, name, 0.7
    )
    assert torch.allclose(w_perm, weights[:, perm], atol=1e-12)
    assert torch.allclose(y_perm, y_hat, atol=1e-9)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_outputs_live_on_the_inputs_device_and_dtype(name, device):
    x_train = torch.linspace(0, 1, 5, dtype=torch.float64, device=device)
    y_hat, weights = nadaraya_watson(
        x_train, x_train * 2, x_train[:3], name, 0.5
    )
    assert y_hat.device == x_train.device and weights.device == x_train.device
    assert y_hat.dtype == torch.float64 and weights.dtype == torch.float64
    assert y_hat.shape == (3,) and weights.shape == (3, 5)


def test_mixed_precision_promotes_instead_of_truncating():
    x_train = torch.linspace(0, 1, 5)
    y_train = torch.tensor(
        [1.0, 1.0, 1.0, 1.0, 1.0 + 1e-12], dtype=torch.float64
    )
    y_hat, _ = nadaraya_watson(x_train, y_train, x_train[:1], "constant")
    assert y_hat.dtype == torch.float64 and y_hat.item() > 1.0


def test_bad_inputs_are_refused_with_the_argument_named():
    x, y = vector([0.0, 1.0, 2.0]), vector([1.0, 2.0, 3.0])
    with pytest.raises(
        ValueError,
        match=r"kernel must be one of \['boxcar', 'constant', 'epanechnikov', 'gaussian'\]",
    ):
        nadaraya_watson(x, y, x, kernel="triangle")
    for width in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="width must be a positive"):
            nadaraya_watson(x, y, x, width=width)
    with pytest.raises(TypeError, match="width"):
        nadaraya_watson(x, y, x, width="1")
    with pytest.raises(ValueError, match=r"x_train must have shape \(K,\)"):
        nadaraya_watson(x[None], y, x)
    with pytest.raises(
        ValueError, match=r"y_train must have shape \(K,\)=\(3,\)"
    ):
        nadaraya_watson(x, y[:2], x)
    with pytest.raises(ValueError, match=r"x_query must have shape \(Q,\)"):
        nadaraya_watson(x, y, x[:, None])
    with pytest.raises(
        TypeError, match="x_train must be a floating-point tensor"
    ):
        nadaraya_watson(torch.arange(3), y, x)
    with pytest.raises(TypeError, match="y_train must be a torch.Tensor"):
        nadaraya_watson(x, [1.0, 2.0, 3.0], x)
    with pytest.raises(ValueError, match="at least one key"):
        nadaraya_watson(x[:0], y[:0], x)


# ----------------------------------------------------------------------------- data


def test_regression_data_shapes_order_and_target():
    x_train, y_train, x_val, y_val = make_regression_data(
        n_train=30, n_val=20, seed=0, dtype=torch.float64
    )
    assert x_train.shape == y_train.shape == (
        30,
    ) and x_val.shape == y_val.shape == (20,)
    assert (
        (x_train[1:] >= x_train[:-1]).all()
        and x_train.min() >= 0
        and x_train.max() <= 5
    )
    assert x_val[0] == 0 and x_val[-1] == 5
    assert torch.allclose(y_val, 2 * torch.sin(x_val) + x_val**0.8)
    assert torch.allclose(target_function(x_val), y_val)


def test_regression_data_is_reproducible_and_noise_has_the_asked_spread():
    first = make_regression_data(
        n_train=4000, seed=7, noise=0.3, dtype=torch.float64
    )
    again = make_regression_data(
        n_train=4000, seed=7, noise=0.3, dtype=torch.float64
    )
    other = make_regression_data(
        n_train=4000, seed=8, noise=0.3, dtype=torch.float64
    )
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])
    residual = first[1] - target_function(first[0])
    assert (
        abs(residual.std().item() - 0.3) < 0.03
        and abs(residual.mean().item()) < 0.03
    )
    clean = make_regression_data(
        n_train=10, seed=7, noise=0.0, dtype=torch.float64
    )
    assert torch.allclose(clean[1], target_function(clean[0]))


def test_regression_data_device_and_dtype(device):
    tensors = make_regression_data(
        n_train=5, n_val=3, device=device, dtype=torch.float64
    )
    assert all(
        t.device.type == device.type and t.dtype == torch.float64
        for t in tensors
    )


def test_regression_data_refuses_bad_sizes():
    with pytest.raises(ValueError, match="n_train"):
        make_regression_data(n_train=0)
    with pytest.raises(ValueError, match="noise"):
        make_regression_data(noise=-0.1)
    with pytest.raises(ValueError, match="x_max"):
        make_regression_data(x_max=0)


# ----------------------------------------------------------------------------- learned width


def test_model_with_shared_keys_equals_nadaraya_watson(data):
    x_train, y_train, x_val, _ = data
    model = NWKernelRegression(width=0.4).double()
    with torch.no_grad():
        y_hat = model(x_val, x_train, y_train)
    # The parameter was made in float32, so the width is 0.4 only to float32 precision.
    assert math.isclose(model.width.item(), 0.4, rel_tol=1e-6)
    expected, weights = nadaraya_watson(
        x_train, y_train, x_val, "gaussian", model.width.item()
    )
    assert torch.allclose(y_hat, expected) and torch.allclose(
        model.attention_weights, weights
    )


def test_model_with_per_query_keys(data):
    x_train, y_train, x_val, _ = data
    model = NWKernelRegression(width=0.4).double()
    shared = model(x_val[:7], x_train, y_train)
    rows = model(x_val[:7], x_train.expand(7, -1), y_train.expand(7, -1))
    assert torch.allclose(shared, rows)
    assert model.attention_weights.shape == (7, 40)
    assert torch.allclose(
        model.attention_weights.sum(dim=1), torch.ones(7, dtype=torch.float64)
    )


def test_model_gradcheck_float64():
    gen = torch.Generator().manual_seed(0)
    queries = torch.rand(
        4, generator=gen, dtype=torch.float64, requires_grad=True
    )
    keys = torch.rand(
        4, 5, generator=gen, dtype=torch.float64, requires_grad=True
    )
    values = torch.randn(
        4, 5, generator=gen, dtype=torch.float64, requires_grad=True
    )
    log_width = torch.tensor(
        math.log(0.3), dtype=torch.float64, requires_grad=True
    )
    model = NWKernelRegression()

    def f(q, k, v, lw):
        return torch.func.functional_call(model, {"log_width": lw}, (q, k, v))

    assert torch.autograd.gradcheck(f, (queries, keys, values, log_width))


def test_model_forward_and_backward_on_every_device(device):
    model = NWKernelRegression(width=0.5).to(device)
    queries = torch.linspace(0, 1, 6, device=device)
    keys = torch.linspace(0, 1, 8, device=device).expand(6, -1)
    values = torch.linspace(-1, 1, 8, device=device).expand(6, -1)
    predictions = model(queries, keys, values)
    assert predictions.shape == (6,) and predictions.device.type == device.type
    assert model.attention_weights.shape == (6, 8)
    predictions.pow(2).sum().backward()
    assert (
        model.log_width.grad is not None
        and model.log_width.grad.device.type == device.type
    )


def test_model_refuses_bad_shapes_and_widths():
    model = NWKernelRegression()
    q = torch.zeros(3)
    with pytest.raises(
        ValueError, match=r"keys must have shape \(K,\) or \(Q, K\) with Q=3"
    ):
        model(q, torch.zeros(2, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"keys must have shape"):
        model(q, torch.zeros(3, 4, 1), torch.zeros(3, 4, 1))
    with pytest.raises(
        ValueError,
        match=r"values must have the shape of keys, \(Q, K\)=\(3, 4\)",
    ):
        model(q, torch.zeros(3, 4), torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"queries must have shape \(Q,\)"):
        model(q[:, None], torch.zeros(4), torch.zeros(4))
    for width in (0.0, -2.0):
        with pytest.raises(ValueError, match="width must be a positive"):
            NWKernelRegression(width)


def test_leave_one_out_drops_exactly_the_diagonal():
    x = vector([10.0, 11.0, 12.0, 13.0])
    expected = [
        [11.0, 12.0, 13.0],
        [10.0, 12.0, 13.0],
        [10.0, 11.0, 13.0],
        [10.0, 11.0, 12.0],
    ]
    assert torch.equal(leave_one_out(x), vector(expected))
    with pytest.raises(ValueError, match="K >= 2"):
        leave_one_out(x[:1])


def test_training_starts_from_the_leave_one_out_loss():
    # The first reported loss, recomputed point by point with the point itself left out.
    x_train, y_train, _, _ = make_regression_data(
        n_train=12, seed=2, dtype=torch.float64
    )
    model = NWKernelRegression(width=0.8).double()
    width = model.width.item()
    losses = train_nw_regression(model, x_train, y_train, num_epochs=1, lr=0.1)
    errors = []
    for i in range(12):
        others = [j for j in range(12) if j != i]
        w = [
            math.exp(-(((x_train[i] - x_train[j]).item() / width) ** 2) / 2)
            for j in others
        ]
        prediction = sum(
            wj * y_train[j].item() for wj, j in zip(w, others)
        ) / sum(w)
        errors.append((prediction - y_train[i].item()) ** 2)
    assert math.isclose(losses[0], sum(errors) / 12, rel_tol=1e-10)


def test_training_lowers_the_loss_and_finds_a_local_minimum_of_the_width():
    x_train, y_train, _, _ = make_regression_data(
        n_train=50, seed=0, dtype=torch.float64
    )
    model = NWKernelRegression(width=1.0).double()
    losses = train_nw_regression(
        model, x_train, y_train, num_epochs=40, lr=1.0
    )
    assert len(losses) == 40 and losses[-1] < 0.8 * losses[0]
    assert all(b <= a + 1e-12 for a, b in zip(losses, losses[1:]))
    keys, values = leave_one_out(x_train), leave_one_out(y_train)

    def loo_loss(width: float) -> float:
        with torch.no_grad():
            return (
                (
                    (
                        NWKernelRegression(width).double()(
                            x_train, keys, values
                        )
                        - y_train
                    )
                    ** 2
                )
                .mean()
                .item()
            )

    learned = model.width.item()
    assert 0 < learned < 1.0
    assert loo_loss(learned) < loo_loss(0.8 * learned) and loo_loss(
        learned
    ) < loo_loss(1.25 * learned)


def test_training_refuses_bad_arguments():
    model = NWKernelRegression()
    x = torch.linspace(0, 1, 5)
    with pytest.raises(ValueError, match="num_epochs"):
        train_nw_regression(model, x, x, num_epochs=0, lr=0.1)
    with pytest.raises(ValueError, match="lr"):
        train_nw_regression(model, x, x, num_epochs=1, lr=0.0)
    with pytest.raises(
        ValueError, match=r"y_train must have shape \(K,\)=\(5,\)"
    ):
        train_nw_regression(model, x, x[:4], num_epochs=1, lr=0.1)
