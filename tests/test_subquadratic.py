"""Tests of the chapter "Beyond softmax attention": linear attention and its
recurrence, Performer's random features, Linformer, LSH attention and the
attention graphs.

Forms that must be equal are compared in float64 against a reference
written differently (the explicit (Q, K) matrix, PyTorch's
``scaled_dot_product_attention``, dense loops). Measured with the seeds
below (float64, outputs of size ~1): associative linear attention against
the explicit kernel matrix, 3.3e-16 at most (causal and not); the
recurrence against the causal matrix 3.3e-16, with a decay 4.4e-16;
Linformer with identity projections against SDPA 4.4e-16; LSH with one
bucket 4.4e-16. Hence the bound 1e-12: rounding, with room.

The random-feature estimate of exp(q . k) (q . k = 0.26 below, exp 1.2969):
over 2000 draws of W with m = 16 the mean, 1.2952, is 0.14 standard errors
(0.0128) from the exact value, and the test allows 4; features without the
-|x|^2 / 2 would be 63 away. Its variance over 1000 draws falls with m as
0.279, 0.0847, 0.0204 for m = 16, 64, 256 (ratios 3.3 and 4.2 against the
4 of 1/m; the test allows 2.5 to 6.5).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_pkg.nn.attention_graphs import (
    causal_graph,
    full_graph,
    global_local_graph,
    graph_attention,
    num_edges,
    random_graph,
    receptive_field,
    window_graph,
)
from course_pkg.nn.linear_attention import (
    LinearAttention,
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    quadratic_kernel_attention,
)
from course_pkg.nn.low_rank import linformer_attention
from course_pkg.nn.lsh_attention import lsh_attention, lsh_buckets
from course_pkg.nn.random_features import (
    draw_orthogonal_features,
    performer_attention,
    positive_random_features,
    softmax_kernel_estimate,
)
from course_pkg.nn.sliding_window import sliding_window_mask

F64 = torch.float64
TOLERANCE = 1e-12  # float64 rounding of outputs ~1 (module docstring)


def _qkv(seed=0, num_queries=7, num_keys=9, width=5, value_width=4, scale=1):
    gen = torch.Generator().manual_seed(seed)
    queries = scale * torch.randn(2, 3, num_queries, width, generator=gen)
    keys = scale * torch.randn(2, 3, num_keys, width, generator=gen)
    values = torch.randn(2, 3, num_keys, value_width, generator=gen)
    return queries.to(F64), keys.to(F64), values.to(F64)


def _sdpa(queries, keys, values, causal=False):
    """PyTorch's attention with the package's causal convention: the queries
    are the last Q of the K positions."""
    mask = None
    if causal:
        mask = sliding_window_mask(queries.shape[2], keys.shape[2], None)
    return F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask
    )


# ------------------------------------------------------ linear attention


def test_elu_feature_map_is_positive_and_elu_plus_one():
    X = torch.linspace(-30, 5, 50, dtype=F64)
    phi = elu_feature_map(X)
    assert (phi > 0).all()
    assert torch.allclose(phi, torch.where(X > 0, X + 1, torch.exp(X)))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_associative_form_equals_the_explicit_kernel_matrix(causal, seed):
    queries, keys, values = _qkv(seed)  # Q = 7 < K = 9
    ours = linear_attention(queries, keys, values, causal=causal)
    reference = quadratic_kernel_attention(
        queries, keys, values, causal=causal
    )
    assert (ours - reference).abs().max() < TOLERANCE


def test_explicit_kernel_matrix_by_hand():
    # the reference itself, against a loop over queries and keys
    queries, keys, values = _qkv(2, num_queries=3, num_keys=4)
    phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)
    expected = torch.zeros(2, 3, 3, 4, dtype=F64)
    for i in range(3):
        position = 4 - 3 + i
        weights = torch.stack(
            [(phi_q[:, :, i] * phi_k[:, :, j]).sum(-1) for j in range(4)], -1
        )  # (B, H, K)
        weights = weights * (torch.arange(4) <= position)
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-6)
        expected[:, :, i] = (weights[..., None] * values).sum(-2)
    ours = quadratic_kernel_attention(queries, keys, values, causal=True)
    assert (ours - expected).abs().max() < TOLERANCE


def test_causal_outputs_do_not_see_later_keys():
    queries, keys, values = _qkv(3, num_queries=6, num_keys=6)
    later = values.clone()
    later[:, :, 4:] += 10.0
    before = linear_attention(queries, keys, values, causal=True)
    after = linear_attention(queries, keys, later, causal=True)
    assert torch.equal(before[:, :, :4], after[:, :, :4])
    assert not torch.allclose(before[:, :, 4:], after[:, :, 4:])


@pytest.mark.parametrize(
    "decay", [None, 0.9, 1.0, torch.tensor([0.5, 0.9, 1.0], dtype=F64)]
)
def test_recurrence_equals_the_parallel_form(decay):
    queries, keys, values = _qkv(4)
    ours = linear_attention_recurrent(queries, keys, values, decay=decay)
    reference = quadratic_kernel_attention(
        queries, keys, values, causal=True, decay=decay
    )
    assert (ours - reference).abs().max() < TOLERANCE
    if decay is None:  # and the associative causal form
        causal = linear_attention(queries, keys, values, causal=True)
        assert (ours - causal).abs().max() < TOLERANCE


def test_decay_changes_the_output_and_one_is_no_decay():
    queries, keys, values = _qkv(5)
    plain = linear_attention(queries, keys, values, causal=True)
    kept = quadratic_kernel_attention(
        queries, keys, values, causal=True, decay=1.0
    )
    decayed = quadratic_kernel_attention(
        queries, keys, values, causal=True, decay=0.5
    )
    assert (plain - kept).abs().max() < TOLERANCE
    assert (plain - decayed).abs().max() > 0.01
    # a strong decay leaves each query with (almost) its own key only
    sharp = linear_attention_recurrent(queries, keys, values, decay=1e-9)
    assert (sharp - values[:, :, 2:]).abs().max() < 1e-6


def test_no_nan_when_the_features_vanish():
    queries, keys, values = _qkv(6)
    zero = lambda X: torch.zeros_like(X)  # noqa: E731
    for output in (
        linear_attention(queries, keys, values, zero, causal=True),
        linear_attention_recurrent(queries, keys, values, zero, decay=0.5),
        quadratic_kernel_attention(queries, keys, values, zero),
    ):
        assert torch.equal(output, torch.zeros_like(output))


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_gradcheck(causal):
    queries, keys, values = _qkv(7, num_queries=3, num_keys=4, width=3)
    inputs = tuple(
        t[:1, :2].clone().requires_grad_() for t in (queries, keys, values)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: linear_attention(q, k, v, causal=causal), inputs
    )


def test_layer_with_one_head_is_the_function_on_projections():
    torch.manual_seed(0)
    layer = LinearAttention(6, 1).double()
    gen = torch.Generator().manual_seed(8)
    X = torch.randn(2, 5, 6, generator=gen, dtype=F64)
    heads = linear_attention(
        layer.W_q(X)[:, None],
        layer.W_k(X)[:, None],
        layer.W_v(X)[:, None],
        causal=True,
    )
    expected = layer.W_o(heads[:, 0])
    assert (layer(X, X, X, causal=True) - expected).abs().max() < TOLERANCE


def test_layer_heads_are_independent():
    # head h reads only its slice of the projections: changing the values
    # seen by head 1 leaves head 0's part of the output untouched
    torch.manual_seed(0)
    layer = LinearAttention(8, 2).double()
    layer.W_o = torch.nn.Identity()
    gen = torch.Generator().manual_seed(9)
    X = torch.randn(2, 5, 8, generator=gen, dtype=F64)
    with torch.no_grad():
        before = layer(X, X, X)
        layer.W_v.weight[4:] += 1.0
        after = layer(X, X, X)
    assert torch.equal(before[..., :4], after[..., :4])
    assert not torch.allclose(before[..., 4:], after[..., 4:])


def test_layer_on_the_meta_device_forward_and_backward():
    layer = LinearAttention(8, 2).to("meta")
    X = torch.randn(2, 5, 8, device="meta", requires_grad=True)
    output = layer(X, X, X, causal=True)
    assert output.shape == (2, 5, 8) and output.device.type == "meta"
    output.sum().backward()
    assert X.grad.device.type == "meta"
    assert layer.W_q.weight.grad.device.type == "meta"


# ------------------------------------------------------ random features


# q . k = 0.26: exp(q . k) = 1.297
QUERY = torch.tensor([0.6, 0.2, -0.3, 0.1], dtype=F64)
KEY = torch.tensor([0.5, -0.1, 0.2, 0.4], dtype=F64)


def _estimates(num_features, num_draws, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.stack(
        [
            softmax_kernel_estimate(
                QUERY[None],
                KEY[None],
                draw_orthogonal_features(num_features, 4, gen, F64),
            )[0, 0]
            for _ in range(num_draws)
        ]
    )


def test_random_feature_estimate_is_unbiased():
    estimates = _estimates(16, 2000, seed=0)
    exact = math.exp(QUERY @ KEY)
    standard_error = estimates.std() / math.sqrt(len(estimates))
    assert abs(estimates.mean() - exact) < 4 * standard_error
    # the test can fail: features without the -|x|^2 / 2 estimate
    # exp(q . k + (|q|^2 + |k|^2) / 2), 63 standard errors away
    biased = exact * math.exp((QUERY @ QUERY + KEY @ KEY) / 2)
    assert abs(estimates.mean() - biased) > 8 * standard_error


def test_random_feature_variance_falls_as_one_over_m():
    variances = [
        _estimates(m, 1000, seed=1).var().item() for m in (16, 64, 256)
    ]
    assert variances[0] > variances[1] > variances[2]
    for larger, smaller in zip(variances, variances[1:]):
        assert 2.5 < larger / smaller < 6.5, variances  # 1/m: 4


def test_orthogonal_features_rows_are_orthogonal_in_blocks():
    gen = torch.Generator().manual_seed(2)
    W = draw_orthogonal_features(10, 4, gen, F64)
    assert W.shape == (10, 4)
    for block in (W[:4], W[4:8], W[8:]):
        gram = block @ block.T
        off_diagonal = gram - torch.diag(gram.diagonal())
        assert off_diagonal.abs().max() < 1e-12
    # the same seed gives the same draw, and the dtype and device asked for
    again = draw_orthogonal_features(10, 4, torch.Generator().manual_seed(2))
    assert again.dtype == torch.float32
    assert torch.allclose(again.double(), W, atol=1e-6)
    meta = draw_orthogonal_features(10, 4, device="meta")
    assert meta.device.type == "meta"


def test_positive_random_features_by_formula():
    gen = torch.Generator().manual_seed(3)
    W = draw_orthogonal_features(6, 4, gen, F64)
    X = torch.randn(2, 3, 4, generator=gen, dtype=F64)
    phi = positive_random_features(X, W)
    expected = torch.exp(
        torch.einsum("md,btd->btm", W, X) - (X * X).sum(-1, keepdim=True) / 2
    ) / math.sqrt(6)
    assert phi.shape == (2, 3, 6) and (phi > 0).all()
    assert (phi - expected).abs().max() < TOLERANCE
    estimate = softmax_kernel_estimate(X[0], X[1], W)
    assert (estimate - phi[0] @ phi[1].T).abs().max() < TOLERANCE


@pytest.mark.parametrize("causal", [False, True])
def test_performer_approaches_softmax_attention(causal):
    # queries and keys of norm ~1: the estimate's variance grows as
    # exp(|q|^2 + |k|^2), so small vectors keep the test short. Measured
    # (max |error|, non-causal / causal): m = 64: 0.34 / 0.37, 1024: 0.071
    # / 0.077, 16384: 0.013 / 0.014 (1/sqrt(m))
    queries, keys, values = _qkv(10, scale=0.5)
    exact = _sdpa(queries, keys, values, causal)
    gen = torch.Generator().manual_seed(11)
    errors = []
    for m in (64, 1024, 16384):
        W = draw_orthogonal_features(m, 5, gen, F64)
        estimate = performer_attention(queries, keys, values, W, causal)
        errors.append((estimate - exact).abs().max().item())
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 0.03, errors


def test_performer_stabilised_exponent_keeps_float32_accurate():
    # queries and keys of norm ~6: exp(W x - |x|^2 / 2) falls to ~1e-30 and
    # below, where float32 loses the features (and eps swamps their sums)
    # unless the largest exponents are subtracted (they cancel in the
    # ratio). Measured against float64: unstabilised 1.8, ours 0.027
    queries, keys, values = _qkv(12, scale=4)
    W = draw_orthogonal_features(32, 5, torch.Generator().manual_seed(13), F64)
    scale = 5**-0.25

    def features(X):
        return positive_random_features(X, W.to(X.dtype))

    reference = linear_attention(
        queries * scale, keys * scale, values, features, eps=1e-300
    )
    single = [t.float() for t in (queries, keys, values)]
    unstabilised = linear_attention(
        single[0] * scale, single[1] * scale, single[2], features
    )
    ours = performer_attention(*single, W.float())
    assert (unstabilised.double() - reference).abs().max() > 1.0
    assert (ours.double() - reference).abs().max() < 0.1


def test_performer_equals_linear_attention_on_its_features():
    # the stabilising constants cancel: the same output as the
    # unstabilised features fed to linear attention (eps scaled away)
    queries, keys, values = _qkv(14, scale=0.5)
    W = draw_orthogonal_features(8, 5, torch.Generator().manual_seed(15), F64)
    scale = 5**-0.25
    reference = linear_attention(
        queries * scale,
        keys * scale,
        values,
        lambda X: positive_random_features(X, W),
        causal=True,
        eps=1e-300,
    )
    ours = performer_attention(queries, keys, values, W, True, eps=1e-300)
    assert (ours - reference).abs().max() < TOLERANCE


# ------------------------------------------------------ Linformer


def test_linformer_with_identity_projections_is_exact_attention():
    queries, keys, values = _qkv(20)
    identity = torch.eye(9, dtype=F64)
    ours = linformer_attention(queries, keys, values, identity, identity)
    assert (ours - _sdpa(queries, keys, values)).abs().max() < TOLERANCE


def test_linformer_projects_keys_and_values_along_the_sequence():
    queries, keys, values = _qkv(21)
    gen = torch.Generator().manual_seed(22)
    E = torch.randn(3, 9, generator=gen, dtype=F64)
    P = torch.randn(3, 9, generator=gen, dtype=F64)
    ours = linformer_attention(queries, keys, values, E, P)
    reference = _sdpa(queries, E @ keys, P @ values)
    assert ours.shape == (2, 3, 7, 4)
    assert (ours - reference).abs().max() < TOLERANCE
    # averaging pairs of keys is not the identity: the result differs
    pairs = torch.zeros(5, 9, dtype=F64)
    for row in range(5):
        pairs[row, 2 * row : 2 * row + 2] = 0.5
    averaged = linformer_attention(queries, keys, values, pairs, pairs)
    assert (averaged - _sdpa(queries, keys, values)).abs().max() > 0.01


# ------------------------------------------------------ LSH attention


def test_lsh_buckets_by_hand():
    gen = torch.Generator().manual_seed(30)
    rotations = torch.randn(5, 4, generator=gen, dtype=F64)
    X = torch.randn(3, 6, 5, generator=gen, dtype=F64)
    buckets = lsh_buckets(X, rotations)
    assert buckets.shape == (3, 6) and buckets.dtype == torch.int64
    for index in torch.cartesian_prod(torch.arange(3), torch.arange(6)):
        x = X[tuple(index)]
        scores = [x @ rotations[:, c] for c in range(4)]
        scores += [-s for s in scores]
        assert buckets[tuple(index)] == max(range(8), key=scores.__getitem__)
    # the bucket ignores length; the opposite vector is n/2 buckets away
    assert torch.equal(lsh_buckets(3.5 * X, rotations), buckets)
    assert torch.equal(lsh_buckets(-X, rotations), (buckets + 4) % 8)


@pytest.mark.parametrize("causal", [False, True])
def test_lsh_with_one_bucket_is_exact_attention(causal):
    queries, _, values = _qkv(31, num_queries=8, num_keys=8)
    ours = lsh_attention(queries, values, 1, causal)
    keys = F.normalize(queries, dim=-1)  # shared QK
    reference = _sdpa(queries, keys, values, causal)
    assert (ours - reference).abs().max() < TOLERANCE


def test_lsh_attends_within_buckets_and_never_nans():
    # 16 buckets for 8 tokens: many tokens are alone in their bucket
    queries, _, values = _qkv(32, num_queries=8, num_keys=8)
    gen = torch.Generator().manual_seed(33)
    state = gen.get_state()
    ours = lsh_attention(queries, values, 16, generator=gen)
    # the documented draw: R = randn(d, n/2) in the queries' dtype
    rotations = torch.randn(
        5, 8, generator=torch.Generator().set_state(state), dtype=F64
    )
    buckets = lsh_buckets(queries, rotations)  # (B, H, T)
    keys = F.normalize(queries, dim=-1)
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(5)
    same = buckets[..., :, None] == buckets[..., None, :]
    reference = torch.softmax(scores.masked_fill(~same, -math.inf), -1)
    assert not ours.isnan().any()
    assert (ours - reference @ values).abs().max() < TOLERANCE
    alone = same.sum(-1) == 1  # (B, H, T): a query with only itself
    assert alone.any()
    assert torch.equal(ours[alone], values[alone])
    # a zero query (no direction) is not NaN either
    queries[0, 0, 0] = 0.0
    assert not lsh_attention(queries, values, 4, generator=gen).isnan().any()


# ------------------------------------------------------ graphs


def _dense(num_tokens, edge):
    return torch.tensor(
        [[edge(i, j) for j in range(num_tokens)] for i in range(num_tokens)],
        dtype=torch.bool,
    )


@pytest.mark.parametrize("T", [1, 5, 9])
def test_graph_builders_equal_dense_loops(T):
    assert torch.equal(full_graph(T), _dense(T, lambda i, j: True))
    assert torch.equal(causal_graph(T), _dense(T, lambda i, j: j <= i))
    for w in (1, 3, 12):
        causal = _dense(T, lambda i, j: i - w < j <= i)
        both = _dense(T, lambda i, j: abs(i - j) < w)
        assert torch.equal(window_graph(T, w), causal)
        assert torch.equal(window_graph(T, w, causal=False), both)
        assert torch.equal(window_graph(T, w), sliding_window_mask(T, T, w))
        hubs = [0, T - 1]
        expected = _dense(
            T, lambda i, j: abs(i - j) < w or i in hubs or j in hubs
        )
        assert torch.equal(global_local_graph(T, w, hubs), expected)
    assert torch.equal(global_local_graph(T, 2, []), window_graph(T, 2, False))


@pytest.mark.parametrize("T", [1, 6, 10])
def test_edge_counts(T):
    assert num_edges(full_graph(T)) == T * T
    assert num_edges(causal_graph(T)) == T * (T + 1) // 2
    for w in range(1, T + 1):
        assert num_edges(window_graph(T, w)) == T * w - w * (w - 1) // 2
        assert num_edges(window_graph(T, w, causal=False)) == (
            T * (2 * w - 1) - w * (w - 1)
        )
    # a global token at 0 adds its row and column outside the band
    for w in range(1, T + 1):
        band = T * (2 * w - 1) - w * (w - 1)
        hub = num_edges(global_local_graph(T, w, [0]))
        assert hub == band + 2 * (T - w)


def test_random_graph_rows_and_seed():
    graph = random_graph(10, 3, torch.Generator().manual_seed(40))
    assert (graph.sum(-1) == 3).all() and num_edges(graph) == 30
    again = random_graph(10, 3, torch.Generator().manual_seed(40))
    other = random_graph(10, 3, torch.Generator().manual_seed(41))
    assert torch.equal(graph, again) and not torch.equal(graph, other)
    assert random_graph(4, 4).all()


def test_receptive_field_of_stacked_windows():
    # L causal windows of w reach L (w - 1) + 1 positions back
    for w, layers in ((2, 3), (3, 4)):
        reach = receptive_field(window_graph(20, w), layers)
        assert torch.equal(reach, window_graph(20, layers * (w - 1) + 1))
    # two layers through a global token connect everything
    hub = global_local_graph(12, 1, [5])
    assert not receptive_field(hub, 1).all()
    assert receptive_field(hub, 2).all()


def test_graph_attention_is_masked_softmax_attention():
    queries, keys, values = _qkv(41, num_queries=6, num_keys=6)
    for mask in (full_graph(6), causal_graph(6), window_graph(6, 2)):
        ours = graph_attention(queries, keys, values, mask)
        reference = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask
        )
        assert (ours - reference).abs().max() < TOLERANCE
    empty = torch.zeros(6, 6, dtype=torch.bool)
    empty[0, 0] = True
    output = graph_attention(queries, keys, values, empty)
    assert torch.equal(output[:, :, 1:], torch.zeros_like(output[:, :, 1:]))


# ------------------------------------------------------ bad input


def _f(*shape):
    return torch.ones(*shape)


Q4, K4, V4 = _f(2, 2, 3, 4), _f(2, 2, 5, 4), _f(2, 2, 5, 3)
W8 = _f(8, 4)
EYE = torch.eye(5)
MASK = torch.ones(3, 5, dtype=torch.bool)
BAD = [
    (elu_feature_map, dict(X=[1.0]), TypeError, "X"),
    (elu_feature_map, dict(X=torch.ones(3, dtype=torch.long)), TypeError, "X"),
    (linear_attention, dict(queries=Q4, keys=K4, values="v"), TypeError, "values"),
    (linear_attention, dict(queries=Q4, keys=_f(2, 2, 5, 3), values=V4), ValueError, "keys"),
    (linear_attention, dict(queries=Q4, keys=K4, values=V4, feature_map=3), TypeError, "feature_map"),
    (linear_attention, dict(queries=_f(2, 2, 6, 4), keys=K4, values=V4, causal=True), ValueError, "K >= Q"),
    (linear_attention, dict(queries=Q4, keys=K4, values=V4, eps=0.0), ValueError, "eps"),
    (quadratic_kernel_attention, dict(queries=Q4, keys=K4, values=V4, causal=1), TypeError, "causal"),
    (quadratic_kernel_attention, dict(queries=Q4, keys=K4, values=V4, decay=0.5), ValueError, "decay"),
    (quadratic_kernel_attention, dict(queries=Q4, keys=K4, values=V4, causal=True, decay=1.5), ValueError, "decay"),
    (linear_attention_recurrent, dict(queries=Q4, keys=K4, values=V4, decay="0.5"), TypeError, "decay"),
    (linear_attention_recurrent, dict(queries=Q4, keys=K4, values=V4, decay=torch.ones(3)), ValueError, "decay"),
    (linear_attention_recurrent, dict(queries=Q4, keys=K4, values=V4, decay=torch.zeros(2)), ValueError, "decay"),
    (linear_attention_recurrent, dict(queries=Q4.double(), keys=K4, values=V4), TypeError, "queries"),
    (LinearAttention, dict(num_hiddens=8, num_heads=3), ValueError, "num_heads"),
    (LinearAttention, dict(num_hiddens=8.0, num_heads=2), TypeError, "num_hiddens"),
    (LinearAttention(8, 2), dict(queries=_f(2, 3, 6), keys=_f(2, 3, 8), values=_f(2, 3, 8)), ValueError, "queries"),
    (LinearAttention(8, 2), dict(queries=_f(2, 3, 8).long(), keys=_f(2, 3, 8), values=_f(2, 3, 8)), TypeError, "queries"),
    (draw_orthogonal_features, dict(num_features=0, head_width=4), ValueError, "num_features"),
    (draw_orthogonal_features, dict(num_features=4, head_width=4, generator=0), TypeError, "generator"),
    (draw_orthogonal_features, dict(num_features=4, head_width=4, dtype=torch.int64), TypeError, "dtype"),
    (positive_random_features, dict(X=_f(3, 5), W=W8), ValueError, "X"),
    (positive_random_features, dict(X=_f(3, 4), W=[[1.0]]), TypeError, "W"),
    (softmax_kernel_estimate, dict(queries=_f(3, 4), keys=_f(2, 3), W=W8), ValueError, "keys"),
    (softmax_kernel_estimate, dict(queries=_f(3, 4).long(), keys=_f(2, 4), W=W8), TypeError, "queries"),
    (performer_attention, dict(queries=Q4, keys=K4, values=V4, W=_f(8, 3)), ValueError, "W"),
    (performer_attention, dict(queries=Q4, keys=K4, values=V4, W=W8.double()), TypeError, "W"),
    (linformer_attention, dict(queries=Q4, keys=K4, values=V4, key_projection=_f(2, 4), value_projection=_f(2, 5)), ValueError, "key_projection"),
    (linformer_attention, dict(queries=Q4, keys=K4, values=V4, key_projection=_f(2, 5), value_projection=_f(3, 5)), ValueError, "value_projection"),
    (linformer_attention, dict(queries=Q4, keys=K4, values=V4, key_projection=EYE, value_projection=EYE.long()), TypeError, "value_projection"),
    (lsh_buckets, dict(X=_f(3, 4), rotations=_f(4, 0)), ValueError, "rotations"),
    (lsh_buckets, dict(X=_f(3, 5), rotations=_f(4, 2)), ValueError, "X"),
    (lsh_buckets, dict(X=(1, 2), rotations=_f(4, 2)), TypeError, "X"),
    (lsh_attention, dict(queries=Q4, values=V4, num_buckets=2), ValueError, "values"),
    (lsh_attention, dict(queries=Q4, values=_f(2, 2, 3, 3), num_buckets=3), ValueError, "num_buckets"),
    (lsh_attention, dict(queries=Q4, values=_f(2, 2, 3, 3), num_buckets=2.0), TypeError, "num_buckets"),
    (lsh_attention, dict(queries=Q4, values=_f(2, 2, 3, 3), num_buckets=2, causal=None), TypeError, "causal"),
    (full_graph, dict(num_tokens=0), ValueError, "num_tokens"),
    (full_graph, dict(num_tokens=3, device=3), TypeError, "device"),
    (causal_graph, dict(num_tokens=2.5), TypeError, "num_tokens"),
    (causal_graph, dict(num_tokens=3, device="cuda:99"), ValueError, "device"),
    (window_graph, dict(num_tokens=5, window=0), ValueError, "window"),
    (window_graph, dict(num_tokens=5, window=2, causal="yes"), TypeError, "causal"),
    (global_local_graph, dict(num_tokens=5, window=2, global_tokens=[5]), ValueError, "global_tokens"),
    (global_local_graph, dict(num_tokens=5, window=2, global_tokens=0), TypeError, "global_tokens"),
    (global_local_graph, dict(num_tokens=5, window=2, global_tokens=[1.0]), TypeError, "global_tokens"),
    (random_graph, dict(num_tokens=3, num_random=4), ValueError, "num_random"),
    (random_graph, dict(num_tokens=3, num_random=1, generator=1), TypeError, "generator"),
    (num_edges, dict(mask=MASK.int()), TypeError, "mask"),
    (num_edges, dict(mask=torch.ones(5, dtype=torch.bool)), ValueError, "mask"),
    (receptive_field, dict(mask=MASK, num_layers=1), ValueError, "mask"),
    (receptive_field, dict(mask=EYE.bool(), num_layers=0), ValueError, "num_layers"),
    (graph_attention, dict(queries=Q4, keys=K4, values=V4, mask=MASK.T), ValueError, "mask"),
    (graph_attention, dict(queries=Q4, keys=K4, values=V4, mask=MASK.float()), TypeError, "mask"),
]  # fmt: skip


@pytest.mark.parametrize(
    "function, arguments, error, name",
    BAD,
    ids=[
        f"{getattr(f, '__name__', type(f).__name__)}-{n}" for f, _, _, n in BAD
    ],
)
def test_bad_input_is_refused_by_name(function, arguments, error, name):
    with pytest.raises(error, match=name):
        function(**arguments)


def test_causal_performer_output_does_not_depend_on_later_keys():
    # The keys' stabilising constant is the largest exponent of all keys;
    # eps is added at the scale of the keys seen so far, so no trace of a
    # later key reaches an earlier output. (With eps added at the overall
    # scale, the earlier outputs moved by ~1e-7 here.)
    queries, keys, values = _qkv(16, num_queries=9, scale=2)
    W = draw_orthogonal_features(8, 5, torch.Generator().manual_seed(17), F64)
    later_keys, later_values = keys.clone(), values.clone()
    later_keys[:, :, 5:] *= 3  # larger exponents, later only
    later_values[:, :, 5:] += 1
    a = performer_attention(queries, keys, values, W, causal=True)
    b = performer_attention(queries, later_keys, later_values, W, causal=True)
    assert (a[:, :, :5] - b[:, :, :5]).abs().max() < 1e-14
    assert (a[:, :, 5:] - b[:, :, 5:]).abs().max() > 1e-3


def test_performer_rows_whose_features_underflow_give_zero_not_nan():
    # float32 features of a first key far below the last one underflow to
    # 0 at the overall scale, and so does eps scaled to them: 0 / 0 is
    # avoided, the row is 0
    queries = torch.zeros(1, 1, 2, 4)
    keys = torch.zeros(1, 1, 2, 4)
    keys[..., 0, :] = 40.0  # exponent ~ -40^2 * 4 / 2 / 2, far below key 1's
    values = torch.ones(1, 1, 2, 3)
    W = torch.eye(4)
    out = performer_attention(queries, keys, values, W, causal=True)
    assert torch.isfinite(out).all()
