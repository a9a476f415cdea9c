"""A configurable decoder-only model: attention heads, norm, FFN and where the norm sits.

Chapter: "Training the modern block". The chapter's GPT
(:class:`course_pkg.models.gpt.GPT`) is post-norm, layer norm, ReLU FFN and full
multi-head attention. :class:`VariantBlock` keeps its cached, causal forward
and lets each of the four choices vary on its own:

- ``num_kv_heads``: key/value heads of the attention
  (:class:`course_pkg.nn.grouped_query.GroupedQueryAttention`; H is
  multi-head, 1 multi-query attention);
- ``norm``: ``"layer"`` (``nn.LayerNorm``) or ``"rms"``
  (:class:`course_pkg.nn.modern_blocks.RMSNorm`);
- ``ffn``: ``"relu"`` (:class:`course_pkg.nn.blocks.PositionWiseFFN`)
  or ``"swiglu"`` (:class:`course_pkg.nn.modern_blocks.SwiGLUFFN`);
- ``placement``: ``"post"``, ``norm(X + sublayer(X))`` as in the paper, or
  ``"pre"``, ``X + sublayer(norm(X))``; a pre-norm stack normalises once more
  before its output layer.

:class:`VariantGPT` is a :class:`~course_pkg.models.gpt.GPT` (same embedding,
positions, output layer, cache and forward contract, so
:func:`course_pkg.experiments.lm_translation.train_lm`, :func:`course_pkg.models.gpt.generate`
and :func:`course_pkg.experiments.lm_translation.translate_lm` take it) whose blocks are
:class:`VariantBlock`. With ``num_kv_heads=H``, ``norm="layer"``,
``ffn="relu"`` and ``placement="post"`` it computes what the GPT computes.

Shape letters (see the package docstring): ``B`` batch, ``Q`` positions fed
in one call, ``t`` positions fed so far, ``D`` width, ``H`` heads, ``G``
key/value heads, ``d`` = D / H, ``V`` vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_choice,
    check_features,
    check_sizes,
    check_tensor,
)
from course_pkg.models.gpt import GPT, GPTSettings
from course_pkg.nn.attention import KVCache
from course_pkg.nn.modern_blocks import (
    NORMS,
    PreNormEncoderBlock,
    check_block_options,
)

PLACEMENTS = ("post", "pre")


class VariantBlock(PreNormEncoderBlock):
    """A causal decoder-only block with a key/value cache and four options.

    Same submodules as :class:`course_pkg.nn.modern_blocks.PreNormEncoderBlock`
    (``attention``, ``norm1``, ``ffn``, ``norm2``, ``dropout``); what differs
    is :meth:`forward`, which is causal, takes a cache and puts the norms
    where ``placement`` says.

    Args:
        num_hiddens: D, divisible by num_heads.
        ffn_num_hiddens: hidden width of the FFN. num_heads: H.
        dropout: on the attention weights and each sublayer's output.
        use_bias: biases in the attention projections.
        num_kv_heads: G, dividing H (default H).
        norm: "layer" or "rms". ffn: "relu" or "swiglu".
        placement: "post" (norm after each residual sum) or "pre" (norm
            before each sublayer).
    Raises:
        TypeError/ValueError: on an unknown norm, ffn or placement, or head
            counts that do not divide.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float,
        use_bias: bool = False,
        *,
        num_kv_heads: int | None = None,
        norm: str = "layer",
        ffn: str = "relu",
        placement: str = "post",
    ):
        check_placement(placement)
        super().__init__(
            num_hiddens,
            ffn_num_hiddens,
            num_heads,
            dropout,
            use_bias,
            norm=norm,
            ffn=ffn,
            num_kv_heads=num_kv_heads,
        )
        self.placement = placement

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
            cache: None, or the cache of the t - Q positions before (keys and
                values (B, G, t - Q, d)).
            valid_lens: None, or (B,) numbers of real positions among the t.
            need_weights: keep the attention weights (True) or not; the
                grouped-query attention has one path either way.
        Returns:
            (B, Q, D) outputs and the cache extended by the new positions
            (keys and values (B, G, t, d)).
        Raises:
            TypeError/ValueError: if X is not a (B, Q, D) tensor.
        """
        _check_variant_block_forward(self, X)
        if self.placement == "pre":
            normed = self.norm1(X)
            cache = self.attention.cache(normed, normed, past=cache)
            attended = self.attention.attend(
                normed,
                cache,
                valid_lens,
                causal=True,
                need_weights=need_weights,
            )
            X = X + self.dropout(attended)
            return X + self.dropout(self.ffn(self.norm2(X))), cache
        cache = self.attention.cache(X, X, past=cache)
        attended = self.attention.attend(
            X, cache, valid_lens, causal=True, need_weights=need_weights
        )
        X = self.norm1(X + self.dropout(attended))
        return self.norm2(X + self.dropout(self.ffn(X))), cache


def _check_variant_block_forward(block: VariantBlock, X: object) -> None:
    """X a float (B, Q, D) tensor of the block's width, dtype and device."""
    shape = f"(B, Q, {block.num_hiddens})"
    check_tensor("X", X, 3, shape)
    check_features("X", X, block.num_hiddens, block)


class VariantGPT(GPT):
    """The course's GPT with :class:`VariantBlock` blocks.

    The GPT's constructor builds the embedding, the positions, the blocks
    and the output layer (and checks the sizes); this one hands it the
    factories of its own blocks and, for ``placement="pre"``, of an output
    layer that normalises first (``dense`` is then ``Sequential(norm,
    Linear)``).

    Args:
        vocab_size: V; the sizes after it, dropout, max_len, positional and
            use_bias as in :class:`course_pkg.models.gpt.GPT`.
        num_kv_heads: G; it, norm, ffn and placement as in
            :class:`VariantBlock`.
        make_block, make_head: as in :class:`~course_pkg.models.gpt.GPT`;
            given, they build the blocks and the output layer instead.
    Raises:
        TypeError/ValueError: on any argument GPT or VariantBlock refuses
            (placement, norm and ffn before anything is built).
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        max_len: int = 1000,
        *,
        positional: str = "sinusoidal",
        use_bias: bool = False,
        num_kv_heads: int | None = None,
        norm: str = "layer",
        ffn: str = "relu",
        placement: str = "post",
        make_block: Callable[[int], nn.Module] | None = None,
        make_head: Callable[[], nn.Module] | None = None,
    ):
        _check_variant_gpt_args(
            num_hiddens, ffn_num_hiddens, num_heads, dropout, num_kv_heads,
            norm, ffn, placement,
        )  # fmt: skip
        if make_block is None:

            def make_block(i: int) -> nn.Module:
                return VariantBlock(
                    num_hiddens, ffn_num_hiddens, num_heads, dropout,
                    use_bias, num_kv_heads=num_kv_heads, norm=norm, ffn=ffn,
                    placement=placement,
                )  # fmt: skip

        if make_head is None and placement == "pre":

            def make_head() -> nn.Module:
                return nn.Sequential(
                    NORMS[norm](num_hiddens),
                    nn.Linear(num_hiddens, vocab_size),
                )

        super().__init__(
            vocab_size,
            num_hiddens,
            ffn_num_hiddens,
            num_heads,
            num_blks,
            dropout,
            max_len,
            positional=positional,
            use_bias=use_bias,
            make_block=make_block,
            make_head=make_head,
        )
        self.num_kv_heads = self.blks[0].attention.num_kv_heads

    def kv_cache_numel(self, batch_size: int, num_steps: int) -> int:
        """Numbers the key/value cache holds for batch_size sequences of
        num_steps positions, all blocks together: 2 * N * B * T * G * d.

        Raises:
            TypeError/ValueError: if batch_size or num_steps is not an int
                >= 1.
        """
        check_sizes(batch_size=batch_size, num_steps=num_steps)
        return sum(
            blk.attention.kv_cache_numel(batch_size, num_steps)
            for blk in self.blks
        )

    def _cached_steps(self, keys: torch.Tensor, batch_size: int) -> int:
        """t - Q, read from the first block's cached keys (B, G, t - Q, d);
        refuses keys of another shape, batch or G (the list itself is
        checked by the GPT's ``_check_cache``)."""
        expected = (batch_size, self.num_kv_heads)
        if keys.dim() != 4 or tuple(keys.shape[:2]) != expected:
            raise ValueError(
                f"cache keys must have shape (B, G, t, d) with B={batch_size} "
                f"as in X and G={self.num_kv_heads}, got {tuple(keys.shape)}"
            )
        return keys.shape[2]


def _check_variant_gpt_args(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    dropout: object,
    num_kv_heads: object,
    norm: object,
    ffn: object,
    placement: object,
) -> None:
    """placement "post" or "pre"; norm and ffn known names; the block
    sizes (D divisible by H, G dividing H) and dropout in [0, 1)."""
    check_placement(placement)
    check_block_options(norm, ffn)
    check_block_sizes(
        num_hiddens, ffn_num_hiddens, num_heads, dropout, num_kv_heads
    )


def check_placement(placement: Any) -> None:
    """Refuse a placement other than "post" or "pre" (TypeError/ValueError)."""
    check_choice("placement", placement, PLACEMENTS)


@dataclass(frozen=True)
class VariantSettings(GPTSettings):
    """Sizes and budget shared by every variant of the chapter's experiments.

    The pretraining chapter's :class:`~course_pkg.models.gpt.GPTSettings`
    with 2 blocks, an FFN of width 64, a subset of the training pairs
    (num_train), 8 epochs and a seed, so that a model trains in a few
    seconds on one CPU core; test BLEU is computed on num_test test pairs.
    """

    ffn_num_hiddens: int = 64
    num_blks: int = 2
    lr_per_epoch: tuple[float, ...] = (0.02,) * 5 + (0.01, 0.005, 0.0025)
    seed: int = 0
    num_train: int = 2000
    num_test: int = 400
