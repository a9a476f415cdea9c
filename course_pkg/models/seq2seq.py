"""The GRU encoder–decoders of two chapters, and their settings.

Chapter "The encoder–decoder architecture": :class:`Seq2SeqEncoder` and
:class:`Seq2SeqDecoder` fill in the interface of
:mod:`course_pkg.models.encoder_decoder` with GRUs (Sutskever et al., 2014; Cho et
al., 2014). Chapter "Bahdanau attention": :class:`Seq2SeqAttentionDecoder`
replaces the single context vector by an additive-attention read of every
encoder output (Bahdanau et al., 2015). :class:`Seq2SeqSettings` holds the
sizes and training budget both chapters (and ``bench/seq2seq.py``) use.

Shapes follow d2l's: the GRUs are time-major, so the encoder returns outputs
(T, B, D) and a state (L, B, D), with ``L`` the number of GRU layers and
``E`` the embedding width. Other letters as in the package docstring; ``Q``
counts the target positions fed to the decoder in one call.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from course_pkg.checks import (
    check_shape,
    check_sizes,
    check_token_ids,
    check_valid_lens,
)
from course_pkg.models.encoder_decoder import Decoder, Encoder, EncoderDecoder
from course_pkg.nn.gru import check_gru_sizes, gru_layer, init_seq2seq
from course_pkg.nn.scoring import AdditiveAttention


@dataclass(frozen=True)
class Seq2SeqSettings:
    """Hyperparameters of the two GRU chapters and ``bench/seq2seq.py``.

    One place, so that the chapters and the benchmark cannot drift apart.
    Both models (plain and Bahdanau) get the same sizes and the same training
    budget, so the chapter "Bahdanau attention" compares architectures, not
    budgets.
    """

    embed_size: int = 64
    num_hiddens: int = 128
    num_layers: int = 1
    dropout: float = 0.1
    batch_size: int = 64
    # num_steps covers all but two of the 6,400 training targets (+ <eos>).
    num_steps: int = 18
    lr: float = 0.01
    # What a 2-core CPU trains in about 10 s (plain) and 25 s (attention).
    num_epochs: int = 3
    grad_clip: float = 1.0
    seed: int = 0

    def model_sizes(self) -> tuple[int, int, int, float]:
        """(embed_size, num_hiddens, num_layers, dropout): a model's sizes."""
        return self.embed_size, self.num_hiddens, self.num_layers, self.dropout

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (e.g. to store in a checkpoint)."""
        return asdict(self)


SETTINGS = Seq2SeqSettings()


class Seq2SeqEncoder(Encoder):
    """A GRU encoder: embeds the source ids and runs an L-layer GRU over them.

    Args:
        vocab_size: V, size of the source vocabulary. embed_size: E, width of
            the embeddings.
        num_hiddens: D, width of the GRU state. num_layers: L, number of
            stacked GRU layers.
        dropout: dropout between GRU layers (only used when L > 1).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0.0,
    ):
        super().__init__()
        check_gru_sizes(
            vocab_size, embed_size, num_hiddens, num_layers, dropout=dropout
        )
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = gru_layer(embed_size, num_hiddens, num_layers, dropout)
        self.apply(init_seq2seq)

    def forward(
        self, X: torch.Tensor, *args: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode.

        Args:
            X: (B, T) source ids. args: ignored (the decoder's ``init_state``
                takes the valid lengths); the GRU reads padding too, as in d2l,
                so its final state has seen the pads.
        Returns:
            outputs (T, B, D), the last layer's state at every step, and state
            (L, B, D), every layer's final state.
        Raises:
            TypeError, ValueError: if X is not a (B, T) tensor of ids in
                [0, V) with T >= 1.
        """
        check_token_ids("X", X, self.embedding, min_steps=1)
        embs = self.embedding(X.t().long())  # (T, B, E)
        outputs, state = self.rnn(embs)  # (T, B, D), (L, B, D)
        return outputs, state


class GRUState(NamedTuple):
    """The state of a :class:`Seq2SeqDecoder`.

    ``context`` (B, D) is the encoder's last-layer final state, ``hidden``
    (L, B, D) the decoder GRU's state.
    """

    context: torch.Tensor
    hidden: torch.Tensor


class Seq2SeqDecoder(Decoder):
    """A GRU decoder that sees one fixed context vector.

    The context is the encoder's last-layer final state; at every step the GRU
    input is [embedding of the previous target token; context].

    Args:
        vocab_size: V, size of the target vocabulary. embed_size: E.
        num_hiddens: D (must equal the encoder's). num_layers: L (must equal
            the encoder's).
        dropout: dropout between GRU layers.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0.0,
    ):
        super().__init__()
        check_gru_sizes(
            vocab_size, embed_size, num_hiddens, num_layers, dropout=dropout
        )
        self.num_hiddens, self.num_layers = num_hiddens, num_layers
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = gru_layer(
            embed_size + num_hiddens, num_hiddens, num_layers, dropout
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self.apply(init_seq2seq)

    def init_state(
        self, enc_all_outputs: tuple[torch.Tensor, torch.Tensor], *args: Any
    ) -> GRUState:
        """The encoder's (outputs, state (L, B, D)) -> :class:`GRUState`."""
        _, enc_state = enc_all_outputs
        return GRUState(enc_state[-1], enc_state)

    def forward(
        self, X: torch.Tensor, state: GRUState
    ) -> tuple[torch.Tensor, GRUState]:
        """Score the next token after every prefix of X.

        Args:
            X: (B, Q) target ids (teacher forcing: the reference shifted
                right, starting with <bos>).
            state: from :meth:`init_state` or the previous call.
        Returns:
            Y (B, Q, V) scores, and the new state (same context, hidden after
            the last step).
        Raises:
            TypeError, ValueError: if X is not a (B, Q) tensor of ids in
                [0, V), or the state does not fit.
        """
        context, hidden = _check_seq2seq_decoder_forward(self, X, state)
        num_steps = X.shape[1]
        embs = self.embedding(X.t().long())  # (Q, B, E)
        contexts = context.unsqueeze(0).expand(num_steps, -1, -1)  # (Q, B, D)
        outputs, hidden = self.rnn(
            torch.cat((embs, contexts), dim=-1), hidden
        )  # (Q, B, D)
        Y = self.dense(outputs).transpose(0, 1)  # (B, Q, V)
        return Y, GRUState(context, hidden)


def _check_seq2seq_decoder_forward(
    decoder: Seq2SeqDecoder, X: object, state: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """X (B, Q) ids in [0, V), Q >= 1; state (context (B, D), hidden
    (L, B, D)), returned unpacked."""
    check_token_ids("X", X, decoder.embedding, min_steps=1)
    batch_size = X.shape[0]
    context, hidden = state
    check_shape(
        "state.context", context, (batch_size, decoder.num_hiddens), "(B, D)"
    )
    _check_hidden(hidden, batch_size, decoder.num_layers, decoder.num_hiddens)
    return context, hidden


def _check_hidden(
    hidden: Any, batch_size: int, num_layers: int, num_hiddens: int
) -> None:
    shape = (num_layers, batch_size, num_hiddens)
    check_shape("state.hidden", hidden, shape, "(L, B, D)")


class AttentionGRUState(NamedTuple):
    """The state of a :class:`Seq2SeqAttentionDecoder`.

    ``enc_outputs`` (B, T, D) are every encoder output (the keys and
    values), ``hidden`` (L, B, D) the decoder GRU's state, and
    ``enc_valid_lens`` None or (B,) the source lengths.
    """

    enc_outputs: torch.Tensor
    hidden: torch.Tensor
    enc_valid_lens: torch.Tensor | None


class BahdanauState(NamedTuple):
    """The state of a :class:`Seq2SeqAttentionDecoder`: the fields of
    :class:`AttentionGRUState`, and ``projected_keys`` (B, T, D), the keys
    W_k h_i, projected once per sequence by ``init_state``."""

    enc_outputs: torch.Tensor
    hidden: torch.Tensor
    enc_valid_lens: torch.Tensor | None
    projected_keys: torch.Tensor


class AttentionGRUDecoder(Decoder):
    """A GRU decoder that attends over the encoder outputs (Bahdanau, Luong).

    Holds ``attention``, ``embedding`` and ``rnn`` (a time-major GRU), built
    by a subclass in that order (it fixes the random initialisation), and
    :meth:`forward`, which checks X and the state, embeds X and hands the
    steps to the subclass's ``_decode(embs, *state) -> (Y, weights, state)``.
    """

    _state_type: Any = AttentionGRUState

    def __init__(
        self, attention: nn.Module, embedding: nn.Module, rnn: nn.GRU
    ):
        super().__init__()
        self.num_hiddens, self.num_layers = rnn.hidden_size, rnn.num_layers
        self.attention, self.embedding, self.rnn = attention, embedding, rnn
        self._attention_weights: torch.Tensor | None = None

    def init_state(
        self,
        enc_all_outputs: tuple[torch.Tensor, torch.Tensor],
        enc_valid_lens: torch.Tensor | None = None,
        *args: Any,
    ) -> AttentionGRUState:
        """Encoder (outputs (T, B, D), state (L, B, D)) and (B,) source
        lengths -> an :class:`AttentionGRUState`; keeps every output."""
        outputs, state = enc_all_outputs
        check_valid_lens(
            "enc_valid_lens",
            enc_valid_lens,
            *outputs.shape[1::-1],
            like=("enc_all_outputs", outputs),
        )
        return AttentionGRUState(
            outputs.transpose(0, 1), state, enc_valid_lens
        )

    def forward(self, X: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """Score the next token after every prefix of X.

        Args:
            X: (B, Q) target ids (teacher forcing: the reference shifted
                right, starting with <bos>).
            state: from :meth:`init_state` or the previous call.
        Returns:
            Y (B, Q, V) scores and the new state; :attr:`attention_weights`
            then holds (B, Q, T).
        Raises:
            TypeError, ValueError: on ids outside [0, V) or a state that does
                not fit (checked before any computation).
        """
        _check_attention_gru_decoder_forward(self, X, state)
        embs = self.embedding(X.t().long())  # (Q, B, E)
        Y, self._attention_weights, new_state = self._decode(embs, *state)
        return Y, new_state

    @property
    def attention_weights(self) -> torch.Tensor | None:
        """(B, Q, T) weights of the last forward call; row s: step s."""
        return self._attention_weights

    def _check_state(self, state: Any, batch_size: int) -> None:
        """Check the state's fields against X's batch (B)."""
        fields = self._state_type._fields
        if not isinstance(state, tuple) or len(state) != len(fields):
            raise TypeError(
                f"state must be a {self._state_type.__name__} "
                f"({', '.join(fields)}), got {type(state).__name__}"
            )
        enc_outputs, hidden, enc_valid_lens = state[:3]
        T = enc_outputs.shape[1] if getattr(enc_outputs, "ndim", 0) > 1 else 0
        shape = (batch_size, T, self.num_hiddens)
        check_shape("state.enc_outputs", enc_outputs, shape, "(B, T, D)")
        _check_hidden(hidden, batch_size, self.num_layers, self.num_hiddens)
        check_valid_lens(
            "state.enc_valid_lens",
            enc_valid_lens,
            batch_size,
            T,
            like=("state.enc_outputs", enc_outputs),
        )


def _check_attention_gru_decoder_forward(
    decoder: AttentionGRUDecoder, X: object, state: object
) -> None:
    """X (B, Q) ids in [0, V), Q >= 1; state the decoder's state type for
    that B (``_check_state``)."""
    check_token_ids("X", X, decoder.embedding, min_steps=1)
    decoder._check_state(state, X.shape[0])


class Seq2SeqAttentionDecoder(AttentionGRUDecoder):
    """A GRU decoder with Bahdanau (additive) attention on encoder outputs.

    Before each step, the last layer's hidden state (the query) attends over
    the encoder outputs (keys = values); the resulting context is concatenated
    to the token embedding as GRU input. Source padding is masked with the
    source valid lengths, so pads get weight exactly 0.

    Args:
        vocab_size: V. embed_size: E. num_hiddens: D and num_layers: L (both
            the encoder's). dropout: between GRU layers and on the weights.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0.0,
    ):
        check_gru_sizes(
            vocab_size, embed_size, num_hiddens, num_layers, dropout=dropout
        )
        D = num_hiddens
        super().__init__(
            AdditiveAttention(D, dropout, query_size=D, key_size=D),
            nn.Embedding(vocab_size, embed_size),
            # The GRU reads [context; embedding], as the plain decoder's does.
            gru_layer(embed_size + D, D, num_layers, dropout),
        )
        self.dense = nn.Linear(D, vocab_size)
        self.apply(init_seq2seq)

    _state_type = BahdanauState

    def init_state(
        self,
        enc_all_outputs: tuple[torch.Tensor, torch.Tensor],
        enc_valid_lens: torch.Tensor | None = None,
        *args: Any,
    ) -> BahdanauState:
        """:class:`AttentionGRUDecoder`'s state, and the keys W_k h_i
        (B, T, D): they do not depend on the step, so they are projected
        once per sequence (Bahdanau et al., 2015, App. A.1.2)."""
        state = super().init_state(enc_all_outputs, enc_valid_lens)
        keys = self.attention.project_keys(state.enc_outputs)
        return BahdanauState(*state, keys)

    def _check_state(self, state: Any, batch_size: int) -> None:
        """The base class's checks, and projected_keys (B, T, D)."""
        super()._check_state(state, batch_size)
        shape = (*state[0].shape[:2], self.num_hiddens)
        check_shape("state.projected_keys", state[3], shape, "(B, T, D)")

    def _decode(
        self,
        embs: torch.Tensor,
        enc_outputs: torch.Tensor,
        hidden: torch.Tensor,
        enc_valid_lens: torch.Tensor | None,
        keys: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, BahdanauState]:
        """Embeddings (Q, B, E) -> Y (B, Q, V), weights (B, Q, T), state."""
        outputs, weights = [], []
        # The query of a step is the state the previous step left, so the
        # steps run one after the other.
        for emb in embs:  # (B, E)
            query = hidden[-1].unsqueeze(1)  # (B, 1, D)
            context = self.attention(
                query,
                enc_outputs,
                enc_outputs,
                enc_valid_lens,
                projected_keys=keys,
            )  # (B, 1, D)
            step_input = torch.cat((context, emb.unsqueeze(1)), dim=-1)
            step_input = step_input.transpose(0, 1)  # (1, B, D + E)
            output, hidden = self.rnn(step_input, hidden)  # (1, B, D)
            outputs.append(output)
            weights.append(self.attention.attention_weights)  # (B, 1, T)
        Y = self.dense(torch.cat(outputs, dim=0)).transpose(0, 1)  # (B, Q, V)
        state = BahdanauState(enc_outputs, hidden, enc_valid_lens, keys)
        return Y, torch.cat(weights, dim=1), state


def seq2seq_model(
    attention: bool,
    src_vocab_size: int,
    tgt_vocab_size: int,
    settings: Seq2SeqSettings = SETTINGS,
) -> EncoderDecoder:
    """The chapters' GRU encoder–decoder, plain or with Bahdanau attention.

    Args:
        attention: use :class:`Seq2SeqAttentionDecoder` (else
            :class:`Seq2SeqDecoder`).
        src_vocab_size, tgt_vocab_size: V of each language. settings: sizes
            and dropout.
    Returns:
        A freshly initialised ``EncoderDecoder`` on the CPU (seed torch first
        for repeatable weights).
    """
    check_sizes(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    sizes = settings.model_sizes()
    decoder_class = Seq2SeqAttentionDecoder if attention else Seq2SeqDecoder
    return EncoderDecoder(
        Seq2SeqEncoder(src_vocab_size, *sizes),
        decoder_class(tgt_vocab_size, *sizes),
    )
