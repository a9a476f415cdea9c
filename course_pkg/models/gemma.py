"""Gemma 3 (text): Llama's pieces with local and global layers and four norms a block.

Chapter: "Today's open models". Gemma 3
(Gemma Team 2025) is a :class:`~course_pkg.models.llama.Llama` with QK-norm
and these changes:

- **local and global layers**: five of every six blocks attend within a
  sliding window (:func:`~course_pkg.nn.sliding_window.sliding_window_attention`,
  1,024 positions in the published models), every sixth to the whole
  prefix; the local blocks rotate with RoPE of base 10,000, the global
  ones with base 1,000,000 (in the larger models also divided by a linear
  scaling factor, :class:`~course_pkg.nn.rotary.RotaryEmbedding`'s
  ``position_scale``). Only the global layers' cache grows with the
  context;
- **sandwich norms**: each sublayer's output is normalised before it joins
  the residual stream, X + norm(attention(norm(X))), four RMSNorms a block
  (:class:`GemmaBlock`);
- **GeGLU**: the gated FFN with GELU (tanh form) for SiLU
  (:class:`~course_pkg.nn.modern_blocks.GeGLUFFN`);
- the token embeddings are multiplied by sqrt(D), and the output layer is
  the embedding matrix (tied);
- each head is ``head_width`` wide whatever D / H is (256 in most models).

Hugging Face's ``Gemma3ForCausalLM`` differs from this in two ways that
:func:`gemma_from_hf` takes care of: its RMSNorm multiplies by (1 + w), so
our gains are its weights plus one; and its scores are scaled by
``query_pre_attn_scalar ** -0.5``, which may differ from d ** -0.5 (27B:
168 against d = 128): the factor sqrt(d / query_pre_attn_scalar) goes into
the query norm's gains, since the rotation is linear. Its RoPE pairs
features (i, i + d / 2), the course (2i, 2i + 1), as for Llama.

Shape letters (see the package docstring): ``B`` batch, ``Q`` positions fed
in one call, ``t`` positions fed so far, ``D`` width, ``H`` heads, ``G``
key/value heads, ``d`` head width, ``F`` FFN width, ``V`` vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch

from course_pkg.checks import (
    check_features,
    check_positive_int,
    check_positive_number,
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
from course_pkg.models.llama import (
    _ATTENTION_LAYERS,
    _FFN_LAYERS,
    _OURS,
    _THEIRS,
    LlamaBlock,
    _anchor_sizes,
    _check_attention_options,
    _check_shapes,
    _halves_to_pairs,
    _layer,
    _norm_head,
    _pairs_to_halves,
)
from course_pkg.models.variant_gpt import VariantGPT
from course_pkg.nn.attention import KVCache
from course_pkg.nn.modern_blocks import RMSNorm
from course_pkg.nn.rotary import RotaryEmbedding


class GemmaBlock(LlamaBlock):
    """Gemma's block: a :class:`~course_pkg.models.llama.LlamaBlock` with
    QK-norm and a GeGLU FFN, whose two sublayer outputs are normalised
    before they join the residual stream.

    X + post_norm1(attention(norm1(X))), then + post_norm2(ffn(norm2(.))):
    X (B, Q, D) and the cache of the t - Q positions before -> (B, Q, D)
    and the cache of t.

    Args:
        num_hiddens: D. ffn_num_hiddens: F. num_heads: H.
        num_kv_heads: G (default H).
        rotary, norm_eps, sliding_window, dropout, head_width: as in
            :class:`~course_pkg.models.llama.LlamaAttention`.
    Raises:
        TypeError/ValueError: as :class:`~course_pkg.models.llama.LlamaBlock`.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        *,
        rotary: RotaryEmbedding | None = None,
        norm_eps: float = 1e-6,
        sliding_window: int | None = None,
        dropout: float = 0.0,
        head_width: int | None = None,
    ):
        super().__init__(
            num_hiddens, ffn_num_hiddens, num_heads, num_kv_heads,
            rotary=rotary, qk_norm=True, norm_eps=norm_eps,
            sliding_window=sliding_window, dropout=dropout,
            head_width=head_width, ffn="geglu",
        )  # fmt: skip
        self.post_norm1 = RMSNorm(num_hiddens, norm_eps)
        self.post_norm2 = RMSNorm(num_hiddens, norm_eps)

    def forward(
        self,
        X: torch.Tensor,
        cache: KVCache | None = None,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, KVCache]:
        """As :meth:`~course_pkg.models.llama.LlamaBlock.forward`, with the
        sublayer outputs normalised."""
        _check_gemma_block_forward(self, X)
        normed = self.norm1._normalise(X)
        cache = self.attention.cache(normed, normed, past=cache)
        attended = self.attention.attend(
            normed, cache, valid_lens, causal=True, need_weights=need_weights
        )
        X = X + self.dropout(self.post_norm1._normalise(attended))
        ffn_out = self.ffn(self.norm2._normalise(X))
        return X + self.dropout(self.post_norm2._normalise(ffn_out)), cache


def _check_gemma_block_forward(block: GemmaBlock, X: object) -> None:
    """X a float tensor (B, Q, D) on the block's device and dtype."""
    check_tensor("X", X, 3, f"(B, Q, {block.num_hiddens})")
    check_features("X", X, block.num_hiddens, block)


class Gemma3(VariantGPT):
    """Gemma 3's text model: embeddings times sqrt(D), N :class:`GemmaBlock`,
    RMSNorm, and the embedding matrix as output layer.

    Block i is global (whole prefix, RoPE of base ``rope_base`` with
    positions divided by ``rope_scale``) when (i + 1) is a multiple of
    ``global_every``, local otherwise (window ``sliding_window``, RoPE of
    base ``local_rope_base``). A
    :class:`~course_pkg.models.variant_gpt.VariantGPT`, so ``forward(X)`` (X
    (B, T) ids -> (B, T, V) scores), ``forward_with_cache`` and
    :func:`course_pkg.models.gpt.generate` work as for the course's GPT;
    valid_lens is refused (the windowed attention takes none).

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: F.
        num_heads: H, dividing D. num_blks: N.
        num_kv_heads: G, dividing H (default H).
        max_len: longest sequence accepted.
        dropout: 0 (Gemma's windowed attention takes none).
        head_width: d, even (default D / H).
        sliding_window: w >= 1, the local blocks' window.
        global_every: every how many blocks one is global (6 in Gemma 3).
        rope_base, rope_scale: the global blocks' RoPE base and position
            divisor (Gemma 3 4B and larger: 1e6 and 8).
        local_rope_base: the local blocks' RoPE base (10,000).
        norm_eps: eps of every RMSNorm.
    Attributes:
        global_blocks: the indices of the global blocks.
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
        head_width: int | None = None,
        sliding_window: int = 1024,
        global_every: int = 6,
        rope_base: float = 1e6,
        rope_scale: float = 1.0,
        local_rope_base: float = 1e4,
        norm_eps: float = 1e-6,
    ):
        head_width = _check_gemma3_args(
            vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
            num_kv_heads, max_len, dropout, head_width, sliding_window,
            global_every, rope_base, rope_scale, local_rope_base, norm_eps,
        )  # fmt: skip
        local = RotaryEmbedding(head_width, local_rope_base)
        whole = RotaryEmbedding(head_width, rope_base, rope_scale)
        global_blocks = [
            i for i in range(num_blks) if (i + 1) % global_every == 0
        ]

        def make_block(i: int) -> GemmaBlock:
            is_global = i in global_blocks
            return GemmaBlock(
                num_hiddens, ffn_num_hiddens, num_heads, num_kv_heads,
                rotary=whole if is_global else local, norm_eps=norm_eps,
                sliding_window=None if is_global else sliding_window,
                head_width=head_width,
            )  # fmt: skip

        super().__init__(
            vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
            dropout, max_len, positional="none", use_bias=False,
            num_kv_heads=num_kv_heads, norm="rms", ffn="swiglu",
            placement="pre", make_block=make_block,
            make_head=lambda: _norm_head(num_hiddens, vocab_size, norm_eps),
        )  # fmt: skip
        self.dense[1].weight = self.embedding.weight
        self.embedding_scale = math.sqrt(num_hiddens)
        self.global_blocks = global_blocks
        self.sliding_window = sliding_window

    def _apply(
        self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> Gemma3:
        # A move that cannot reuse the storage (to the meta device, say)
        # gives each module a new Parameter, which would untie the head.
        super()._apply(fn, recurse)
        self.dense[1].weight = self.embedding.weight
        return self

    def _check_input(
        self,
        X: torch.Tensor,
        cache: list[KVCache] | None,
        valid_lens: torch.Tensor | None,
    ) -> int:
        """The GPT's checks; valid_lens must be None."""
        if valid_lens is not None:
            raise ValueError(
                "valid_lens must be None: Gemma's local blocks attend "
                "within a window and take no lengths"
            )
        return super()._check_input(X, cache, valid_lens)


def _check_gemma3_args(
    vocab_size: object,
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    num_blks: object,
    num_kv_heads: object,
    max_len: object,
    dropout: object,
    head_width: object,
    sliding_window: object,
    global_every: object,
    rope_base: object,
    rope_scale: object,
    local_rope_base: object,
    norm_eps: object,
) -> int:
    """The stack's sizes and attention options; global_every an int >= 1;
    rope_scale > 0; both RoPE bases finite numbers > 1. Returns d."""
    check_stack_args(
        vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
        max_len, dropout=dropout,
    )  # fmt: skip
    head_width = _check_attention_options(
        num_hiddens, num_heads, num_kv_heads, True, norm_eps,
        sliding_window, dropout, head_width,
    )  # fmt: skip
    check_positive_int("global_every", global_every)
    check_positive_number("rope_scale", rope_scale)
    for name, base in (
        ("rope_base", rope_base),
        ("local_rope_base", local_rope_base),
    ):
        check_positive_number(name, base)
        if not 1 < base < math.inf:
            raise ValueError(f"{name} must be a finite number > 1, got {base}")
    return head_width


# --------------------------------------------------------------- converters

# A block's layers: (ours under blks.{i}., Hugging Face's under
# model.layers.{i}.). Norm gains are Hugging Face's weights plus one.
_BLOCK_LAYERS = (
    ("norm1", "input_layernorm"),
    *_ATTENTION_LAYERS,
    ("post_norm1", "post_attention_layernorm"),
    ("norm2", "pre_feedforward_layernorm"),
    ("post_norm2", "post_feedforward_layernorm"),
    *_FFN_LAYERS,
)
_NORMS = {"norm1", "attention.W_q.norm", "attention.W_k.norm", "post_norm1"}
_NORMS |= {"norm2", "post_norm2", "dense.0"}
_ROTATED = {"attention.W_q", "attention.W_k"}
_ROTATED |= {"attention.W_q.norm", "attention.W_k.norm"}


def _pairs(num_blks: int) -> list[tuple[str, str]]:
    """(our name, Hugging Face's name) of every weight."""
    pairs = [("embedding.weight", "model.embed_tokens.weight")]
    for i in range(num_blks):
        pairs += [
            (f"blks.{i}.{ours}.weight", f"model.layers.{i}.{theirs}.weight")
            for ours, theirs in _BLOCK_LAYERS
        ]
    pairs += [
        ("dense.0.weight", "model.norm.weight"),
        ("dense.1.weight", "lm_head.weight"),
    ]
    return pairs


def gemma_from_hf(
    state_dict: Mapping[str, torch.Tensor],
    num_heads: int,
    query_pre_attn_scalar: float | None = None,
) -> StateDict:
    """A :class:`Gemma3` state dict from Hugging Face's ``Gemma3ForCausalLM``.

    Args:
        state_dict: ``Gemma3ForCausalLM.state_dict()`` (``lm_head.weight``,
            tied, may be left out).
        num_heads: H (with the query projection's H d rows it gives d).
        query_pre_attn_scalar: the config's; None means d (no change).
    Returns:
        {name: tensor} for ``Gemma3.load_state_dict``: norm gains plus one,
        query and key projections and norms permuted within each head from
        ``rotate_half``'s order to the course's pairs, the query norms'
        gains times sqrt(d / query_pre_attn_scalar).
    Raises:
        TypeError: if state_dict is not a mapping of str to tensors, or a
            number is not one.
        ValueError: naming a missing, left-over or misshapen tensor, or a
            num_heads that does not fit the weights.
    """
    return _convert(state_dict, num_heads, query_pre_attn_scalar, True)


def gemma_to_hf(
    state_dict: Mapping[str, torch.Tensor],
    num_heads: int,
    query_pre_attn_scalar: float | None = None,
) -> StateDict:
    """Hugging Face's ``Gemma3ForCausalLM`` state dict from a
    :class:`Gemma3`'s: the inverse of :func:`gemma_from_hf`, with its
    refusals."""
    return _convert(state_dict, num_heads, query_pre_attn_scalar, False)


def _convert(
    state_dict: Mapping[str, torch.Tensor],
    num_heads: int,
    query_pre_attn_scalar: float | None,
    from_hf: bool,
) -> StateDict:
    """:func:`gemma_from_hf` (from_hf) or :func:`gemma_to_hf`: every tensor
    under the other side's name, through :func:`_from_hf` or
    :func:`_to_hf`."""
    source = _check_state_dict("state_dict", state_dict)
    names = _THEIRS if from_hf else _OURS
    if from_hf and names.embedding in source:  # the head is tied
        source.setdefault("lm_head.weight", source[names.embedding])
    pairs = _pairs(_count_blocks(source, names.blocks))
    sizes = _anchor_sizes(source, num_heads, names, experts=False)
    _check_shapes(source, pairs, sizes, ours=not from_hf)
    factor = _query_factor(sizes["d"], query_pre_attn_scalar)
    convert = _from_hf if from_hf else _to_hf
    result: StateDict = {}
    used: set[str] = set()
    for our_name, their_name in pairs:
        old, new = (
            (their_name, our_name) if from_hf else (our_name, their_name)
        )
        tensor = _take(source, old, used)
        result[new] = convert(tensor, _layer(our_name), sizes["d"], factor)
    _check_all_used(source, used)
    return result


def _from_hf(
    tensor: torch.Tensor, layer: str, head_width: int, factor: float
) -> torch.Tensor:
    """Hugging Face's weight of a layer as ours: norm gains plus one, the
    query norm's times factor, then the rotated rows to the course's
    pairs."""
    if layer in _NORMS:
        tensor = tensor + 1
    if layer == "attention.W_q.norm":
        tensor = tensor * factor
    if layer in _ROTATED:
        tensor = _halves_to_pairs(tensor, head_width)
    return tensor


def _to_hf(
    tensor: torch.Tensor, layer: str, head_width: int, factor: float
) -> torch.Tensor:
    """The inverse of :func:`_from_hf`, its steps in reverse order."""
    if layer in _ROTATED:
        tensor = _pairs_to_halves(tensor, head_width)
    if layer == "attention.W_q.norm":
        tensor = tensor / factor
    if layer in _NORMS:
        tensor = tensor - 1
    return tensor


def _query_factor(head_width: int, query_pre_attn_scalar: object) -> float:
    """sqrt(d / query_pre_attn_scalar), 1 for None (TypeError/ValueError
    naming query_pre_attn_scalar if it is not a number > 0)."""
    if query_pre_attn_scalar is None:
        return 1.0
    check_positive_number("query_pre_attn_scalar", query_pre_attn_scalar)
    return math.sqrt(head_width / query_pre_attn_scalar)
