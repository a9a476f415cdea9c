"""Bahdanau's decoder projects the keys W_k h_i once per sequence (Bahdanau et al., 2015,
App. A.1.2): the scores, weights and final state are those of the decoder that re-projected them
at every step (the package before the change, written out here), in float64 to 1e-12; the
projection is counted once; a wrong cache is refused by name."""

from __future__ import annotations

import pytest
import torch

from course_pkg.evaluation.cost import count_flops
from course_pkg.models.seq2seq import BahdanauState, Seq2SeqAttentionDecoder
from course_pkg.nn.scoring import AdditiveAttention
from tests.seq2seq_cases import EMBED, HIDDEN, TGT_V, encoder_run

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _decode_reprojecting(decoder, tgt, enc_outputs, hidden, valid_lens):
    """The former ``_decode``: ``decoder.attention`` called without a cache, so W_k h_i is
    recomputed at every step. tgt (B, Q) -> scores (B, Q, V), weights (B, Q, T), hidden."""
    outputs, weights = [], []
    for emb in decoder.embedding(tgt.t()):
        query = hidden[-1].unsqueeze(1)
        context = decoder.attention(
            query, enc_outputs, enc_outputs, valid_lens
        )
        step_input = torch.cat((context, emb.unsqueeze(1)), -1).transpose(0, 1)
        output, hidden = decoder.rnn(step_input, hidden)
        outputs.append(output)
        weights.append(decoder.attention.attention_weights)
    Y = decoder.dense(torch.cat(outputs, 0)).transpose(0, 1)
    return Y, torch.cat(weights, 1), hidden


@pytest.mark.parametrize("num_layers", [1, 2])
def test_cached_keys_give_the_reprojecting_decoder(num_layers):
    torch.manual_seed(num_layers)
    decoder = Seq2SeqAttentionDecoder(
        TGT_V, EMBED, HIDDEN, num_layers
    ).double()
    outputs, hidden, valid_lens, tgt = encoder_run()
    hidden = hidden.repeat(num_layers, 1, 1)
    state = decoder.init_state((outputs, hidden), valid_lens)
    assert isinstance(state, BahdanauState)
    torch.testing.assert_close(
        state.projected_keys,
        decoder.attention.W_k(outputs.transpose(0, 1)),
        **TIGHT,
    )
    Y, new_state = decoder(tgt, state)
    theirs = _decode_reprojecting(
        decoder, tgt, outputs.transpose(0, 1), hidden, valid_lens
    )
    torch.testing.assert_close(Y, theirs[0], **TIGHT)
    torch.testing.assert_close(decoder.attention_weights, theirs[1], **TIGHT)
    torch.testing.assert_close(new_state.hidden, theirs[2], **TIGHT)
    # and the gradients agree too
    grads = torch.autograd.grad(Y.sum(), list(decoder.parameters()))
    their_grads = torch.autograd.grad(
        theirs[0].sum(), list(decoder.parameters())
    )
    for ours, their in zip(grads, their_grads):
        torch.testing.assert_close(ours, their, **TIGHT)


def test_the_test_catches_a_stale_cache():
    """A cache from other keys changes the scores: the comparison above can fail."""
    torch.manual_seed(0)
    decoder = Seq2SeqAttentionDecoder(TGT_V, EMBED, HIDDEN, 1).double()
    outputs, hidden, valid_lens, tgt = encoder_run()
    state = decoder.init_state((outputs, hidden), valid_lens)
    stale = state._replace(projected_keys=state.projected_keys.flip(1))
    theirs = _decode_reprojecting(
        decoder, tgt, outputs.transpose(0, 1), hidden, valid_lens
    )
    assert not torch.allclose(decoder(tgt, stale)[0], theirs[0])


def test_additive_attention_with_projected_keys_is_unchanged():
    torch.manual_seed(0)
    layer = AdditiveAttention(7, 0.0, query_size=4, key_size=5).double()
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    k = torch.randn(2, 6, 5, dtype=torch.float64)
    v = torch.randn(2, 6, 2, dtype=torch.float64)
    valid = torch.tensor([2, 6])
    plain = layer(q, k, v, valid)
    cached = layer(q, k, v, valid, projected_keys=layer.project_keys(k))
    torch.testing.assert_close(cached, plain, **TIGHT)
    with pytest.raises(ValueError, match=r"projected_keys must have shape"):
        layer(
            q,
            k,
            v,
            valid,
            projected_keys=torch.randn(2, 6, 5, dtype=torch.float64),
        )
    with pytest.raises(
        ValueError, match=r"state\.projected_keys must have shape"
    ):
        decoder = Seq2SeqAttentionDecoder(TGT_V, EMBED, HIDDEN, 1).double()
        outputs, hidden, valid_lens, tgt = encoder_run()
        state = decoder.init_state((outputs, hidden), valid_lens)
        decoder(
            tgt, state._replace(projected_keys=state.projected_keys[:, :-1])
        )


def test_keys_are_projected_once_per_sequence():
    """Counted FLOPs of one decoder call on Q target steps: the key projection appears once,
    not Q times (2 B T D^2 multiply-adds, counted as FLOPs by count_flops)."""
    torch.manual_seed(0)
    B, T, Q, D = 3, 6, 5, HIDDEN
    decoder = Seq2SeqAttentionDecoder(TGT_V, EMBED, D, 1).double()
    outputs, hidden, valid_lens, tgt = encoder_run()
    state = decoder.init_state((outputs, hidden), valid_lens)
    cached = count_flops(lambda: decoder(tgt, state))
    reprojecting = count_flops(
        lambda: _decode_reprojecting(
            decoder, tgt, outputs.transpose(0, 1), hidden, valid_lens
        )
    )
    assert (B, T, Q) == (tgt.shape[0], outputs.shape[0], tgt.shape[1])
    assert reprojecting - cached == Q * 2 * B * T * D * D
