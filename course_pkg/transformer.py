"""The Transformer of Vaswani et al. (2017): encoder, decoder and model.

Chapter: "The Transformer". Post-norm blocks as in the paper (and in d2l):
every sublayer is followed by ``AddNorm``, i.e.
``LayerNorm(X + dropout(sublayer(X)))``; the feed-forward network uses ReLU.
Names and constructor arguments follow d2l, without its lazy layers.

Shape letters: ``B`` batch, ``T`` source length, ``t`` target positions fed in
one call, ``k`` target positions seen so far (cached ones included), ``D``
model width (``num_hiddens``), ``H`` heads, ``V`` vocabulary size.

The decoder keeps a key/value cache. Under a causal mask a past position never
looks at a later one, so its keys and values in every block stay the same as
the target grows. The decoder state therefore holds, per block, the projected
self-attention keys and values of every position fed so far (and the
projected encoder outputs for cross-attention, which never change), plus the
number of positions already fed, ``offset``, where the positional encoding
resumes. Feeding a target one token at a time then costs one position per
step, and gives the same scores as one call on the whole prefix.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from course_pkg.attention import MultiHeadAttention
from course_pkg.positional import PositionalEncoding
from course_pkg.seq2seq import Decoder, Encoder, EncoderDecoder

# ------------------------------------------------------------ input checks


def _check_tokens(name: str, X: torch.Tensor, vocab_size: int) -> None:
    if not isinstance(X, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of token ids, shape (B, T), "
            f"got {type(X).__name__}"
        )
    if (
        X.dtype.is_floating_point
        or X.dtype.is_complex
        or X.dtype == torch.bool
    ):
        raise TypeError(
            f"{name} must hold integer token ids, got dtype {X.dtype}"
        )
    if X.dim() != 2:
        raise ValueError(
            f"{name} must have shape (B, T), got {tuple(X.shape)}"
        )
    # Values are read only on the CPU: elsewhere it would force a device
    # synchronisation.
    if (
        X.device.type == "cpu"
        and X.numel() > 0
        and (int(X.min()) < 0 or int(X.max()) >= vocab_size)
    ):
        raise ValueError(
            f"{name} must hold ids in [0, {vocab_size}), "
            f"got [{int(X.min())}, {int(X.max())}]"
        )


def _check_lens(
    name: str,
    lens: torch.Tensor | None,
    batch_size: int,
    max_len: int | None,
) -> None:
    if lens is None:
        return
    if not isinstance(lens, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape (B,)=({batch_size},), "
            f"got {type(lens).__name__}"
        )
    if (
        lens.dtype.is_floating_point
        or lens.dtype.is_complex
        or lens.dtype == torch.bool
    ):
        raise TypeError(f"{name} must hold integers, got dtype {lens.dtype}")
    if tuple(lens.shape) != (batch_size,):
        raise ValueError(
            f"{name} must have shape (B,)=({batch_size},), "
            f"got {tuple(lens.shape)}"
        )
    if lens.device.type == "cpu" and lens.numel() > 0:
        if int(lens.min()) < 0:
            raise ValueError(
                f"{name} must be >= 0, got minimum {int(lens.min())}"
            )
        if max_len is not None and int(lens.max()) > max_len:
            raise ValueError(
                f"{name} must be <= {max_len}, got {int(lens.max())}"
            )


# ------------------------------------------------------- the two sublayers


class PositionWiseFFN(nn.Module):
    """The same two-layer MLP at every position: dense2(ReLU(dense1(X))).

    Args:
        ffn_num_hiddens: width of the hidden layer.
        ffn_num_outputs: output width (D in a block).
        input_size: input width (default ffn_num_outputs, as inside a
            Transformer block).
    """

    def __init__(
        self,
        ffn_num_hiddens: int,
        ffn_num_outputs: int,
        *,
        input_size: int | None = None,
    ):
        super().__init__()
        self.input_size = input_size or ffn_num_outputs
        self.dense1 = nn.Linear(self.input_size, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (B, T, input_size) -> (B, T, ffn_num_outputs).

        Raises ValueError if X's last dimension is not input_size.
        """
        if X.shape[-1] != self.input_size:
            raise ValueError(
                f"X must have shape (..., {self.input_size}), "
                f"got {tuple(X.shape)}"
            )
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    """Residual connection then layer norm: LayerNorm(X + dropout(Y)).

    Args:
        norm_shape: the normalised shape, D for a Transformer.
        dropout: on the sublayer output Y.
    """

    def __init__(self, norm_shape: int | tuple[int, ...], dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape)

    def forward(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """X (B, T, D) a sublayer's input, Y (B, T, D) its output -> (B, T, D).

        Raises ValueError if X and Y differ in shape.
        """
        if X.shape != Y.shape:
            raise ValueError(
                "X and Y must have the same shape, "
                f"got {tuple(X.shape)} and {tuple(Y.shape)}"
            )
        return self.ln(X + self.dropout(Y))


# ----------------------------------------------------------------- encoder


class TransformerEncoderBlock(nn.Module):
    """Self-attention then the feed-forward network, each followed by AddNorm.

    Args:
        num_hiddens: D, divisible by num_heads.
        ffn_num_hiddens: hidden width of the FFN. num_heads: H.
        dropout: everywhere. use_bias: biases in the attention projections.
    Raises:
        ValueError: if num_hiddens is not divisible by num_heads.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float,
        use_bias: bool = False,
    ):
        super().__init__()
        self.attention = MultiHeadAttention(
            num_hiddens, num_heads, dropout, use_bias
        )
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens)
        self.addnorm2 = AddNorm(num_hiddens, dropout)

    def forward(
        self,
        X: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """X (B, T, D), valid_lens None or (B,) -> (B, T, D).

        need_weights=False takes the fused attention path.
        """
        attended = self.attention(
            X, X, X, valid_lens, need_weights=need_weights
        )  # (B, T, D)
        Y = self.addnorm1(X, attended)
        return self.addnorm2(Y, self.ffn(Y))


class TransformerEncoder(Encoder):
    """Embedding scaled by sqrt(D), sinusoidal positions, num_blks blocks.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: FFN width.
        num_heads: H. num_blks: number of blocks. dropout: everywhere.
        use_bias: biases in attention. max_len: longest source accepted.
    Attributes:
        attention_weights: list, per block, of (B, H, T, T) self-attention
            weights of the last call (None entries after a call with
            need_weights=False).
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
        super().__init__()
        self.vocab_size, self.num_hiddens = vocab_size, num_hiddens
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
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
        need_weights: bool = True,
    ) -> torch.Tensor:
        """Encode.

        Args:
            X: (B, T) token ids.
            valid_lens: None or (B,) numbers of real tokens (the rest is
                padding).
            need_weights: keep the attention weights (explicit path) or not
                (fused path, faster).
        Returns:
            (B, T, D).
        Raises:
            ValueError/TypeError: on a wrong rank or dtype, ids outside
                [0, V), lengths outside [0, T].
        """
        _check_tokens("X", X, self.vocab_size)
        _check_lens("valid_lens", valid_lens, X.shape[0], X.shape[1])
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


# ----------------------------------------------------------------- decoder


class TransformerDecoderBlock(nn.Module):
    """Masked self-attention, cross-attention, FFN; each followed by AddNorm.

    Args:
        num_hiddens: D. ffn_num_hiddens: FFN width. num_heads: H.
        dropout: everywhere.
        i: this block's index in the decoder, i.e. which entry of the
            state's cache is its own.
        use_bias: biases in the attention projections.
    Raises:
        ValueError: if num_hiddens is not divisible by num_heads.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float,
        i: int,
        use_bias: bool = False,
    ):
        super().__init__()
        self.i = i
        self.attention1 = MultiHeadAttention(
            num_hiddens, num_heads, dropout, use_bias
        )
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.attention2 = MultiHeadAttention(
            num_hiddens, num_heads, dropout, use_bias
        )
        self.addnorm2 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens)
        self.addnorm3 = AddNorm(num_hiddens, dropout)

    def forward(
        self,
        X: torch.Tensor,
        state: list[Any],
        *,
        tgt_valid_lens: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, list[Any]]:
        """Decode t new positions.

        Args:
            X: (B, t, D) block inputs at the t new positions.
            state: ``[enc_outputs (B, T, D), enc_valid_lens None or (B,),
                caches, offset]`` as made by
                :meth:`TransformerDecoder.init_state`; ``caches[self.i]`` is
                None or this block's ``(keys (B, k - t, D), values
                (B, k - t, D), enc_keys (B, T, D), enc_values (B, T, D))``.
            tgt_valid_lens: None or (B,) numbers of real target tokens
                counted from position 0, at most k
                (:class:`TransformerDecoder` clamps them).
            need_weights: keep the attention weights (explicit path) or not
                (fused path).
        Returns:
            (B, t, D) and a new state whose cache entry for this block also
            holds the new positions.
        """
        enc_outputs, enc_valid_lens, caches, offset = state
        cache = caches[self.i]
        keys = self.attention1.W_k(X)  # (B, t, D)
        values = self.attention1.W_v(X)  # (B, t, D)
        if cache is None:
            enc_keys = self.attention2.W_k(enc_outputs)  # (B, T, D)
            enc_values = self.attention2.W_v(enc_outputs)  # (B, T, D)
        else:
            past_keys, past_values, enc_keys, enc_values = cache
            keys = torch.cat([past_keys, keys], dim=1)  # (B, k, D)
            values = torch.cat([past_values, values], dim=1)  # (B, k, D)
        X2 = self.attention1.attend_projected(
            X,
            keys,
            values,
            tgt_valid_lens,
            causal=True,
            need_weights=need_weights,
        )
        Y = self.addnorm1(X, X2)
        Y2 = self.attention2.attend_projected(
            Y, enc_keys, enc_values, enc_valid_lens, need_weights=need_weights
        )
        Z = self.addnorm2(Y, Y2)
        # A new list: the caller's state stays valid, so a search may branch
        # from it.
        caches = list(caches)
        caches[self.i] = (keys, values, enc_keys, enc_values)
        new_state = [enc_outputs, enc_valid_lens, caches, offset]
        return self.addnorm3(Z, self.ffn(Z)), new_state


class TransformerDecoder(Decoder):
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
            call, each a list per block of (B, H, t, k) and (B, H, t, T)
            tensors (None entries after need_weights=False).
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
        super().__init__()
        self.vocab_size, self.num_hiddens = vocab_size, num_hiddens
        self.num_blks = num_blks
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
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
    ) -> list[Any]:
        """The state before any target token.

        Args:
            enc_outputs: (B, T, D) encoder outputs.
            enc_valid_lens: None or (B,) source lengths.
        Returns:
            ``[enc_outputs, enc_valid_lens, [None] * num_blks, 0]``: the last
            two are the per-block key/value caches (filled by
            :meth:`forward`) and the number of target positions fed so far.
        Raises:
            ValueError/TypeError: if enc_outputs is not (B, T, D) or
                enc_valid_lens not (B,) in [0, T].
        """
        if not isinstance(enc_outputs, torch.Tensor):
            raise TypeError(
                "enc_outputs must be a torch.Tensor of shape (B, T, D), "
                f"got {type(enc_outputs).__name__}"
            )
        if enc_outputs.dim() != 3 or enc_outputs.shape[-1] != self.num_hiddens:
            raise ValueError(
                f"enc_outputs must have shape (B, T, {self.num_hiddens}), "
                f"got {tuple(enc_outputs.shape)}"
            )
        batch_size, num_steps = enc_outputs.shape[:2]
        _check_lens("enc_valid_lens", enc_valid_lens, batch_size, num_steps)
        return [enc_outputs, enc_valid_lens, [None] * self.num_blks, 0]

    def forward(
        self,
        X: torch.Tensor,
        state: list[Any],
        *,
        tgt_valid_lens: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, list[Any]]:
        """Scores for t new target positions, given the state of those before.

        Args:
            X: (B, t) target ids at positions offset .. offset + t - 1.
            state: from :meth:`init_state` or from the previous call; it is
                not modified.
            tgt_valid_lens: None or (B,) numbers of real target tokens in the
                whole target, counted from position 0 (so the same tensor
                serves every step). Under the causal mask, padding at the end
                of a target cannot reach a real position; this only changes
                the outputs at padded positions (as ``tgt_key_padding_mask``
                does in ``torch.nn.Transformer``).
            need_weights: keep the attention weights (explicit path) or not
                (fused path, faster).
        Returns:
            Y (B, t, V) scores and the new state (offset + t positions
            cached).
        Raises:
            ValueError/TypeError: on a malformed X, state or tgt_valid_lens,
                or beyond max_len.
        """
        if (
            not isinstance(state, (list, tuple))
            or len(state) != 4
            or len(state[2]) != self.num_blks
        ):
            raise ValueError(
                "state must be [enc_outputs, enc_valid_lens, caches, offset] "
                "from init_state"
            )
        enc_outputs, enc_valid_lens, caches, offset = state
        _check_tokens("X", X, self.vocab_size)
        if X.shape[0] != enc_outputs.shape[0]:
            batch_size = enc_outputs.shape[0]
            raise ValueError(
                f"X must have shape (B, t) with B={batch_size} as in the "
                f"state, got {tuple(X.shape)}"
            )
        _check_lens("tgt_valid_lens", tgt_valid_lens, X.shape[0], None)
        if tgt_valid_lens is not None:
            # Only the k = offset + t positions fed so far exist as keys.
            tgt_valid_lens = tgt_valid_lens.clamp(max=offset + X.shape[1])
        embedded = self.embedding(X) * math.sqrt(self.num_hiddens)
        X = self.pos_encoding(embedded, offset)  # (B, t, D)
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
        enc_outputs, enc_valid_lens, caches, _ = state
        new_offset = offset + X.shape[1]
        return self.dense(X), [enc_outputs, enc_valid_lens, caches, new_offset]


# --------------------------------------------------------------- the model


class Transformer(EncoderDecoder):
    """The encoder–decoder Transformer: its encoder and decoder together.

    Args:
        src_vocab_size, tgt_vocab_size: source and target V.
        num_hiddens: D. ffn_num_hiddens: FFN width. num_heads: H.
        num_blks: blocks in each stack. dropout: everywhere.
        use_bias: biases in attention.
        max_len: longest source and target accepted.
    Attributes:
        encoder: a :class:`TransformerEncoder`.
        decoder: a :class:`TransformerDecoder`.
        need_weights: what :meth:`forward` does when not told: True keeps
            the attention weights (explicit path); False takes the fused
            path. A training loop that calls
            ``model(src, tgt_in, src_valid_len)`` never reads the weights,
            so set it to False there.
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
    ):
        sizes = (
            num_hiddens,
            ffn_num_hiddens,
            num_heads,
            num_blks,
            dropout,
            use_bias,
        )
        super().__init__(
            TransformerEncoder(src_vocab_size, *sizes, max_len=max_len),
            TransformerDecoder(tgt_vocab_size, *sizes, max_len=max_len),
        )
        self.need_weights = True

    def forward(
        self,
        enc_X: torch.Tensor,
        dec_X: torch.Tensor,
        enc_valid_lens: torch.Tensor | None = None,
        *,
        tgt_valid_lens: torch.Tensor | None = None,
        need_weights: bool | None = None,
    ) -> torch.Tensor:
        """Scores of every target position.

        Args:
            enc_X: (B, T) source ids. dec_X: (B, t) target ids.
            enc_valid_lens, tgt_valid_lens: None or (B,) lengths.
            need_weights: as in the encoder and decoder; None means the
                model's ``need_weights`` attribute.
        Returns:
            (B, t, V) scores.
        """
        if need_weights is None:
            need_weights = self.need_weights
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
