"""Luong et al.'s attention decoder: attend *after* the recurrent step.

Chapter "Bahdanau attention". :class:`LuongAttentionDecoder` is the decoder of
Luong, Pham & Manning (2015) on the course's GRU encoder. Where Bahdanau's
decoder (:class:`course_pkg.seq2seq.Seq2SeqAttentionDecoder`) queries the
encoder with the state *before* the step and feeds the context into the GRU,
Luong's runs the GRU first and queries with the new state s_t; the context
c_t and s_t then make the *attentional hidden state*
s̃_t = tanh(W_c [c_t; s_t]), from which the next token is scored. With
``input_feeding`` the GRU also reads s̃_{t-1} beside the embedding (their
"input feeding"), and the steps run one after another; without it the
recurrence never sees the context, and a whole target sequence is decoded in
one GRU call and one batched attention.

Shapes as in :mod:`course_pkg.seq2seq`: encoder outputs (T, B, D), GRU states
(L, B, D); ``t`` counts the target positions fed in one call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from course_pkg.checks import check_shape, check_token_ids, check_valid_lens
from course_pkg.encoder_decoder import Decoder, EncoderDecoder
from course_pkg.scoring import LuongAttention
from course_pkg.seq2seq import (
    SETTINGS,
    Seq2SeqEncoder,
    Seq2SeqSettings,
    _check_hidden,
    _gru,
    init_seq2seq,
)


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


class LuongAttentionDecoder(Decoder):
    """A GRU decoder with Luong attention after each recurrent step.

    Step t: s_t = GRU(x_t, s_{t-1}) with x_t the embedding of y_{t-1} (and,
    with input feeding, s̃_{t-1} beside it); c_t = attention(query s_t,
    keys = values = encoder outputs); s̃_t = tanh(W_c [c_t; s_t]); scores
    W s̃_t + b. Source padding is masked with the valid lengths.

    Args:
        vocab_size: V. embed_size: E. num_hiddens: D (must equal the
            encoder's). num_layers: L (must equal the encoder's).
        dropout: between GRU layers and on the attention weights.
        score: Luong's score, "general" (q^T W k, default), "dot" or
            "concat" (see :class:`course_pkg.scoring.LuongAttention`).
        input_feeding: feed s̃_{t-1} to the GRU with the embedding.
    Raises:
        ValueError: on an unknown score.
    """

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
        super().__init__()
        self.num_hiddens, self.num_layers = num_hiddens, num_layers
        self.input_feeding = input_feeding
        self.attention = LuongAttention(
            score, num_hiddens, num_hiddens, dropout=dropout
        )
        self.embedding = nn.Embedding(vocab_size, embed_size)
        rnn_input = embed_size + (num_hiddens if input_feeding else 0)
        self.rnn = _gru(rnn_input, num_hiddens, num_layers, dropout)
        self.W_c = nn.Linear(2 * num_hiddens, num_hiddens, bias=False)
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self.apply(init_seq2seq)
        self._attention_weights: torch.Tensor | None = None

    def init_state(
        self,
        enc_all_outputs: tuple[torch.Tensor, torch.Tensor],
        enc_valid_lens: torch.Tensor | None = None,
        *args: Any,
    ) -> LuongGRUState:
        """Keep every encoder output; start the GRU from the encoder's state.

        Args:
            enc_all_outputs: the encoder's (outputs (T, B, D), state
                (L, B, D)).
            enc_valid_lens: None or (B,) source lengths.
        Returns:
            A :class:`LuongGRUState` with s̃ = 0.
        """
        outputs, enc_state = enc_all_outputs
        return LuongGRUState(
            outputs.transpose(0, 1),
            enc_state,
            enc_valid_lens,
            enc_state.new_zeros(enc_state.shape[1:]),
        )

    def _check_state(self, state: Any, batch_size: int) -> int:
        """Check the state against X's batch; return T."""
        if not isinstance(state, tuple) or len(state) != 4:
            raise TypeError(
                "state must be a LuongGRUState (enc_outputs, hidden, "
                f"enc_valid_lens, attentional), got {type(state).__name__}"
            )
        enc_outputs, hidden, enc_valid_lens, attentional = state
        if not isinstance(enc_outputs, torch.Tensor):
            raise TypeError("state.enc_outputs must be a (B, T, D) tensor")
        num_src_steps = enc_outputs.shape[1] if enc_outputs.dim() > 1 else 0
        D, L = self.num_hiddens, self.num_layers
        check_shape(
            "state.enc_outputs",
            enc_outputs,
            (batch_size, num_src_steps, D),
            "(B, T, D)",
        )
        _check_hidden(hidden, batch_size, L, D)
        check_shape(
            "state.attentional", attentional, (batch_size, D), "(B, D)"
        )
        check_valid_lens(
            "state.enc_valid_lens", enc_valid_lens, batch_size, num_src_steps
        )
        return num_src_steps

    def _attend(
        self, outputs: torch.Tensor, state: LuongGRUState
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """GRU outputs (B, t, D) -> attentional states (B, t, D), weights
        (B, t, T)."""
        enc_outputs, valid_lens = state.enc_outputs, state.enc_valid_lens
        context = self.attention(outputs, enc_outputs, enc_outputs, valid_lens)
        attentional = torch.tanh(self.W_c(torch.cat((context, outputs), -1)))
        return attentional, self.attention.attention_weights

    def forward(
        self, X: torch.Tensor, state: LuongGRUState
    ) -> tuple[torch.Tensor, LuongGRUState]:
        """Score the next token after every prefix of X.

        Args:
            X: (B, t) target ids (teacher forcing: the reference shifted
                right, starting with <bos>).
            state: from :meth:`init_state` or the previous call.
        Returns:
            Y (B, t, V) scores and the new state; :attr:`attention_weights`
            then holds (B, t, T).
        Raises:
            TypeError, ValueError: if X is not a (B, t) tensor of ids in
                [0, V), or the state does not fit (checked before any
                computation).
        """
        check_token_ids("X", X, self.embedding.num_embeddings, min_steps=1)
        self._check_state(state, X.shape[0])
        state = LuongGRUState(*state)
        hidden, attentional = state.hidden, state.attentional
        embs = self.embedding(X.t().long())  # (t, B, E)
        if not self.input_feeding:
            # The recurrence never reads the context: one GRU call for every
            # step, then one batched attention with t queries.
            outputs, hidden = self.rnn(embs, hidden)  # (t, B, D)
            states, weights = self._attend(outputs.transpose(0, 1), state)
            attentional = states[:, -1]
        else:
            steps, rows = [], []
            for emb in embs:  # (B, E)
                step_input = torch.cat((emb, attentional), dim=-1)[None]
                output, hidden = self.rnn(step_input, hidden)  # (1, B, D)
                step_state, step_weights = self._attend(
                    output.transpose(0, 1), state
                )  # (B, 1, D), (B, 1, T)
                attentional = step_state[:, 0]
                steps.append(step_state)
                rows.append(step_weights)
            states, weights = torch.cat(steps, 1), torch.cat(rows, 1)
        self._attention_weights = weights  # (B, t, T)
        new_state = LuongGRUState(
            state.enc_outputs, hidden, state.enc_valid_lens, attentional
        )
        return self.dense(states), new_state  # (B, t, V)

    @property
    def attention_weights(self) -> torch.Tensor | None:
        """(B, t, T) weights of the last forward call; row s: step s."""
        return self._attention_weights


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
    sizes = (
        settings.embed_size,
        settings.num_hiddens,
        settings.num_layers,
        settings.dropout,
    )
    return EncoderDecoder(
        Seq2SeqEncoder(src_vocab_size, *sizes),
        LuongAttentionDecoder(tgt_vocab_size, *sizes, **decoder_options),
    )
