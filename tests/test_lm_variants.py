"""Tests of course_pkg.models.variant_gpt: the configurable decoder-only model.

Peer: the course's GPT (course_pkg.models.gpt, itself tested against ``torch.nn.TransformerEncoder``)
with its weights copied into the variant with num_kv_heads=H, layer norm, ReLU FFN and
post-norm; for the pre-norm placement, ``torch.nn.TransformerEncoderLayer(norm_first=True)``
under a causal mask. Also: shapes of every variant, causality (hypothesis), the cache (one call =
step by step; its size is kv_cache_numel), training and translating through lm_translation,
gradcheck in float64, the meta device and bad input.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_pkg.data.corpus import english_french_corpus
from course_pkg.experiments.lm_translation import (
    train_lm,
    translate_lm,
    translation_lm_loader,
    translation_lm_vocab,
)
from course_pkg.models.gpt import GPT, generate
from course_pkg.models.variant_gpt import (
    VariantBlock,
    VariantGPT,
    VariantSettings,
)

V, D, FFN, H, N = 13, 16, 24, 4, 2
VARIANTS = [
    dict(num_kv_heads=g, norm=n, ffn=f, placement=p)
    for g, n, f, p in [
        (4, "layer", "relu", "post"),
        (2, "layer", "relu", "post"),
        (1, "rms", "swiglu", "pre"),
        (4, "rms", "relu", "pre"),
        (2, "layer", "swiglu", "pre"),
    ]
]


def make(seed: int = 0, dtype=None, **options) -> VariantGPT:
    """In torch's default dtype unless ``dtype`` is given."""
    torch.manual_seed(seed)
    model = VariantGPT(V, D, FFN, H, N, 0.0, 40, **options)
    return (model if dtype is None else model.to(dtype)).eval()


def tokens(seed: int = 1, B: int = 3, T: int = 9) -> torch.Tensor:
    return torch.randint(
        0, V, (B, T), generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_shapes_cache_and_parameter_count(options):
    model = make(**options)
    scores, cache = model.forward_with_cache(tokens())
    assert scores.shape == (3, 9, V)
    G, d = options["num_kv_heads"], D // H
    assert all(c.keys.shape == c.values.shape == (3, G, 9, d) for c in cache)
    numel = sum(c.keys.numel() + c.values.numel() for c in cache)
    assert numel == model.kv_cache_numel(3, 9) == 2 * N * 3 * 9 * G * d
    # Attention parameters: W_q and W_o are D x D, W_k and W_v are D x G d.
    attention = sum(p.numel() for p in model.blks[0].attention.parameters())
    assert attention == 2 * D * D + 2 * D * G * d


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_default_variant_equals_the_gpt_with_copied_weights(positional):
    gpt = make_gpt(positional)
    variant = make(seed=5, positional=positional)
    renamed = {
        k.replace("addnorm1.ln", "norm1").replace("addnorm2.ln", "norm2"): v
        for k, v in gpt.state_dict().items()
    }
    variant.load_state_dict(renamed)  # strict: the same parameters
    X = tokens()
    for need_weights in (True, False):
        expected = gpt(X, need_weights=need_weights)
        torch.testing.assert_close(variant(X), expected, atol=1e-12, rtol=0)
    prompt = X[:, :3]
    assert torch.equal(
        generate(gpt, prompt, 6, top_k=1),
        generate(variant, prompt, 6, top_k=1),
    )


def make_gpt(positional: str) -> GPT:
    torch.manual_seed(0)
    return GPT(V, D, FFN, H, N, 0.0, 40, positional=positional).eval()


@pytest.mark.usefixtures("float64")
def test_pre_norm_block_equals_torch_norm_first_layer():
    torch.manual_seed(0)
    block = VariantBlock(D, FFN, H, 0.0, placement="pre").eval()
    torch_layer = nn.TransformerEncoderLayer(
        D, H, FFN, 0.0, batch_first=True, norm_first=True, bias=True
    ).eval()
    a = block.attention
    with torch.no_grad():
        # Norms away from weight 1 / bias 0, so that norm1 and norm2 (and each one's weight and
        # bias) can be told apart: swapping them would change the output.
        for norm in (block.norm1, block.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.copy_(torch.randn_like(norm.bias))
        # our attention has no biases: torch's are zeroed to match
        torch_layer.self_attn.in_proj_weight.copy_(
            torch.cat([a.W_q.weight, a.W_k.weight, a.W_v.weight])
        )
        torch_layer.self_attn.in_proj_bias.zero_()
        torch_layer.self_attn.out_proj.weight.copy_(a.W_o.weight)
        torch_layer.self_attn.out_proj.bias.zero_()
        for ours, theirs in [
            (block.norm1, torch_layer.norm1),
            (block.norm2, torch_layer.norm2),
            (block.ffn.dense1, torch_layer.linear1),
            (block.ffn.dense2, torch_layer.linear2),
        ]:
            theirs.load_state_dict(ours.state_dict())
    X = torch.randn(2, 7, D)
    mask = nn.Transformer.generate_square_subsequent_mask(7)
    expected = torch_layer(X, src_mask=mask, is_causal=True)
    torch.testing.assert_close(block(X)[0], expected, atol=1e-12, rtol=0)


@pytest.mark.usefixtures("float64")
@settings(max_examples=15, deadline=None)
@given(
    variant=st.integers(0, len(VARIANTS) - 1),
    position=st.integers(1, 8),
    new_id=st.integers(0, V - 1),
)
def test_causal_a_later_token_does_not_change_earlier_scores(
    variant, position, new_id
):
    model = make(**VARIANTS[variant])
    X = tokens()
    changed = X.clone()
    changed[:, position] = new_id
    torch.testing.assert_close(
        model(changed)[:, :position],
        model(X)[:, :position],
        atol=1e-12,
        rtol=0,
    )


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("options", VARIANTS[1:3], ids=str)
def test_cached_steps_equal_one_call(options):
    model = make(**options)
    X = tokens()
    whole = model(X)
    scores, cache = model.forward_with_cache(X[:, :4])
    steps = [scores]
    for i in range(4, 9):
        scores, cache = model.forward_with_cache(X[:, i : i + 1], cache)
        steps.append(scores)
    torch.testing.assert_close(torch.cat(steps, 1), whole, atol=1e-12, rtol=0)


def test_trains_and_translates_through_lm_translation():
    train, _, test = english_french_corpus(seed=0, num_pairs=200)
    vocab = translation_lm_vocab(train)
    s = VariantSettings()
    loader = translation_lm_loader(train[:64], vocab, 32, s.num_steps)
    torch.manual_seed(0)
    model = VariantGPT(
        len(vocab), **s.model_sizes(), num_kv_heads=1, placement="pre"
    )
    history = train_lm(model, loader, [0.01] * 4, vocab.pad, s.grad_clip)
    assert history["epoch_loss"][-1] < history["epoch_loss"][0]
    out = translate_lm(model, [e for e, _ in test[:5]], vocab, 8)
    assert len(out) == 5 and all(len(t) <= 8 for t in out)


@pytest.mark.parametrize("options", [VARIANTS[0], VARIANTS[2]], ids=str)
def test_gradcheck_float64(options):
    # seeded: with ReLU an unlucky draw puts a unit at its kink, where gradcheck's finite
    # differences disagree with the one-sided gradient
    torch.manual_seed(0)
    model = VariantGPT(7, 4, 6, 2, 1, 0.0, 8, **{**options, "num_kv_heads": 1})
    model = model.double()
    embedded = model.embedding.weight.detach().clone().requires_grad_()

    def scores(weight):
        return torch.func.functional_call(
            model,
            {"embedding.weight": weight},
            (torch.tensor([[1, 4, 2, 6]]),),
        )

    # Differentiating through the block stack by the embedding table.
    assert torch.autograd.gradcheck(scores, (embedded,), eps=1e-6, atol=1e-5)


def test_meta_device_forward_and_backward_with_a_cache():
    model = VariantGPT(
        V, D, FFN, H, N, 0.1, num_kv_heads=2, norm="rms", placement="pre"
    ).to("meta")
    X = tokens().to("meta")
    scores, cache = model.forward_with_cache(X[:, :5])
    more, _ = model.forward_with_cache(X[:, 5:], cache)
    assert more.device.type == "meta" and more.shape == (3, 4, V)
    (scores.sum() + more.sum()).backward()
    assert model.embedding.weight.grad.device.type == "meta"


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(placement="middle"), ValueError, "placement"),
        (dict(placement=1), TypeError, "placement"),
        (dict(norm="batch"), ValueError, "norm"),
        (dict(ffn="gelu"), ValueError, "ffn"),
        (dict(num_kv_heads=3), ValueError, "num_kv_heads"),
        (dict(num_kv_heads=1.0), TypeError, "num_kv_heads"),
        (dict(positional="rope"), ValueError, "positional"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, name):
    with pytest.raises(error, match=name):
        VariantGPT(V, D, FFN, H, N, 0.0, **kwargs)


def test_bad_inputs_and_foreign_cache_are_refused():
    model = make(num_kv_heads=2)
    with pytest.raises(TypeError, match="X"):
        model(tokens().float())
    with pytest.raises(ValueError, match="X"):
        model(tokens()[0])
    gpt_cache = make_gpt("sinusoidal").forward_with_cache(tokens())[1]
    with pytest.raises(ValueError, match="cache"):
        model.forward_with_cache(tokens(), gpt_cache)
    with pytest.raises(ValueError, match="X"):
        model.blks[0](torch.randn(2, 3, D + 1))
    with pytest.raises(TypeError, match="X"):
        model.blks[0]([[0.0]])
