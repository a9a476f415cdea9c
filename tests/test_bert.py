"""BERT: masking statistics, padding invariance, parity with d2l and torch, heads, bad input.

The masking rule is checked by its rates on a large batch (each within 5 binomial standard
deviations), and by properties that hold for every draw (hypothesis): nothing outside the valid,
non-special positions is touched, labels hold the original token exactly where a token was
selected, and a seeded generator gives the same draw twice.
"""

from __future__ import annotations

import math

import d2l.torch as d2l
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_pkg.models.bert import (
    IGNORE_INDEX,
    BERTClassifier,
    BERTEncoder,
    BERTModel,
    CLSClassifier,
    MaskLM,
    PublishedBERT,
    mask_tokens,
)

V, NUM_SPECIAL, MASK_ID = 40, 5, 4
D, FFN, H, N = 16, 24, 4, 2


def random_batch(seed: int, B: int, T: int, vocab: int = V):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (B, T), generator=generator)
    valid_lens = torch.randint(0, T + 1, (B,), generator=generator)
    return tokens, valid_lens


def eligible_positions(tokens, valid_lens, num_special=NUM_SPECIAL):
    positions = torch.arange(tokens.shape[1])
    return (positions[None] < valid_lens[:, None]) & (tokens >= num_special)


def within_binomial(
    count: int, trials: int, p: float, sigmas: float = 5.0
) -> bool:
    return abs(count - trials * p) <= sigmas * math.sqrt(trials * p * (1 - p))


# ----------------------------------------------------------------------------- mask_tokens


def test_mask_tokens_rates_on_a_large_batch():
    tokens, valid_lens = random_batch(0, 4000, 30)
    inputs, labels = mask_tokens(
        tokens,
        valid_lens,
        MASK_ID,
        V,
        NUM_SPECIAL,
        generator=torch.Generator().manual_seed(1),
    )
    eligible = eligible_positions(tokens, valid_lens)
    selected = labels != IGNORE_INDEX
    num_eligible, num_selected = int(eligible.sum()), int(selected.sum())
    assert num_eligible > 30_000
    assert within_binomial(num_selected, num_eligible, 0.15)
    masked = selected & (inputs == MASK_ID)
    kept = selected & (inputs == tokens)
    swapped = selected & (inputs != MASK_ID) & (inputs != tokens)
    # A random replacement draws the original token again with probability 1 / (V - NUM_SPECIAL).
    p_same = 1 / (V - NUM_SPECIAL)
    assert within_binomial(int(masked.sum()), num_selected, 0.8)
    assert within_binomial(int(kept.sum()), num_selected, 0.1 + 0.1 * p_same)
    assert within_binomial(
        int(swapped.sum()), num_selected, 0.1 * (1 - p_same)
    )
    # Random replacements are uniform over the non-special ids: every id turns up.
    replaced = inputs[swapped]
    assert int(replaced.min()) >= NUM_SPECIAL
    counts = torch.bincount(replaced - NUM_SPECIAL, minlength=V - NUM_SPECIAL)
    expected = len(replaced) / (V - NUM_SPECIAL)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 34 + 5 * math.sqrt(
        2 * 34
    )  # 34 degrees of freedom, far in the tail


@settings(max_examples=60)
@given(
    seed=st.integers(0, 10_000),
    B=st.integers(1, 6),
    T=st.integers(1, 12),
    vocab=st.integers(NUM_SPECIAL + 1, 30),
    mask_prob=st.floats(0.0, 1.0),
)
def test_mask_tokens_touches_only_selected_valid_non_special_positions(
    seed, B, T, vocab, mask_prob
):
    tokens, valid_lens = random_batch(seed, B, T, vocab)
    inputs, labels = mask_tokens(
        tokens,
        valid_lens,
        MASK_ID,
        vocab,
        NUM_SPECIAL,
        mask_prob,
        torch.Generator().manual_seed(seed),
    )
    eligible = eligible_positions(tokens, valid_lens)
    selected = labels != IGNORE_INDEX
    assert inputs.shape == labels.shape == tokens.shape
    assert inputs.dtype == labels.dtype == tokens.dtype
    assert not (
        selected & ~eligible
    ).any()  # never padding, never a special token
    assert torch.equal(labels[selected], tokens[selected])
    assert torch.equal(inputs[~selected], tokens[~selected])
    changed = inputs[selected]
    assert ((changed == MASK_ID) | (changed >= NUM_SPECIAL)).all()
    assert int(inputs.max()) < vocab


def test_mask_tokens_extreme_probabilities():
    tokens, valid_lens = random_batch(3, 50, 10)
    eligible = eligible_positions(tokens, valid_lens)
    _, labels = mask_tokens(
        tokens, valid_lens, MASK_ID, V, NUM_SPECIAL, mask_prob=0.0
    )
    assert (labels == IGNORE_INDEX).all()
    _, labels = mask_tokens(
        tokens, valid_lens, MASK_ID, V, NUM_SPECIAL, mask_prob=1.0
    )
    assert torch.equal(labels != IGNORE_INDEX, eligible)


def test_mask_tokens_is_deterministic_given_the_generator():
    tokens, valid_lens = random_batch(4, 20, 15)

    def draw(seed):
        return mask_tokens(
            tokens,
            valid_lens,
            MASK_ID,
            V,
            NUM_SPECIAL,
            0.5,
            torch.Generator().manual_seed(seed),
        )

    first, again, other = draw(7), draw(7), draw(8)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[1], other[1])


def test_mask_tokens_runs_on_meta_without_reading_values():
    tokens = torch.empty(2, 5, dtype=torch.long, device="meta")
    inputs, labels = mask_tokens(
        tokens,
        torch.empty(2, dtype=torch.long, device="meta"),
        MASK_ID,
        V,
        NUM_SPECIAL,
    )
    assert (
        inputs.device.type == labels.device.type == "meta"
        and inputs.shape == (2, 5)
    )


def test_mask_tokens_accepts_lengths_on_the_cpu_for_tokens_elsewhere():
    tokens = torch.empty(2, 5, dtype=torch.long, device="meta")
    inputs, labels = mask_tokens(
        tokens, torch.tensor([5, 2]), MASK_ID, V, NUM_SPECIAL
    )
    assert inputs.device.type == labels.device.type == "meta"


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"tokens": torch.zeros(2, 3)}, TypeError, "tokens"),
        ({"tokens": torch.zeros(6, dtype=torch.long)}, ValueError, "tokens"),
        ({"tokens": torch.full((2, 3), V)}, ValueError, "tokens"),
        ({"valid_lens": torch.tensor([1.0, 2.0])}, TypeError, "valid_lens"),
        ({"valid_lens": torch.tensor([1, 2, 3])}, ValueError, "valid_lens"),
        ({"valid_lens": torch.tensor([1, 4])}, ValueError, "valid_lens"),
        ({"valid_lens": None}, TypeError, "valid_lens"),
        ({"mask_id": NUM_SPECIAL}, ValueError, "mask_id"),
        ({"mask_id": 1.0}, TypeError, "mask_id"),
        ({"num_special": V}, ValueError, "num_special"),
        ({"num_special": 0}, ValueError, "num_special"),
        ({"vocab_size": "40"}, TypeError, "vocab_size"),
        ({"mask_prob": 1.5}, ValueError, "mask_prob"),
        ({"mask_prob": -0.1}, ValueError, "mask_prob"),
        ({"mask_prob": "0.15"}, TypeError, "mask_prob"),
        ({"generator": 0}, TypeError, "generator"),
    ],
)
def test_mask_tokens_refuses_bad_input_naming_the_argument(
    kwargs, error, name
):
    arguments = {
        "tokens": torch.full((2, 3), NUM_SPECIAL),
        "valid_lens": torch.tensor([3, 1]),
        "mask_id": MASK_ID,
        "vocab_size": V,
        "num_special": NUM_SPECIAL,
        "mask_prob": 0.15,
        "generator": None,
    }
    arguments.update(kwargs)
    with pytest.raises(error, match=name):
        mask_tokens(**arguments)


# ----------------------------------------------------------------------------- the encoder


def encoder(
    seed: int = 0, dropout: float = 0.0, max_len: int = 20
) -> BERTEncoder:
    torch.manual_seed(seed)
    return BERTEncoder(V, D, FFN, H, N, dropout, max_len=max_len).eval()


def encoder_batch(seed: int = 1, B: int = 4, T: int = 9):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (B, T), generator=generator)
    segments = torch.randint(0, 2, (B, T), generator=generator)
    valid_lens = torch.tensor([T, 1, 5, 7])[:B]
    return tokens, segments, valid_lens


@pytest.mark.usefixtures("float64")
@settings(max_examples=25)
@given(seed=st.integers(0, 10_000))
def test_padded_tokens_and_segments_never_change_a_valid_output(seed):
    model = encoder()
    tokens, segments, valid_lens = encoder_batch()
    generator = torch.Generator().manual_seed(seed)
    padded = torch.arange(tokens.shape[1])[None] >= valid_lens[:, None]
    other_tokens = torch.where(
        padded, torch.randint(0, V, tokens.shape, generator=generator), tokens
    )
    other_segments = torch.where(padded, 1 - segments, segments)
    with torch.no_grad():
        before = model(tokens, segments, valid_lens)
        after = model(other_tokens, other_segments, valid_lens)
    torch.testing.assert_close(
        after[~padded], before[~padded], atol=1e-12, rtol=0
    )
    assert before.shape == (4, 9, D)


def test_segments_and_positions_change_the_output():
    model = encoder()
    tokens, segments, valid_lens = encoder_batch()
    with torch.no_grad():
        base = model(tokens, segments, valid_lens)
        flipped = model(tokens, 1 - segments, valid_lens)
        rolled = model(tokens.roll(1, dims=1), segments.roll(1, dims=1), None)
    assert not torch.allclose(base[0], flipped[0])
    # The same tokens one position later: without position embeddings the first row would only move.
    assert not torch.allclose(
        rolled[0, 1:],
        model(tokens, segments, None)[0, :-1].detach(),
        atol=1e-3,
    )


@pytest.mark.usefixtures("float64")
def test_encoder_matches_d2l_bert_encoder():
    ours = encoder(max_len=20)
    theirs = d2l.BERTEncoder(V, D, FFN, H, N, 0.0, max_len=20).eval()
    tokens, segments, valid_lens = encoder_batch()
    theirs(tokens, segments, valid_lens)  # materialise d2l's lazy layers
    theirs.load_state_dict(ours.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(
            ours(tokens, segments, valid_lens),
            theirs(tokens, segments, valid_lens),
            atol=1e-12,
            rtol=0,
        )


@pytest.mark.usefixtures("float64")
@torch.no_grad()
def test_reused_blocks_match_torch_transformer_encoder_layers():
    """Our embeddings followed by torch's post-norm encoder layers with our block weights."""
    ours = encoder(seed=2)
    layers = [
        nn.TransformerEncoderLayer(
            D, H, FFN, dropout=0.0, batch_first=True
        ).train()
        for _ in range(N)
    ]
    for layer, blk in zip(layers, ours.blks):
        attention = blk.attention
        layer.self_attn.in_proj_weight.copy_(
            torch.cat(
                [
                    attention.W_q.weight,
                    attention.W_k.weight,
                    attention.W_v.weight,
                ]
            )
        )
        layer.self_attn.in_proj_bias.copy_(
            torch.cat(
                [attention.W_q.bias, attention.W_k.bias, attention.W_v.bias]
            )
        )
        layer.self_attn.out_proj.load_state_dict(attention.W_o.state_dict())
        layer.linear1.load_state_dict(blk.ffn.dense1.state_dict())
        layer.linear2.load_state_dict(blk.ffn.dense2.state_dict())
        blk.addnorm1.ln.weight.uniform_(
            0.5, 1.5
        )  # not the default 1, so a swap would show
        layer.norm1.load_state_dict(blk.addnorm1.ln.state_dict())
        layer.norm2.load_state_dict(blk.addnorm2.ln.state_dict())
    tokens, segments, valid_lens = encoder_batch()
    X = (
        ours.token_embedding(tokens)
        + ours.segment_embedding(segments)
        + ours.pos_embedding[:, : tokens.shape[1]]
    )
    padding = torch.arange(tokens.shape[1])[None] >= valid_lens[:, None]
    for layer in layers:  # train mode (dropout 0) keeps torch off its fast path that zeroes padding
        X = layer(X, src_key_padding_mask=padding)
    torch.testing.assert_close(
        ours(tokens, segments, valid_lens)[~padding],
        X[~padding],
        atol=1e-12,
        rtol=0,
    )


def test_gradcheck_encoder_float64():
    model = encoder(seed=3).double()
    tokens, segments, valid_lens = encoder_batch(B=2, T=4)

    # The gradient through the first T rows of the position table, the rows a
    # batch of length T reads (the others get none); the whole table took 26 s.
    table = model.pos_embedding.detach()
    unread = table[:, 4:]

    def run(read):
        return torch.func.functional_call(
            model,
            {"pos_embedding": torch.cat([read, unread], dim=1)},
            (tokens, segments, valid_lens),
        )

    read = table[:, :4].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(run, (read,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    "change, error, name",
    [
        (lambda t, s, v: (t.float(), s, v), TypeError, "tokens"),
        (lambda t, s, v: (t[0], s, v), ValueError, "tokens"),
        (lambda t, s, v: (t + V, s, v), ValueError, "tokens"),
        (lambda t, s, v: (t, s + 1, v), ValueError, "segments"),
        (lambda t, s, v: (t, s.bool(), v), TypeError, "segments"),
        (lambda t, s, v: (t, s[:, :-1], v), ValueError, "segments"),
        (lambda t, s, v: (t, s, v[:-1]), ValueError, "valid_lens"),
        (lambda t, s, v: (t, s, v + 20), ValueError, "valid_lens"),
        (lambda t, s, v: (t, s, [1, 2, 3, 4]), TypeError, "valid_lens"),
        (
            lambda t, s, v: (t.repeat(1, 3), s.repeat(1, 3), v),
            ValueError,
            "max_len",
        ),
    ],
)
def test_encoder_refuses_bad_input_naming_the_argument(change, error, name):
    model = encoder(max_len=20)
    with pytest.raises(error, match=name):
        model(*change(*encoder_batch()))


# ----------------------------------------------------------------------------- heads and models


def test_heads_and_model_shapes():
    torch.manual_seed(0)
    model = BERTModel(V, D, FFN, H, N, 0.0, max_len=20).eval()
    tokens, segments, valid_lens = encoder_batch()
    encoded, mlm_scores, pair_scores = model(tokens, segments, valid_lens)
    assert (
        encoded.shape == (4, 9, D)
        and mlm_scores.shape == (4, 9, V)
        and pair_scores.shape == (4, 2)
    )
    torch.testing.assert_close(mlm_scores, model.mlm(encoded))
    torch.testing.assert_close(pair_scores, model.pair(encoded))


def test_cls_classifier_reads_only_the_first_position():
    torch.manual_seed(0)
    head = CLSClassifier(D, 3)
    X = torch.randn(2, 5, D)
    Y = X.clone()
    Y[:, 1:] = torch.randn(2, 4, D)
    torch.testing.assert_close(head(X), head(Y))
    assert head(X).shape == (2, 3)


def test_classifier_wraps_the_given_encoder_in_place():
    model = encoder()
    classifier = BERTClassifier(model, 3)
    assert classifier.encoder is model
    tokens, segments, valid_lens = encoder_batch()
    assert classifier(tokens, segments, valid_lens).shape == (4, 3)
    with pytest.raises(TypeError, match="encoder"):
        BERTClassifier(nn.Linear(2, 2), 3)
    with pytest.raises(ValueError, match="pooling"):
        BERTClassifier(model, 3, pooling="max")


@pytest.mark.usefixtures("float64")
@torch.no_grad()
def test_mean_pooling_averages_the_valid_positions_only():
    classifier = BERTClassifier(encoder(), 3, pooling="mean").eval()
    tokens, segments, valid_lens = encoder_batch()
    encoded = classifier.encoder(tokens, segments, valid_lens)
    means = torch.stack(
        [encoded[i, :n].mean(dim=0) for i, n in enumerate(valid_lens.tolist())]
    )
    torch.testing.assert_close(
        classifier(tokens, segments, valid_lens),
        classifier.classifier(means[:, None]),
        atol=1e-12,
        rtol=0,
    )


@pytest.mark.parametrize("head", [MaskLM(V, D), CLSClassifier(D, 2)])
def test_heads_refuse_a_wrong_width(head):
    with pytest.raises(ValueError, match="X"):
        head(torch.randn(2, 3, D + 1))
    with pytest.raises(TypeError, match="X"):  # not an AttributeError
        head([[[0.0] * D]])


def test_mean_pooling_accepts_lengths_on_the_cpu_for_tokens_elsewhere():
    classifier = BERTClassifier(encoder(), 3, pooling="mean")
    classifier.to("meta")
    tokens = torch.empty(4, 9, dtype=torch.long, device="meta")
    scores = classifier(
        tokens, torch.zeros_like(tokens), torch.tensor([9, 1, 5, 7])
    )
    assert scores.shape == (4, 3) and scores.device.type == "meta"


# ---------------------------------------------------------------- the published BERT
# Parity with Hugging Face's BertModel: tests/test_hf.py.


def test_the_course_encoder_keeps_its_choices_by_default():
    torch.manual_seed(0)
    encoder = BERTEncoder(V, D, FFN, H, N, 0.0)
    assert isinstance(encoder.embedding_norm, nn.Identity)
    assert isinstance(encoder.blks[0].ffn.activation, nn.ReLU)
    assert encoder.blks[0].addnorm1.ln.eps == 1e-5


def test_published_bert_choices_initialisation_and_pooler():
    torch.manual_seed(0)
    model = PublishedBERT(101, 64, 4, 2, 64)
    assert isinstance(model.blks[0].ffn.activation, nn.GELU)
    assert model.blks[0].ffn.activation.approximate == "none"  # erf
    assert model.blks[0].ffn.dense1.out_features == 4 * 64
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert len(norms) == 1 + 2 * 2 and all(m.eps == 1e-12 for m in norms)
    for name, parameter in model.named_parameters():
        if name.endswith("bias"):
            assert torch.equal(parameter, torch.zeros_like(parameter)), name
        elif parameter.dim() == 1:
            assert torch.equal(parameter, torch.ones_like(parameter)), name
        elif (
            parameter.numel() >= 4096
        ):  # 5% is 4.5 standard errors of the spread
            assert abs(parameter.std().item() / 0.02 - 1) < 0.05, name
        else:  # the segment table, 2 x 64
            assert name == "segment_embedding.weight"
            assert abs(parameter.std().item() / 0.02 - 1) < 0.3, name
    tokens = torch.randint(0, 101, (3, 6))
    encoded = model(tokens, torch.zeros_like(tokens), torch.tensor([6, 4, 1]))
    pooled = model.pool(encoded)
    assert pooled.shape == (3, 64)
    dense = model.pooler[0]
    torch.testing.assert_close(
        pooled, torch.tanh(encoded[:, 0] @ dense.weight.T + dense.bias)
    )
    with pytest.raises(ValueError, match="encoded"):
        model.pool(encoded[:, :0])
    # a BERTEncoder: the course's classifier takes it
    assert BERTClassifier(model, 2)(
        tokens, torch.zeros_like(tokens)
    ).shape == (3, 2)
