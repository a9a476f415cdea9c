"""GPT-2 exactly as published, built from the course's pieces.

The course's :class:`course_pkg.models.gpt.GPT` and
:class:`course_pkg.models.bert.BERTEncoder` keep the blocks of "The Transformer";
the published models (Radford et al. 2019; Devlin et al. 2019) differ in a
few choices, each of which the course has a piece for:

==================  ======================  ========================  ======================
choice              course GPT and BERT     GPT-2 (:class:`GPT2`)     BERT (``PublishedBERT``)
==================  ======================  ========================  ======================
norm placement      post-norm:              pre-norm:                 post-norm
                    LN(X + f(X))            X + f(LN(X)), and a
                                            final LN after the
                                            last block
FFN activation      ReLU                    GELU, tanh                GELU (erf)
                                            approximation
positions           sinusoidal or learned   learned                   learned
                    (GPT), learned (BERT)
token embedding     times sqrt(D) (GPT)     as it is                  as it is, + segment,
                                                                      then LN
output layer        its own weights and     the token embedding's     (none: an encoder)
                    bias                    weights, no bias (tied)
layer-norm eps      1e-5                    1e-5                      1e-12
attention biases    off (GPT), on (BERT)    on                        on
initialisation      PyTorch's defaults      N(0, 0.02^2); residual    N(0, 0.02^2);
                                            outputs N(0, 0.02^2 /     biases 0
                                            (2 num_blks)); biases 0
pooler              none (a classifier      none                      tanh(dense(X[:, 0])),
                    reads <cls> itself)                               on <cls>
==================  ======================  ========================  ======================

The GPT-2 column is the paper's text as ``transformers``' ``GPT2LMHeadModel``
(and nanoGPT) build it; OpenAI's released code draws the position table with
std 0.01 and does not scale the residual outputs. The BERT column is
``transformers``' ``BertModel``; Google's original code uses the tanh GELU and
a truncated normal initialisation.

:class:`GPT2Block` is the pre-norm block with a causal, cached
self-attention (the course's :class:`~course_pkg.nn.attention.MultiHeadAttention`
with biases) and a GELU feed-forward network
(:class:`~course_pkg.nn.blocks.PositionWiseFFN` with
``activation="gelu_tanh"``). :class:`GPT2` is a :class:`~course_pkg.models.gpt.GPT`
with those blocks, learned positions, no embedding scale and a final layer
norm before an output layer tied to the token embedding, so it takes the
GPT's cache and :func:`course_pkg.models.gpt.generate` as they are.
:mod:`course_pkg.models.hf_weights` converts the weights of Hugging Face's models to these
classes and back.

Shape letters (see the package docstring): ``B`` batch, ``T`` sequence
length, ``Q`` positions fed in one call, ``t`` positions fed so far, ``D``
width, ``H`` heads, ``V`` vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_features,
    check_positive_number,
    check_sizes,
)
from course_pkg.models.gpt import GPT
from course_pkg.nn.attention import KVCache, MultiHeadAttention
from course_pkg.nn.blocks import PositionWiseFFN, init_normal

# GPT-2's initialisation: every weight N(0, INIT_STD^2).
INIT_STD = 0.02


class GPT2Block(nn.Module):
    """GPT-2's block: X + attention(LN(X)), then + FFN(LN(.)), causal, cached.

    Args:
        num_hiddens: D, divisible by num_heads.
        ffn_num_hiddens: hidden width of the FFN (4 D in GPT-2).
        num_heads: H. dropout: on the attention weights and on each
            sublayer's output.
        eps: the layer norms'.
    Raises:
        TypeError/ValueError: naming a size that is not an int >= 1, one
            that does not divide, dropout outside [0, 1) or eps <= 0.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float,
        *,
        eps: float = 1e-5,
    ):
        super().__init__()
        _check_gpt2_block_args(
            num_hiddens, ffn_num_hiddens, num_heads, dropout, eps
        )
        self.ln_1 = nn.LayerNorm(num_hiddens, eps=eps)
        self.attention = MultiHeadAttention(
            num_hiddens, num_heads, dropout, bias=True
        )
        self.ln_2 = nn.LayerNorm(num_hiddens, eps=eps)
        self.ffn = PositionWiseFFN(
            ffn_num_hiddens, num_hiddens, activation="gelu_tanh"
        )
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        X: torch.Tensor,
        cache: KVCache | None = None,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, KVCache]:
        """Run the block on Q new positions.

        Args:
            X: (B, Q, D) block inputs at the new positions.
            cache: None, or the keys and values (B, t - Q, D) of the
                positions before, projected from their normed inputs.
            valid_lens: None, or (B,) numbers of real positions among the t.
            need_weights: explicit attention path (keeps the weights) or
                fused path.
        Returns:
            (B, Q, D) outputs and the cache of all t positions.
        Raises:
            TypeError/ValueError: if X is not floats (B, Q, D) of the
                block's dtype and device.
        """
        check_features("X", X, self.ffn.input_size, self)
        normed = self.ln_1(X)
        cache = self.attention.cache(normed, normed, past=cache)
        attended = self.attention.attend(
            normed, cache, valid_lens, causal=True, need_weights=need_weights
        )  # (B, Q, D)
        X = X + self.dropout(attended)
        return X + self.dropout(self.ffn(self.ln_2(X))), cache


def _check_gpt2_block_args(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    dropout: object,
    eps: object,
) -> None:
    """Sizes D, F, H ints >= 1 with D divisible by H; dropout in [0, 1);
    eps a number > 0."""
    check_block_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
    check_positive_number("eps", eps)


class GPT2(GPT):
    """GPT-2: learned positions, pre-norm GELU blocks, a final layer norm and
    an output layer tied to the token embedding.

    Args:
        vocab_size: V. num_hiddens: D. num_heads: H. num_blks: number of
            blocks. max_len: number of positions (GPT-2: 1024).
        dropout: on the embedding sum, the attention weights and each
            sublayer's output.
        ffn_num_hiddens: FFN width (default 4 D).
        eps: the layer norms'.
    Attributes:
        embedding: (V, D) token embedding (``wte``); ``pos_encoding`` a
            :class:`~course_pkg.nn.positional.LearnedPositionalEncoding`
            (``wpe``); blks: :class:`GPT2Block` s.
        dense: ``Sequential(LayerNorm(D), Linear(D, V, bias=False))``, the
            final norm and the output layer, whose weight *is*
            ``embedding.weight``.
    Raises:
        TypeError/ValueError: naming the size, dropout or eps refused.
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        num_heads: int,
        num_blks: int,
        max_len: int,
        dropout: float = 0.0,
        ffn_num_hiddens: int | None = None,
        eps: float = 1e-5,
    ):
        ffn_num_hiddens = _check_gpt2_args(
            num_hiddens, num_heads, dropout, ffn_num_hiddens, eps
        )
        super().__init__(
            vocab_size,
            num_hiddens,
            ffn_num_hiddens,
            num_heads,
            num_blks,
            dropout,
            max_len,
            positional="learned",
            use_bias=True,
            make_block=lambda i: GPT2Block(
                num_hiddens, ffn_num_hiddens, num_heads, dropout, eps=eps
            ),
            make_head=lambda: nn.Sequential(
                nn.LayerNorm(num_hiddens, eps=eps),
                nn.Linear(num_hiddens, vocab_size, bias=False),
            ),
        )
        self.dense[1].weight = self.embedding.weight
        self.embedding_scale = 1.0
        self.reset_parameters()

    def _apply(
        self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> GPT2:
        # A move that cannot reuse the storage (to the meta device, say) gives
        # each module a new Parameter, which would untie the output layer.
        super()._apply(fn, recurse)
        self.dense[1].weight = self.embedding.weight
        return self

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2's initialisation: weights N(0, 0.02^2), biases 0, norms 1
        and 0 (:func:`~course_pkg.nn.blocks.init_normal`); the two
        projections that write into the residual stream (attention output,
        FFN output) N(0, (0.02 / sqrt(2 num_blks))^2), since each block adds
        two of them to the stream.
        """
        init_normal(self, INIT_STD)
        residual_std = INIT_STD / math.sqrt(2 * self.num_blks)
        for blk in self.blks:
            nn.init.normal_(blk.attention.W_o.weight, std=residual_std)
            nn.init.normal_(blk.ffn.dense2.weight, std=residual_std)


def _check_gpt2_args(
    num_hiddens: object,
    num_heads: object,
    dropout: object,
    ffn_num_hiddens: object,
    eps: object,
) -> int:
    """D an int >= 1; the block sizes with F (default 4 D, returned);
    dropout in [0, 1); eps a number > 0."""
    check_sizes(num_hiddens=num_hiddens)
    if ffn_num_hiddens is None:
        ffn_num_hiddens = 4 * num_hiddens
    check_block_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
    check_positive_number("eps", eps)
    return ffn_num_hiddens
