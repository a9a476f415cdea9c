"""The encoder–decoder interface and the GRU models of two chapters.

Chapter "The encoder–decoder architecture": an encoder maps a source sequence
to a state; a decoder turns that state and the target prefix into next-token
scores. :class:`Seq2SeqEncoder` and :class:`Seq2SeqDecoder` fill in the
interface with GRUs (Sutskever et al., 2014; Cho et al., 2014). Chapter
"Bahdanau attention": :class:`Seq2SeqAttentionDecoder` replaces the single
context vector by an additive-attention read of every encoder output (Bahdanau
et al., 2015).

The Transformer fills in the same interface, so one training loop
(:mod:`course_pkg.train`) and one set of decoding functions
(:mod:`course_pkg.decode`) serve every model.

The decoder contract. ``decoder.forward(X, state)`` takes X (B, t) target ids
and returns ``(Y, new_state)`` with Y (B, t, V). Feeding a prefix one token at
a time, each call given the state the previous call returned, gives the same Y
as one call on the whole prefix from a fresh ``init_state`` (the "cached" and
"uncached" decoding paths).

Shapes follow d2l's: the GRUs are time-major, so the encoder returns outputs
(T, B, D) and a state (L, B, D), with L the number of GRU layers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from course_pkg.attention import AdditiveAttention

# --------------------------------------------------------------- the interface


class Encoder(nn.Module):
    """Base encoder: ``forward(X, *args)`` maps X (B, T) ids to a state."""

    def forward(
        self, X: torch.Tensor, *args: Any
    ) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class Decoder(nn.Module):
    """Base decoder: ``init_state(enc_all_outputs, *args)``, then
    ``forward(X, state) -> (Y, state)``.

    X is (B, T) target ids, Y is (B, T, V) scores over the target vocabulary.
    """

    def init_state(
        self, enc_all_outputs: Any, *args: Any
    ) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(
        self, X: torch.Tensor, state: Any
    ) -> tuple[torch.Tensor, Any]:  # pragma: no cover - abstract
        raise NotImplementedError


class EncoderDecoder(nn.Module):
    """An encoder and a decoder trained together.

    Args:
        encoder: an :class:`Encoder`. decoder: a :class:`Decoder`.
    """

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(
        self, enc_X: torch.Tensor, dec_X: torch.Tensor, *args: Any
    ) -> torch.Tensor:
        """enc_X (B, T_src), dec_X (B, T_tgt) ids, args (e.g. source valid
        lengths (B,)) -> (B, T_tgt, V) scores."""
        enc_all_outputs = self.encoder(enc_X, *args)
        dec_state = self.decoder.init_state(enc_all_outputs, *args)
        return self.decoder(dec_X, dec_state)[0]


# ---------------------------------------------------------------- input checks


def check_token_ids(name: str, X: torch.Tensor, vocab_size: int) -> None:
    """Refuse anything but a (B, T) integer tensor with T >= 1 (and, on the
    CPU, with ids below vocab_size).

    Raises:
        TypeError: if X is not a tensor of an integer dtype.
        ValueError: if X is not 2-D, has no time step, or (on the CPU) holds an
            id outside [0, V).
    """
    if not isinstance(X, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of token ids with shape (B, T), got {type(X).__name__}"
        )
    if (
        X.dtype.is_floating_point
        or X.dtype.is_complex
        or X.dtype == torch.bool
    ):
        raise TypeError(
            f"{name} must hold integer token ids (torch.long), got dtype {X.dtype}"
        )
    if X.dim() != 2:
        raise ValueError(
            f"{name} must have shape (B, T), got {tuple(X.shape)}"
        )
    if X.shape[1] == 0:
        raise ValueError(
            f"{name} must have at least one time step, got shape {tuple(X.shape)}"
        )
    # Reading values costs a device sync on a GPU and is impossible on meta
    # (see course_pkg.attention).
    if X.device.type == "cpu" and X.numel() > 0:
        low, high = int(X.min()), int(X.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} must hold ids in [0, {vocab_size}), got values in [{low}, {high}]"
            )


def _check_state_tensor(
    name: str, tensor: Any, shape: tuple[int, ...], letters: str
) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"state's {name} must be a torch.Tensor of shape {letters}, got {type(tensor).__name__}"
        )
    if tuple(tensor.shape) != shape:
        raise ValueError(
            f"state's {name} must have shape {letters}={shape}, got {tuple(tensor.shape)}"
        )


def init_seq2seq(module: nn.Module) -> None:
    """Xavier-uniform initialisation of Linear and GRU weight matrices.

    Use with ``model.apply``.

    GRUs start better conditioned this way than with PyTorch's uniform default;
    biases are kept.
    """
    if type(module) is nn.Linear:
        nn.init.xavier_uniform_(module.weight)
    if type(module) is nn.GRU:
        for name, param in module.named_parameters():
            if name.startswith("weight"):
                nn.init.xavier_uniform_(param)


# --------------------------------------------------------- GRU encoder–decoder


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
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(
            embed_size,
            num_hiddens,
            num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
        )
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
            TypeError/ValueError: if X is not a (B, T) tensor of ids in [0, V).
        """
        check_token_ids("X", X, self.embedding.num_embeddings)
        embs = self.embedding(X.t().long())  # (T, B, E)
        outputs, state = self.rnn(embs)  # (T, B, D), (L, B, D)
        return outputs, state


class Seq2SeqDecoder(Decoder):
    """A GRU decoder that sees one fixed context vector.

    The context is the encoder's last-layer final state; at every step the GRU
    input is [embedding of the previous target token; context].

    Args:
        vocab_size: V, size of the target vocabulary. embed_size: E.
        num_hiddens: D (must equal the encoder's). num_layers: L (must equal
            the encoder's).
        dropout: dropout between GRU layers.
    State:
        ``(context (B, D), hidden (L, B, D))``.
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
        self.num_hiddens, self.num_layers = num_hiddens, num_layers
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(
            embed_size + num_hiddens,
            num_hiddens,
            num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self.apply(init_seq2seq)

    def init_state(
        self, enc_all_outputs: tuple[torch.Tensor, torch.Tensor], *args: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder (outputs, state (L, B, D)) -> (context (B, D), state)."""
        _, enc_state = enc_all_outputs
        return enc_state[-1], enc_state

    def forward(
        self, X: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Score the next token after every prefix of X.

        Args:
            X: (B, T) target ids (teacher forcing: the reference shifted right,
                starting with <bos>).
            state: ``(context (B, D), hidden (L, B, D))`` from
                :meth:`init_state` or the previous call.
        Returns:
            Y (B, T, V) scores, and the new state (same context, hidden after
            the last step).
        Raises:
            TypeError/ValueError: if X is not a (B, T) tensor of ids in
                [0, V), or the state does not fit.
        """
        check_token_ids("X", X, self.embedding.num_embeddings)
        batch_size, num_steps = X.shape
        context, hidden = state
        _check_state_tensor(
            "context", context, (batch_size, self.num_hiddens), "(B, D)"
        )
        _check_state_tensor(
            "hidden",
            hidden,
            (self.num_layers, batch_size, self.num_hiddens),
            "(L, B, D)",
        )
        embs = self.embedding(X.t().long())  # (T, B, E)
        contexts = context.unsqueeze(0).expand(num_steps, -1, -1)  # (T, B, D)
        outputs, hidden = self.rnn(
            torch.cat((embs, contexts), dim=-1), hidden
        )  # (T, B, D)
        Y = self.dense(outputs).transpose(0, 1)  # (B, T, V)
        return Y, (context, hidden)


class Seq2SeqAttentionDecoder(Decoder):
    """A GRU decoder with Bahdanau (additive) attention on encoder outputs.

    Before each step, the last layer's hidden state (the query) attends over
    the encoder outputs (keys = values); the resulting context is concatenated
    to the token embedding as GRU input. Source padding is masked with the
    source valid lengths, so pads get weight exactly 0.

    Args:
        vocab_size: V. embed_size: E. num_hiddens: D (must equal the
            encoder's).
        num_layers: L (must equal the encoder's). dropout: between GRU layers
            and on the attention weights.
    State:
        ``(enc_outputs (B, T_src, D), hidden (L, B, D), enc_valid_lens (B,) or
        None)``.
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
        self.num_hiddens, self.num_layers = num_hiddens, num_layers
        self.attention = AdditiveAttention(
            num_hiddens, dropout, query_size=num_hiddens, key_size=num_hiddens
        )
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(
            embed_size + num_hiddens,
            num_hiddens,
            num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self.apply(init_seq2seq)
        self._attention_weights: torch.Tensor | None = None

    def init_state(
        self,
        enc_all_outputs: tuple[torch.Tensor, torch.Tensor],
        enc_valid_lens: torch.Tensor | None = None,
        *args: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Keep every encoder output for the attention.

        enc_all_outputs = (outputs (T_src, B, D), state (L, B, D));
        enc_valid_lens (B,) or None.

        Returns:
            ``(enc_outputs (B, T_src, D), hidden (L, B, D), enc_valid_lens)``.
        """
        outputs, enc_state = enc_all_outputs
        return outputs.transpose(0, 1), enc_state, enc_valid_lens

    def forward(
        self,
        X: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    ) -> tuple[
        torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
    ]:
        """Score the next token after every prefix of X, attending at each
        step.

        Args:
            X: (B, T) target ids. state: see the class docstring.
        Returns:
            Y (B, T, V) scores and the new state; :attr:`attention_weights`
            then holds (B, T, T_src).
        Raises:
            TypeError/ValueError: if X is not a (B, T) tensor of ids in
                [0, V), the state does not fit, or a valid length is outside
                [0, T_src] (checked on the CPU, see course_pkg.attention).
        """
        check_token_ids("X", X, self.embedding.num_embeddings)
        batch_size = X.shape[0]
        enc_outputs, hidden, enc_valid_lens = state
        if not isinstance(enc_outputs, torch.Tensor) or enc_outputs.dim() != 3:
            raise ValueError(
                "state's enc_outputs must be a tensor of shape (B, T_src, D)"
            )
        _check_state_tensor(
            "enc_outputs",
            enc_outputs,
            (batch_size, enc_outputs.shape[1], self.num_hiddens),
            "(B, T_src, D)",
        )
        _check_state_tensor(
            "hidden",
            hidden,
            (self.num_layers, batch_size, self.num_hiddens),
            "(L, B, D)",
        )
        embs = self.embedding(X.t().long())  # (T, B, E)
        outputs, weights = [], []
        # The query of a step is the state the previous step left, so the
        # steps run one after the other.
        for emb in embs:  # (B, E)
            query = hidden[-1].unsqueeze(1)  # (B, 1, D)
            context = self.attention(
                query, enc_outputs, enc_outputs, enc_valid_lens
            )  # (B, 1, D)
            step_input = torch.cat((context, emb.unsqueeze(1)), dim=-1)
            step_input = step_input.transpose(0, 1)  # (1, B, D + E)
            output, hidden = self.rnn(step_input, hidden)  # (1, B, D)
            outputs.append(output)
            weights.append(self.attention.attention_weights)  # (B, 1, T_src)
        self._attention_weights = torch.cat(weights, dim=1)  # (B, T, T_src)
        Y = self.dense(torch.cat(outputs, dim=0)).transpose(0, 1)  # (B, T, V)
        return Y, (enc_outputs, hidden, enc_valid_lens)

    @property
    def attention_weights(self) -> torch.Tensor | None:
        """(B, T, T_src) weights of the last forward call; row t: step t."""
        return self._attention_weights
