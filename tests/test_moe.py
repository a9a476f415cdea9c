"""Tests of course_pkg.nn.moe: the mixture-of-experts layer, its loss and its converters.

Peers nobody here wrote: Hugging Face's ``MixtralSparseMoeBlock`` and ``Qwen3MoeSparseMoeBlock``
(built from small configs, float64, weights drawn there and converted with ``moe_from_hf``) and
its ``load_balancing_loss_func``.

Both Hugging Face routers take the softmax in float32 even for float64 logits (Mixtral:
``router_logits.float()``; Qwen3-MoE: ``softmax(..., dtype=torch.float)``), so their gates carry
float32 rounding (relative 6e-8); ours stay float64. Hence two checks: the whole block against
theirs with a bound measured at that float32 level, and their experts fed our gates against
ours at the float64 level (1e-12).
"""

from __future__ import annotations

import pytest
import torch
from transformers import MixtralConfig, Qwen3MoeConfig
from transformers.models.mixtral.modeling_mixtral import (
    MixtralSparseMoeBlock,
    load_balancing_loss_func,
)
from transformers.models.qwen3_moe.modeling_qwen3_moe import (
    Qwen3MoeSparseMoeBlock,
)

from course_pkg.nn.modern_blocks import SwiGLUFFN
from course_pkg.nn.moe import (
    MoEFeedForward,
    expert_load,
    load_balancing_loss,
    moe_from_hf,
    moe_to_hf,
)

D, F, E = 8, 6, 4
F64 = torch.float64

# Measured (float64; seeds 0-2 of make_pair and inputs; the four CASES; outputs of size up to
# ~3): ours differs from Hugging Face's block by at most 2.2e-7, all of it their float32 gates
# (their experts fed our float64 gates agree to 1.4e-17). Bound ~10x. With top_k=1 against
# their 2 the difference is 1.8.
BLOCK_BOUND = 2e-6
# Our experts with our gates vs theirs with our gates, and the router logits (measured 1.4e-17
# and 0): float64 rounding only.
EXACT_BOUND = 1e-12
# The loss: theirs accumulates in float32; measured 4.1e-7 over the cases of
# test_loss_equals_hf (losses of size ~1-3), bound ~10x. top_k=1 against 2 moves it by 0.99.
LOSS_BOUND = 4e-6

# what both blocks' configs share
SHARED = dict(
    hidden_size=D, num_attention_heads=2, num_key_value_heads=2,
    experts_implementation="eager",
)  # fmt: skip
BLOCKS = {
    "mixtral": lambda k, norm: MixtralSparseMoeBlock(
        MixtralConfig(
            **SHARED, intermediate_size=F, num_local_experts=E,
            num_experts_per_tok=k,
        )
    ),
    "qwen3": lambda k, norm: Qwen3MoeSparseMoeBlock(
        Qwen3MoeConfig(
            **SHARED, moe_intermediate_size=F, num_experts=E,
            num_experts_per_tok=k, norm_topk_prob=norm,
        )
    ),
}  # fmt: skip
# (block, top_k, norm_topk_prob): Mixtral always renormalises
CASES = [
    ("mixtral", 2, True),
    ("qwen3", 2, True),
    ("qwen3", 2, False),
    ("qwen3", 3, False),
]


def make_pair(kind, top_k, norm, seed=0):
    """(ours, theirs): Hugging Face's block in float64, its router's weights drawn from N(0, 1)
    (clear choices), its experts' from N(0, 0.3^2) (outputs of order 1); ours loaded from its
    state dict through moe_from_hf."""
    torch.manual_seed(seed)
    theirs = BLOCKS[kind](top_k, norm).double().eval()
    with torch.no_grad():
        theirs.gate.weight.normal_()
        for parameter in theirs.experts.parameters():
            parameter.normal_(0, 0.3)
    ours = MoEFeedForward(D, F, E, top_k, norm_topk_prob=norm).double()
    ours.load_state_dict(moe_from_hf(theirs.state_dict()))
    return ours, theirs


def inputs(seed=0, B=3, T=5):
    return torch.randn(
        B, T, D, dtype=F64, generator=torch.Generator().manual_seed(seed)
    )


def hf_forward(theirs, X):
    """Their output and router logits (recorded from their router, as transformers does)."""
    recorded = []
    handle = theirs.gate.register_forward_hook(
        lambda m, i, o: recorded.append(o[0])
    )
    try:
        with torch.no_grad():
            out = theirs(X.clone())
    finally:
        handle.remove()
    return out, recorded[0]


def max_block_difference(kind, top_k, norm, seed, ours_top_k=None):
    ours, theirs = make_pair(kind, top_k, norm, seed)
    if ours_top_k is not None:
        ours.top_k = ours_top_k
    X = inputs(seed)
    with torch.no_grad():
        out = ours(X)
    expected, _ = hf_forward(theirs, X)
    return (out - expected).abs().max().item()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind, top_k, norm", CASES)
def test_block_equals_hf(kind, top_k, norm, seed):
    assert max_block_difference(kind, top_k, norm, seed) <= BLOCK_BOUND


@pytest.mark.parametrize("kind, top_k, norm", CASES)
def test_router_logits_equal_hf(kind, top_k, norm):
    ours, theirs = make_pair(kind, top_k, norm)
    X = inputs()
    assert ours.router_logits is None
    with torch.no_grad():
        ours(X)
    _, expected = hf_forward(theirs, X)
    assert ours.router_logits.shape == (3 * 5, E)
    assert (ours.router_logits - expected).abs().max() <= EXACT_BOUND


@pytest.mark.parametrize("kind, top_k, norm", CASES)
def test_hf_experts_with_our_gates_equal_ours(kind, top_k, norm):
    # the float64 check: same routing, then their experts against ours
    ours, theirs = make_pair(kind, top_k, norm)
    X = inputs()
    with torch.no_grad():
        out = ours(X)
        _, gates, chosen = ours.route(X)
        expected = theirs.experts(X.reshape(-1, D), chosen, gates).reshape(
            X.shape
        )
        _, _, their_chosen = theirs.gate(X.reshape(-1, D))
    assert torch.equal(chosen, their_chosen)
    assert (out - expected).abs().max() <= EXACT_BOUND


@pytest.mark.parametrize("kind", ["mixtral", "qwen3"])
def test_top_1_instead_of_2_fails_the_bound(kind):
    assert (
        max_block_difference(kind, 2, True, 0, ours_top_k=1)
        > 1000 * BLOCK_BOUND
    )


def test_without_renormalising_fails_the_bound():
    ours, theirs = make_pair("qwen3", 2, True)
    ours.norm_topk_prob = False
    X = inputs()
    with torch.no_grad():
        difference = (ours(X) - hf_forward(theirs, X)[0]).abs().max()
    assert difference > 1000 * BLOCK_BOUND


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_gates_sum_to_one_and_are_the_largest_probabilities(top_k):
    torch.manual_seed(0)
    ours = MoEFeedForward(D, F, E, top_k).double()
    X = inputs()
    logits, gates, chosen = ours.route(X)
    assert gates.shape == chosen.shape == (15, top_k)
    assert (gates.sum(-1) - 1).abs().max() <= 1e-15
    probs = logits.softmax(-1)
    assert torch.equal(chosen, probs.topk(top_k).indices)
    # unnormalised: the probabilities themselves
    ours.norm_topk_prob = False
    _, raw, _ = ours.route(X)
    assert torch.equal(raw, probs.topk(top_k).values)


def test_one_expert_top_1_is_that_swiglu_ffn():
    torch.manual_seed(0)
    ours = MoEFeedForward(D, F, 1, 1).double()
    ffn = SwiGLUFFN(F, D).double()
    ffn.load_state_dict(ours.experts[0].state_dict())
    X = inputs()
    assert torch.equal(ours(X), ffn(X))


def test_gradient_reaches_router_and_chosen_experts_only():
    torch.manual_seed(0)
    ours = MoEFeedForward(D, F, 6, 1).double()
    X = inputs(B=1, T=2)
    ours(X).sum().backward()
    _, _, chosen = ours.route(X)
    for e, expert in enumerate(ours.experts):
        # an expert no token chose does not run: no gradient at all
        grad = expert.down.weight.grad
        reached = grad is not None and grad.abs().sum() > 0
        assert reached == (e in chosen.flatten().tolist())
    assert ours.router.weight.grad is not None


def test_meta_device_forward_and_backward():
    ours = MoEFeedForward(D, F, E, 2).to("meta")
    X = torch.randn(2, 3, D, device="meta", requires_grad=True)
    out = ours(X)
    assert out.shape == (2, 3, D) and out.device.type == "meta"
    assert ours.router_logits.shape == (6, E)
    (out.sum() + load_balancing_loss(ours.router_logits, E, 2)).backward()
    assert X.grad.shape == X.shape
    assert ours.router.weight.grad.device.type == "meta"


# ---------------------------------------------------------------------- the loss


def loss_difference(top_k, layers, seed=0, ours_top_k=None):
    generator = torch.Generator().manual_seed(seed)
    logits = tuple(
        torch.randn(n, E, dtype=F64, generator=generator) * 2 for n in layers
    )
    theirs = load_balancing_loss_func(logits, E, top_k)
    argument = logits[0] if len(logits) == 1 else logits
    ours = load_balancing_loss(argument, E, ours_top_k or top_k)
    assert ours.shape == () and ours.dtype == F64
    return (ours - theirs).abs().item()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("layers", [(15,), (15, 7, 30)])
@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_loss_equals_hf(top_k, layers, seed):
    assert loss_difference(top_k, layers, seed) <= LOSS_BOUND


def test_loss_with_top_1_instead_of_2_fails_the_bound():
    assert loss_difference(2, (15,), ours_top_k=1) > 1000 * LOSS_BOUND


def test_loss_of_layer_logits_equals_hf():
    ours, theirs = make_pair("mixtral", 2, True)
    X = inputs()
    with torch.no_grad():
        ours(X)
    _, recorded = hf_forward(theirs, X)
    expected = load_balancing_loss_func((recorded,), E, 2)
    assert (
        load_balancing_loss(ours.router_logits, E, 2) - expected
    ).abs() <= LOSS_BOUND


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_loss_of_an_even_router_is_top_k(top_k):
    # probabilities all 1/E: f sums to k, so the loss is E * (k / E) = k
    assert load_balancing_loss(torch.zeros(8, E, dtype=F64), E, top_k) == top_k


def test_loss_gradient_reaches_the_logits():
    logits = torch.randn(15, E, dtype=F64, requires_grad=True)
    load_balancing_loss(logits, E, 2).backward()
    assert logits.grad.abs().sum() > 0


# ----------------------------------------------------------------- the converters


@pytest.mark.parametrize("layout", ["fused", "mixtral", "qwen3"])
def test_converters_round_trip(layout):
    ours, _ = make_pair("mixtral", 2, True)
    state = ours.state_dict()
    back = moe_from_hf(moe_to_hf(state, layout))
    assert back.keys() == state.keys()
    assert all(torch.equal(back[name], state[name]) for name in state)


@pytest.mark.parametrize("kind", ["mixtral", "qwen3"])
def test_to_hf_loads_into_hf(kind):
    ours, theirs = make_pair(kind, 2, True)
    state = theirs.state_dict()
    again = moe_to_hf(ours.state_dict())
    assert again.keys() == state.keys()
    assert all(torch.equal(again[name], state[name]) for name in state)
    theirs.load_state_dict(again)


def test_per_expert_names_of_the_checkpoints():
    # the published layouts, as transformers' conversion_mapping.py merges them:
    # gate_up_proj[e] = cat(w1, w3) (Mixtral) or cat(gate_proj, up_proj) (Qwen3-MoE),
    # down_proj[e] = w2 or down_proj
    _, theirs = make_pair("mixtral", 2, True)
    fused = theirs.state_dict()
    gate_up, down = fused["experts.gate_up_proj"], fused["experts.down_proj"]
    for names in (("w1", "w3", "w2"), ("gate_proj", "up_proj", "down_proj")):
        legacy = {"gate.weight": fused["gate.weight"]}
        for e in range(E):
            legacy[f"experts.{e}.{names[0]}.weight"] = gate_up[e, :F]
            legacy[f"experts.{e}.{names[1]}.weight"] = gate_up[e, F:]
            legacy[f"experts.{e}.{names[2]}.weight"] = down[e]
        converted, expected = moe_from_hf(legacy), moe_from_hf(fused)
        assert all(torch.equal(converted[n], expected[n]) for n in expected)


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((D, F, 4, 5), {}, ValueError, "top_k must be <= num_experts=4"),
        ((D, F, 4, 0), {}, ValueError, "top_k"),
        ((D, F, 0, 1), {}, ValueError, "num_experts"),
        ((D, F, 4.0, 2), {}, TypeError, "num_experts"),
        ((D, 0, 4, 2), {}, ValueError, "ffn_num_hiddens"),
        ((True, F, 4, 2), {}, TypeError, "num_hiddens"),
        ((D, F, 4, 2), {"norm_topk_prob": 1}, TypeError, "norm_topk_prob"),
    ],
)
def test_constructor_refuses_bad_input(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        MoEFeedForward(*args, **kwargs)


@pytest.mark.parametrize(
    "X, error, match",
    [
        ([[0.0] * D], TypeError, "X must be a torch.Tensor"),
        (torch.zeros(2, 3, D + 1), ValueError, "X must have shape"),
        (torch.zeros(2, 3, D, dtype=torch.int64), TypeError, "floating-point"),
        (torch.zeros(2, 3, D, dtype=F64), TypeError, "dtype"),
        (torch.zeros(2, 3, D, device="meta"), ValueError, "must be on cpu"),
    ],
)
@pytest.mark.parametrize("method", ["forward", "route"])
def test_forward_refuses_bad_input(X, error, match, method):
    ours = MoEFeedForward(D, F, E, 2)
    with pytest.raises(error, match=match):
        getattr(ours, method)(X)
    assert ours.router_logits is None  # nothing was changed


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((torch.zeros(5, E), E, E + 1), ValueError, "top_k"),
        ((torch.zeros(5, E), E, 1.0), TypeError, "top_k"),
        (([[0.0] * E], E, 2), TypeError, r"router_logits\[0\]"),
        (
            (torch.zeros(5, E).tolist()[0], E, 2),
            TypeError,
            r"router_logits\[0\]",
        ),
        (
            (torch.zeros(5, E + 1), E, 2),
            ValueError,
            "router_logits must have shape",
        ),
        ((torch.zeros(0, E), E, 2), ValueError, "N >= 1"),
        ((torch.zeros(5, E, 1), E, 2), ValueError, "router_logits"),
        (
            (torch.zeros(5, E, dtype=torch.int64), E, 2),
            TypeError,
            "floating-point",
        ),
        (((), E, 2), ValueError, "non-empty"),
        (
            ((torch.zeros(5, E), torch.zeros(5, E, dtype=F64)), E, 2),
            TypeError,
            "one dtype",
        ),
        ((torch.zeros(5, E), "4", 2), TypeError, "num_experts"),
    ],
)
def test_loss_refuses_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        load_balancing_loss(*args)


def test_converters_refuse_bad_input():
    ours = MoEFeedForward(D, F, E, 2).state_dict()
    theirs = moe_to_hf(ours)
    with pytest.raises(TypeError, match="state_dict"):
        moe_from_hf([1, 2])
    with pytest.raises(TypeError, match="state_dict"):
        moe_to_hf({"router.weight": [1.0]})
    with pytest.raises(TypeError, match="layout"):
        moe_to_hf(ours, 1)
    with pytest.raises(ValueError, match="layout"):
        moe_to_hf(ours, "llama")
    with pytest.raises(ValueError, match="missing 'experts.down_proj'"):
        moe_from_hf(
            {k: v for k, v in theirs.items() if k != "experts.down_proj"}
        )
    with pytest.raises(ValueError, match="does not use"):
        moe_from_hf({**theirs, "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="does not use"):
        moe_to_hf({**ours, "experts.9.up.weight": torch.zeros(F, D)})
    with pytest.raises(ValueError, match="experts.down_proj must have shape"):
        moe_from_hf({**theirs, "experts.down_proj": torch.zeros(E, D, F + 1)})
    with pytest.raises(
        ValueError, match="experts.2.up.weight must have shape"
    ):
        moe_to_hf({**ours, "experts.2.up.weight": torch.zeros(F, D + 1)})
    with pytest.raises(ValueError, match="gate_up_proj"):
        moe_from_hf({"gate.weight": torch.zeros(E, D)})


def test_dispatching_tokens_equals_running_every_expert():
    # each expert on its own tokens (real devices) against every expert on every token,
    # weighted 0 where not chosen (the meta device's way): the same sums
    torch.manual_seed(0)
    ours = MoEFeedForward(D, F, 6, 2).double()
    X = inputs(B=3, T=5)
    flat = X.reshape(-1, D)
    _, gates, chosen = ours.route(X)
    weights = torch.zeros(flat.shape[0], 6, dtype=X.dtype).scatter(
        -1, chosen, gates
    )
    dense = sum(
        weights[:, e, None] * expert(flat)
        for e, expert in enumerate(ours.experts)
    )
    assert (ours(X).reshape(-1, D) - dense).abs().max() <= 1e-15


def test_expert_load_is_each_experts_share_of_the_choices():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(50, E, generator=generator, dtype=F64)
    load = expert_load(logits, E, 2)
    chosen = logits.topk(2, dim=-1).indices
    counts = torch.stack([(chosen == e).sum() for e in range(E)]).to(F64)
    assert torch.equal(load, counts / counts.sum())
    assert load.sum().item() == pytest.approx(1.0, abs=1e-15)
    # a list of layers counts as their concatenation
    halves = [logits[:20], logits[20:]]
    assert torch.equal(expert_load(halves, E, 2), load)
    # the balancing loss's f_e is k times the load
    probs = logits.softmax(-1)
    manual = E * (2 * load * probs.mean(0)).sum()
    assert (
        abs(load_balancing_loss(logits, E, 2).item() - manual.item()) < 1e-12
    )


def test_expert_load_of_a_collapsed_router_is_one_hot():
    logits = torch.zeros(10, E, dtype=F64)
    logits[:, 2] = 5.0
    assert expert_load(logits, E, 1).tolist() == [0.0, 0.0, 1.0, 0.0]
