"""Tests for course_pkg.models.luong: the equations, shapes, cached decoding,
gradcheck and bad input (the decoder contract, masking and devices: in
tests/test_gru_decoders.py)."""

from __future__ import annotations

import pytest
import torch

from course_pkg.inference.decode import greedy_decode
from course_pkg.models.luong import (
    LuongAttentionDecoder,
    LuongGRUState,
    luong_model,
)
from course_pkg.models.seq2seq import Seq2SeqEncoder, Seq2SeqSettings
from tests.seq2seq_cases import EMBED, HIDDEN, SRC_V, TGT_V, encoder_run
from tests.seq2seq_cases import random_batch as _batch


def _model(score="general", input_feeding=False, num_layers=1):
    sizes = Seq2SeqSettings(
        embed_size=EMBED, num_hiddens=HIDDEN, num_layers=num_layers, dropout=0
    )
    return luong_model(
        SRC_V, TGT_V, sizes, score=score, input_feeding=input_feeding
    ).double()


def _by_the_equations(decoder, tgt, enc_outputs, hidden, valid_lens):
    """Luong's equations written out, one step and one sentence at a time,
    with the decoder's parameters (one GRU layer, general score)."""
    gru = decoder.rnn
    W_ir, W_iz, W_in = gru.weight_ih_l0.chunk(3)
    W_hr, W_hz, W_hn = gru.weight_hh_l0.chunk(3)
    b_ir, b_iz, b_in = gru.bias_ih_l0.chunk(3)
    b_hr, b_hz, b_hn = gru.bias_hh_l0.chunk(3)
    W_a, W_c = decoder.attention.W.weight, decoder.W_c.weight
    rows = []
    for b in range(tgt.shape[0]):
        s = hidden[0, b]
        s_tilde = torch.zeros_like(s)
        h = enc_outputs[: int(valid_lens[b]), b]  # (ℓ, D) real positions
        row = []
        for y in tgt[b]:
            x = decoder.embedding.weight[y]
            if decoder.input_feeding:
                x = torch.cat((x, s_tilde))
            r = torch.sigmoid(W_ir @ x + b_ir + W_hr @ s + b_hr)
            z = torch.sigmoid(W_iz @ x + b_iz + W_hz @ s + b_hz)
            n = torch.tanh(W_in @ x + b_in + r * (W_hn @ s + b_hn))
            s = (1 - z) * n + z * s  # s_t: the GRU step comes first
            alpha = torch.softmax(h @ W_a.T @ s, dim=0)  # score s^T W_a h_i
            c = alpha @ h
            s_tilde = torch.tanh(W_c @ torch.cat((c, s)))
            row.append(decoder.dense(s_tilde))
        rows.append(torch.stack(row))
    return torch.stack(rows)


def _one_layer_decoder(input_feeding):
    torch.manual_seed(0)
    return LuongAttentionDecoder(
        TGT_V, EMBED, HIDDEN, 1, input_feeding=input_feeding
    ).double()


@pytest.mark.parametrize("input_feeding", [False, True])
def test_decoder_follows_luongs_equations(input_feeding):
    decoder = _one_layer_decoder(input_feeding)
    outputs, hidden, valid_lens, tgt = encoder_run()
    Y, state = decoder(tgt, decoder.init_state((outputs, hidden), valid_lens))
    expected = _by_the_equations(decoder, tgt, outputs, hidden, valid_lens)
    torch.testing.assert_close(Y, expected, rtol=1e-10, atol=1e-10)
    assert isinstance(state, LuongGRUState)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_shapes(num_layers):
    model = _model(num_layers=num_layers)
    src, tgt, valid_lens = _batch(batch_size=3, src_len=5, tgt_len=4)
    state = model.decoder.init_state(model.encoder(src), valid_lens)
    assert state.enc_outputs.shape == (3, 5, HIDDEN)
    assert state.attentional.shape == (3, HIDDEN)
    assert not state.attentional.any()
    Y, new_state = model.decoder(tgt, state)
    assert Y.shape == (3, 4, TGT_V)
    assert model.decoder.attention_weights.shape == (3, 4, 5)
    assert new_state.hidden.shape == (num_layers, 3, HIDDEN)
    assert new_state.attentional.shape == (3, HIDDEN)
    assert model(src, tgt, valid_lens).shape == (3, 4, TGT_V)


@pytest.mark.parametrize("input_feeding", [False, True])
def test_cached_and_uncached_greedy_decoding_agree(input_feeding):
    torch.manual_seed(0)
    model = _model(input_feeding=input_feeding)
    src, _, valid_lens = _batch(batch_size=4, src_len=6)
    cached, cached_w = greedy_decode(model, src, valid_lens, 1, 2, 7)
    uncached, _ = greedy_decode(
        model, src, valid_lens, 1, 2, 7, use_cache=False
    )
    assert torch.equal(cached, uncached)
    assert cached_w.shape == (4, cached.shape[1], 6)


@pytest.mark.parametrize("input_feeding", [False, True])
def test_gradcheck_float64(input_feeding):
    torch.manual_seed(0)
    decoder = LuongAttentionDecoder(
        7, 3, 4, 1, input_feeding=input_feeding
    ).double()
    enc_outputs = torch.randn(3, 2, 4, dtype=torch.float64)
    hidden = torch.randn(1, 2, 4, dtype=torch.float64)
    valid_lens = torch.tensor([3, 2])
    tgt = torch.randint(0, 7, (2, 3))

    def run(enc, h):
        return decoder(tgt, decoder.init_state((enc, h), valid_lens))[0]

    assert torch.autograd.gradcheck(
        run,
        (enc_outputs.requires_grad_(), hidden.requires_grad_()),
    )


def test_same_encoder_and_parameter_count_as_the_formulas():
    model = _model()
    assert isinstance(model.encoder, Seq2SeqEncoder)
    D = HIDDEN
    extra = sum(p.numel() for p in model.decoder.attention.parameters())
    assert extra == D * D  # W_a of the general score
    assert model.decoder.W_c.weight.shape == (D, 2 * D)
    fed = _model(input_feeding=True)
    assert fed.decoder.rnn.input_size == EMBED + D
    assert model.decoder.rnn.input_size == EMBED


def test_refuses_bad_input_before_computing():
    torch.manual_seed(0)
    model = _model()
    src, tgt, valid_lens = _batch()
    state = model.decoder.init_state(model.encoder(src), valid_lens)
    with pytest.raises(ValueError, match="score"):
        LuongAttentionDecoder(TGT_V, EMBED, HIDDEN, 1, score="cosine")
    with pytest.raises(TypeError, match="X"):
        model.decoder(tgt.double(), state)
    with pytest.raises(ValueError, match="X"):
        model.decoder(torch.full_like(tgt, TGT_V), state)
    with pytest.raises(TypeError, match="state"):
        model.decoder(tgt, state[:3])
    with pytest.raises(ValueError, match=r"state\.hidden"):
        model.decoder(tgt[:2], state._replace(enc_outputs=state[0][:2]))
    with pytest.raises(ValueError, match=r"state\.attentional"):
        model.decoder(tgt, state._replace(attentional=state.hidden))
    with pytest.raises(ValueError, match=r"state\.enc_valid_lens"):
        model.decoder(tgt, state._replace(enc_valid_lens=valid_lens + 9))
    with pytest.raises(TypeError, match=r"state\.enc_outputs"):
        model.decoder(tgt, state._replace(enc_outputs=[0.0]))
    assert model.decoder.attention_weights is None  # nothing ran
