"""Performer's FAVOR+: softmax attention estimated with positive random
features (Choromanski et al. 2021).

Chapter: "Beyond softmax attention". The softmax kernel itself is an
expectation: for w drawn from N(0, I_d),

    E[exp(w . q - q . q / 2) exp(w . k - k . k / 2)] = exp(q . k),

since E[exp(w . x)] = exp(x . x / 2) and (q + k) . (q + k) - q . q - k . k = 2 q . k.
Averaging over m draws w_1..w_m (the rows of W) gives features
phi(x) = exp(W x - x . x / 2) / sqrt(m) with E[phi(q) . phi(k)] = exp(q . k)
(:func:`softmax_kernel_estimate`): an unbiased estimate whose variance falls
as 1/m. Every feature is positive, so an estimated row of weights never sums
to a negative number (the trigonometric features of earlier random-feature
methods can). Rows drawn in orthogonal blocks (:func:`draw_orthogonal_features`)
keep each row N(0, I_d) and lower the variance further.

With these features, :func:`performer_attention` is linear attention
(:mod:`course_pkg.nn.linear_attention`) on queries and keys scaled by
d^(-1/4), so that q . k becomes q . k / sqrt(d), as in softmax attention.

Stabilising the exponent. exp(W x - x . x / 2) overflows for long vectors.
:func:`performer_attention` subtracts, before the exponential, the largest
exponent of each query's own features, and the largest over all keys of a
(batch, head): each query's features are then multiplied by a constant c_q,
all keys' by one constant c_K, and both cancel in the ratio
phi(q)^T S / phi(q)^T z; only eps, added to the denominator, is seen at
the keys' scale. In causal attention that scale must not depend on later
keys (through eps, a later key would reach the output): query i adds eps at
the scale of the keys j <= i, eps exp(c_i - c_K), c_i the largest exponent
of those keys. A max per key would not cancel: it would reweight the keys.
:func:`positive_random_features` itself is the exact, unstabilised phi.

Shape letters (see the package docstring): ``B`` batch, ``H`` heads, ``Q``
queries, ``K`` key-value pairs; here also ``d`` the width of a query or key,
``d_v`` of a value, ``m`` the number of random features (``num_features``).
"""

from __future__ import annotations

import math

import torch

from course_pkg.checks import (
    check_axes,
    check_device,
    check_float_dtype_arg,
    check_floats,
    check_generator,
    check_same_float_dtype,
    check_sizes,
)
from course_pkg.nn.linear_attention import (
    _check_kernel_inputs,
    _linear_attention,
)


def draw_orthogonal_features(
    num_features: int,
    head_width: int,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """m random feature directions, drawn in blocks of d orthogonal rows,
    each row rescaled to the length of a N(0, I_d) vector (a chi variable
    with d degrees of freedom): every row is then N(0, I_d) on its own, and
    the rows of a block are exactly orthogonal.

    Args:
        num_features: m (any m; the last block is cut to fit).
        head_width: d.
        generator: the source of randomness (None: torch's global one).
            The draw is made in float64 on the generator's device (the CPU
            without one), then cast, so one seed gives the same W anywhere.
        dtype: a floating-point dtype. device: where W is returned.
    Returns:
        (m, d) W.
    Raises:
        TypeError, ValueError: if a size is not an int >= 1, generator not
            a torch.Generator, dtype not floating point or device unknown.
    """
    device = _check_draw_orthogonal_features(
        num_features, head_width, generator, dtype, device
    )
    source = "cpu" if generator is None else generator.device
    draw = dict(generator=generator, dtype=torch.float64, device=source)
    num_blocks = -(-num_features // head_width)
    gaussian = torch.randn(num_blocks, head_width, head_width, **draw)
    rotations, triangular = torch.linalg.qr(gaussian)  # (n, d, d) each
    # the signs of R's diagonal make Q uniform over orthogonal matrices
    signs = triangular.diagonal(dim1=-2, dim2=-1).sign()  # (n, d)
    rows = (rotations * signs[:, None, :]).transpose(-1, -2)  # rows of Q^T
    rows = rows.reshape(-1, head_width)[:num_features]  # (m, d), unit rows
    lengths = torch.randn(num_features, head_width, **draw).norm(dim=-1)
    return (rows * lengths[:, None]).to(dtype=dtype, device=device)


def _check_draw_orthogonal_features(
    num_features: object,
    head_width: object,
    generator: object,
    dtype: object,
    device: object,
) -> torch.device | None:
    """num_features m and head_width d ints >= 1; generator None or a
    torch.Generator; dtype floating point; device None or a usable device,
    returned as a torch.device (or None)."""
    check_sizes(num_features=num_features, head_width=head_width)
    check_generator(generator)
    check_float_dtype_arg("dtype", dtype)
    return check_device("device", device)


def positive_random_features(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """phi(x) = exp(W x - x . x / 2) / sqrt(m), positive, with
    E_W[phi(q) . phi(k)] = exp(q . k) for W's rows N(0, I_d).

    Args:
        X: (..., d) queries or keys. W: (m, d) feature directions.
    Returns:
        (..., m).
    Raises:
        TypeError, ValueError: if X or W is not a floating-point tensor,
            W is not 2-D, their d differ, or their dtypes or devices.
    """
    _check_features(X, W)
    return torch.exp(_log_features(X, W))


def _log_features(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """log phi(x) = W x - x . x / 2 - log(m) / 2: (..., d) -> (..., m)."""
    squared_norm = (X * X).sum(-1, keepdim=True) / 2
    return X @ W.transpose(0, 1) - squared_norm - math.log(W.shape[0]) / 2


def softmax_kernel_estimate(
    queries: torch.Tensor, keys: torch.Tensor, W: torch.Tensor
) -> torch.Tensor:
    """The random-feature estimate phi(q_i) . phi(k_j) of exp(q_i . k_j)
    for every pair: unbiased over draws of W, its variance falling as 1/m.

    Args:
        queries: (Q, d). keys: (K, d). W: (m, d).
    Returns:
        (Q, K).
    Raises:
        TypeError, ValueError: on shapes that do not fit, integer tensors,
            or tensors of another dtype or device.
    """
    _check_softmax_kernel_estimate(queries, keys, W)
    query_features = torch.exp(_log_features(queries, W))  # (Q, m)
    key_features = torch.exp(_log_features(keys, W))  # (K, m)
    return query_features @ key_features.transpose(0, 1)


def _check_softmax_kernel_estimate(
    queries: object, keys: object, W: object
) -> None:
    """W (m, d), queries (Q, d) and keys (K, d), of one float dtype and
    device."""
    check_axes("W", W, "md", (None, None))
    width = W.shape[1]
    check_axes("queries", queries, "Qd", (None, width))
    check_axes("keys", keys, "Kd", (None, width))
    check_same_float_dtype(queries=queries, keys=keys, W=W)


def performer_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    W: torch.Tensor,
    causal: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """FAVOR+: softmax attention softmax(Q K^T / sqrt(d)) V estimated by
    linear attention on positive random features of d^(-1/4) Q and
    d^(-1/4) K (stabilised as the module docstring says).

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        W: (m, d) feature directions (e.g. from
            :func:`draw_orthogonal_features`), shared by the heads.
        causal: query i (position K - Q + i) sees keys j <= K - Q + i;
            needs K >= Q.
        eps: added to each denominator (> 0).
    Returns:
        (B, H, Q, d_v).
    Raises:
        TypeError, ValueError: on shapes that do not fit, integer tensors,
            tensors of another dtype or device, causal with K < Q or
            eps <= 0.
    """
    _check_performer_attention(queries, keys, values, W, causal, eps)
    return _performer_attention(queries, keys, values, W, causal, eps)


def _check_performer_attention(
    queries: object,
    keys: object,
    values: object,
    W: object,
    causal: object,
    eps: object,
) -> None:
    """queries (B, H, Q, d), keys (B, H, K, d), values (B, H, K, d_v) and
    W (m, d) of one float dtype and device; causal a bool (K >= Q when
    True); eps > 0."""
    _check_kernel_inputs(queries, keys, values, causal, eps)
    check_axes("W", W, "md", (None, queries.shape[-1]))
    check_same_float_dtype(queries=queries, W=W)


def _performer_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    W: torch.Tensor,
    causal: bool,
    eps: float,
) -> torch.Tensor:
    """:func:`performer_attention` on inputs that fit: (B, H, Q, d),
    (B, H, K, d), (B, H, K, d_v), W (m, d) -> (B, H, Q, d_v)."""
    query_features, key_features, eps_scale = _performer_features(
        queries, keys, W, causal
    )
    return _linear_attention(
        query_features, key_features, values, causal, eps * eps_scale
    )


def _performer_features(
    queries: torch.Tensor, keys: torch.Tensor, W: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The stabilised features of d^(-1/4) Q and d^(-1/4) K: (B, H, Q, d),
    (B, H, K, d), W (m, d) -> (B, H, Q, m), (B, H, K, m), and the factor of
    eps, (B, H, Q, 1): 1 without causal, exp(c_i - c_K) with."""
    scale = queries.shape[-1] ** -0.25
    log_query = _log_features(queries * scale, W)  # (B, H, Q, m)
    log_key = _log_features(keys * scale, W)  # (B, H, K, m)
    # constants that cancel in the ratio: one per query, one per (B, H)
    log_query = log_query - log_query.amax(-1, keepdim=True)
    key_max = log_key.amax(-1, keepdim=True)  # (B, H, K, 1)
    overall = key_max.amax(-2, keepdim=True)  # (B, H, 1, 1): c_K
    eps_scale = torch.ones_like(log_query[..., :1])
    if causal:  # c_i: the largest exponent of the keys up to query i
        seen = key_max.cummax(-2).values[..., -queries.shape[-2] :, :]
        eps_scale = torch.exp(seen - overall)  # (B, H, Q, 1)
    return torch.exp(log_query), torch.exp(log_key - overall), eps_scale


def _check_features(X: object, W: object) -> None:
    """X (..., d) and W (m, d), floating point, one dtype and device."""
    check_floats("X", X)
    check_axes("W", W, "md", (None, None))
    if X.dim() < 1 or X.shape[-1] != W.shape[1]:
        raise ValueError(
            f"X must have shape (..., d={W.shape[1]}) (W's d), "
            f"got {tuple(X.shape)}"
        )
    check_same_float_dtype(X=X, W=W)
