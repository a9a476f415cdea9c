"""Tests of course_pkg.models.gpt2: GPT-2's architecture built from the course's pieces.

Parity with Hugging Face's ``GPT2LMHeadModel`` (logits, padding, generation, the weights'
round trip) is in ``tests/test_hf.py``. Here: gradients reach every parameter, the output layer
stays tied to the token embedding through moves, copies and loads, GPT-2's initialisation
(measured spreads), the cache (step by step = one call, float64), cached and uncached
:func:`course_pkg.models.gpt.generate` agree, what ``valid_lens`` hides (for GPT-2, the course's GPT and
the pre-norm variant), GELU's tanh approximation against its formula, gradcheck in float64 and
the meta device.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from course_pkg.models.gpt import GPT, generate
from course_pkg.models.gpt2 import GPT2, INIT_STD
from course_pkg.models.variant_gpt import VariantGPT
from course_pkg.nn.blocks import PositionWiseFFN

V, D, H, N, MAX_LEN = 17, 16, 4, 2, 12


def make_model(seed: int = 0, **options) -> GPT2:
    torch.manual_seed(seed)
    return GPT2(V, D, H, N, MAX_LEN, **options).eval()


def tokens(B: int = 3, T: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(
        0, V, (B, T), generator=torch.Generator().manual_seed(seed)
    )


def test_forward_gives_scores_and_gradients_reach_every_parameter():
    model = make_model(dropout=0.1).train()
    scores = model(tokens())
    assert scores.shape == (3, 7, V)
    scores.square().sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, (
            name
        )


def test_default_sizes_are_gpt2s():
    model = make_model()
    assert model.blks[0].ffn.dense1.out_features == 4 * D
    assert isinstance(model.blks[0].ffn.activation, nn.GELU)
    assert model.blks[0].ffn.activation.approximate == "tanh"
    assert model.dense[1].bias is None and model.embedding_scale == 1.0
    # V D + max_len D, per block 4 (D^2 + D) + 2 (4 D^2) + 4 D + D + 4 D norms/biases, final norm
    per_block = 4 * (D * D + D) + (D * 4 * D + 4 * D) + (4 * D * D + D) + 4 * D
    expected = V * D + MAX_LEN * D + N * per_block + 2 * D
    assert sum(p.numel() for p in model.parameters()) == expected


def test_the_output_layer_stays_the_token_embedding():
    model = make_model()
    for moved in (
        model.to("meta"),
        make_model().double(),
        copy.deepcopy(make_model()),
        make_model().requires_grad_(False),
    ):
        assert moved.dense[1].weight is moved.embedding.weight
    model = make_model()
    other = make_model(seed=3)
    model.load_state_dict(other.state_dict())
    assert model.dense[1].weight is model.embedding.weight
    assert torch.equal(model.embedding.weight, other.embedding.weight)


def test_initialisation_is_gpt2s():
    torch.manual_seed(0)
    model = GPT2(101, 64, 4, 3, 64)
    residual = INIT_STD / math.sqrt(2 * 3)
    weights = {
        "embedding": [model.embedding.weight],
        "positions": [model.pos_encoding.embedding.weight],
    }
    for blk in model.blks:
        weights.setdefault("W_q, W_k, W_v, dense1", []).extend(
            [
                blk.attention.W_q.weight,
                blk.attention.W_k.weight,
                blk.attention.W_v.weight,
                blk.ffn.dense1.weight,
            ]
        )
        weights.setdefault("W_o, dense2", []).extend(
            [blk.attention.W_o.weight, blk.ffn.dense2.weight]
        )
    expected = {
        "embedding": INIT_STD,
        "positions": INIT_STD,
        "W_q, W_k, W_v, dense1": INIT_STD,
        "W_o, dense2": residual,
    }
    for name, tensors in weights.items():
        values = torch.cat([t.detach().flatten() for t in tensors])
        # 4096 to 86016 draws: the standard error of the spread is at most 1.1%, so 5% is 4.5 of
        # them; measured +1.5%, +0.5%, +0.5%, +0.2%, means within 1.1 standard errors. Without
        # the residual scaling W_o and dense2 would be 2.45 times too wide.
        assert abs(values.std().item() / expected[name] - 1) < 0.05, name
        assert abs(values.mean().item()) < 5 * expected[name] / math.sqrt(
            values.numel()
        ), name
    for name, parameter in model.named_parameters():
        if name.endswith("bias"):
            assert torch.equal(parameter, torch.zeros_like(parameter)), name
        elif parameter.dim() == 1:  # layer-norm gains
            assert torch.equal(parameter, torch.ones_like(parameter)), name


def test_step_by_step_with_the_cache_equals_one_call(float64):
    model = make_model()
    X = tokens(T=MAX_LEN)
    whole = model(X)
    scores, cache = model.forward_with_cache(X[:, :5])
    steps = [scores]
    for t in range(5, MAX_LEN):
        scores, cache = model.forward_with_cache(
            X[:, t : t + 1], cache, need_weights=False
        )
        steps.append(scores)
    torch.testing.assert_close(
        torch.cat(steps, dim=1), whole, rtol=0, atol=1e-12
    )
    assert cache[0].keys.shape == (3, MAX_LEN, D)


def test_generate_with_and_without_the_cache_agree():
    model = make_model()
    prompt = tokens(B=2, T=3)
    out = generate(model, prompt, MAX_LEN - 3, top_k=1)
    assert out.shape == (2, MAX_LEN) and torch.equal(out[:, :3], prompt)
    assert torch.equal(
        out, generate(model, prompt, MAX_LEN - 3, top_k=1, use_cache=False)
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: GPT2(V, D, H, N, MAX_LEN),
        lambda: GPT(V, D, 24, H, N, 0.0, MAX_LEN),
        lambda: VariantGPT(
            V, D, 24, H, N, 0.0, MAX_LEN, placement="pre", num_kv_heads=2
        ),
    ],
    ids=["GPT2", "GPT", "VariantGPT"],
)
def test_valid_lens_hides_the_padding_from_every_position(make, float64):
    torch.manual_seed(0)
    model = make().eval()
    X = tokens(B=2, T=8)
    valid_lens = torch.tensor([8, 3])
    other = X.clone()
    other[1, 3:7] = (
        X[1, 3:7] + 1
    ) % V  # the padding before the last position changes
    with torch.no_grad():
        masked, masked_other = model(X, valid_lens), model(other, valid_lens)
        plain, plain_other = model(X), model(other)
    # the last (padded) position reads the 3 real tokens only: the other padding is hidden
    torch.testing.assert_close(
        masked_other[1, -1], masked[1, -1], rtol=0, atol=1e-12
    )
    assert (
        plain_other[1, -1] - plain[1, -1]
    ).abs().max() > 1e-3  # without lengths it is not
    # the real positions are the same with or without lengths (the causal mask hides the rest)
    torch.testing.assert_close(masked[1, :3], plain[1, :3], rtol=0, atol=1e-12)
    torch.testing.assert_close(masked[0], plain[0], rtol=0, atol=1e-12)


def test_gelu_tanh_is_the_formula_of_gpt2(float64):
    ffn = PositionWiseFFN(4, 3, activation="gelu_tanh")
    x = torch.linspace(-6, 6, 241)
    formula = (
        0.5
        * x
        * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    )
    torch.testing.assert_close(ffn.activation(x), formula, rtol=0, atol=1e-15)
    erf = PositionWiseFFN(4, 3, activation="gelu").activation(x)
    torch.testing.assert_close(
        erf, 0.5 * x * (1 + torch.erf(x / math.sqrt(2))), rtol=0, atol=1e-15
    )
    assert (erf - formula).abs().max() > 1e-4  # the two differ


def test_gradcheck_float64():
    torch.manual_seed(0)
    model = GPT2(7, 8, 2, 1, 5).double().eval()
    X = torch.randint(0, 7, (2, 4), generator=torch.Generator().manual_seed(0))
    names = (
        "embedding.weight",
        "blks.0.attention.W_q.weight",
        "blks.0.ffn.dense1.bias",
    )
    start = tuple(
        dict(model.named_parameters())[n].detach().clone().requires_grad_()
        for n in names
    )

    def run(*parameters):
        # the tied embedding is read twice: by the input and by the output layer
        return functional_call(
            model, dict(zip(names, parameters, strict=True)), (X,)
        )

    assert torch.autograd.gradcheck(run, start)


def test_meta_device_forward_and_backward_with_a_cache_and_lengths():
    model = make_model(dropout=0.1).to("meta").train()
    X = tokens().to("meta")
    scores, cache = model.forward_with_cache(
        X[:, :4], valid_lens=torch.tensor([4, 4, 2])
    )
    more, _ = model.forward_with_cache(X[:, 4:], cache)
    assert scores.device.type == more.device.type == "meta" and more.shape == (
        3,
        3,
        V,
    )
    (scores.sum() + more.sum()).backward()
    assert model.embedding.weight.grad.device.type == "meta"


def test_bad_sizes_are_refused_before_anything_is_built():
    state = torch.random.get_rng_state()
    with pytest.raises(TypeError, match="num_hiddens"):
        GPT2(V, "16", H, N, MAX_LEN)  # not 4 * "16" for the FFN
    with pytest.raises(ValueError, match="eps"):
        GPT2(V, D, H, N, MAX_LEN, eps=0.0)
    with pytest.raises(ValueError, match="num_heads"):
        GPT2(V, D, 5, N, MAX_LEN)
    with pytest.raises(ValueError, match="activation"):
        PositionWiseFFN(4, 3, activation="swish")
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize(
    "make",
    [
        lambda: GPT2(V, D, H, N, MAX_LEN),
        lambda: VariantGPT(V, D, 24, H, N, 0.0, MAX_LEN, placement="pre"),
        lambda: VariantGPT(V, D, 24, H, N, 0.0, MAX_LEN, norm="rms"),
    ],
    ids=["GPT2", "VariantGPT pre", "VariantGPT post"],
)
def test_the_subclasses_build_no_block_or_head_they_throw_away(
    make, monkeypatch
):
    # GPT2 and VariantGPT hand GPT their block and head factories, so GPT's
    # own GPTBlock and Linear(D, V) head are never built (they were once
    # built and then replaced, which also spent random draws on them).
    from course_pkg.models import gpt as gpt_module

    def refuse(*args, **kwargs):
        raise AssertionError("a GPTBlock was built")

    monkeypatch.setattr(gpt_module.GPTBlock, "__init__", refuse)
    built = []
    linear_init = nn.Linear.__init__

    def count_linear(self, in_features, out_features, *args, **kwargs):
        built.append((in_features, out_features))
        linear_init(self, in_features, out_features, *args, **kwargs)

    monkeypatch.setattr(nn.Linear, "__init__", count_linear)
    model = make()
    # Every Linear built is one the model keeps.
    kept = [
        (m.in_features, m.out_features)
        for m in model.modules()
        if isinstance(m, nn.Linear)
    ]
    assert sorted(built) == sorted(kept)
