"""DeepSeek-V3: multi-head latent attention and a mixture of experts with shared
experts, built from the course's pieces.

Chapter: "Today's open models". A
DeepSeek-V3 (DeepSeek-AI 2024) block is pre-norm, X + MLA(RMSNorm(X)), then
+ FFN(RMSNorm(.)), with
:class:`~course_pkg.nn.latent_attention.MultiHeadLatentAttention` (the
cache holds a latent and one rotated key a position) and, after the first
``num_dense`` blocks, :class:`~course_pkg.nn.moe.DeepSeekMoE` (shared
experts, a sigmoid router with a balancing bias on its choice, groups of
experts) in place of the SwiGLU FFN. Token embeddings are not scaled; a final
RMSNorm and an untied output layer give the scores. (The published model also
has a multi-token prediction module for training and YaRN's RoPE scaling for
its 128K context; neither is built here.)

:func:`deepseek_from_hf` and :func:`deepseek_to_hf` convert the state dicts
of Hugging Face's ``DeepseekV3ForCausalLM`` with ``rope_interleave=True``
(its default, the published layout): that RoPE rotates pairs of neighbouring
features, as the course's does, so only names change.

Shape letters (see the package docstring): ``B`` batch, ``Q`` positions fed
in one call, ``t`` positions fed so far, ``D`` width, ``V`` vocabulary
size, ``r`` the latent width.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from course_pkg.checks import (
    check_features,
    check_nonnegative_number,
    check_positive_int,
    check_positive_number,
    check_sizes,
    check_stack_args,
)
from course_pkg.models.gpt import GPT
from course_pkg.models.hf_weights import (
    StateDict,
    _check_all_used,
    _check_state_dict,
    _count_blocks,
    _take,
)
from course_pkg.models.llama import _FFN_LAYERS, _OURS, _THEIRS, _norm_head
from course_pkg.nn.latent_attention import (
    LatentCache,
    MultiHeadLatentAttention,
    _check_options,
)
from course_pkg.nn.modern_blocks import RMSNorm, SwiGLUFFN
from course_pkg.nn.moe import (
    DeepSeekMoE,
    _check_deepseek,
    moe_from_hf,
    moe_to_hf,
)
from course_pkg.nn.rotary import RotaryEmbedding


class DeepSeekBlock(nn.Module):
    """A pre-norm block of multi-head latent attention and a SwiGLU FFN or a
    :class:`~course_pkg.nn.moe.DeepSeekMoE`: X + attention(norm1(X)), then
    + ffn(norm2(.)).

    Args:
        num_hiddens: D. attention: the block's
            :class:`~course_pkg.nn.latent_attention.MultiHeadLatentAttention`.
        ffn: its FFN, (..., D) -> (..., D). norm_eps: the norms' eps.
    Raises:
        TypeError/ValueError: naming the argument that does not fit.
    """

    def __init__(
        self,
        num_hiddens: int,
        attention: MultiHeadLatentAttention,
        ffn: nn.Module,
        norm_eps: float = 1e-6,
    ):
        _check_deepseek_block_args(num_hiddens, attention, ffn, norm_eps)
        super().__init__()
        self.num_hiddens = num_hiddens
        self.norm1 = RMSNorm(num_hiddens, norm_eps)
        self.attention = attention
        self.norm2 = RMSNorm(num_hiddens, norm_eps)
        self.ffn = ffn

    def forward(
        self,
        X: torch.Tensor,
        cache: LatentCache | None = None,
        valid_lens: None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, LatentCache]:
        """X (B, Q, D) at the new positions and the cache of those before
        (latents (B, t - Q, r)) -> (B, Q, D) and the cache of all t.
        valid_lens must be None; need_weights=False takes the fused kernel.
        """
        _check_deepseek_block_forward(self, X, valid_lens)
        normed = self.norm1._normalise(X)
        cache = self.attention.cache(normed, cache)
        X = X + self.attention.attend(normed, cache, need_weights=need_weights)
        return X + self.ffn(self.norm2._normalise(X)), cache


def _check_deepseek_block_args(
    num_hiddens: object, attention: object, ffn: object, norm_eps: object
) -> None:
    """num_hiddens D an int >= 1; attention a MultiHeadLatentAttention D
    wide; ffn an nn.Module; norm_eps a number >= 0."""
    check_positive_int("num_hiddens", num_hiddens)
    if not isinstance(attention, MultiHeadLatentAttention):
        raise TypeError(
            "attention must be a MultiHeadLatentAttention, got "
            f"{type(attention).__name__}"
        )
    if attention.num_hiddens != num_hiddens:
        raise ValueError(
            f"attention must be {num_hiddens} wide (num_hiddens), got "
            f"{attention.num_hiddens}"
        )
    if not isinstance(ffn, nn.Module):
        raise TypeError(f"ffn must be an nn.Module, got {type(ffn).__name__}")
    check_nonnegative_number("norm_eps", norm_eps)


def _check_deepseek_block_forward(
    block: DeepSeekBlock, X: object, valid_lens: object
) -> None:
    """X a float tensor (..., D) on the block's device and dtype;
    valid_lens None."""
    check_features("X", X, block.num_hiddens, block)
    if valid_lens is not None:
        raise ValueError(
            "valid_lens must be None: DeepSeek's blocks take no lengths"
        )


class DeepSeekV3(GPT):
    """DeepSeek-V3's decoder: embedding, N :class:`DeepSeekBlock`, RMSNorm and
    an output layer.

    A :class:`~course_pkg.models.gpt.GPT`, so ``forward(X)`` (X (B, T) ids ->
    (B, T, V) scores), ``forward_with_cache`` (a cache of
    :class:`~course_pkg.nn.latent_attention.LatentCache`, one a block) and
    :func:`course_pkg.models.gpt.generate` work as for the course's GPT.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: F, the dense blocks'
            FFN width. num_heads: H. num_blks: N. max_len: longest sequence.
        kv_rank: r; it, q_rank, nope_width, rope_width and value_width as
            in :class:`~course_pkg.nn.latent_attention.MultiHeadLatentAttention`.
        rope_base: RoPE's base.
        num_dense: the first blocks with a plain SwiGLU FFN (3 in V3).
        expert_width: one expert's hidden width (2,048 in V3).
        num_experts: E; it, top_k, num_shared, num_groups, top_groups,
            routed_scale and norm_topk_prob as in
            :class:`~course_pkg.nn.moe.DeepSeekMoE` (V3: 256, 8, 1, 8, 4,
            2.5, True).
        norm_eps: eps of every RMSNorm.
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
        max_len: int = 1000,
        *,
        kv_rank: int,
        nope_width: int,
        rope_width: int,
        value_width: int,
        q_rank: int | None = None,
        rope_base: float = 10000.0,
        num_dense: int = 1,
        expert_width: int,
        num_experts: int,
        top_k: int,
        num_shared: int = 1,
        num_groups: int = 1,
        top_groups: int = 1,
        routed_scale: float = 1.0,
        norm_topk_prob: bool = True,
        norm_eps: float = 1e-6,
    ):
        _check_deepseek_v3_args(
            vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
            max_len, kv_rank, nope_width, rope_width, value_width, q_rank,
            rope_base, num_dense, expert_width, num_experts, top_k,
            num_shared, num_groups, top_groups, routed_scale,
            norm_topk_prob, norm_eps,
        )  # fmt: skip
        rotary = RotaryEmbedding(rope_width, rope_base)

        def attention() -> MultiHeadLatentAttention:
            return MultiHeadLatentAttention(
                num_hiddens, num_heads, kv_rank, nope_width=nope_width,
                rope_width=rope_width, value_width=value_width, q_rank=q_rank,
                rotary=rotary, norm_eps=norm_eps,
            )  # fmt: skip

        def experts() -> DeepSeekMoE:
            return DeepSeekMoE(
                num_hiddens, expert_width, num_experts, top_k,
                num_shared=num_shared, num_groups=num_groups,
                top_groups=top_groups, routed_scale=routed_scale,
                norm_topk_prob=norm_topk_prob,
            )  # fmt: skip

        def make_block(i: int) -> DeepSeekBlock:
            dense = SwiGLUFFN(ffn_num_hiddens, num_hiddens)
            ffn = dense if i < num_dense else experts()
            return DeepSeekBlock(num_hiddens, attention(), ffn, norm_eps)

        super().__init__(
            vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
            0.0, max_len, positional="none", make_block=make_block,
            make_head=lambda: _norm_head(num_hiddens, vocab_size, norm_eps),
        )  # fmt: skip
        self.embedding_scale = 1.0
        self.num_dense = num_dense

    @property
    def router_logits(self) -> list[torch.Tensor | None]:
        """Each mixture-of-experts block's router logits (N, E) of the last
        forward."""
        return [blk.ffn.router_logits for blk in self.blks[self.num_dense :]]

    def cache_numel(self, batch_size: int, num_steps: int) -> int:
        """Numbers the cache holds for batch_size sequences of num_steps
        positions, all blocks: N B T (r + dR)."""
        return sum(
            blk.attention.cache_numel(batch_size, num_steps)
            for blk in self.blks
        )

    def _check_input(
        self,
        X: torch.Tensor,
        cache: list[LatentCache] | None,
        valid_lens: torch.Tensor | None,
    ) -> int:
        """The GPT's checks; valid_lens must be None."""
        if valid_lens is not None:
            raise ValueError(
                "valid_lens must be None: DeepSeek's blocks take no lengths"
            )
        return super()._check_input(X, cache, valid_lens)


def _check_deepseek_v3_args(
    vocab_size: object,
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    num_blks: object,
    max_len: object,
    kv_rank: object,
    nope_width: object,
    rope_width: object,
    value_width: object,
    q_rank: object,
    rope_base: object,
    num_dense: object,
    expert_width: object,
    num_experts: object,
    top_k: object,
    num_shared: object,
    num_groups: object,
    top_groups: object,
    routed_scale: object,
    norm_topk_prob: object,
    norm_eps: object,
) -> None:
    """The stack's sizes; num_dense an int in [0, N]; the latent attention's
    widths; rope_base a finite number > 1; the experts' settings."""
    check_stack_args(
        vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
        max_len, dropout=0.0,
    )  # fmt: skip
    if not isinstance(num_dense, int) or isinstance(num_dense, bool):
        raise TypeError(
            f"num_dense must be an int, got {type(num_dense).__name__}"
        )
    if not 0 <= num_dense <= num_blks:
        raise ValueError(
            f"num_dense must be in [0, num_blks={num_blks}], got {num_dense}"
        )
    _check_options(
        num_hiddens, num_heads, kv_rank, nope_width, rope_width,
        value_width, q_rank, None, norm_eps,
    )  # fmt: skip
    check_positive_number("rope_base", rope_base)
    if not 1 < rope_base < math.inf:
        raise ValueError(
            f"rope_base must be a finite number > 1, got {rope_base}"
        )
    check_sizes(expert_width=expert_width)
    _check_deepseek(
        num_hiddens, expert_width, num_experts, top_k, num_shared,
        num_groups, top_groups, routed_scale, norm_topk_prob,
    )  # fmt: skip


# --------------------------------------------------------------- converters

# A block's attention and norms: (ours under blks.{i}., Hugging Face's under
# model.layers.{i}.); the low-rank query's three, or the plain query's one.
_BLOCK_LAYERS = (
    ("norm1", "input_layernorm"),
    ("attention.W_kv_down", "self_attn.kv_a_proj_with_mqa"),
    ("attention.kv_norm", "self_attn.kv_a_layernorm"),
    ("attention.W_kv_up", "self_attn.kv_b_proj"),
    ("attention.W_o", "self_attn.o_proj"),
    ("norm2", "post_attention_layernorm"),
)
_LOW_RANK_QUERY = (
    ("attention.W_q.0", "self_attn.q_a_proj"),
    ("attention.W_q.1", "self_attn.q_a_layernorm"),
    ("attention.W_q.2", "self_attn.q_b_proj"),
)
# A dense block's FFN is named as Llama's (_FFN_LAYERS); a mixture
# block's shared expert:
_SHARED = (
    ("ffn.shared.gate", "mlp.shared_experts.gate_proj"),
    ("ffn.shared.up", "mlp.shared_experts.up_proj"),
    ("ffn.shared.down", "mlp.shared_experts.down_proj"),
)


def _pairs(
    state: StateDict, num_blks: int, ours: bool
) -> list[tuple[str, str]]:
    """(our name, Hugging Face's name) of every tensor but the routed
    experts' and routers' (left to :func:`course_pkg.nn.moe.moe_from_hf`)."""
    low_rank = (
        "blks.0.attention.W_q.0.weight"
        if ours
        else "model.layers.0.self_attn.q_a_proj.weight"
    ) in state
    query = (
        _LOW_RANK_QUERY
        if low_rank
        else (("attention.W_q", "self_attn.q_proj"),)
    )
    pairs = [("embedding.weight", "model.embed_tokens.weight")]
    for i in range(num_blks):
        router = (
            f"blks.{i}.ffn.router.weight"
            if ours
            else f"model.layers.{i}.mlp.gate.weight"
        )
        ffn = _SHARED if router in state else _FFN_LAYERS
        for our, their in _BLOCK_LAYERS + query + ffn:
            pairs.append(
                (f"blks.{i}.{our}.weight", f"model.layers.{i}.{their}.weight")
            )
    pairs += [
        ("dense.0.weight", "model.norm.weight"),
        ("dense.1.weight", "lm_head.weight"),
    ]
    return pairs


def deepseek_from_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """A :class:`DeepSeekV3` state dict from Hugging Face's
    ``DeepseekV3ForCausalLM`` (``rope_interleave=True``).

    Returns:
        {name: tensor} for ``DeepSeekV3.load_state_dict``: names changed; each
        mixture-of-experts block's router, experts and choice bias
        (``e_score_correction_bias``) through
        :func:`course_pkg.nn.moe.moe_from_hf`.
    Raises:
        TypeError: if state_dict is not a mapping of str to tensors.
        ValueError: naming a missing, left-over or misshapen tensor.
    """
    return _convert(state_dict, from_hf=True)


def deepseek_to_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """Hugging Face's ``DeepseekV3ForCausalLM`` state dict from a
    :class:`DeepSeekV3`'s: the inverse of :func:`deepseek_from_hf`, with its
    refusals (the experts in transformers 5's fused layout)."""
    return _convert(state_dict, from_hf=False)


# A mixture block's choice bias under its FFN's prefix: (ours, theirs).
_CHOICE_BIAS = ("choice_bias", "gate.e_score_correction_bias")


def _convert(
    state_dict: Mapping[str, torch.Tensor], from_hf: bool
) -> StateDict:
    """:func:`deepseek_from_hf` (from_hf) or :func:`deepseek_to_hf`: each
    mixture-of-experts block's router, experts and choice bias through the
    mixture's own converter, every other tensor under its other name."""
    source = _check_state_dict("state_dict", state_dict)
    names, other = (_THEIRS, _OURS) if from_hf else (_OURS, _THEIRS)
    bias, other_bias = _CHOICE_BIAS[::-1] if from_hf else _CHOICE_BIAS
    convert = moe_from_hf if from_hf else moe_to_hf
    num_blks = _count_blocks(source, names.blocks)
    rest, result, used = dict(source), {}, set()
    for i in range(num_blks):
        if f"{names.block.format(i)}{names.router}.weight" not in source:
            continue  # a dense block
        prefix = (names.block + names.ffn).format(i)
        choice_bias = rest.pop(prefix + bias, None)
        if choice_bias is None:
            raise ValueError(f"state_dict has no tensor {prefix}{bias}")
        part = {
            name[len(prefix) :]: rest.pop(name)
            for name in list(rest)
            if name.startswith(prefix)
            and not _is_shared(name, prefix, from_hf)
        }
        other_prefix = (other.block + other.ffn).format(i)
        for name, tensor in convert(part).items():
            result[other_prefix + name] = tensor
        result[other_prefix + other_bias] = choice_bias
    for our, their in _pairs(source, num_blks, ours=not from_hf):
        old, new = (their, our) if from_hf else (our, their)
        result[new] = _take(rest, old, used)
    _check_all_used(rest, used)
    return result


def _is_shared(name: str, prefix: str, from_hf: bool) -> bool:
    """Whether a tensor under a block's FFN prefix is the shared expert's
    (renamed with the other tensors, not through the mixture's
    converter)."""
    if from_hf:
        return ".shared_experts." in name
    return name.startswith(prefix + "shared.")
