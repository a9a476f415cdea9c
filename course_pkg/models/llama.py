"""Llama: the decoder-only model of open LLMs, built from the course's pieces.

Chapter: "Today's open models". A Llama (Touvron et al. 2023) is the
course's pre-norm GPT (:class:`course_pkg.models.variant_gpt.VariantGPT`
with ``placement="pre"``) with RMSNorm
(:class:`course_pkg.nn.modern_blocks.RMSNorm`), a SwiGLU FFN
(:class:`course_pkg.nn.modern_blocks.SwiGLUFFN`), grouped-query attention
(:class:`course_pkg.nn.grouped_query.GroupedQueryAttention`) whose queries and
keys are rotated by RoPE (:class:`course_pkg.nn.rotary.RotaryEmbedding`), no
position table, no biases, and an output layer that is not the token
embedding. Three options give its relatives:

- ``rope_type="llama3"``: Llama 3.1's frequency scaling
  (:class:`course_pkg.nn.rope_scaling.Llama3RotaryEmbedding`);
- ``qk_norm=True``: Qwen3's RMSNorm over each head's queries and keys,
  before the rotation;
- ``sliding_window=w``: Mistral's band, every query seeing its w latest
  positions (:func:`course_pkg.nn.sliding_window.sliding_window_attention`);
- ``num_experts=E``: every block's FFN a mixture of E SwiGLU experts
  (:class:`course_pkg.nn.moe.MoEFeedForward`): Mixtral, Qwen3-MoE;
- ``head_width=d``: heads of their own width, not D / H (Qwen3).

:func:`llama_from_hf` and :func:`llama_to_hf` convert the plain state dicts of
Hugging Face's ``LlamaForCausalLM``, ``Qwen3ForCausalLM``,
``MistralForCausalLM``, ``MixtralForCausalLM`` and ``Qwen3MoeForCausalLM``
(the package never imports ``transformers``). One
difference is not in the names: Hugging Face rotates the two halves of a
head (feature i with feature i + d/2, ``rotate_half``), the course
interleaved pairs (feature 2i with 2i + 1). The converters permute the rows
of the query and key projections within each head (and the QK-norm gains)
so that our pair i holds their features (i, i + d/2): the inverse of the
permutation Hugging Face applies to Meta's checkpoints. The scores are
unchanged, since queries and keys are permuted alike. The permutation needs
the head width, which is not in the weights: the converters take num_heads.
A head_dim that is not D / H (Qwen3's published models: 128) is the
``head_width`` option.

Shape letters (see the package docstring): ``B`` batch, ``Q`` positions fed
in one call, ``t`` positions fed so far, ``D`` width, ``H`` heads, ``G``
key/value heads, ``d`` = D / H, ``F`` FFN width, ``V`` vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_bool,
    check_choice,
    check_features,
    check_nonnegative_number,
    check_positive_int,
    check_probability,
    check_stack_args,
    check_tensor,
)
from course_pkg.models.hf_weights import (
    StateDict,
    _check_all_used,
    _check_state_dict,
    _count_blocks,
    _take,
)
from course_pkg.models.variant_gpt import VariantGPT
from course_pkg.nn.attention import KVCache
from course_pkg.nn.grouped_query import GroupedQueryAttention
from course_pkg.nn.modern_blocks import GeGLUFFN, RMSNorm, SwiGLUFFN
from course_pkg.nn.moe import (
    MoEFeedForward,
    _check_top_k,
    moe_from_hf,
    moe_to_hf,
)
from course_pkg.nn.rope_scaling import Llama3RotaryEmbedding, _check_llama3
from course_pkg.nn.rotary import RotaryEmbedding
from course_pkg.nn.sliding_window import (
    sliding_window_attention,
    sliding_window_mask,
)

ROPE_TYPES = ("default", "llama3")
# The FFN a block may take: name -> class.
GATED_FFNS = {"swiglu": SwiGLUFFN, "geglu": GeGLUFFN}


class _HeadNormLinear(nn.Linear):
    """A bias-free projection to num_heads * d features, then RMSNorm over
    each head's d features (Qwen3's q_norm / k_norm): (..., in_features) ->
    (..., num_heads * d). Its input is checked by the attention layer that
    calls it."""

    def __init__(
        self, in_features: int, num_heads: int, head_width: int, eps: float
    ):
        super().__init__(in_features, num_heads * head_width, bias=False)
        self.head_width = head_width
        self.norm = RMSNorm(head_width, eps)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        heads = super().forward(X).unflatten(-1, (-1, self.head_width))
        return self.norm._normalise(heads).flatten(-2)


class LlamaAttention(GroupedQueryAttention):
    """Grouped-query attention with RoPE and two options: QK-norm and a
    sliding window.

    A :class:`~course_pkg.nn.grouped_query.GroupedQueryAttention` without
    biases (``forward``, ``cache``, ``attend`` and their checks are
    its own). With ``qk_norm``, ``W_q`` and ``W_k`` are linear layers
    followed by an RMSNorm over each head's d outputs (gain ``W_q.norm.weight``
    (d,)), applied before the rotation. With ``sliding_window=w``, a query
    sees its w latest positions, itself included; the attention is then
    always causal, keeps no weights and takes no valid_lens.

    Args:
        num_hiddens: D, divisible by num_heads unless head_width is given.
        num_heads: H. num_kv_heads: G, dividing H (default H).
        head_width: d, even (default D / H, which must then be even); the
            heads together are H d wide (Qwen3, Gemma: not D).
        rotary: the embedding that rotates queries and keys (default plain
            RoPE of base 10000).
        qk_norm: Qwen3's RMSNorm of each head's queries and keys.
        norm_eps: eps of those norms.
        sliding_window: None, or w >= 1.
        dropout: on the attention weights; 0 with a window.
    Raises:
        TypeError/ValueError: on sizes that do not divide, an odd head
            width, a negative norm_eps, a window < 1, a window with dropout.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        *,
        rotary: RotaryEmbedding | None = None,
        qk_norm: bool = False,
        norm_eps: float = 1e-6,
        sliding_window: int | None = None,
        dropout: float = 0.0,
        head_width: int | None = None,
    ):
        head_width = _check_llama_attention_args(
            num_hiddens, num_heads, num_kv_heads, rotary, qk_norm, norm_eps,
            sliding_window, dropout, head_width,
        )  # fmt: skip
        super().__init__(
            num_hiddens,
            num_heads,
            dropout,
            False,
            num_kv_heads=num_kv_heads,
            rotary=rotary if rotary is not None else True,
            head_width=head_width,
        )
        if qk_norm:
            self.W_q = _HeadNormLinear(
                num_hiddens, num_heads, head_width, norm_eps
            )
            self.W_k = _HeadNormLinear(
                num_hiddens, self.num_kv_heads, head_width, norm_eps
            )
        self.qk_norm, self.sliding_window = qk_norm, sliding_window

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        causal: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """As GroupedQueryAttention's (queries (B, Q, D) -> (B, Q, D));
        with a window, causal must be True and valid_lens None (ValueError)."""
        self._check_window(valid_lens, causal)
        return super().forward(
            queries, keys, values, valid_lens, causal=causal,
            need_weights=need_weights,
        )  # fmt: skip

    def attend(
        self,
        queries: torch.Tensor,
        cache: KVCache,
        valid_lens: torch.Tensor | None = None,
        *,
        causal: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """As GroupedQueryAttention's (queries (B, Q, D), keys and values
        (B, G, K, d) -> (B, Q, D)); with a window, causal must be True and
        valid_lens None (ValueError)."""
        self._check_window(valid_lens, causal)
        return super().attend(
            queries, cache, valid_lens, causal=causal,
            need_weights=need_weights,
        )  # fmt: skip

    def _fused_attend(
        self, queries: torch.Tensor, cache: KVCache, causal: bool
    ) -> torch.Tensor:
        """scaled_dot_product_attention over the key/value heads, with the
        causal (and window) mask: queries (B, Q, D) -> (B, Q, D)."""
        keys, values = cache
        batch_size, num_queries = queries.shape[:2]
        num_keys = keys.shape[2]
        heads = self._split_heads(self.W_q(queries))  # (B, H, Q, d)
        heads = self.rotary._rotate(heads, num_keys - num_queries)
        mask, is_causal = None, False
        window = self.sliding_window
        if window is not None and num_keys <= window:
            window = None  # every key is in every query's window
        if causal and window is None and num_queries == num_keys:
            is_causal = True  # the kernel's own causal mask: no (Q, K) tensor
        elif causal and (num_queries > 1 or window is not None):
            mask = sliding_window_mask(
                num_queries, num_keys, window, heads.device
            )  # (Q, K); one new query without a window sees every key
        heads = F.scaled_dot_product_attention(
            heads, keys, values, attn_mask=mask, is_causal=is_causal,
            enable_gqa=True,
        )  # (B, H, Q, d)  # fmt: skip
        self.attention_weights = None
        return self.W_o(
            heads.transpose(1, 2).reshape(batch_size, num_queries, -1)
        )

    def _check_window(self, valid_lens: object, causal: object) -> None:
        if self.sliding_window is None:
            return
        if valid_lens is not None or causal is not True:
            raise ValueError(
                f"with sliding_window={self.sliding_window} the attention is "
                "causal and takes no valid_lens: causal must be True and "
                f"valid_lens None, got causal={causal!r} and valid_lens "
                f"{'None' if valid_lens is None else 'given'}"
            )

    def _attend(
        self,
        queries: torch.Tensor,
        cache: KVCache,
        valid_lens: torch.Tensor | None,
        causal: bool,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """GroupedQueryAttention's, or with a window the band of
        :func:`~course_pkg.nn.sliding_window.sliding_window_attention`:
        queries (B, Q, D), keys and values (B, G, K, d) -> (B, Q, D).
        need_weights=False without lengths or dropout takes PyTorch's fused
        kernel (no weights kept), as MultiHeadAttention's fused path."""
        if (
            not need_weights
            and valid_lens is None
            and not (self.training and self.attention.dropout.p)
        ):
            return self._fused_attend(queries, cache, causal)
        if self.sliding_window is None:
            return super()._attend(
                queries, cache, valid_lens, causal, need_weights
            )
        keys, values = cache
        batch_size, num_queries = queries.shape[:2]
        heads = self._split_heads(self.W_q(queries))  # (B, H, Q, d)
        heads = self.rotary._rotate(heads, keys.shape[2] - num_queries)
        heads = sliding_window_attention(
            heads, keys, values, self.sliding_window
        )  # (B, H, Q, d)
        self.attention_weights = None
        return self.W_o(
            heads.transpose(1, 2).reshape(
                batch_size, num_queries, self.num_hiddens
            )
        )


class LlamaBlock(nn.Module):
    """A pre-norm causal block of RMSNorm, :class:`LlamaAttention` and a
    gated FFN: X + attention(norm1(X)), then + ffn(norm2(.)).

    The pre-norm path of :class:`~course_pkg.models.variant_gpt.VariantBlock`
    (``norm="rms"``, ``ffn="swiglu"``, no biases) with the attention's
    options, built from its own parts: X (B, Q, D) and the cache of the
    t - Q positions before -> (B, Q, D) and the cache of t.

    Args:
        num_hiddens: D. ffn_num_hiddens: F. num_heads: H.
        num_kv_heads: G (default H).
        rotary, qk_norm, norm_eps, sliding_window, dropout, head_width: as
            in :class:`LlamaAttention` (dropout also on each sublayer's
            output).
        ffn: "swiglu" (:class:`~course_pkg.nn.modern_blocks.SwiGLUFFN`) or
            "geglu" (:class:`~course_pkg.nn.modern_blocks.GeGLUFFN`, Gemma).
        num_experts: None, or E: the FFN is then a mixture of E SwiGLU
            experts of width F (:class:`~course_pkg.nn.moe.MoEFeedForward`,
            Mixtral, Qwen3-MoE) with top_k experts a token and the gates
            renormalised when norm_topk_prob.
    Raises:
        TypeError/ValueError: as :class:`LlamaAttention`, or on a bad F,
            ffn or expert setting.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        *,
        rotary: RotaryEmbedding | None = None,
        qk_norm: bool = False,
        norm_eps: float = 1e-6,
        sliding_window: int | None = None,
        dropout: float = 0.0,
        head_width: int | None = None,
        ffn: str = "swiglu",
        num_experts: int | None = None,
        top_k: int = 2,
        norm_topk_prob: bool = True,
    ):
        head_width = _check_llama_block_args(
            num_hiddens, ffn_num_hiddens, num_heads, num_kv_heads, rotary,
            qk_norm, norm_eps, sliding_window, dropout, head_width, ffn,
            num_experts, top_k, norm_topk_prob,
        )  # fmt: skip
        super().__init__()
        self.num_hiddens = num_hiddens
        self.norm1 = RMSNorm(num_hiddens, norm_eps)
        self.attention = LlamaAttention(
            num_hiddens, num_heads, num_kv_heads, rotary=rotary,
            qk_norm=qk_norm, norm_eps=norm_eps,
            sliding_window=sliding_window, dropout=dropout,
            head_width=head_width,
        )  # fmt: skip
        self.norm2 = RMSNorm(num_hiddens, norm_eps)
        if num_experts is None:
            self.ffn = GATED_FFNS[ffn](ffn_num_hiddens, num_hiddens)
        else:
            self.ffn = MoEFeedForward(
                num_hiddens, ffn_num_hiddens, num_experts, top_k,
                norm_topk_prob=norm_topk_prob,
            )  # fmt: skip
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        X: torch.Tensor,
        cache: KVCache | None = None,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, KVCache]:
        """X (B, Q, D) at the new positions, the cache of those before
        (keys and values (B, G, t - Q, d)) and valid_lens (None or (B,)) ->
        (B, Q, D) and the cache of all t; need_weights: keep the attention
        weights or not. TypeError/ValueError if X is not (B, Q, D)."""
        _check_llama_block_forward(self, X)
        normed = self.norm1._normalise(X)
        cache = self.attention.cache(normed, normed, past=cache)
        attended = self.attention.attend(
            normed, cache, valid_lens, causal=True, need_weights=need_weights
        )
        X = X + self.dropout(attended)
        return X + self.dropout(self.ffn(self.norm2._normalise(X))), cache


def _check_llama_attention_args(
    num_hiddens: object,
    num_heads: object,
    num_kv_heads: object,
    rotary: object,
    qk_norm: object,
    norm_eps: object,
    sliding_window: object,
    dropout: object,
    head_width: object,
) -> int:
    """LlamaAttention's sizes and options, then rotary None or a
    RotaryEmbedding of the head width; returns the head width d."""
    head_width = _check_attention_options(
        num_hiddens, num_heads, num_kv_heads, qk_norm, norm_eps,
        sliding_window, dropout, head_width,
    )  # fmt: skip
    _check_rotary(rotary, head_width)
    return head_width


def _check_llama_block_args(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    num_kv_heads: object,
    rotary: object,
    qk_norm: object,
    norm_eps: object,
    sliding_window: object,
    dropout: object,
    head_width: object,
    ffn: object,
    num_experts: object,
    top_k: object,
    norm_topk_prob: object,
) -> int:
    """F an int >= 1; ffn one of GATED_FFNS; the expert settings; then the
    attention's sizes, options and rotary; returns the head width d."""
    check_positive_int("ffn_num_hiddens", ffn_num_hiddens)
    if ffn not in GATED_FFNS:
        raise ValueError(
            f"ffn must be one of {tuple(GATED_FFNS)}, got {ffn!r}"
        )
    _check_experts(ffn, num_experts, top_k, norm_topk_prob)
    head_width = _check_attention_options(
        num_hiddens, num_heads, num_kv_heads, qk_norm, norm_eps,
        sliding_window, dropout, head_width,
    )  # fmt: skip
    _check_rotary(rotary, head_width)
    return head_width


def _check_llama_block_forward(block: LlamaBlock, X: object) -> None:
    """X a float tensor (B, Q, D) on the block's device and dtype."""
    check_tensor("X", X, 3, f"(B, Q, {block.num_hiddens})")
    check_features("X", X, block.num_hiddens, block)


class Llama(VariantGPT):
    """A decoder-only Llama: token embedding, N :class:`LlamaBlock`, RMSNorm,
    and an output layer of its own.

    A :class:`~course_pkg.models.variant_gpt.VariantGPT`, so
    ``forward(X)`` (X (B, T) ids -> (B, T, V) scores),
    ``forward_with_cache(X, cache)`` and
    :func:`course_pkg.models.gpt.generate` work as for the course's GPT;
    the token embeddings are not scaled (``embedding_scale`` 1), there is
    no position table (RoPE inside the attention), and ``dense`` is
    ``Sequential(RMSNorm(D), Linear(D, V, bias=False))``.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: F.
        num_heads: H, dividing D (with D / H even unless head_width is
            given). num_blks: N.
        num_kv_heads: G, dividing H (default H).
        max_len: longest sequence accepted.
        dropout: on attention weights and sublayer outputs (0 in the
            published models; must be 0 with a sliding window).
        rope_base: RoPE's base (Llama 2: 10000, Llama 3: 500000).
        rope_type: "default" (plain RoPE) or "llama3" (Llama 3.1's scaling,
            with rope_factor, rope_low_freq_factor, rope_high_freq_factor and
            rope_original_max_len: see
            :func:`course_pkg.nn.rope_scaling.llama3_inverse_frequency`).
        qk_norm: Qwen3's RMSNorm of each head's queries and keys.
        sliding_window: None, or Mistral's window w >= 1.
        norm_eps: eps of every RMSNorm (Hugging Face's ``rms_norm_eps``).
        head_width: d, even (default D / H); Qwen3's published models have
            d = 128 whatever D / H is.
        num_experts, top_k, norm_topk_prob: every block's FFN a mixture of
            experts (Mixtral: 8 experts, 2 a token; Qwen3-MoE: 128 and 8),
            as in :class:`LlamaBlock`; F is then one expert's width.
    Raises:
        TypeError/ValueError: naming the argument, before anything is built.
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        num_kv_heads: int | None = None,
        max_len: int = 1000,
        dropout: float = 0.0,
        *,
        rope_base: float = 10000.0,
        rope_type: str = "default",
        rope_factor: float = 8.0,
        rope_low_freq_factor: float = 1.0,
        rope_high_freq_factor: float = 4.0,
        rope_original_max_len: int = 8192,
        qk_norm: bool = False,
        sliding_window: int | None = None,
        norm_eps: float = 1e-6,
        head_width: int | None = None,
        num_experts: int | None = None,
        top_k: int = 2,
        norm_topk_prob: bool = True,
    ):
        head_width, rotary = _check_llama_args(
            vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
            num_kv_heads, max_len, dropout, rope_base, rope_type,
            rope_factor, rope_low_freq_factor, rope_high_freq_factor,
            rope_original_max_len, qk_norm, sliding_window, norm_eps,
            head_width, num_experts, top_k, norm_topk_prob,
        )  # fmt: skip
        if rope_type == "llama3":
            rotary = Llama3RotaryEmbedding(
                head_width, rope_base, factor=rope_factor,
                low_freq_factor=rope_low_freq_factor,
                high_freq_factor=rope_high_freq_factor,
                original_max_len=rope_original_max_len,
            )  # fmt: skip

        def make_block(i: int) -> LlamaBlock:
            return LlamaBlock(
                num_hiddens, ffn_num_hiddens, num_heads, num_kv_heads,
                rotary=rotary, qk_norm=qk_norm, norm_eps=norm_eps,
                sliding_window=sliding_window, dropout=dropout,
                head_width=head_width, num_experts=num_experts, top_k=top_k,
                norm_topk_prob=norm_topk_prob,
            )  # fmt: skip

        super().__init__(
            vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
            dropout, max_len, positional="none", use_bias=False,
            num_kv_heads=num_kv_heads, norm="rms", ffn="swiglu",
            placement="pre", make_block=make_block,
            make_head=lambda: _norm_head(num_hiddens, vocab_size, norm_eps),
        )  # fmt: skip
        self.embedding_scale = 1.0
        self.rope_type, self.qk_norm = rope_type, qk_norm
        self.sliding_window = sliding_window

    @property
    def router_logits(self) -> list[torch.Tensor | None]:
        """Each block's router logits (N, E) of the last forward (None
        before one; :func:`course_pkg.nn.moe.load_balancing_loss` takes
        them); empty without experts."""
        return [
            blk.ffn.router_logits
            for blk in self.blks
            if isinstance(blk.ffn, MoEFeedForward)
        ]

    def _check_input(
        self,
        X: torch.Tensor,
        cache: list[KVCache] | None,
        valid_lens: torch.Tensor | None,
    ) -> int:
        """The GPT's checks; with a window, valid_lens must be None."""
        if self.sliding_window is not None and valid_lens is not None:
            raise ValueError(
                f"valid_lens must be None with sliding_window="
                f"{self.sliding_window} (the windowed attention takes no "
                "lengths)"
            )
        return super()._check_input(X, cache, valid_lens)


def _check_llama_args(
    vocab_size: object,
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    num_blks: object,
    num_kv_heads: object,
    max_len: object,
    dropout: object,
    rope_base: object,
    rope_type: object,
    rope_factor: object,
    rope_low_freq_factor: object,
    rope_high_freq_factor: object,
    rope_original_max_len: object,
    qk_norm: object,
    sliding_window: object,
    norm_eps: object,
    head_width: object,
    num_experts: object,
    top_k: object,
    norm_topk_prob: object,
) -> tuple[int, RotaryEmbedding]:
    """Llama's sizes, attention and expert options, rope_type in ROPE_TYPES,
    rope_base > 1 and the llama3 settings (checked whatever rope_type is);
    returns the head width d and the plain RoPE of rope_base."""
    check_stack_args(
        vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
        max_len, dropout=dropout,
    )  # fmt: skip
    head_width = _check_attention_options(
        num_hiddens, num_heads, num_kv_heads, qk_norm, norm_eps,
        sliding_window, dropout, head_width,
    )  # fmt: skip
    _check_experts("swiglu", num_experts, top_k, norm_topk_prob)
    check_choice("rope_type", rope_type, ROPE_TYPES)
    rotary = _checked_rotary(head_width, rope_base)
    try:  # checked whatever rope_type is: a bad value is a bad call
        _check_llama3(
            head_width, rope_base, rope_factor, rope_low_freq_factor,
            rope_high_freq_factor, rope_original_max_len,
        )  # fmt: skip
    except (TypeError, ValueError) as error:  # name our argument
        raise type(error)(f"rope_{error}") from None
    return head_width, rotary


def _norm_head(
    num_hiddens: int, vocab_size: int, norm_eps: float
) -> nn.Module:
    """The output layer of the pre-norm decoders (Llama, Gemma, DeepSeek):
    RMSNorm then Linear(D, V) without bias, (..., D) -> (..., V)."""
    return nn.Sequential(
        RMSNorm(num_hiddens, norm_eps),
        nn.Linear(num_hiddens, vocab_size, bias=False),
    )


def _check_rotary(rotary: object, head_width: int) -> None:
    """None or a RotaryEmbedding of head_width d (TypeError, ValueError)."""
    if rotary is not None and not isinstance(rotary, RotaryEmbedding):
        raise TypeError(
            "rotary must be a RotaryEmbedding or None, "
            f"got {type(rotary).__name__}"
        )
    if rotary is not None and rotary.head_width != head_width:
        raise ValueError(
            f"rotary must rotate head_width={head_width} features "
            f"(num_hiddens / num_heads), got {rotary.head_width}"
        )


def _checked_rotary(head_width: int, base: object) -> RotaryEmbedding:
    """Plain RoPE of the given base, refused (naming rope_base) if it is not
    a number > 1."""
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(
            f"rope_base must be a number > 1, got {type(base).__name__}"
        )
    if not 1 < base < float("inf"):
        raise ValueError(f"rope_base must be a finite number > 1, got {base}")
    return RotaryEmbedding(head_width, base)


def _check_attention_options(
    num_hiddens: object,
    num_heads: object,
    num_kv_heads: object,
    qk_norm: object,
    norm_eps: object,
    sliding_window: object,
    dropout: object,
    head_width: object = None,
) -> int:
    """The attention's sizes and options (TypeError, ValueError naming the
    argument); returns the head width d (head_width, or D / H)."""
    check_block_sizes(
        num_hiddens, None, num_heads, dropout, num_kv_heads, head_width
    )
    if head_width is None:
        head_width = num_hiddens // num_heads
        if head_width % 2:
            raise ValueError(
                f"num_hiddens / num_heads must be even (RoPE rotates pairs), "
                f"got num_hiddens={num_hiddens}, num_heads={num_heads}"
            )
    elif head_width % 2:
        raise ValueError(
            f"head_width must be even (RoPE rotates pairs), got {head_width}"
        )
    check_bool("qk_norm", qk_norm)
    check_nonnegative_number("norm_eps", norm_eps)
    if sliding_window is not None:
        check_positive_int("sliding_window", sliding_window)
        check_probability("dropout", dropout)
        if dropout:
            raise ValueError(
                f"dropout must be 0 with a sliding_window, got {dropout}"
            )
    return head_width


def _check_experts(
    ffn: str, num_experts: object, top_k: object, norm_topk_prob: object
) -> None:
    """The experts' settings, checked with or without experts (None): top_k
    an int >= 1 and norm_topk_prob a bool; with E experts, ffn "swiglu" and
    k <= E (TypeError, ValueError naming the argument)."""
    if num_experts is None:
        check_positive_int("top_k", top_k)
    else:
        if ffn != "swiglu":
            raise ValueError(
                f"ffn must be 'swiglu' with num_experts, got {ffn!r}"
            )
        _check_top_k(top_k, num_experts)
    check_bool("norm_topk_prob", norm_topk_prob)


# --------------------------------------------------------------- converters

# A block's layers: (ours under blks.{i}., Hugging Face's under
# model.layers.{i}.). The q/k projections and norms are permuted.
_ATTENTION_LAYERS = (
    ("attention.W_q", "self_attn.q_proj"),
    ("attention.W_k", "self_attn.k_proj"),
    ("attention.W_v", "self_attn.v_proj"),
    ("attention.W_o", "self_attn.o_proj"),
    ("attention.W_q.norm", "self_attn.q_norm"),
    ("attention.W_k.norm", "self_attn.k_norm"),
)
_FFN_LAYERS = (
    ("ffn.gate", "mlp.gate_proj"),
    ("ffn.up", "mlp.up_proj"),
    ("ffn.down", "mlp.down_proj"),
)
_BLOCK_LAYERS = (
    ("norm1", "input_layernorm"),
    *_ATTENTION_LAYERS,
    ("norm2", "post_attention_layernorm"),
    *_FFN_LAYERS,
)
_PERMUTED = ("attention.W_q", "attention.W_k")
_NORMS = ("attention.W_q.norm", "attention.W_k.norm")


def _pairs(
    num_blks: int, qk_norm: bool, experts: bool = False
) -> list[tuple[str, str]]:
    """(our name, Hugging Face's name) of every weight; with experts, the
    FFN's are left to :func:`course_pkg.nn.moe.moe_from_hf`."""
    pairs = [("embedding.weight", "model.embed_tokens.weight")]
    for i in range(num_blks):
        for ours, theirs in _BLOCK_LAYERS:
            if ours in _NORMS and not qk_norm:
                continue
            if experts and ours.startswith("ffn."):
                continue
            pairs.append(
                (
                    f"blks.{i}.{ours}.weight",
                    f"model.layers.{i}.{theirs}.weight",
                )
            )
    pairs += [
        ("dense.0.weight", "model.norm.weight"),
        ("dense.1.weight", "lm_head.weight"),
    ]
    return pairs


def _halves_to_pairs(weight: torch.Tensor, head_width: int) -> torch.Tensor:
    """Rows (or entries) of each head from Hugging Face's order (feature i
    pairs with i + d/2) to ours (feature 2i with 2i + 1): (n d, ...) ->
    (n d, ...)."""
    rest = weight.shape[1:]
    heads = weight.reshape(-1, 2, head_width // 2, *rest)
    return heads.transpose(1, 2).reshape(weight.shape).contiguous()


def _pairs_to_halves(weight: torch.Tensor, head_width: int) -> torch.Tensor:
    """The inverse of :func:`_halves_to_pairs`."""
    rest = weight.shape[1:]
    heads = weight.reshape(-1, head_width // 2, 2, *rest)
    return heads.transpose(1, 2).reshape(weight.shape).contiguous()


def llama_from_hf(
    state_dict: Mapping[str, torch.Tensor], num_heads: int
) -> StateDict:
    """A :class:`Llama` state dict from Hugging Face's.

    Args:
        state_dict: ``LlamaForCausalLM``, ``Qwen3ForCausalLM`` (with
            ``q_norm``/``k_norm``), ``MistralForCausalLM``,
            ``MixtralForCausalLM`` or ``Qwen3MoeForCausalLM`` (experts in
            every block) ``.state_dict()``, without biases.
        num_heads: H (not in the weights; with the query projection's H d
            rows it gives the head width d the rotation's permutation
            needs).
    Returns:
        {name: tensor} for ``Llama.load_state_dict``; the query and key
        projections (and QK-norm gains) permuted within each head from
        ``rotate_half``'s order to the course's pairs; each block's experts
        through :func:`course_pkg.nn.moe.moe_from_hf`.
    Raises:
        TypeError: if state_dict is not a mapping of str to tensors, or
            num_heads not an int.
        ValueError: naming a missing, left-over or misshapen tensor, or a
            num_heads that does not fit the weights.
    """
    return _convert(state_dict, num_heads, from_hf=True)


def llama_to_hf(
    state_dict: Mapping[str, torch.Tensor], num_heads: int
) -> StateDict:
    """Hugging Face's ``LlamaForCausalLM`` (``Qwen3ForCausalLM`` with
    QK-norm, ``MistralForCausalLM``; with experts ``MixtralForCausalLM`` or
    ``Qwen3MoeForCausalLM``, in transformers 5's fused layout) state dict
    from a :class:`Llama`'s: the inverse of :func:`llama_from_hf`, with its
    refusals.

    Args:
        state_dict: ``Llama.state_dict()``. num_heads: H.
    Returns:
        {name: tensor} for ``load_state_dict`` of Hugging Face's model.
    """
    return _convert(state_dict, num_heads, from_hf=False)


class _Names(NamedTuple):
    """Where one side's state dict keeps what a converter looks for; layer
    names are a block's, without its prefix and ``.weight``."""

    blocks: str  # pattern of a block's first norm, the block index its group
    block: str  # a block's prefix, "{}" its index
    embedding: str
    query: str
    key: str
    gate: str
    q_norm: str
    router: str
    ffn: str  # the FFN's prefix within a block

    def first(self, layer: str) -> str:
        """The name of block 0's weight of layer."""
        return f"{self.block.format(0)}{layer}.weight"


_OURS = _Names(
    r"blks\.(\d+)\.norm1\.weight", "blks.{}.", "embedding.weight",
    "attention.W_q", "attention.W_k", "ffn.gate", "attention.W_q.norm",
    "ffn.router", "ffn.",
)  # fmt: skip
_THEIRS = _Names(
    r"model\.layers\.(\d+)\.input_layernorm\.weight", "model.layers.{}.",
    "model.embed_tokens.weight", "self_attn.q_proj", "self_attn.k_proj",
    "mlp.gate_proj", "self_attn.q_norm", "mlp.gate", "mlp.",
)  # fmt: skip


def _anchor_sizes(
    state: StateDict, num_heads: object, names: _Names, experts: bool
) -> dict[str, int]:
    """:func:`_sizes` from the embedding and block 0's projections, named as
    on that side (no gate with experts)."""
    gate = None if experts else names.first(names.gate)
    return _sizes(
        state, num_heads, names.embedding, names.first(names.query),
        names.first(names.key), gate,
    )  # fmt: skip


def _convert(
    state_dict: Mapping[str, torch.Tensor], num_heads: int, from_hf: bool
) -> StateDict:
    """:func:`llama_from_hf` (from_hf) or :func:`llama_to_hf`: every tensor
    under the other side's name, the rotated ones permuted within each
    head, each block's experts through the mixture's own converter."""
    source = _check_state_dict("state_dict", state_dict)
    names, other = (_THEIRS, _OURS) if from_hf else (_OURS, _THEIRS)
    num_blks = _count_blocks(source, names.blocks)
    qk_norm = names.first(names.q_norm) in source
    experts = names.first(names.router) in source
    pairs = _pairs(num_blks, qk_norm, experts)
    sizes = _anchor_sizes(source, num_heads, names, experts)
    _check_shapes(source, pairs, sizes, ours=not from_hf)
    permute = _halves_to_pairs if from_hf else _pairs_to_halves
    if not experts:
        return _renamed(source, pairs, permute, sizes["d"], from_hf)
    rest, parts = _split_blocks(source, num_blks, names.block + names.ffn)
    result = _renamed(rest, pairs, permute, sizes["d"], from_hf)
    convert = moe_from_hf if from_hf else moe_to_hf
    for i, part in enumerate(parts):
        prefix = (other.block + other.ffn).format(i)
        result.update({prefix + k: v for k, v in convert(part).items()})
    return result


def _split_blocks(
    state: StateDict, num_blks: int, prefix: str
) -> tuple[StateDict, list[StateDict]]:
    """The tensors under prefix.format(i) for each block i, without the
    prefix, and the rest."""
    rest = dict(state)
    parts = []
    for i in range(num_blks):
        start = prefix.format(i)
        names = [name for name in rest if name.startswith(start)]
        parts.append({name[len(start) :]: rest.pop(name) for name in names})
    return rest, parts


def _renamed(
    source: StateDict,
    pairs: list[tuple[str, str]],
    permute: Callable[[torch.Tensor, int], torch.Tensor],
    head_width: int,
    forward: bool,
) -> StateDict:
    """Every tensor of source under its other name ((ours, theirs) pairs;
    theirs -> ours when forward), the rotated projections permuted within
    each head; a left-over tensor is refused."""
    result: StateDict = {}
    used: set[str] = set()
    for our_name, their_name in pairs:
        tensor = _take(source, their_name if forward else our_name, used)
        layer = _layer(our_name)
        if layer in _PERMUTED or layer in _NORMS:
            tensor = permute(tensor, head_width)
        result[our_name if forward else their_name] = tensor
    _check_all_used(source, used)
    return result


def _layer(our_name: str) -> str:
    """The layer a weight belongs to, without the block:
    "blks.3.ffn.up.weight" -> "ffn.up", "dense.0.weight" -> "dense.0"."""
    layer = our_name.removesuffix(".weight")
    return layer.split(".", 2)[-1] if layer.startswith("blks.") else layer


def _sizes(
    state: StateDict,
    num_heads: object,
    embedding: str,
    query_projection: str,
    key_projection: str,
    gate: str | None,
) -> dict[str, int]:
    """V, D, H, G, d and F from num_heads and four anchor tensors (F 0
    without a gate: experts) (ValueError naming one that is missing or does
    not fit)."""
    check_positive_int("num_heads", num_heads)
    anchors = (embedding, query_projection, key_projection, gate)
    for name in filter(None, anchors):
        if name not in state:
            raise ValueError(f"state_dict has no tensor {name!r}")
        if state[name].dim() != 2:
            raise ValueError(
                f"state_dict[{name!r}] must have 2 dimensions, got "
                f"shape {tuple(state[name].shape)}"
            )
    vocab_size, width = state[embedding].shape
    q_rows = state[query_projection].shape[0]  # H * d
    if q_rows % num_heads or (q_rows // num_heads) % 2:
        raise ValueError(
            f"num_heads={num_heads} must divide the {q_rows} rows of "
            f"state_dict[{query_projection!r}] into heads of even width"
        )
    head_width = q_rows // num_heads
    kv_rows = state[key_projection].shape[0]
    if kv_rows % head_width or num_heads % max(kv_rows // head_width, 1):
        raise ValueError(
            f"state_dict[{key_projection!r}] must have G * d rows with "
            f"d={head_width} and G dividing num_heads={num_heads}, got "
            f"{kv_rows}"
        )
    return {
        "V": vocab_size, "D": width, "H": num_heads,
        "G": kv_rows // head_width, "d": head_width,
        "F": 0 if gate is None else state[gate].shape[0],
    }  # fmt: skip


def _check_shapes(
    state: StateDict,
    pairs: list[tuple[str, str]],
    sizes: dict[str, int],
    *,
    ours: bool,
) -> None:
    """Refuse a tensor whose shape does not fit the sizes (ValueError
    naming it); missing tensors are left to ``_take``."""
    V, D, F = sizes["V"], sizes["D"], sizes["F"]
    q_rows, kv_rows = sizes["H"] * sizes["d"], sizes["G"] * sizes["d"]
    by_layer = {
        "embedding": (V, D), "norm1": (D,), "norm2": (D,),
        "post_norm1": (D,), "post_norm2": (D,),  # Gemma's
        "attention.W_q": (q_rows, D), "attention.W_k": (kv_rows, D),
        "attention.W_v": (kv_rows, D), "attention.W_o": (D, q_rows),
        "attention.W_q.norm": (sizes["d"],),
        "attention.W_k.norm": (sizes["d"],),
        "ffn.gate": (F, D), "ffn.up": (F, D), "ffn.down": (D, F),
        "dense.0": (D,), "dense.1": (V, D),
    }  # fmt: skip
    for our_name, their_name in pairs:
        name = our_name if ours else their_name
        if name not in state:
            continue
        want = by_layer[_layer(our_name)]
        got = tuple(state[name].shape)
        if got != want:
            raise ValueError(
                f"state_dict[{name!r}] must have shape {want} (V={V}, D={D}, "
                f"H={sizes['H']}, G={sizes['G']}, F={F}), got {got}"
            )
