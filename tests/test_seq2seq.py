"""Tests for course_pkg.models.seq2seq: parity with d2l, the pipeline, bad input (the decoder contract,
masking and devices of every GRU decoder: in tests/test_gru_decoders.py).

d2l 1.0.3's package exports ``Seq2SeqEncoder`` but not the book's ``Seq2SeqDecoder`` and
``Seq2SeqAttentionDecoder`` (they live only in its notebooks). The decoders are therefore compared
with references assembled here from d2l.torch's own parts (``d2l.Decoder``, ``d2l.GRU``,
``d2l.AdditiveAttention`` with its ``masked_softmax``, ``d2l.init_seq2seq``), wired the way the d2l
book describes: the plain decoder reads its context as ``enc_outputs[-1]`` every call, the attention
decoder concatenates [context; embedding].
"""

from __future__ import annotations

import d2l.torch as d2l
import pytest
import torch
from torch import nn

from course_pkg.models.encoder_decoder import EncoderDecoder
from course_pkg.models.seq2seq import (
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)
from tests.seq2seq_cases import EMBED, HIDDEN, SRC_V, TGT_V
from tests.seq2seq_cases import random_batch as _batch

# ----------------------------------------------------------------------------- references from d2l's parts


class D2LBookDecoder(d2l.Decoder):
    """The d2l book's GRU decoder with a fixed context, from d2l.torch's GRU and init."""

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = d2l.GRU(embed_size + num_hiddens, num_hiddens, num_layers)
        self.dense = nn.LazyLinear(vocab_size)
        self.apply(d2l.init_seq2seq)

    def init_state(self, enc_all_outputs, *args):
        return enc_all_outputs

    def forward(self, X, state):
        embs = self.embedding(X.t().long())
        enc_output, hidden_state = state
        context = enc_output[-1].repeat(embs.shape[0], 1, 1)
        outputs, hidden_state = self.rnn(
            torch.cat((embs, context), -1), hidden_state
        )
        return self.dense(outputs).swapaxes(0, 1), [enc_output, hidden_state]


class D2LBookAttentionDecoder(d2l.AttentionDecoder):
    """The d2l book's Bahdanau decoder, from d2l.torch's AdditiveAttention (LazyLinear, masked_softmax)."""

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers):
        super().__init__()
        self.attention = d2l.AdditiveAttention(num_hiddens, 0.0)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers)
        self.dense = nn.LazyLinear(vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens):
        outputs, hidden_state = enc_outputs
        return outputs.permute(1, 0, 2), hidden_state, enc_valid_lens

    def forward(self, X, state):
        enc_outputs, hidden_state, enc_valid_lens = state
        outputs, self._weights = [], []
        for x in self.embedding(X).permute(1, 0, 2):
            query = hidden_state[-1].unsqueeze(1)
            context = self.attention(
                query, enc_outputs, enc_outputs, enc_valid_lens
            )
            x = torch.cat((context, x.unsqueeze(1)), dim=-1)
            out, hidden_state = self.rnn(x.permute(1, 0, 2), hidden_state)
            outputs.append(out)
            self._weights.append(self.attention.attention_weights)
        Y = self.dense(torch.cat(outputs, dim=0)).permute(1, 0, 2)
        return Y, [enc_outputs, hidden_state, enc_valid_lens]

    @property
    def attention_weights(self):
        return self._weights


def _copy_from_reference(ours: nn.Module, reference: nn.Module) -> None:
    """Load the reference's weights into ours (d2l.GRU nests its nn.GRU one level deeper)."""
    state = {
        key.replace("rnn.rnn.", "rnn."): value
        for key, value in reference.state_dict().items()
    }
    ours.load_state_dict(state, strict=True)


# ----------------------------------------------------------------------------- parity


@pytest.mark.parametrize("num_layers", [1, 2])
def test_encoder_matches_d2l(num_layers):
    torch.manual_seed(0)
    reference = d2l.Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers).double()
    ours = Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers).double()
    _copy_from_reference(ours, reference)
    src, _, _ = _batch()
    their_outputs, their_state = reference(src)
    our_outputs, our_state = ours(src)
    assert our_outputs.shape == (src.shape[1], src.shape[0], HIDDEN)
    assert our_state.shape == (num_layers, src.shape[0], HIDDEN)
    torch.testing.assert_close(
        our_outputs, their_outputs, rtol=1e-12, atol=1e-12
    )
    torch.testing.assert_close(our_state, their_state, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_decoder_matches_d2l_book_decoder(num_layers):
    torch.manual_seed(0)
    encoder = d2l.Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers).double()
    reference = D2LBookDecoder(TGT_V, EMBED, HIDDEN, num_layers).double()
    src, tgt, valid_lens = _batch()
    enc_all_outputs = encoder(src)
    reference(
        tgt, reference.init_state(enc_all_outputs)
    )  # materialise LazyLinear
    ours = Seq2SeqDecoder(TGT_V, EMBED, HIDDEN, num_layers).double()
    _copy_from_reference(ours, reference)
    their_Y, (_, their_hidden) = reference(
        tgt, reference.init_state(enc_all_outputs, valid_lens)
    )
    our_Y, (_, our_hidden) = ours(
        tgt, ours.init_state(enc_all_outputs, valid_lens)
    )
    assert our_Y.shape == (src.shape[0], tgt.shape[1], TGT_V)
    torch.testing.assert_close(our_Y, their_Y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        our_hidden, their_hidden, rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("num_layers", [1, 2])
def test_attention_decoder_matches_d2l_book_decoder(num_layers):
    torch.manual_seed(0)
    encoder = d2l.Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers).double()
    reference = D2LBookAttentionDecoder(
        TGT_V, EMBED, HIDDEN, num_layers
    ).double()
    src, tgt, valid_lens = _batch()
    enc_all_outputs = encoder(src)
    reference(
        tgt, reference.init_state(enc_all_outputs, valid_lens)
    )  # materialise LazyLinear
    ours = Seq2SeqAttentionDecoder(TGT_V, EMBED, HIDDEN, num_layers).double()
    _copy_from_reference(ours, reference)
    their_Y, their_state = reference(
        tgt, reference.init_state(enc_all_outputs, valid_lens)
    )
    our_Y, our_state = ours(tgt, ours.init_state(enc_all_outputs, valid_lens))
    torch.testing.assert_close(our_Y, their_Y, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(
        our_state[1], their_state[1], rtol=1e-10, atol=1e-12
    )
    their_weights = torch.cat(
        reference.attention_weights, dim=1
    )  # (B, T, T_src)
    assert ours.attention_weights.shape == (
        src.shape[0],
        tgt.shape[1],
        src.shape[1],
    )
    torch.testing.assert_close(
        ours.attention_weights, their_weights, rtol=1e-10, atol=1e-12
    )


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize(
    "decoder_class", [Seq2SeqDecoder, Seq2SeqAttentionDecoder]
)
def test_decoder_gradcheck_float64(decoder_class, num_layers):
    """Backward through the decoder agrees with finite differences, by the encoder's outputs
    (the attention decoder reads them all, the plain one none) and its final state."""
    torch.manual_seed(0)
    decoder = decoder_class(7, 3, 4, num_layers).double()
    enc_outputs = torch.randn(3, 2, 4, dtype=torch.float64)
    hidden = torch.randn(num_layers, 2, 4, dtype=torch.float64)
    valid_lens = torch.tensor([3, 2])
    tgt = torch.randint(0, 7, (2, 3))

    def run(enc, h):
        return decoder(tgt, decoder.init_state((enc, h), valid_lens))[0]

    assert torch.autograd.gradcheck(
        run, (enc_outputs.requires_grad_(), hidden.requires_grad_())
    )


# ----------------------------------------------------------------------------- the decoder contract


def _model(kind: str, num_layers: int = 2) -> EncoderDecoder:
    decoder_class = (
        Seq2SeqDecoder if kind == "plain" else Seq2SeqAttentionDecoder
    )
    return EncoderDecoder(
        Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers),
        decoder_class(TGT_V, EMBED, HIDDEN, num_layers),
    ).double()


def test_encoder_decoder_forward_equals_manual_pipeline():
    torch.manual_seed(0)
    model = _model("attention")
    src, tgt, valid_lens = _batch()
    manual, _ = model.decoder(
        tgt,
        model.decoder.init_state(model.encoder(src, valid_lens), valid_lens),
    )
    torch.testing.assert_close(
        model(src, tgt, valid_lens), manual, rtol=0, atol=0
    )


# ----------------------------------------------------------------------------- attention masking


def test_attention_decoder_without_valid_lens_attends_everywhere():
    torch.manual_seed(0)
    decoder = Seq2SeqAttentionDecoder(TGT_V, EMBED, HIDDEN, 1)
    outputs, state = torch.randn(4, 2, HIDDEN), torch.randn(1, 2, HIDDEN)
    decoder(
        torch.zeros(2, 3, dtype=torch.long),
        decoder.init_state((outputs, state)),
    )
    assert torch.all(decoder.attention_weights > 0)


# ----------------------------------------------------------------------------- integer dtypes


def test_int32_ids_accepted_and_equal_to_int64():
    torch.manual_seed(0)
    model = _model("attention")
    src, tgt, valid_lens = _batch()
    torch.testing.assert_close(
        model(src.int(), tgt.int(), valid_lens),
        model(src, tgt, valid_lens),
        rtol=0,
        atol=0,
    )


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "src, error, words",
    [
        (torch.zeros(5, dtype=torch.long), ValueError, "(B, T)"),
        (torch.zeros(2, 5, 1, dtype=torch.long), ValueError, "(B, T)"),
        (torch.zeros(2, 5), TypeError, "integer"),
        (torch.zeros(2, 5, dtype=torch.bool), TypeError, "integer"),
        (torch.zeros(2, 0, dtype=torch.long), ValueError, "time step"),
        (torch.full((2, 5), SRC_V), ValueError, f"[0, {SRC_V})"),
        (torch.full((2, 5), -1), ValueError, f"[0, {SRC_V})"),
        ([[1, 2]], TypeError, "torch.Tensor"),
    ],
)
def test_encoder_refuses_bad_ids(src, error, words):
    encoder = Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, 1)
    with pytest.raises(error, match="X") as info:
        encoder(src)
    assert words in str(info.value)


@pytest.mark.parametrize(
    "decoder_class", [Seq2SeqDecoder, Seq2SeqAttentionDecoder]
)
def test_decoders_refuse_bad_ids_and_mismatched_state(decoder_class):
    decoder = decoder_class(TGT_V, EMBED, HIDDEN, 2)
    encoder = Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, 2)
    src = torch.zeros(3, 5, dtype=torch.long)
    state = decoder.init_state(encoder(src), torch.tensor([5, 5, 5]))
    with pytest.raises(TypeError, match="integer"):
        decoder(torch.zeros(3, 2), state)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        decoder(torch.zeros(3, dtype=torch.long), state)
    with pytest.raises(ValueError, match=f"0, {TGT_V}"):
        decoder(torch.full((3, 2), TGT_V), state)
    with pytest.raises(
        ValueError, match=r"state\.\w+ must have shape .*\(2, "
    ):  # batch of 2 against a state for 3
        decoder(torch.zeros(2, 2, dtype=torch.long), state)
    wrong_layers = Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, 1)
    with pytest.raises(ValueError, match=r"\(L, B, D\)"):
        decoder(
            torch.zeros(3, 2, dtype=torch.long),
            decoder.init_state(wrong_layers(src), torch.tensor([5, 5, 5])),
        )


def test_attention_decoder_refuses_too_long_valid_lens():
    decoder = Seq2SeqAttentionDecoder(TGT_V, EMBED, HIDDEN, 1)
    outputs, state = torch.randn(4, 2, HIDDEN), torch.randn(1, 2, HIDDEN)
    with pytest.raises(ValueError, match="valid_lens"):
        decoder(
            torch.zeros(2, 3, dtype=torch.long),
            decoder.init_state((outputs, state), torch.tensor([4, 5])),
        )
