"""Luong et al.'s attention decoder: attend *after* the recurrent step.

Chapter "Bahdanau attention". :class:`LuongAttentionDecoder` is the decoder of
Luong, Pham & Manning (2015) on the course's GRU encoder. Where Bahdanau's
decoder (:class:`course_pkg.models.seq2seq.Seq2SeqAttentionDecoder`) queries the
encoder with the state *before* the step and feeds the context into the GRU,
Luong's runs the GRU first and queries with the new state s_t; the context
c_t and s_t then make the *attentional hidden state*
s̃_t = tanh(W_c [c_t; s_t]), from which the next token is scored. With
``input_feeding`` the GRU also reads s̃_{t-1} beside the embedding (their
"input feeding"), and the steps run one after another; without it the
recurrence never sees the context, and a whole target sequence is decoded in
one GRU call and one batched attention.

Shapes as in :mod:`course_pkg.models.seq2seq`: encoder outputs (T, B, D), GRU states
(L, B, D); ``Q`` counts the target positions fed in one call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from course_pkg.checks import check_shape, check_sizes
from course_pkg.models.encoder_decoder import EncoderDecoder
from course_pkg.models.seq2seq import (
    SETTINGS,
    AttentionGRUDecoder,
    Seq2SeqEncoder,
    Seq2SeqSettings,
)
from course_pkg.nn.gru import check_gru_sizes, gru_layer, init_seq2seq
from course_pkg.nn.scoring import LuongAttention


class LuongGRUState(NamedTuple):
    """The state of a :class:`LuongAttentionDecoder`.

    ``enc_outputs`` (B, T, D) are every encoder output (keys and values),
    ``hidden`` (L, B, D) the decoder GRU's state, ``enc_valid_lens`` None or
    (B,) the source lengths, and ``attentional`` (B, D) the last attentional
    hidden state s̃ (zeros before the first step; read only with input
    feeding).
    """

    enc_outputs: torch.Tensor
    hidden: torch.Tensor
    enc_valid_lens: torch.Tensor | None
    attentional: torch.Tensor


class LuongAttentionDecoder(AttentionGRUDecoder):
    """A GRU decoder with Luong attention after each recurrent step.

    Step t: s_t = GRU(x_t, s_{t-1}) with x_t the embedding of y_{t-1} (and,
    with input feeding, s̃_{t-1} beside it); c_t = attention(query s_t,
    keys = values = encoder outputs); s̃_t = tanh(W_c [c_t; s_t]); scores
    W s̃_t + b. Source padding is masked with the valid lengths. The state
    checks and ``forward`` are those of Bahdanau's decoder
    (:class:`course_pkg.models.seq2seq.AttentionGRUDecoder`).

    Args:
        vocab_size: V. embed_size: E. num_hiddens: D (must equal the
            encoder's). num_layers: L (must equal the encoder's).
        dropout: between GRU layers and on the attention weights.
        score: Luong's score, "general" (q^T W k, default), "dot" or
            "concat" (see :class:`course_pkg.nn.scoring.LuongAttention`).
        input_feeding: feed s̃_{t-1} to the GRU with the embedding.
    Raises:
        ValueError: on an unknown score.
    """

    _state_type = LuongGRUState

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0.0,
        *,
        score: str = "general",
        input_feeding: bool = False,
    ):
        check_gru_sizes(
            vocab_size, embed_size, num_hiddens, num_layers, dropout=dropout
        )
        D = num_hiddens
        rnn_input = embed_size + (D if input_feeding else 0)
        super().__init__(
            LuongAttention(score, D, D, dropout=dropout),
            nn.Embedding(vocab_size, embed_size),
            gru_layer(rnn_input, D, num_layers, dropout),
        )
        self.input_feeding = input_feeding
        self.W_c = nn.Linear(2 * D, D, bias=False)
        self.dense = nn.Linear(D, vocab_size)
        self.apply(init_seq2seq)

    def init_state(
        self,
        enc_all_outputs: tuple[torch.Tensor, torch.Tensor],
        enc_valid_lens: torch.Tensor | None = None,
        *args: Any,
    ) -> LuongGRUState:
        """Bahdanau's state, and s̃ = 0 (B, D).

        Args:
            enc_all_outputs: encoder (outputs (T, B, D), state (L, B, D)).
            enc_valid_lens: None or (B,) source lengths.
        Returns:
            A :class:`LuongGRUState`; the GRU starts from the encoder's state.
        """
        state = super().init_state(enc_all_outputs, enc_valid_lens)
        zeros = state.hidden.new_zeros(state.hidden.shape[1:])
        return LuongGRUState(*state, zeros)

    def _check_state(self, state: Any, batch_size: int) -> None:
        """Bahdanau's checks, and s̃ (B, D)."""
        super()._check_state(state, batch_size)
        shape = (batch_size, self.num_hiddens)
        check_shape("state.attentional", state[3], shape, "(B, D)")

    def _attend(
        self, outputs: torch.Tensor, enc_outputs: torch.Tensor, valid_lens: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """GRU outputs (B, Q, D) -> attentional states (B, Q, D), weights
        (B, Q, T)."""
        context = self.attention(outputs, enc_outputs, enc_outputs, valid_lens)
        attentional = torch.tanh(self.W_c(torch.cat((context, outputs), -1)))
        return attentional, self.attention.attention_weights

    def _decode(
        self,
        embs: torch.Tensor,
        enc_outputs: torch.Tensor,
        hidden: torch.Tensor,
        enc_valid_lens: torch.Tensor | None,
        attentional: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, LuongGRUState]:
        """Embeddings (Q, B, E) -> Y (B, Q, V), weights (B, Q, T), state."""
        memory = (enc_outputs, enc_valid_lens)
        if not self.input_feeding:
            # The recurrence never reads the context: one GRU call for every
            # step, then one batched attention with Q queries.
            outputs, hidden = self.rnn(embs, hidden)  # (Q, B, D)
            states, weights = self._attend(outputs.transpose(0, 1), *memory)
            attentional = states[:, -1]
        else:
            steps, rows = [], []
            for emb in embs:  # (B, E)
                step_input = torch.cat((emb, attentional), dim=-1)[None]
                output, hidden = self.rnn(step_input, hidden)  # (1, B, D)
                step_state, step_weights = self._attend(
                    output.transpose(0, 1), *memory
                )  # (B, 1, D), (B, 1, T)
                attentional = step_state[:, 0]
                steps.append(step_state)
                rows.append(step_weights)
            states, weights = torch.cat(steps, 1), torch.cat(rows, 1)
        state = LuongGRUState(enc_outputs, hidden, enc_valid_lens, attentional)
        return self.dense(states), weights, state  # (B, Q, V)


def luong_model(
    src_vocab_size: int,
    tgt_vocab_size: int,
    settings: Seq2SeqSettings = SETTINGS,
    **decoder_options: Any,
) -> EncoderDecoder:
    """The chapter's GRU encoder with a :class:`LuongAttentionDecoder`.

    Args:
        src_vocab_size, tgt_vocab_size: V of each language.
        settings: sizes and dropout (those of the Bahdanau model by default).
        decoder_options: ``score`` and ``input_feeding`` of the decoder.
    Returns:
        A freshly initialised ``EncoderDecoder`` on the CPU (seed torch first
        for repeatable weights).
    """
    check_sizes(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    sizes = settings.model_sizes()
    return EncoderDecoder(
        Seq2SeqEncoder(src_vocab_size, *sizes),
        LuongAttentionDecoder(tgt_vocab_size, *sizes, **decoder_options),
    )
