"""The Transformer's building blocks: FFN, AddNorm, encoder and decoder block.

Chapter: "The Transformer". Post-norm blocks as in the paper (and in d2l):
every sublayer is followed by ``AddNorm``, i.e.
``LayerNorm(X + dropout(sublayer(X)))``; the feed-forward network uses ReLU.
Names and constructor arguments follow d2l, without its lazy layers. Two
keyword-only options give the published models' variants of the same pieces
(see :mod:`course_pkg.models.gpt2`): the FFN's ``activation`` (GELU in BERT and
GPT-2) and the layer norms' ``eps``. The stacks and the model that use
these blocks are in :mod:`course_pkg.models.transformer`; :class:`EmbeddingStack` is
what those stacks and the GPT start with.

Shape letters (see the package docstring): ``B`` batch, ``T`` source length,
``Q`` target positions fed in one call (the queries), ``t`` target positions
fed so far (cached ones included), ``D`` width, ``H`` heads.

The decoder's key/value cache. Under a causal mask a past position never
looks at a later one, so its keys and values in every block stay the same as
the target grows. :class:`DecoderState` therefore holds, per block, the
projected self-attention keys and values of the t positions fed so far and
the projected encoder outputs (which never change), plus ``offset``, the
number of positions fed, where the positional encoding resumes. Feeding a
target one token at a time then costs one position per step, and gives the
same scores as one call on the whole prefix.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_features,
    check_int,
    check_positive_number,
    check_probability,
    check_sizes,
    check_stack_args,
    check_str,
    check_valid_lens,
)
from course_pkg.nn.attention import KVCache, MultiHeadAttention

#: The FFN's activations: "relu" (the Transformer's), "gelu" (exact, with
#: erf: BERT's) and "gelu_tanh" (the tanh approximation: GPT-2's "gelu_new").
ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
}


def check_activation(activation: str) -> None:
    """Refuse an activation that is not one of :data:`ACTIVATIONS`' keys.

    Raises:
        TypeError/ValueError: if activation is not one of those strings.
    """
    check_str("activation", activation)
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {tuple(ACTIVATIONS)}, "
            f"got {activation!r}"
        )


def ffn_input_size(
    ffn_num_hiddens: int, ffn_num_outputs: int, input_size: int | None
) -> int:
    """A position-wise FFN's input width (default ffn_num_outputs, as inside
    a block), once its three widths are checked.

    Raises:
        TypeError/ValueError: if a width is not an int >= 1.
    """
    input_size = ffn_num_outputs if input_size is None else input_size
    check_sizes(
        ffn_num_hiddens=ffn_num_hiddens,
        ffn_num_outputs=ffn_num_outputs,
        input_size=input_size,
    )
    return input_size


@torch.no_grad()
def init_normal(module: nn.Module, std: float = 0.02) -> None:
    """The published models' initialisation (BERT, GPT-2), in place: every
    ``nn.Linear`` and ``nn.Embedding`` weight drawn from N(0, std^2), their
    biases 0, layer norms' weights 1 and biases 0.

    Args:
        module: the model; every submodule of those kinds is reset.
        std: the weights' standard deviation (0.02 in BERT and GPT-2).
    Raises:
        TypeError/ValueError: if module is not an nn.Module or std not a
            number > 0.
    """
    _check_init_normal(module, std)
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Embedding)):
            nn.init.normal_(layer.weight, std=std)
        if isinstance(layer, nn.LayerNorm) and layer.weight is not None:
            nn.init.ones_(layer.weight)
        if isinstance(layer, (nn.Linear, nn.LayerNorm)):
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


def _check_init_normal(module: object, std: object) -> None:
    """module an nn.Module; std a number > 0."""
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"module must be an nn.Module, got {type(module).__name__}"
        )
    check_positive_number("std", std)


class PositionWiseFFN(nn.Module):
    """The same two-layer MLP at every position: dense2(ReLU(dense1(X)))
    (ReLU, or the activation chosen).

    Args:
        ffn_num_hiddens: width of the hidden layer.
        ffn_num_outputs: output width (D in a block).
        input_size: input width (default ffn_num_outputs, as inside a
            Transformer block).
        activation: "relu" (default), "gelu" or "gelu_tanh"
            (:data:`ACTIVATIONS`).
    Raises:
        TypeError/ValueError: if a width is not an int >= 1 or the
            activation unknown.
    """

    def __init__(
        self,
        ffn_num_hiddens: int,
        ffn_num_outputs: int,
        *,
        input_size: int | None = None,
        activation: str = "relu",
    ):
        super().__init__()
        self.input_size = ffn_input_size(
            ffn_num_hiddens, ffn_num_outputs, input_size
        )
        check_activation(activation)
        self.dense1 = nn.Linear(self.input_size, ffn_num_hiddens)
        self.activation = ACTIVATIONS[activation]()
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (B, T, input_size) -> (B, T, ffn_num_outputs).

        Raises TypeError if X is not a float tensor of the model's dtype,
        ValueError if its last dimension is not input_size.
        """
        check_features("X", X, self.input_size, self)
        return self.dense2(self.activation(self.dense1(X)))


class AddNorm(nn.Module):
    """Residual connection then layer norm: LayerNorm(X + dropout(Y)).

    Args:
        norm_shape: the normalised shape, D for a Transformer.
        dropout: on the sublayer output Y.
        eps: the layer norm's, added to the variance (BERT: 1e-12).
    Raises:
        TypeError/ValueError: if norm_shape is not an int >= 1 (or a tuple of
            them), dropout not in [0, 1) or eps not a number > 0.
    """

    def __init__(
        self,
        norm_shape: int | tuple[int, ...],
        dropout: float,
        *,
        eps: float = 1e-5,
    ):
        super().__init__()
        _check_norm_args(norm_shape, dropout, eps)
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape, eps=eps)

    def forward(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """X (B, T, D) a sublayer's input, Y (B, T, D) its output -> (B, T, D).

        Raises TypeError if X or Y is not a float tensor of the model's
        dtype, ValueError if they differ in shape or do not end in norm_shape.
        """
        _check_residual(X, Y, self)
        return self.ln(X + self.dropout(Y))


class TransformerEncoderBlock(nn.Module):
    """Self-attention then the feed-forward network, each followed by AddNorm.

    Args:
        num_hiddens: D, divisible by num_heads.
        ffn_num_hiddens: hidden width of the FFN. num_heads: H.
        dropout: everywhere. use_bias: biases in the attention projections.
        activation: the FFN's (:data:`ACTIVATIONS`). eps: the norms'.
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
        *,
        activation: str = "relu",
        eps: float = 1e-5,
    ):
        super().__init__()
        _check_transformer_encoder_block_args(
            num_hiddens, ffn_num_hiddens, num_heads, dropout, activation, eps
        )
        self.attention = MultiHeadAttention(
            num_hiddens, num_heads, dropout, use_bias
        )
        self.addnorm1 = AddNorm(num_hiddens, dropout, eps=eps)
        self.ffn = PositionWiseFFN(
            ffn_num_hiddens, num_hiddens, activation=activation
        )
        self.addnorm2 = AddNorm(num_hiddens, dropout, eps=eps)

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
        check_features("X", X, self.ffn.input_size, self)
        Y = self.addnorm1(
            X, self.attention(X, X, X, valid_lens, need_weights=need_weights)
        )
        return self.addnorm2(Y, self.ffn(Y))


def _check_transformer_encoder_block_args(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    dropout: object,
    activation: object,
    eps: object,
) -> None:
    """Sizes ints >= 1 with num_heads dividing num_hiddens, dropout in
    [0, 1), activation a key of :data:`ACTIVATIONS`, eps a number > 0."""
    check_block_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
    check_activation(activation)
    check_positive_number("eps", eps)


class EmbeddingStack(nn.Module):
    """What every stack that reads token ids starts with: sizes checked and
    kept, and the token embedding.

    :class:`course_pkg.models.transformer.TransformerEncoder`,
    :class:`course_pkg.models.transformer.TransformerDecoder` and
    :class:`course_pkg.models.gpt.GPT` call this first, then build their positions
    and blocks (``pos_encoding``, ``blks``): in that order, which fixes the
    random initialisation. They take the sizes in d2l's order and hand
    them on as one tuple.

    Args:
        sizes: (vocab_size V, num_hiddens D, ffn_num_hiddens, num_heads H,
            num_blks), ints >= 1; the FFN width and H are only checked here.
        dropout: in [0, 1). max_len: longest sequence accepted, >= 1.
    Attributes:
        vocab_size, num_hiddens, num_blks, max_len: as given.
        embedding: ``nn.Embedding(V, D)``, ids (B, T) -> (B, T, D).
        need_weights: None (keep the attention weights in eval mode only),
            True or False; what ``forward`` does when not told
            (:func:`course_pkg.nn.attention.resolve_need_weights`).
    Raises:
        TypeError/ValueError: naming the size that is not an int >= 1, or
            dropout outside [0, 1).
    """

    def __init__(
        self,
        sizes: tuple[int, int, int, int, int],
        dropout: float,
        max_len: int,
    ):
        super().__init__()
        check_stack_args(*sizes, max_len, dropout=dropout)
        vocab_size, num_hiddens, _, _, num_blks = sizes
        self.vocab_size, self.num_hiddens = vocab_size, num_hiddens
        self.num_blks, self.max_len = num_blks, max_len
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.need_weights: bool | None = None


class BlockCache(NamedTuple):
    """What one decoder block keeps between calls.

    ``self_attention`` holds the keys and values of the t target positions
    fed so far, (B, t, D) each; ``cross_attention`` the projected encoder
    outputs, (B, T, D) each.
    """

    self_attention: KVCache
    cross_attention: KVCache


class DecoderState(NamedTuple):
    """The state a :class:`course_pkg.models.transformer.TransformerDecoder` passes
    from one call to the next.

    ``enc_outputs`` (B, T, D) are the encoder outputs, ``enc_valid_lens``
    None or (B,) the source lengths, ``caches`` one :class:`BlockCache` per
    block (None before the first call), and ``offset`` the number t of
    target positions fed so far.
    """

    enc_outputs: torch.Tensor
    enc_valid_lens: torch.Tensor | None
    caches: tuple[BlockCache | None, ...]
    offset: int


class TransformerDecoderBlock(nn.Module):
    """Masked self-attention, cross-attention, FFN; each followed by AddNorm.

    Args:
        num_hiddens: D. ffn_num_hiddens: FFN width. num_heads: H.
        dropout: everywhere. use_bias: biases in the attention projections.
        i: this block's index in the decoder (its entry of ``state.caches``).
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
        _check_transformer_decoder_block_args(
            num_hiddens, ffn_num_hiddens, num_heads, dropout, i
        )
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
        state: DecoderState,
        *,
        tgt_valid_lens: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, DecoderState]:
        """Decode Q new positions: X (B, Q, D) -> (B, Q, D), new state.

        Args:
            state: a :class:`DecoderState`; ``state.caches[self.i]`` is this
                block's (the new state's also holds the new positions).
            tgt_valid_lens: None or (B,) real target tokens, at most t.
            need_weights: keep the weights (explicit path) or not (fused).
        """
        self_kv, cross_kv = self._caches(X, state, tgt_valid_lens)
        attended = self.attention1.attend(
            X, self_kv, tgt_valid_lens, causal=True, need_weights=need_weights
        )  # masked self-attention over the t positions so far
        Y = self.addnorm1(X, attended)
        attended = self.attention2.attend(
            Y, cross_kv, state.enc_valid_lens, need_weights=need_weights
        )  # cross-attention over the encoder outputs
        Z = self.addnorm2(Y, attended)
        caches = list(state.caches)
        caches[self.i] = BlockCache(self_kv, cross_kv)
        output = self.addnorm3(Z, self.ffn(Z))  # (B, Q, D)
        return output, state._replace(caches=tuple(caches))

    def _caches(
        self,
        X: torch.Tensor,
        state: DecoderState,
        tgt_valid_lens: torch.Tensor | None = None,
    ) -> tuple[KVCache, KVCache]:
        """Self-attention keys/values of the t positions so far (the new X
        appended) and the cross-attention's projected encoder outputs, once
        X, state and tgt_valid_lens are checked."""
        check_features("X", X, self.ffn.input_size, self)
        _check_state(state, self.i)
        check_valid_lens(
            "tgt_valid_lens", tgt_valid_lens, X.shape[0], None, like=("X", X)
        )
        cache = state.caches[self.i]
        if cache is None:
            enc_outputs = state.enc_outputs
            return self.attention1.cache(X, X), self.attention2.cache(
                enc_outputs, enc_outputs
            )
        return (
            self.attention1.cache(X, X, past=cache.self_attention),
            cache.cross_attention,
        )


def _check_transformer_decoder_block_args(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    dropout: object,
    i: object,
) -> None:
    """Sizes ints >= 1 with num_heads dividing num_hiddens, dropout in
    [0, 1), i a block index (an int >= 0)."""
    check_block_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
    check_int("i", i)
    if i < 0:
        raise ValueError(f"i must be a block index >= 0, got {i}")


def _check_state(state: DecoderState, i: int) -> None:
    """Refuse a state that is not a DecoderState with a cache entry for
    block i (TypeError, ValueError), before any computation."""
    if not isinstance(state, DecoderState):
        raise TypeError(
            f"state must be a DecoderState, got {type(state).__name__}"
        )
    if not 0 <= i < len(state.caches):
        raise ValueError(
            f"state.caches has {len(state.caches)} entries, so block index "
            f"i={i} is out of range (state from a decoder with fewer blocks?)"
        )


def _check_norm_args(
    norm_shape: int | tuple[int, ...], dropout: float, eps: object
) -> None:
    """AddNorm's arguments: norm_shape an int >= 1 or a tuple of them,
    dropout in [0, 1), eps a number > 0 (TypeError, ValueError)."""
    shape = norm_shape if isinstance(norm_shape, tuple) else (norm_shape,)
    check_sizes(**{f"norm_shape[{i}]": n for i, n in enumerate(shape)})
    check_probability("dropout", dropout)
    check_positive_number("eps", eps)


def _check_residual(
    X: torch.Tensor, Y: torch.Tensor, add_norm: AddNorm
) -> None:
    """X and Y: float tensors of one shape (B, T, D) ending in the norm's
    shape, of the layer's dtype and on its device (TypeError, ValueError)."""
    for name, tensor in (("X", X), ("Y", Y)):
        check_features(name, tensor, add_norm.ln.normalized_shape, add_norm)
    if X.shape != Y.shape:
        raise ValueError(
            "X and Y must have the same shape, "
            f"got {tuple(X.shape)} and {tuple(Y.shape)}"
        )
