"""Nadaraya–Watson kernel regression: attention pooling without learned scores.

Chapter: "Queries, keys, values and attention pooling".

Nadaraya (1964) and Watson (1964) predict at a query ``q`` the weighted average
of the training targets ``y_i``, with weights that say how close ``q`` is to
each training input ``x_i``:

    f(q) = sum_i  alpha(q, x_i) y_i,    alpha(q, x_i) = k((q - x_i) / width) /
    sum_j k((q - x_j) / width).

In the language of attention the query is ``q``, the keys are the ``x_i``, the
values are the ``y_i``, and ``alpha`` is the attention weight. The module
holds, in the chapter's order: the four kernels, the nonparametric predictor, a
toy data set, and a version whose width is learned.

Shape letters: ``Q`` number of queries, ``K`` number of key–value (training)
pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from course_pkg.checks import (
    check_device,
    check_float_dtype,
    check_float_dtype_arg,
    check_floats,
    check_nonnegative_number,
    check_positive_int,
    check_positive_number,
    check_same_device,
    check_seed,
    check_sizes,
    check_tensor,
)

# --------------------------------------------------------------------- kernels
# Each kernel is a function of the scaled distance u = (q - k) / width. They
# are left unnormalised, with value 1 at u = 0: a constant factor cancels in
# the attention weights.


def gaussian(u: torch.Tensor) -> torch.Tensor:
    """Gaussian kernel exp(-u^2 / 2): every key is in reach, nearer keys count
    more.

    Args:
        u: tensor of scaled distances, any shape.
    Returns:
        Tensor of u's shape, dtype and device, values in (0, 1].
    Raises:
        TypeError: if u is not a tensor.
    """
    check_floats("u", u)
    return torch.exp(-(u**2) / 2)


def boxcar(u: torch.Tensor) -> torch.Tensor:
    """Boxcar kernel ``1[|u| < 1]``: the plain average of the keys closer than
    one width.

    Args:
        u: tensor of scaled distances, any shape.
    Returns:
        Tensor of u's shape, dtype and device, values in {0, 1}.
    Raises:
        TypeError: if u is not a tensor.
    """
    check_floats("u", u)
    return (u.abs() < 1).to(u.dtype)


def constant(u: torch.Tensor) -> torch.Tensor:
    """Constant kernel 1: every key counts the same, so the prediction is the
    mean of the values.

    Args:
        u: tensor of scaled distances, any shape.
    Returns:
        Tensor of ones of u's shape, dtype and device.
    Raises:
        TypeError: if u is not a tensor.
    """
    check_floats("u", u)
    return torch.ones_like(u)


def epanechnikov(u: torch.Tensor) -> torch.Tensor:
    """Epanechnikov kernel max(0, 1 - u^2): compact support like the boxcar,
    smooth inside it.

    Args:
        u: tensor of scaled distances, any shape.
    Returns:
        Tensor of u's shape, dtype and device, values in [0, 1].
    Raises:
        TypeError: if u is not a tensor.
    """
    check_floats("u", u)
    return (1 - u**2).clamp_min(0)


KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gaussian": gaussian,
    "boxcar": boxcar,
    "constant": constant,
    "epanechnikov": epanechnikov,
}

# ------------------------------------------------------- nonparametric pooling


def _check_vector(name: str, value: Any, letter: str) -> None:
    check_tensor(name, value, 1, f"({letter},)")
    check_float_dtype(name, value)


def _check_pooling(
    x_train: Any, y_train: Any, x_query: Any, kernel: Any, width: Any
) -> None:
    """The checks of :func:`nadaraya_watson`."""
    if kernel not in KERNELS:
        raise ValueError(
            f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}"
        )
    check_positive_number("width", width)
    _check_vector("x_train", x_train, "K")
    _check_vector("y_train", y_train, "K")
    _check_vector("x_query", x_query, "Q")
    check_same_device(x_train=x_train, y_train=y_train, x_query=x_query)
    if y_train.shape != x_train.shape:
        raise ValueError(
            f"y_train must have shape (K,)=({x_train.shape[0]},) like x_train, got {tuple(y_train.shape)}"
        )
    if x_train.shape[0] == 0:
        raise ValueError("x_train must hold at least one key, got shape (0,)")


def _rows_of_keys(
    queries: Any, keys: Any, values: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check queries (Q,), keys and values (K,) or (Q, K) of one shape, and
    give keys and values as (Q, K) (a (K,) one shared by every query)."""
    _check_vector("queries", queries, "Q")
    check_floats("keys", keys)
    check_floats("values", values)
    check_same_device(queries=queries, keys=keys, values=values)
    num_queries = queries.shape[0]
    if keys.dim() == 1:
        keys = keys.unsqueeze(0).expand(num_queries, -1)  # (Q, K)
    if keys.dim() != 2 or keys.shape[0] != num_queries:
        raise ValueError(
            f"keys must have shape (K,) or (Q, K) with Q={num_queries}, got {tuple(keys.shape)}"
        )
    if values.dim() == 1:
        values = values.unsqueeze(0).expand(num_queries, -1)
    if values.shape != keys.shape:
        raise ValueError(
            f"values must have the shape of keys, (Q, K)={tuple(keys.shape)}, got {tuple(values.shape)}"
        )
    return keys, values


def nadaraya_watson(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_query: torch.Tensor,
    kernel: str = "gaussian",
    width: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nadaraya–Watson prediction: attention pooling of y_train with kernel
    weights.

    Each row of the weights is k(u) / sum k(u) over the keys, u = (query - key)
    / width. A query with no key in reach (possible with "boxcar" and
    "epanechnikov") gets a row of zeros and the prediction 0, never NaN. The
    "gaussian" weights are computed as softmax(-u^2 / 2): the same numbers, but
    the nearest key keeps its weight even where every exp(-u^2 / 2) underflows
    to 0.

    Args:
        x_train: (K,) keys, the training inputs. y_train: (K,) values, the
            training targets. x_query: (Q,) queries.
        kernel: one of the names in ``KERNELS``.
        width: positive bandwidth; a smaller one makes the weights more local.
    Returns:
        y_hat: (Q,) predictions.
        attention_weights: (Q, K) weights; each row sums to 1, or is all 0
        when nothing is in reach.
        Both on the inputs' device, in their (promoted) dtype.
    Raises:
        ValueError: on an unknown kernel, a width that is not positive, K = 0,
            or shapes that do not fit. TypeError: on arguments that are not
            floating-point tensors or a width that is not a number.
    """
    _check_pooling(x_train, y_train, x_query, kernel, width)
    u = (x_query[:, None] - x_train[None, :]) / width  # (Q, K)
    if kernel == "gaussian":
        attention_weights = torch.softmax(-(u**2) / 2, dim=1)
    else:
        scores = KERNELS[kernel](u)
        totals = scores.sum(dim=1, keepdim=True)  # (Q, 1)
        # Dividing by 1 where nothing is in reach keeps that row at exactly 0
        # (and its gradient finite).
        attention_weights = scores / torch.where(
            totals > 0, totals, torch.ones_like(totals)
        )
    dtype = torch.promote_types(attention_weights.dtype, y_train.dtype)
    y_hat = attention_weights.to(dtype) @ y_train.to(dtype)  # (Q,)
    return y_hat, attention_weights


# -------------------------------------------------------------------- toy data


def target_function(x: torch.Tensor) -> torch.Tensor:
    """The smooth function the chapter tries to recover: f(x) = 2 sin(x) +
    x^0.8, for x >= 0.

    Args:
        x: tensor of inputs, any shape, x >= 0.
    Returns:
        Tensor of x's shape, dtype and device.
    """
    check_floats("x", x)
    return 2 * torch.sin(x) + x**0.8


def make_regression_data(
    n_train: int = 50,
    n_val: int = 50,
    seed: int = 0,
    noise: float = 0.5,
    x_max: float = 5.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Noisy samples of :func:`target_function` for training, a clean grid for
    validation.

    The numbers are drawn on the CPU in float64 from a generator seeded with
    ``seed`` and only then moved to ``device``/``dtype``, so every device gets
    the same data set.

    Args:
        n_train: K, the number of training points, drawn uniformly in [0,
            x_max] and sorted.
        n_val: the number of validation points, evenly spaced on [0, x_max].
        seed: seed of the private random generator (the global one is left
            alone).
        noise: standard deviation of the Gaussian noise added to the training
            targets.
        x_max: right end of the input interval.
        device, dtype: where and in which precision to return the tensors.
    Returns:
        x_train (K,), y_train (K,), x_val (n_val,), y_val (n_val,) with y_val =
        f(x_val), noiseless.
    Raises:
        TypeError: if a size or seed is not an int, noise or x_max not a
            number, device not a str/``torch.device``, dtype not a float dtype.
        ValueError: if a size is < 1, noise < 0, x_max <= 0, noise or x_max
            not finite (NaN, inf), or device not available here.
    """
    device = _check_make_regression_data(
        n_train, n_val, seed, noise, x_max, device, dtype
    )
    generator = torch.Generator().manual_seed(seed)
    x_train = torch.sort(
        torch.rand(n_train, generator=generator, dtype=torch.float64) * x_max
    ).values
    y_train = target_function(x_train) + noise * torch.randn(
        n_train, generator=generator, dtype=torch.float64
    )
    x_val = torch.linspace(0, x_max, n_val, dtype=torch.float64)
    y_val = target_function(x_val)
    return tuple(
        t.to(device=device, dtype=dtype)
        for t in (x_train, y_train, x_val, y_val)
    )


def _check_make_regression_data(
    n_train: object,
    n_val: object,
    seed: object,
    noise: object,
    x_max: object,
    device: object,
    dtype: object,
) -> torch.device | None:
    """Sizes ints >= 1, seed an int, noise >= 0, x_max > 0, device available
    (returned as a torch.device or None), dtype a float torch.dtype."""
    check_sizes(n_train=n_train, n_val=n_val)
    check_seed("seed", seed)
    check_nonnegative_number("noise", noise)
    check_positive_number("x_max", x_max)
    device = check_device("device", device)
    check_float_dtype_arg("dtype", dtype)
    return device


# --------------------------------------------------------------- learned width


class NWKernelRegression(nn.Module):
    """Gaussian Nadaraya–Watson regression whose width is learned.

    weights = softmax(-((q - k) / width)^2 / 2) over the keys; prediction =
    weights · values. The width is stored as its logarithm, so gradient steps
    can never make it zero or negative.

    Args:
        width: the initial width, > 0.
    Attributes:
        log_width: () parameter, log of the width.
        attention_weights: (Q, K) weights of the last forward call.
    Raises:
        ValueError: if width is not a positive number.
    """

    def __init__(self, width: float = 1.0):
        super().__init__()
        check_positive_number("width", width)
        self.log_width = nn.Parameter(torch.tensor(math.log(width)))
        self.attention_weights: torch.Tensor | None = None

    @property
    def width(self) -> torch.Tensor:
        """() tensor, the current width exp(log_width)."""
        return self.log_width.exp()

    def forward(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        """Pool the values with Gaussian weights.

        Args:
            queries: (Q,) query positions.
            keys: (K,) keys shared by all queries, or (Q, K) one row of keys
                per query.
            values: same shape as keys.
        Returns:
            (Q,) predictions.
        Raises:
            ValueError/TypeError: if keys is not (K,) or (Q, K), or values does
                not match keys.
        """
        keys, values = _rows_of_keys(queries, keys, values)  # (Q, K) each
        u = (queries[:, None] - keys) / self.width  # (Q, K)
        self.attention_weights = torch.softmax(-(u**2) / 2, dim=1)
        return (self.attention_weights * values).sum(dim=1)


def leave_one_out(x: torch.Tensor) -> torch.Tensor:
    """Row i holds every entry of x except x[i]: the keys of training query i.

    Args:
        x: (K,) tensor, K >= 2.
    Returns:
        (K, K - 1) tensor on x's device and dtype.
    Raises:
        ValueError: if x is not 1-D with at least 2 entries.
    """
    _check_leave_one_out(x)
    num = x.shape[0]
    keep = ~torch.eye(num, dtype=torch.bool, device=x.device)
    return x.unsqueeze(0).expand(num, num)[keep].reshape(num, num - 1)


def _check_leave_one_out(x: object) -> None:
    """x a float tensor of shape (K,) with K >= 2."""
    check_floats("x", x)
    if x.dim() != 1 or x.shape[0] < 2:
        raise ValueError(
            f"x must have shape (K,) with K >= 2, got {tuple(x.shape)}"
        )


def train_nw_regression(
    model: NWKernelRegression,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    num_epochs: int,
    lr: float,
) -> list[float]:
    """Fit the width by full-batch SGD on the leave-one-out mean squared error.

    Each training point is a query whose keys are all the *other* training
    points: with itself among its keys the loss is lowest at width -> 0, where
    every point just copies its own target.

    Args:
        model: the regression to train (in place).
        x_train: (K,) inputs, K >= 2. y_train: (K,) targets.
        num_epochs: number of gradient steps, >= 1. lr: learning rate, > 0.
    Returns:
        The loss before each step, num_epochs floats.
    Raises:
        TypeError: if x_train or y_train is not a float tensor, num_epochs
            not an int or lr not a number.
        ValueError: on shapes or devices that do not fit, num_epochs < 1,
            or lr not finite > 0.
    """
    _check_train_nw_regression(x_train, y_train, num_epochs, lr)
    keys, values = (
        leave_one_out(x_train),
        leave_one_out(y_train),
    )  # (K, K - 1) each
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(num_epochs):
        optimizer.zero_grad()
        loss = ((model(x_train, keys, values) - y_train) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _check_train_nw_regression(
    x_train: object, y_train: object, num_epochs: object, lr: object
) -> None:
    """x_train and y_train float (K,) tensors of one shape and device;
    num_epochs an int >= 1; lr a finite number > 0."""
    _check_vector("x_train", x_train, "K")
    _check_vector("y_train", y_train, "K")
    if y_train.shape != x_train.shape:
        raise ValueError(
            f"y_train must have shape (K,)=({x_train.shape[0]},), got {tuple(y_train.shape)}"
        )
    check_same_device(x_train=x_train, y_train=y_train)
    check_positive_int("num_epochs", num_epochs)
    check_positive_number("lr", lr)
