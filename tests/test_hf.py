"""Parity of course_pkg.models.gpt2.GPT2 and course_pkg.models.bert.PublishedBERT with Hugging Face ``transformers``.

The peer nobody here wrote: ``transformers`` (5.23.0, in requirements.txt; imported here and only
here, never by the package). Its models are built from small configurations with random weights
(seeded; nothing is downloaded, and ``HF_HUB_OFFLINE=1`` is set before the import), converted by
:mod:`course_pkg.models.hf_weights`, and compared in float64 with a 1e-12 bound (tests/README.md, rule 1):
logits, right padding with ``valid_lens`` against ``attention_mask`` (every position, padded ones
included), cached greedy generation token for token against ``generate``, BERT's hidden states and
pooled output with ``attention_mask`` and ``token_type_ids``, and the round trips of the state
dicts. Each bound is shown to catch a wrong variant of the model by orders of magnitude.

GPT-2's initialisation (std 0.02) keeps every activation near 0, where ReLU, GELU and its tanh
approximation differ little and a layer norm's eps hardly counts; the weights compared here are
redrawn with std 0.3 (layer-norm gains around 1) so that every choice of the architecture shows.
"""

from __future__ import annotations

import copy
import os
import re

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers reads it

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
)

from course_pkg.models.bert import PublishedBERT  # noqa: E402
from course_pkg.models.gpt import generate  # noqa: E402
from course_pkg.models.gpt2 import GPT2  # noqa: E402
from course_pkg.models.hf_weights import (  # noqa: E402
    bert_from_hf,
    bert_to_hf,
    gpt2_from_hf,
    gpt2_to_hf,
)
from tests import hf_peers  # noqa: E402

# float64 against float64: measured 1.6e-15 to 7.5e-15 on logits up to 6.8 in size (GPT-2, both
# attention paths, padded or not) and 8.9e-16 to 3.0e-15 on BERT's hidden states (up to 3.6) and
# pooled outputs; each wrong variant below gives 8e-5 or more (test_the_*_catches_wrong_variants).
BOUND = 1e-12
# What a wrong variant must exceed, at least: 10^6 x the bound.
WRONG = 1e-6
WEIGHT_STD = 0.3

# GPT2Config's fields, the sizes GPT2_CONFIGS gives, and those of its fields that GPT2 takes, in
# the order of its arguments (the last two: ffn_num_hiddens and eps)
GPT2_FIELDS = (
    "n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_inner"
)  # fmt: skip
OUR_GPT2 = (
    "vocab_size", "n_embd", "n_head", "n_layer", "n_positions", "n_inner",
    "layer_norm_epsilon",
)  # fmt: skip
# one and several heads, the default FFN width 4 D and another
GPT2_CONFIGS = [
    (2, 4, 32, 50, 24, None),
    (3, 2, 16, 37, 20, 24),
    (1, 1, 8, 11, 12, None),
]


def test_the_pinned_version_is_the_one_measured():
    assert transformers.__version__ == "5.23.0"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Hugging Face's hub is never reached (nothing here asks it; this makes sure)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@torch.no_grad()
def _redraw(model: nn.Module, seed: int) -> None:
    """Every parameter N(0, WEIGHT_STD^2); layer-norm gains N(1, WEIGHT_STD^2)."""
    generator = torch.Generator().manual_seed(seed)
    for name, parameter in model.named_parameters():
        noise = torch.randn(
            parameter.shape, generator=generator, dtype=torch.float64
        )
        is_gain = (
            name.endswith("weight") and parameter.dim() == 1
        )  # layer norms'
        parameter.copy_(noise * WEIGHT_STD + (1.0 if is_gain else 0.0))


def _theirs(
    model_class: type, config_class: type, fields: tuple, config: tuple,
    seed: int, **fixed,
) -> nn.Module:  # fmt: skip
    """A Hugging Face model in float64, its weights redrawn, in eval mode; its config: the
    values of config for fields, and fixed."""
    torch.manual_seed(seed)
    settings = dict(zip(fields, config, strict=True), **fixed)
    model = model_class(config_class(**settings)).double()
    _redraw(model, seed)
    return model.eval()


def _ours(
    model_class: type, theirs: nn.Module, fields: tuple, convert
) -> nn.Module:
    """Our model_class in float64 with their converted weights, in eval mode, sized by their
    config's fields: the positional arguments, then the FFN's width and the norms' eps."""
    *sizes, ffn, eps = (getattr(theirs.config, name) for name in fields)
    model = model_class(*sizes, ffn_num_hiddens=ffn, eps=eps).double()
    model.load_state_dict(convert(theirs.state_dict()))
    return model.eval()


def hf_gpt2(config: tuple, seed: int = 0) -> GPT2LMHeadModel:
    return _theirs(
        GPT2LMHeadModel, GPT2Config, GPT2_FIELDS, config, seed,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
        eos_token_id=0, pad_token_id=0,
    )  # fmt: skip


def ours_gpt2(theirs: GPT2LMHeadModel) -> GPT2:
    return _ours(GPT2, theirs, OUR_GPT2, gpt2_from_hf)


def ids(
    vocab_size: int, batch: int, steps: int, seed: int = 1
) -> torch.Tensor:
    return torch.randint(
        1,
        vocab_size,
        (batch, steps),
        generator=torch.Generator().manual_seed(seed),
    )


def right_padding(valid_lens: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, T) attention_mask: 1 on the first valid_lens positions of each row."""
    return (torch.arange(steps)[None] < valid_lens[:, None]).long()


# ----------------------------------------------------------------------------- GPT-2


@pytest.mark.parametrize("config", GPT2_CONFIGS, ids=str)
@pytest.mark.parametrize(
    "need_weights", [True, False], ids=["explicit", "fused"]
)
def test_gpt2_logits_match_hugging_face_float64(config, need_weights):
    theirs = hf_gpt2(config)
    ours = ours_gpt2(theirs)
    X = ids(config[3], 3, config[4])  # every position the model has
    with torch.no_grad():
        expected = theirs(X).logits
        got = ours(X, need_weights=need_weights)
    assert expected.abs().max() > 0.5  # weights that make the logits differ
    torch.testing.assert_close(got, expected, rtol=0, atol=BOUND)


def test_gpt2_right_padding_matches_the_attention_mask():
    config = GPT2_CONFIGS[0]
    theirs = hf_gpt2(config, seed=2)
    ours = ours_gpt2(theirs)
    X = ids(config[3], 4, 10, seed=3)
    valid_lens = torch.tensor([10, 7, 2, 1])
    with torch.no_grad():
        expected = theirs(
            X, attention_mask=right_padding(valid_lens, 10)
        ).logits
        got = ours(X, valid_lens)
        unmasked = ours(X)
    # every position, the padded ones too: they attend to the real tokens only, on both sides
    torch.testing.assert_close(got, expected, rtol=0, atol=BOUND)
    real = right_padding(valid_lens, 10).bool()
    # without valid_lens the real positions are the same (the causal mask hides the padding
    # from them) and the padded ones are not: the lengths do mask something
    torch.testing.assert_close(
        unmasked[real], expected[real], rtol=0, atol=BOUND
    )
    assert (unmasked[~real] - expected[~real]).abs().max() > WRONG


@pytest.mark.parametrize("config", GPT2_CONFIGS[:2], ids=str)
def test_cached_greedy_generation_equals_hugging_face_generate(config):
    theirs = hf_gpt2(config, seed=4)
    ours = ours_gpt2(theirs)
    prompt = ids(config[3], 3, 4, seed=5)
    new_tokens = config[4] - 4  # up to the last position
    expected = theirs.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=None,  # never stop early
        pad_token_id=0,
    )
    got = generate(ours, prompt, new_tokens, top_k=1)
    assert expected.shape == (3, config[4])
    assert torch.equal(got, expected)
    assert torch.equal(
        generate(ours, prompt, new_tokens, top_k=1, use_cache=False), expected
    )
    assert len(expected[:, 4:].unique()) >= 4  # not one token repeated


def _wrong_gpt2_variants(ours: GPT2) -> dict[str, GPT2]:
    """Copies of ours, each with one choice of the published GPT-2 changed."""
    variants = {}
    for name in ("relu", "gelu"):  # ReLU, or GELU with erf instead of tanh
        model = copy.deepcopy(ours)
        for blk in model.blks:
            blk.ffn.activation = nn.ReLU() if name == "relu" else nn.GELU()
        variants[f"{name} FFN"] = model
    model = copy.deepcopy(ours)
    with torch.no_grad():
        model.dense[1].weight = nn.Parameter(
            model.embedding.weight.clone() * 1.001
        )
    variants["untied output layer (0.1% off)"] = model
    model = copy.deepcopy(ours)
    model.dense[0] = nn.Identity()
    variants["no final norm"] = model
    model = copy.deepcopy(ours)
    model.embedding_scale = model.num_hiddens**0.5
    variants["embedding times sqrt(D)"] = model
    model = copy.deepcopy(ours)
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = 1e-12
    variants["layer-norm eps 1e-12"] = model
    return variants


def test_the_gpt2_bound_catches_wrong_variants():
    config = GPT2_CONFIGS[0]
    theirs = hf_gpt2(config)
    ours = ours_gpt2(theirs)
    X = ids(config[3], 3, config[4])
    valid_lens = torch.tensor([24, 15, 9])
    with torch.no_grad():
        expected = theirs(
            X, attention_mask=right_padding(valid_lens, config[4])
        ).logits
        gaps = {
            name: (model(X, valid_lens) - expected).abs().max().item()
            for name, model in _wrong_gpt2_variants(ours).items()
        }
        # the padding mask one position short: the last real position no longer sees itself
        gaps["valid_lens - 1"] = (
            (ours(X, valid_lens - 1) - expected).abs().max().item()
        )
        # one position long: the first padded position is seen
        gaps["valid_lens + 1 (padded)"] = (
            (ours(X, (valid_lens + 1).clamp(max=config[4])) - expected)
            .abs()
            .max()
            .item()
        )
    # measured: ReLU 0.65, GELU (erf) 1.6e-3, untied 6.7e-3, no final norm 42,
    # sqrt(D) 6.0, eps 1e-12 3.4e-4, valid_lens - 1 2.5, valid_lens + 1 1.5
    for name, gap in gaps.items():
        assert gap > WRONG, (name, gap)


def _assert_round_trips(ours, theirs, to_hf, from_hf) -> None:
    """Our state dict and theirs each come back bit for bit from the other's names."""
    state = ours.state_dict()
    hf_peers.assert_same_state(from_hf(to_hf(state)), state)
    hf_state = theirs.state_dict()
    hf_peers.assert_same_state(to_hf(from_hf(hf_state)), hf_state)


def test_gpt2_state_dict_round_trips_exactly():
    theirs = hf_gpt2(GPT2_CONFIGS[1])
    ours = ours_gpt2(theirs)
    assert (
        ours.dense[1].weight is ours.embedding.weight
    )  # loading keeps the tie
    _assert_round_trips(ours, theirs, gpt2_to_hf, gpt2_from_hf)
    # GPT2Model's state dict (no output layer, no "transformer." prefix) gives the same
    body = gpt2_from_hf(theirs.transformer.state_dict())
    hf_peers.assert_same_state(body, ours.state_dict())
    # and a fresh Hugging Face model loads ours strictly
    fresh = hf_gpt2(GPT2_CONFIGS[1], seed=9)
    fresh.load_state_dict(gpt2_to_hf(ours.state_dict()))
    X = ids(GPT2_CONFIGS[1][3], 2, 6)
    mask = torch.ones_like(X)
    with torch.no_grad():
        assert torch.equal(
            fresh(X, attention_mask=mask).logits,
            theirs(X, attention_mask=mask).logits,
        )


def test_gpt2_converter_refuses_another_models_state_dict():
    theirs = hf_gpt2(GPT2_CONFIGS[2]).state_dict()
    with pytest.raises(ValueError, match="lm_head.weight must equal"):
        gpt2_from_hf(
            {**theirs, "lm_head.weight": theirs["lm_head.weight"] + 1}
        )
    with pytest.raises(ValueError, match="does not know"):
        gpt2_from_hf({**theirs, "transformer.h.0.extra": torch.zeros(1)})
    missing = dict(theirs)
    del missing["transformer.h.0.attn.c_attn.bias"]
    with pytest.raises(ValueError, match="c_attn.bias"):
        gpt2_from_hf(missing)
    with pytest.raises(ValueError, match="blocks 0, 1"):
        gpt2_from_hf({k: v for k, v in theirs.items() if ".h." not in k})
    bert = hf_bert(BERT_CONFIGS[0]).state_dict()
    with pytest.raises(ValueError, match="blocks 0, 1"):
        gpt2_from_hf(bert)
    with pytest.raises(ValueError, match="blocks 0, 1"):
        bert_from_hf(theirs)


# ------------------------------------------------------------------------------ BERT

# BertConfig's fields, the sizes BERT_CONFIGS gives, and those PublishedBERT takes (as GPT-2's)
BERT_FIELDS = (
    "num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size",
    "max_position_embeddings", "intermediate_size",
)  # fmt: skip
OUR_BERT = (
    "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
    "max_position_embeddings", "intermediate_size", "layer_norm_eps",
)  # fmt: skip
BERT_CONFIGS = [(2, 4, 32, 30, 16, 64), (1, 2, 16, 23, 12, 40)]


def hf_bert(config: tuple, seed: int = 0) -> BertModel:
    return _theirs(
        BertModel, BertConfig, BERT_FIELDS, config, seed,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip


def ours_bert(theirs: BertModel) -> PublishedBERT:
    return _ours(PublishedBERT, theirs, OUR_BERT, bert_from_hf)


def bert_inputs(
    vocab_size: int, steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tokens = ids(vocab_size, 4, steps, seed=6)
    segments = (
        torch.arange(steps)[None] >= torch.tensor([3, 5, 1, 2])[:, None]
    ).long()
    valid_lens = torch.tensor([steps, steps - 3, 4, 1])
    return tokens, segments, valid_lens


@pytest.mark.parametrize("config", BERT_CONFIGS, ids=str)
@pytest.mark.parametrize(
    "need_weights", [True, False], ids=["explicit", "fused"]
)
def test_bert_hidden_states_and_pooler_match_hugging_face_float64(
    config, need_weights
):
    theirs = hf_bert(config)
    ours = ours_bert(theirs)
    tokens, segments, valid_lens = bert_inputs(config[3], config[4])
    with torch.no_grad():
        expected = theirs(
            input_ids=tokens,
            token_type_ids=segments,
            attention_mask=right_padding(valid_lens, config[4]),
        )
        encoded = ours(tokens, segments, valid_lens, need_weights=need_weights)
        pooled = ours.pool(encoded)
    # every position, padded ones too (both attend to the real tokens only)
    torch.testing.assert_close(
        encoded, expected.last_hidden_state, rtol=0, atol=BOUND
    )
    torch.testing.assert_close(
        pooled, expected.pooler_output, rtol=0, atol=BOUND
    )


def test_the_bert_bound_catches_wrong_variants():
    config = BERT_CONFIGS[0]
    theirs = hf_bert(config)
    ours = ours_bert(theirs)
    tokens, segments, valid_lens = bert_inputs(config[3], config[4])
    variants = {}
    for name, activation in (
        ("relu", nn.ReLU()),
        ("gelu tanh", nn.GELU(approximate="tanh")),
    ):
        model = copy.deepcopy(ours)
        for blk in model.blks:
            blk.ffn.activation = activation
        variants[name] = (model, valid_lens, segments)
    model = copy.deepcopy(ours)
    model.embedding_norm = nn.Identity()
    variants["no embedding norm"] = (model, valid_lens, segments)
    model = copy.deepcopy(ours)
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = 1e-5
    variants["layer-norm eps 1e-5"] = (model, valid_lens, segments)
    variants["valid_lens - 1"] = (ours, valid_lens - 1, segments)
    variants["segments all 0"] = (ours, valid_lens, torch.zeros_like(segments))
    with torch.no_grad():
        expected = theirs(
            input_ids=tokens,
            token_type_ids=segments,
            attention_mask=right_padding(valid_lens, config[4]),
        ).last_hidden_state
        gaps = {
            name: (model(tokens, seg, lens) - expected).abs().max().item()
            for name, (model, lens, seg) in variants.items()
        }
    # measured: ReLU 0.44, GELU (tanh) 8.7e-4, no embedding norm 2.5, eps 1e-5 8.1e-5,
    # valid_lens - 1 3.5, segments all 0 2.0
    for name, gap in gaps.items():
        assert gap > WRONG, (name, gap)


def test_bert_state_dict_round_trips_exactly():
    theirs = hf_bert(BERT_CONFIGS[0])
    _assert_round_trips(ours_bert(theirs), theirs, bert_to_hf, bert_from_hf)


# -------------------------------------------------------------- wrong shapes


def _refused(convert, state, key, target):
    """convert(state) raises ValueError naming key and its expected shape;
    neither state nor the target model's weights changed."""
    state_before = {k: v.clone() for k, v in state.items()}
    target_before = copy.deepcopy(target.state_dict())
    with pytest.raises(
        ValueError, match=rf"state_dict\['{key}'\] must have shape \("
    ):
        target.load_state_dict(convert(state))
    assert state.keys() == state_before.keys()
    assert all(torch.equal(state[k], v) for k, v in state_before.items())
    after = target.state_dict()
    assert all(torch.equal(after[k], v) for k, v in target_before.items())


def _gpt2_wrong_shapes(ours: GPT2, theirs: GPT2LMHeadModel):
    """(converter, state dict, key, target model): one tensor of a wrong shape
    each, shapes a reshape, split or transpose would have taken silently."""
    hf_state, our_state = theirs.state_dict(), ours.state_dict()
    D = our_state["embedding.weight"].shape[1]
    c_attn = "transformer.h.0.attn.c_attn.weight"
    yield (
        gpt2_from_hf,
        {**hf_state, c_attn: hf_state[c_attn].t()},
        c_attn,
        ours,
    )
    longer = torch.zeros(D, 3 * D + 3, dtype=torch.float64)
    yield gpt2_from_hf, {**hf_state, c_attn: longer}, c_attn, ours
    bias = "transformer.h.0.attn.c_attn.bias"
    yield gpt2_from_hf, {**hf_state, bias: hf_state[bias][:-3]}, bias, ours
    fc = "transformer.h.0.mlp.c_proj.weight"
    yield gpt2_from_hf, {**hf_state, fc: hf_state[fc].t()}, fc, ours
    head = "lm_head.weight"
    yield gpt2_from_hf, {**hf_state, head: hf_state[head][:-1]}, head, ours
    W_q = "blks.0.attention.W_q.weight"
    yield gpt2_to_hf, {**our_state, W_q: our_state[W_q][:-1]}, W_q, theirs
    dense = "blks.0.ffn.dense1.weight"
    yield gpt2_to_hf, {**our_state, dense: our_state[dense].t()}, dense, theirs


def _bert_wrong_shapes(ours: PublishedBERT, theirs: BertModel) -> list:
    """(converter, state dict, key, target model), as _gpt2_wrong_shapes."""
    hf_state, our_state = theirs.state_dict(), ours.state_dict()
    table = our_state["pos_embedding"]
    return [
        # two tables stacked: table[0] would have dropped the second
        (bert_to_hf, {**our_state, "pos_embedding": table.repeat(2, 1, 1)},
         "pos_embedding", theirs),
        (bert_to_hf, {**our_state, "pos_embedding": table[0]},
         "pos_embedding", theirs),
        (bert_to_hf, {**our_state, "blks.1.attention.W_k.weight":
                      our_state["blks.1.attention.W_k.weight"][:, :-1]},
         "blks.1.attention.W_k.weight", theirs),
        (bert_from_hf, {**hf_state, "encoder.layer.1.output.dense.weight":
                        hf_state["encoder.layer.1.output.dense.weight"].t()},
         "encoder.layer.1.output.dense.weight", ours),
        (bert_from_hf, {**hf_state, "embeddings.position_embeddings.weight":
                        hf_state["embeddings.position_embeddings.weight"][None]},
         "embeddings.position_embeddings.weight", ours),
        (bert_from_hf, {**hf_state, "pooler.dense.bias":
                        hf_state["pooler.dense.bias"][:-1]},
         "pooler.dense.bias", ours),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("make_theirs", "make_ours", "wrong_shapes"),
    [
        pytest.param(
            lambda: hf_gpt2(GPT2_CONFIGS[1]), ours_gpt2, _gpt2_wrong_shapes,
            id="gpt2",
        ),
        pytest.param(
            lambda: hf_bert(BERT_CONFIGS[0]), ours_bert, _bert_wrong_shapes,
            id="bert",
        ),
    ],
)  # fmt: skip
def test_converters_refuse_a_tensor_of_the_wrong_shape(
    make_theirs, make_ours, wrong_shapes
):
    theirs = make_theirs()
    ours = make_ours(theirs)
    cases = list(wrong_shapes(ours, theirs))
    assert len(cases) >= 6
    for convert, state, key, model in cases:
        _refused(convert, state, re.escape(key), model)
