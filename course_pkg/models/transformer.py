"""The Transformer of Vaswani et al. (2017): its settings, encoder, decoder
and model.

Chapter: "The Transformer". The blocks these stacks repeat are in
:mod:`course_pkg.nn.blocks`; the interface they implement in
:mod:`course_pkg.models.encoder_decoder`.

Shape letters (see the package docstring): ``B`` batch, ``T`` source length,
``Q`` target positions fed in one call, ``t`` target positions fed so far,
``D`` width (``num_hiddens``), ``H`` heads, ``V`` vocabulary size.

Which attention path runs: the models' one rule,
:func:`course_pkg.nn.attention.resolve_need_weights`. Every ``forward`` here
takes ``need_weights: bool | None``; None (the default) reads the stack's
``need_weights`` attribute, and that attribute left at None means "keep the
weights in eval mode, not in training mode". A training step never reads the
weights, so it takes the fused kernel (faster); decoding and plots run in
eval mode and get ``attention_weights``. Pass True or False to choose, or set
``model.need_weights`` (on a :class:`Transformer` it sets both stacks').
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from course_pkg.checks import (
    check_features,
    check_sizes,
    check_source_target,
    check_tensor,
    check_token_ids,
    check_valid_lens,
)
from course_pkg.models.encoder_decoder import Decoder, Encoder, EncoderDecoder
from course_pkg.nn.attention import resolve_need_weights
from course_pkg.nn.blocks import (
    DecoderState,
    EmbeddingStack,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from course_pkg.nn.positional import PositionalEncoding


@dataclass(frozen=True)
class TransformerSettings:
    """The sizes of a Transformer; the defaults are the chapter's model.

    Attributes:
        num_hiddens: D. ffn_num_hiddens: the FFN's hidden width.
        num_heads: H. num_blks: blocks in each stack. dropout: everywhere.
        use_bias: biases in the attention projections.
        max_len: longest source and target accepted.
    """

    num_hiddens: int = 32
    ffn_num_hiddens: int = 128
    num_heads: int = 4
    num_blks: int = 2
    dropout: float = 0.0
    use_bias: bool = False
    max_len: int = 1000

    def as_dict(self) -> dict[str, Any]:
        """The settings as keyword arguments of the classes below."""
        return asdict(self)


class TransformerEncoder(EmbeddingStack, Encoder):
    """Embedding scaled by sqrt(D), sinusoidal positions, num_blks blocks.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: FFN width.
        num_heads: H. num_blks: number of blocks. dropout: everywhere.
        use_bias: biases in attention. max_len: longest source accepted.
    Attributes:
        attention_weights: list, per block, of (B, H, T, T) self-attention
            weights of the last call (None entries after a fused call).
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        use_bias: bool = False,
        *,
        max_len: int = 1000,
    ):
        sizes = (vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks)
        super().__init__(sizes, dropout, max_len)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout, max_len)
        self.blks = nn.ModuleList(
            TransformerEncoderBlock(
                num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias
            )
            for _ in range(num_blks)
        )
        self.attention_weights: list[torch.Tensor | None] = [None] * num_blks

    def forward(
        self,
        X: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool | None = None,
    ) -> torch.Tensor:
        """Encode.

        Args:
            X: (B, T) token ids.
            valid_lens: None or (B,) numbers of real tokens (the rest is
                padding).
            need_weights: see the module docstring.
        Returns:
            (B, T, D).
        Raises:
            TypeError: if X or valid_lens is not an integer tensor.
            ValueError: on a wrong rank, ids outside [0, V), T > max_len,
                lengths outside [0, T].
        """
        _check_transformer_encoder_forward(self, X, valid_lens)
        need_weights = resolve_need_weights(self, need_weights)
        # The embedding is scaled up so that the positional signal (values
        # in [-1, 1]) does not swamp it.
        embedded = self.embedding(X) * math.sqrt(self.num_hiddens)
        X = self.pos_encoding(embedded)  # (B, T, D)
        for blk in self.blks:
            X = blk(X, valid_lens, need_weights=need_weights)
        self.attention_weights = [
            blk.attention.attention_weights for blk in self.blks
        ]
        return X


def _check_transformer_encoder_forward(
    encoder: TransformerEncoder, X: object, valid_lens: object
) -> None:
    """X (B, T) ids in [0, V) with T <= max_len; valid_lens None or (B,)
    ints in [0, T]."""
    check_token_ids("X", X, encoder.embedding)
    if X.shape[1] > encoder.max_len:
        raise ValueError(
            f"X must have shape (B, T) with T <= max_len={encoder.max_len}, "
            f"got {tuple(X.shape)}"
        )
    check_valid_lens("valid_lens", valid_lens, *X.shape, like=("X", X))


class TransformerDecoder(EmbeddingStack, Decoder):
    """Embedding times sqrt(D), positions, num_blks blocks, dense layer to V.

    The state (see :meth:`init_state`) carries a key/value cache, so the
    target can be fed whole (training) or a few tokens at a time
    (generation) with the same result.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: FFN width.
        num_heads: H. num_blks: number of blocks. dropout: everywhere.
        use_bias: biases in attention. max_len: longest target accepted.
    Attributes:
        attention_weights: ``[self_weights, cross_weights]`` of the last
            call, each a list per block of (B, H, Q, t) and (B, H, Q, T)
            tensors (None entries after a fused call).
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        use_bias: bool = False,
        *,
        max_len: int = 1000,
    ):
        sizes = (vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks)
        super().__init__(sizes, dropout, max_len)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout, max_len)
        self.blks = nn.ModuleList(
            TransformerDecoderBlock(
                num_hiddens, ffn_num_hiddens, num_heads, dropout, i, use_bias
            )
            for i in range(num_blks)
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self.attention_weights: list[list[torch.Tensor | None]] = [
            [None] * num_blks,
            [None] * num_blks,
        ]

    def init_state(
        self,
        enc_outputs: torch.Tensor,
        enc_valid_lens: torch.Tensor | None = None,
    ) -> DecoderState:
        """The state before any target token.

        Args:
            enc_outputs: (B, T, D) encoder outputs.
            enc_valid_lens: None or (B,) source lengths.
        Returns:
            A :class:`course_pkg.nn.blocks.DecoderState` with no
            cache and offset 0.
        Raises:
            TypeError: if enc_outputs is not a float tensor of the model's
                dtype, or enc_valid_lens not an integer tensor.
            ValueError: if enc_outputs is not (B, T, D) on the model's
                device or enc_valid_lens not (B,) in [0, T].
        """
        _check_transformer_decoder_init_state(
            self, enc_outputs, enc_valid_lens
        )
        return DecoderState(
            enc_outputs, enc_valid_lens, (None,) * self.num_blks, 0
        )

    def forward(
        self,
        X: torch.Tensor,
        state: DecoderState,
        *,
        tgt_valid_lens: torch.Tensor | None = None,
        need_weights: bool | None = None,
    ) -> tuple[torch.Tensor, DecoderState]:
        """Scores for Q new target positions, given the state of those before.

        Args:
            X: (B, Q) target ids at positions offset .. offset + Q - 1.
            state: from :meth:`init_state` or from the previous call; it is
                not modified.
            tgt_valid_lens: None or (B,) numbers of real target tokens in the
                whole target, counted from position 0 (so the same tensor
                serves every step). Under the causal mask, padding at the end
                of a target cannot reach a real position; this only changes
                the outputs at padded positions (as ``tgt_key_padding_mask``
                does in ``torch.nn.Transformer``).
            need_weights: see the module docstring.
        Returns:
            Y (B, Q, V) scores and the new state (offset + Q positions
            cached).
        Raises:
            TypeError: if state is not a DecoderState, or X or
                tgt_valid_lens is not an integer tensor.
            ValueError: on a malformed X, state or tgt_valid_lens, or
                beyond max_len.
        """
        num_seen = _check_transformer_decoder_forward(
            self, X, state, tgt_valid_lens
        )
        if tgt_valid_lens is not None:
            # Only the t = offset + Q positions fed so far exist as keys.
            tgt_valid_lens = tgt_valid_lens.clamp(max=num_seen)
        need_weights = resolve_need_weights(self, need_weights)
        embedded = self.embedding(X) * math.sqrt(self.num_hiddens)
        X = self.pos_encoding(embedded, state.offset)  # (B, Q, D)
        for blk in self.blks:
            X, state = blk(
                X,
                state,
                tgt_valid_lens=tgt_valid_lens,
                need_weights=need_weights,
            )
        self.attention_weights = [
            [blk.attention1.attention_weights for blk in self.blks],
            [blk.attention2.attention_weights for blk in self.blks],
        ]
        return self.dense(X), state._replace(offset=num_seen)


def _check_transformer_decoder_init_state(
    decoder: TransformerDecoder, enc_outputs: object, enc_valid_lens: object
) -> None:
    """enc_outputs a float (B, T, D) tensor of the decoder's dtype and
    device; enc_valid_lens None or (B,) ints in [0, T]."""
    check_tensor("enc_outputs", enc_outputs, 3, "(B, T, D)")
    check_features(
        "enc_outputs",
        enc_outputs,
        decoder.num_hiddens,
        decoder,
        shape=f"(B, T, {decoder.num_hiddens})",
    )
    batch_size, num_steps = enc_outputs.shape[:2]
    check_valid_lens(
        "enc_valid_lens",
        enc_valid_lens,
        batch_size,
        num_steps,
        like=("enc_outputs", enc_outputs),
    )


def _check_transformer_decoder_forward(
    decoder: TransformerDecoder,
    X: object,
    state: object,
    tgt_valid_lens: object,
) -> int:
    """state a DecoderState of N caches; X (B, Q) ids in [0, V) with the
    state's B and offset + Q <= max_len; tgt_valid_lens None or (B,) ints.
    Returns offset + Q, the positions seen."""
    if not isinstance(state, DecoderState):
        raise TypeError(
            "state must be the DecoderState of init_state or of the "
            f"previous call, got {type(state).__name__}"
        )
    if len(state.caches) != decoder.num_blks:
        raise ValueError(
            f"state.caches must hold num_blks={decoder.num_blks} entries, "
            f"got {len(state.caches)}"
        )
    check_token_ids("X", X, decoder.embedding)
    batch_size = state.enc_outputs.shape[0]
    if X.shape[0] != batch_size:
        raise ValueError(
            f"X must have shape (B, Q) with B={batch_size} as in the "
            f"state, got {tuple(X.shape)}"
        )
    check_valid_lens(
        "tgt_valid_lens", tgt_valid_lens, batch_size, None, like=("X", X)
    )
    num_seen = state.offset + X.shape[1]
    if num_seen > decoder.max_len:  # the cached positions come first
        raise ValueError(
            f"X (B, Q={X.shape[1]}) after the {state.offset} positions "
            f"cached reaches position {num_seen}, more than "
            f"max_len={decoder.max_len}"
        )
    return num_seen


class Transformer(EncoderDecoder):
    """The encoder–decoder Transformer: its encoder and decoder together.

    Args:
        src_vocab_size, tgt_vocab_size: source and target V.
        num_hiddens: D. ffn_num_hiddens: FFN width. num_heads: H.
        num_blks: blocks in each stack. dropout: everywhere.
        use_bias: biases in attention.
        max_len: longest source and target accepted.
        share_embeddings: the output layer's weight is the decoder's
            embedding matrix (V, D), one parameter (Press and Wolf, 2017;
            Vaswani et al., 2017, sec. 3.4; the paper also shares the source
            embedding, which needs a joint vocabulary).
    Attributes:
        settings: the sizes above, as a :class:`TransformerSettings`.
        encoder: a :class:`TransformerEncoder`.
        decoder: a :class:`TransformerDecoder`.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        use_bias: bool = False,
        *,
        max_len: int = 1000,
        share_embeddings: bool = False,
    ):
        check_sizes(
            src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size
        )
        settings = TransformerSettings(
            num_hiddens=num_hiddens,
            ffn_num_hiddens=ffn_num_hiddens,
            num_heads=num_heads,
            num_blks=num_blks,
            dropout=dropout,
            use_bias=use_bias,
            max_len=max_len,
        )
        super().__init__(
            TransformerEncoder(src_vocab_size, **settings.as_dict()),
            TransformerDecoder(tgt_vocab_size, **settings.as_dict()),
        )
        self.settings = settings
        if share_embeddings:
            self.decoder.dense.weight = self.decoder.embedding.weight

    @property
    def need_weights(self) -> bool | None:
        """The stacks' ``need_weights`` (None: the weights in eval mode)."""
        return self.encoder.need_weights

    @need_weights.setter
    def need_weights(self, value: bool | None) -> None:
        self.encoder.need_weights = self.decoder.need_weights = value

    @classmethod
    def from_settings(
        cls,
        src_vocab_size: int,
        tgt_vocab_size: int,
        settings: TransformerSettings = TransformerSettings(),
        *,
        share_embeddings: bool = False,
    ) -> Transformer:
        """A Transformer of the given sizes (default: the chapter's)."""
        return cls(
            src_vocab_size,
            tgt_vocab_size,
            **settings.as_dict(),
            share_embeddings=share_embeddings,
        )

    def forward(
        self,
        enc_X: torch.Tensor,
        dec_X: torch.Tensor,
        enc_valid_lens: torch.Tensor | None = None,
        *,
        tgt_valid_lens: torch.Tensor | None = None,
        need_weights: bool | None = None,
    ) -> torch.Tensor:
        """Scores of every target position, teacher-forced.

        Args:
            enc_X: (B, T) source ids. dec_X: (B, Q) target ids.
            enc_valid_lens, tgt_valid_lens: None or (B,) lengths.
            need_weights: see the module docstring.
        Returns:
            (B, Q, V) scores.
        """
        check_source_target(self, enc_X, dec_X, enc_valid_lens)
        enc_outputs = self.encoder(
            enc_X, enc_valid_lens, need_weights=need_weights
        )
        state = self.decoder.init_state(enc_outputs, enc_valid_lens)
        Y, _ = self.decoder(
            dec_X,
            state,
            tgt_valid_lens=tgt_valid_lens,
            need_weights=need_weights,
        )
        return Y
