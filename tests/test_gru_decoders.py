"""The decoder contract every GRU decoder of the course keeps (plain, Bahdanau, Luong in each of
its variants), checked once for all of them.

Decoding a target one token a call gives what one call on the whole target gives and leaves the
state it is given unchanged; a decoder that attends gives padding weight 0, so padding changes
nothing; forward and backward run on each device.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.models.encoder_decoder import EncoderDecoder
from course_pkg.models.luong import LuongAttentionDecoder, luong_model
from course_pkg.models.seq2seq import (
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
    Seq2SeqSettings,
)
from tests.seq2seq_cases import (
    EMBED,
    HIDDEN,
    SRC_V,
    TGT_V,
    encoder_run,
    random_batch,
)

# Luong's decoder in each of its variants: (score, input_feeding).
LUONG = [
    (score, feeding)
    for score in ("general", "dot", "concat")
    for feeding in (False, True)
]
KINDS = ["plain", "bahdanau"] + [f"luong-{s}-{int(f)}" for s, f in LUONG]


def _model(kind: str, num_layers: int = 2) -> EncoderDecoder:
    """A float64 encoder–decoder of the given kind ("plain", "bahdanau" or
    "luong-<score>-<input_feeding 0/1>")."""
    if kind.startswith("luong"):
        _, score, feeding = kind.split("-")
        sizes = Seq2SeqSettings(
            embed_size=EMBED,
            num_hiddens=HIDDEN,
            num_layers=num_layers,
            dropout=0,
        )
        return luong_model(
            SRC_V, TGT_V, sizes, score=score, input_feeding=feeding == "1"
        ).double()
    decoder_class = {
        "plain": Seq2SeqDecoder,
        "bahdanau": Seq2SeqAttentionDecoder,
    }[kind]
    return EncoderDecoder(
        Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers),
        decoder_class(TGT_V, EMBED, HIDDEN, num_layers),
    ).double()


def assert_padding_ignored(decoder) -> None:
    """Encoder outputs past a row's valid length get weight 0, so changing them changes nothing."""
    outputs, hidden, valid_lens, tgt = encoder_run()
    Y, _ = decoder(tgt, decoder.init_state((outputs, hidden), valid_lens))
    weights = decoder.attention_weights  # (B, t, T)
    pads = (
        torch.arange(outputs.shape[0])[None, :] >= valid_lens[:, None]
    )  # (B, T)
    assert (weights.masked_select(pads[:, None].expand_as(weights)) == 0).all()
    torch.testing.assert_close(
        weights.sum(-1), torch.ones_like(weights[..., 0])
    )
    changed = outputs.clone()
    changed[pads.t()] = 1e3  # (T, B) positions that are padding
    Y_changed, _ = decoder(
        tgt, decoder.init_state((changed, hidden), valid_lens)
    )
    torch.testing.assert_close(Y_changed, Y, rtol=0, atol=0)


def assert_forward_backward_on(model, device) -> None:
    """An encoder–decoder in float32 on ``device``: scores (2, 4, TGT_V) there, every gradient
    there."""
    model = model.float().to(device)
    src = torch.zeros(2, 5, dtype=torch.long, device=device)
    tgt = torch.zeros(2, 4, dtype=torch.long, device=device)
    valid_lens = torch.tensor([5, 3], device=device)
    Y = model(src, tgt, valid_lens)
    assert Y.shape == (2, 4, TGT_V) and Y.device.type == device.type
    Y.sum().backward()
    assert all(
        p.grad is not None and p.grad.device.type == device.type
        for p in model.parameters()
    )


# Random shapes and batches for the property tests: @given(**SHAPES).
SHAPES = dict(
    batch_size=st.integers(1, 4),
    src_len=st.integers(1, 6),
    tgt_len=st.integers(1, 6),
    seed=st.integers(0, 10**6),
)


def assert_steps_equal_whole(model, batch_size, src_len, tgt_len, seed):
    """Decoding one target token a call, each from the state the call before returned, gives the
    scores, attention weights (where the decoder has them) and final state of one call on the
    whole target, and no call changes the state it is given."""
    src, tgt, valid_lens = random_batch(batch_size, src_len, tgt_len, seed)
    fresh = model.decoder.init_state(model.encoder(src), valid_lens)
    kept = [None if x is None else x.clone() for x in fresh]
    whole, whole_state = model.decoder(tgt, fresh)
    attends = hasattr(model.decoder, "attention_weights")
    whole_weights = model.decoder.attention_weights if attends else None
    state, steps, weights = fresh, [], []
    for t in range(tgt_len):
        Y, state = model.decoder(tgt[:, t : t + 1], state)
        steps.append(Y)
        if attends:
            weights.append(model.decoder.attention_weights)
    close = dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.cat(steps, 1), whole, **close)
    if attends:
        torch.testing.assert_close(
            torch.cat(weights, 1), whole_weights, **close
        )
    for ours, theirs in zip(state, whole_state):
        if ours is not None:
            torch.testing.assert_close(ours, theirs, **close)
    for before, after in zip(kept, fresh):  # no call changed its state
        if before is not None:
            assert torch.equal(before, after)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=15, deadline=None)
@given(**SHAPES)
def test_step_by_step_equals_whole_prefix(kind, **shapes):
    torch.manual_seed(0)
    model = _model(kind)
    assert hasattr(model.decoder, "attention_weights") == (kind != "plain")
    assert_steps_equal_whole(model, **shapes)


@pytest.mark.parametrize(
    "kind", ["bahdanau", "luong-general-0", "luong-general-1"]
)
def test_padding_gets_zero_weight_and_changes_nothing(kind):
    torch.manual_seed(0)
    if kind == "bahdanau":
        decoder = Seq2SeqAttentionDecoder(TGT_V, EMBED, HIDDEN, 1)
    else:
        feeding = kind.endswith("1")
        decoder = LuongAttentionDecoder(
            TGT_V, EMBED, HIDDEN, 1, input_feeding=feeding
        )
    assert_padding_ignored(decoder.double())


@pytest.mark.parametrize("kind", ["plain", "bahdanau", "luong-general-1"])
def test_forward_backward_on_device(kind, device):
    model = _model(kind)
    assert_forward_backward_on(model, device)
    if kind != "plain":
        assert model.decoder.attention_weights.shape == (2, 4, 5)
