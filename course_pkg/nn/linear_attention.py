"""Linear attention: the softmax's exp(q . k) replaced by a kernel
phi(q) . phi(k) (Katharopoulos et al. 2020), and the same attention run as
a recurrence, with an optional decay (RetNet, Sun et al. 2023; gated linear
attention, Yang et al. 2024).

Chapter: "Beyond softmax attention". Softmax attention gives query q the
output sum_j sim(q, k_j) v_j / sum_j sim(q, k_j) with sim(q, k) =
exp(q . k / sqrt(d)). With a kernel sim(q, k) = phi(q) . phi(k), positive
features phi (here elu(x) + 1), the sums regroup:

    sum_j (phi(q) . phi(k_j)) v_j = phi(q)^T (sum_j phi(k_j) v_j^T),

a (m, d_v) matrix S = phi(K)^T V and an (m,) vector z = phi(K)^T 1 shared
by every query. The output is phi(q)^T S / phi(q)^T z: O(K m d_v) work
instead of the (Q, K) weight matrix's O(Q K d). :func:`quadratic_kernel_attention`
writes the same kernel as that explicit matrix; the two agree to rounding
(the tests measure it).

Causal attention sums only over j <= i: S_i and z_i are prefix sums
(:func:`linear_attention` with ``causal=True``), which is a recurrence,
S_i = S_{i-1} + phi(k_i) v_i^T: the layer is an RNN with an (m, d_v) state
(:func:`linear_attention_recurrent`), whose memory does not grow with the
length. A decay gamma in (0, 1], S_i = gamma S_{i-1} + phi(k_i) v_i^T,
weights key j by gamma^(i - j): the recurrences of RetNet and gated linear
attention, in the parallel form an explicit matrix with those weights
(:func:`quadratic_kernel_attention` with ``decay``).

Every output divides by phi(q)^T z + eps: a denominator that underflows to 0
gives 0, never NaN.

Shape letters (see the package docstring): ``B`` batch, ``H`` heads, ``Q``
queries, ``K`` key-value pairs, ``D`` width (``num_hiddens``); here also
``d`` the width of a query or key, ``d_v`` of a value, ``m`` of a feature
phi(x). With ``causal=True`` the queries are the last Q of the K positions
(K >= Q), as everywhere in the package.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_attention_inputs,
    check_axes,
    check_block_sizes,
    check_callable,
    check_causal,
    check_floats,
    check_head_qkv,
    check_module_input,
    check_positive_number,
    check_same_float_dtype,
)
from course_pkg.nn.masks import query_key_distance

FeatureMap = Callable[[torch.Tensor], torch.Tensor]


def elu_feature_map(X: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, elementwise: positive, so phi(q) . phi(k) > 0.

    Args:
        X: (..., d) queries or keys, floating point.
    Returns:
        (..., d), every entry > 0.
    Raises:
        TypeError: if X is not a floating-point tensor.
    """
    check_floats("X", X)
    return _elu_features(X)


def _elu_features(X: torch.Tensor) -> torch.Tensor:
    """elu(x) + 1 on a float tensor (..., d) -> (..., d)."""
    return F.elu(X) + 1


def linear_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    feature_map: FeatureMap = elu_feature_map,
    causal: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Kernel attention in the associative order: phi(Q) (phi(K)^T V) /
    phi(Q) (phi(K)^T 1), never forming the (Q, K) matrix.

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        feature_map: phi, (..., d) -> (..., m) positive features.
        causal: query i (position K - Q + i) sums over keys j <= K - Q + i
            only, through prefix sums of phi(k_j) v_j^T; needs K >= Q.
        eps: added to each denominator (> 0).
    Returns:
        (B, H, Q, d_v).
    Raises:
        TypeError, ValueError: on shapes that do not fit, integer tensors,
            a non-callable feature_map, causal with K < Q or eps <= 0.
    """
    _check_linear_attention(queries, keys, values, feature_map, causal, eps)
    return _linear_attention(
        feature_map(queries), feature_map(keys), values, causal, eps
    )


def _check_linear_attention(
    queries: object,
    keys: object,
    values: object,
    feature_map: object,
    causal: object,
    eps: object,
) -> None:
    """queries (B, H, Q, d), keys (B, H, K, d), values (B, H, K, d_v) of one
    float dtype and device; causal a bool (K >= Q when True); eps > 0;
    feature_map a callable."""
    _check_kernel_inputs(queries, keys, values, causal, eps)
    check_callable("feature_map", feature_map)


def _linear_attention(
    query_features: torch.Tensor,
    key_features: torch.Tensor,
    values: torch.Tensor,
    causal: bool,
    eps: float | torch.Tensor,
) -> torch.Tensor:
    """Features phi(Q) (B, H, Q, m), phi(K) (B, H, K, m), values (B, H, K,
    d_v) -> (B, H, Q, d_v) in O(K m d_v); eps a number or (B, H, Q, 1)."""
    if not causal:
        state = key_features.transpose(-1, -2) @ values  # (B, H, m, d_v)
        normaliser = key_features.sum(-2)  # (B, H, m)
        numerator = query_features @ state  # (B, H, Q, d_v)
        denominator = query_features @ normaliser[..., None]  # (B, H, Q, 1)
        return numerator / _positive(denominator + eps)
    num_queries, num_keys = query_features.shape[-2], key_features.shape[-2]
    # S_j = sum_{j' <= j} phi(k_j') v_j'^T for every j: (B, H, K, m, d_v),
    # kept for the last Q positions, those of the queries (a fused kernel
    # would keep one state at a time; this keeps the algebra visible)
    outer = key_features[..., :, None] * values[..., None, :]
    states = outer.cumsum(-3)[..., num_keys - num_queries :, :, :]
    normalisers = key_features.cumsum(-2)[..., num_keys - num_queries :, :]
    numerator = torch.einsum("bhqm,bhqmv->bhqv", query_features, states)
    denominator = (query_features * normalisers).sum(-1, keepdim=True)
    return numerator / _positive(denominator + eps)


def quadratic_kernel_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    feature_map: FeatureMap = elu_feature_map,
    causal: bool = False,
    decay: float | torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """The same kernel attention as an explicit (Q, K) matrix: weights
    A_ij = phi(q_i) . phi(k_j) (times gamma^(p_i - j) with a decay, p_i =
    K - Q + i the query's position), each row divided by its sum + eps; the
    reference the associative and recurrent forms must equal.

    Args:
        queries: (B, H, Q, d). keys: (B, H, K, d). values: (B, H, K, d_v).
        feature_map: phi, (..., d) -> (..., m) positive features.
        causal: only keys j <= p_i; needs K >= Q.
        decay: None, a number gamma in (0, 1], or an (H,) tensor of one
            gamma per head; needs causal=True.
        eps: added to each row's sum (> 0).
    Returns:
        (B, H, Q, d_v).
    Raises:
        TypeError, ValueError: as :func:`linear_attention`, and on a decay
            outside (0, 1], of another shape, or without causal.
    """
    _check_quadratic_kernel_attention(
        queries, keys, values, feature_map, causal, decay, eps
    )
    gamma = None if decay is None else _per_head(decay, queries)
    return _quadratic_kernel_attention(
        feature_map(queries), feature_map(keys), values, causal, gamma, eps
    )


def _check_quadratic_kernel_attention(
    queries: object,
    keys: object,
    values: object,
    feature_map: object,
    causal: object,
    decay: object,
    eps: object,
) -> None:
    """As :func:`_check_linear_attention`, and decay None, a number in
    (0, 1] or an (H,) float tensor like queries, only with causal=True."""
    _check_kernel_inputs(queries, keys, values, causal, eps)
    check_callable("feature_map", feature_map)
    _check_decay(decay, queries)
    if decay is not None and not causal:
        raise ValueError("decay needs causal=True (it weights past keys)")


def _quadratic_kernel_attention(
    query_features: torch.Tensor,
    key_features: torch.Tensor,
    values: torch.Tensor,
    causal: bool,
    gamma: torch.Tensor | None,
    eps: float | torch.Tensor,
) -> torch.Tensor:
    """Features phi(Q) (B, H, Q, m), phi(K) (B, H, K, m), values (B, H, K,
    d_v), gamma None or (1, H, 1), eps a number or (B, H, Q, 1) -> (B, H,
    Q, d_v) through the (Q, K)
    matrix: the parallel form, in which RetNet trains."""
    weights = query_features @ key_features.transpose(-1, -2)  # (B, H, Q, K)
    if causal:
        num_queries, num_keys = query_features.shape[2], key_features.shape[2]
        distance = query_key_distance(
            num_queries, num_keys, query_features.device
        )  # (Q, K): how far back key j lies from query i
        weights = weights * (distance >= 0)
        if gamma is not None:
            decay = gamma[..., None] ** distance.clamp(min=0).to(gamma.dtype)
            weights = weights * decay  # (1, H, 1, 1) ** (Q, K)
    weights = weights / _positive(weights.sum(-1, keepdim=True) + eps)
    return weights @ values


def linear_attention_recurrent(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    feature_map: FeatureMap = elu_feature_map,
    decay: float | torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Causal linear attention as an RNN over the K positions: the state
    S_j = gamma S_{j-1} + phi(k_j) v_j^T (m, d_v) and z_j = gamma z_{j-1} +
    phi(k_j) (m,), the output phi(q)^T S_p / (phi(q)^T z_p + eps) at the
    query's position p.

    Args:
        queries: (B, H, Q, d), the last Q of the K positions.
        keys: (B, H, K, d), K >= Q. values: (B, H, K, d_v).
        feature_map: phi, (..., d) -> (..., m) positive features.
        decay: gamma: None (1, plain linear attention), a number in (0, 1],
            or an (H,) tensor of one gamma per head.
        eps: added to each denominator (> 0).
    Returns:
        (B, H, Q, d_v), equal to :func:`quadratic_kernel_attention` with
        causal=True and the same decay.
    Raises:
        TypeError, ValueError: as :func:`quadratic_kernel_attention`, and
            K < Q.
    """
    _check_linear_attention_recurrent(
        queries, keys, values, feature_map, decay, eps
    )
    query_features, key_features = feature_map(queries), feature_map(keys)
    gamma = _per_head(1.0 if decay is None else decay, queries)  # (1, H, 1)
    batch, heads, num_queries = queries.shape[:3]
    num_keys, value_width = keys.shape[2], values.shape[-1]
    width = key_features.shape[-1]
    state = values.new_zeros(batch, heads, width, value_width)  # S
    normaliser = values.new_zeros(batch, heads, width)  # z
    outputs = []
    for j in range(num_keys):
        phi_k = key_features[:, :, j]  # (B, H, m)
        update = phi_k[..., None] * values[:, :, j, None, :]  # (B, H, m, d_v)
        state = gamma[..., None] * state + update
        normaliser = gamma * normaliser + phi_k
        i = j - (num_keys - num_queries)  # the query at position j, if any
        if i >= 0:
            phi_q = query_features[:, :, i]  # (B, H, m)
            numerator = (phi_q[..., None] * state).sum(-2)  # (B, H, d_v)
            denominator = (phi_q * normaliser).sum(-1, keepdim=True)
            outputs.append(numerator / (denominator + eps))
    if not outputs:
        return values.new_zeros(batch, heads, 0, value_width)
    return torch.stack(outputs, dim=2)


def _check_linear_attention_recurrent(
    queries: object,
    keys: object,
    values: object,
    feature_map: object,
    decay: object,
    eps: object,
) -> None:
    """queries (B, H, Q, d), keys (B, H, K, d) with K >= Q, values (B, H, K,
    d_v) of one float dtype and device; eps > 0; feature_map a callable;
    decay None, a number in (0, 1] or an (H,) float tensor like queries."""
    _check_kernel_inputs(queries, keys, values, True, eps)
    check_callable("feature_map", feature_map)
    _check_decay(decay, queries)


def _positive(denominator: torch.Tensor) -> torch.Tensor:
    """The denominators, at least the dtype's smallest normal number: with
    eps scaled down to 0 (random features), a row whose features all
    underflowed gives 0, not 0 / 0."""
    return denominator.clamp_min(torch.finfo(denominator.dtype).tiny)


def _per_head(decay: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """gamma as a (1, H, 1) tensor of like's dtype and device (a number is
    the same for every head)."""
    heads = like.shape[1]
    gamma = torch.as_tensor(decay, dtype=like.dtype, device=like.device)
    return gamma.expand(heads).reshape(1, heads, 1)


class LinearAttention(nn.Module):
    """Multi-head linear attention: H kernel attentions
    (:func:`linear_attention`) on learned projections, concatenated and
    mixed by W_o, as :class:`course_pkg.nn.attention.MultiHeadAttention`
    does with softmax attention.

    There is no dropout: the layer never forms attention weights to drop.

    Args:
        num_hiddens: D, the width of the inputs, of every projection and of
            the output; divisible by num_heads.
        num_heads: H.
        bias: whether the four projections have a bias.
        feature_map: phi of every head (default elu(x) + 1).
        eps: added to each denominator (> 0).
    Attributes:
        W_q, W_k, W_v, W_o: ``nn.Linear(D, D)``.
    Raises:
        TypeError, ValueError: naming a size that is not an int >= 1, a D
            not divisible by H, a non-callable feature_map or eps <= 0.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        bias: bool = False,
        *,
        feature_map: FeatureMap = elu_feature_map,
        eps: float = 1e-6,
    ):
        _check_linear_attention_args(num_hiddens, num_heads, feature_map, eps)
        super().__init__()
        self.num_hiddens, self.num_heads = num_hiddens, num_heads
        self.feature_map, self.eps = feature_map, eps
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        *,
        causal: bool = False,
    ) -> torch.Tensor:
        """Attend with H heads of linear attention.

        Args:
            queries: (B, Q, D). keys: (B, K, D). values: (B, K, D).
            causal: hide keys after each query (the last Q of K positions).
        Returns:
            (B, Q, D).
        Raises:
            TypeError, ValueError: on inputs that do not fit each other or
                the layer (width, dtype, device), or causal with K < Q.
        """
        _check_linear_attention_forward(self, queries, keys, values, causal)
        D = self.num_hiddens
        split = self._split_heads
        output = _linear_attention(
            self.feature_map(split(self.W_q(queries))),  # (B, H, Q, m)
            self.feature_map(split(self.W_k(keys))),  # (B, H, K, m)
            split(self.W_v(values)),  # (B, H, K, D/H)
            causal,
            self.eps,
        )  # (B, H, Q, D/H)
        batch, num_queries = queries.shape[:2]
        return self.W_o(output.transpose(1, 2).reshape(batch, num_queries, D))

    def _split_heads(self, X: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, D/H)."""
        head_width = self.num_hiddens // self.num_heads
        return X.view(
            X.shape[0], X.shape[1], self.num_heads, head_width
        ).transpose(1, 2)


def _check_linear_attention_args(
    num_hiddens: object, num_heads: object, feature_map: object, eps: object
) -> None:
    """num_hiddens D and num_heads H ints >= 1, H dividing D; feature_map a
    callable; eps > 0."""
    check_block_sizes(num_hiddens, None, num_heads, 0.0)
    check_callable("feature_map", feature_map)
    check_positive_number("eps", eps)


def _check_linear_attention_forward(
    layer: LinearAttention,
    queries: object,
    keys: object,
    values: object,
    causal: object,
) -> None:
    """queries (B, Q, D), keys and values (B, K, D) with D the layer's
    width, of its dtype and device; causal a bool (K >= Q when True)."""
    D = layer.num_hiddens
    check_attention_inputs(
        queries, keys, values, None,
        query_size=D, key_size=D, value_size=D, causal=causal,
    )  # fmt: skip
    check_module_input("queries", queries, layer)


def _check_kernel_inputs(
    queries: object,
    keys: object,
    values: object,
    causal: object,
    eps: object,
) -> None:
    """queries (B, H, Q, d), keys (B, H, K, d), values (B, H, K, d_v) of one
    float dtype and device, a bool causal (K >= Q when True) and eps > 0:
    TypeError, ValueError naming the argument."""
    check_head_qkv(queries, keys, values)
    check_causal(causal, queries.shape[2], keys.shape[2])
    check_positive_number("eps", eps)


def _check_decay(decay: object, queries: torch.Tensor) -> None:
    """decay None, a number in (0, 1] or an (H,) float tensor of queries'
    dtype and device (values in (0, 1], read on the CPU only)."""
    if decay is None:
        return
    if isinstance(decay, torch.Tensor):
        check_axes("decay", decay, "H", (queries.shape[1],))
        check_same_float_dtype(queries=queries, decay=decay)
        if decay.device.type == "cpu" and decay.numel():
            if not bool(((decay > 0) & (decay <= 1)).all()):
                raise ValueError(
                    f"decay must hold numbers in (0, 1], got {decay.tolist()}"
                )
        return
    if isinstance(decay, bool) or not isinstance(decay, (int, float)):
        raise TypeError(
            "decay must be None, a number in (0, 1] or an (H,) tensor, "
            f"got {type(decay).__name__}"
        )
    if not 0 < decay <= 1:
        raise ValueError(f"decay must be in (0, 1], got {decay}")
