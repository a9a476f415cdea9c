"""The published configurations of today's open models, built from the
course's classes, and what a configuration costs: parameters (total and
active), key/value cache per token, arithmetic per token.

Chapter: "Today's open models". Each entry of :data:`PUBLISHED` holds the
sizes of a released checkpoint as its ``config.json`` gives them, written as
the arguments of the course's class (``Llama`` for Llama 3, Mistral, Qwen3,
Mixtral and Qwen3-MoE; ``Gemma3``; ``DeepSeekV3``; ``T5``; ``GPT2``), so
that :func:`build` makes the model itself, on the meta device (shapes, no
numbers), and :func:`parameter_counts` counts its parameters instead of
trusting a formula.

Letters: N blocks, D width, H query heads, G key/value heads, d head width,
w window, E experts, k experts per token, r DeepSeek's latent width, d_R its
rotary part, c a context length (tokens before the current one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from course_pkg.checks import check_positive_int
from course_pkg.models.deepseek import DeepSeekV3
from course_pkg.models.gemma import Gemma3
from course_pkg.models.gpt2 import GPT2
from course_pkg.models.llama import Llama
from course_pkg.models.t5 import T5
from course_pkg.nn.moe import DeepSeekMoE, MoEFeedForward


@dataclasses.dataclass(frozen=True)
class Published:
    """One released checkpoint: the course's class and its arguments.

    Attributes:
        family: the class that builds it (``Llama``, ``Gemma3``, ...).
        kwargs: the class's arguments at the published sizes.
        context: the longest context the checkpoint was released for.
        cite: the key of its paper in ``book/references.bib``.
    """

    family: Callable[..., nn.Module]
    kwargs: dict[str, Any]
    context: int
    cite: str

    def get(self, name: str, default: Any = None) -> Any:
        return self.kwargs.get(name, default)

    @property
    def num_blks(self) -> int:
        return self.kwargs["num_blks"]

    @property
    def head_width(self) -> int:
        """d: given, or D / H."""
        d = self.get("head_width")
        return (
            d
            if d is not None
            else self.get("num_hiddens") // self.get("num_heads")
        )


def _llama(vocab, D, F, H, N, G, context, cite, **extra) -> Published:
    kwargs = dict(
        vocab_size=vocab, num_hiddens=D, ffn_num_hiddens=F, num_heads=H,
        num_blks=N, num_kv_heads=G, max_len=context, **extra,
    )  # fmt: skip
    return Published(Llama, kwargs, context, cite)


# fmt: off
PUBLISHED: dict[str, Published] = {
    "GPT-2 small": Published(
        GPT2,
        dict(vocab_size=50257, num_hiddens=768, num_heads=12, num_blks=12,
             max_len=1024),
        1024, "radford2019language",
    ),
    "Llama 3.1 8B": _llama(
        128256, 4096, 14336, 32, 32, 8, 131072, "dubey2024llama3",
        rope_base=500000.0, rope_type="llama3", norm_eps=1e-5,
    ),
    "Mistral 7B": _llama(
        32000, 4096, 14336, 32, 32, 8, 32768, "jiang2023mistral",
        sliding_window=4096, norm_eps=1e-5,
    ),
    "Qwen3-8B": _llama(
        151936, 4096, 12288, 32, 36, 8, 40960, "yang2025qwen3",
        head_width=128, qk_norm=True, rope_base=1e6,
    ),
    "Gemma 3 27B": Published(
        Gemma3,
        dict(vocab_size=262208, num_hiddens=5376, ffn_num_hiddens=21504,
             num_heads=32, num_blks=62, num_kv_heads=16, max_len=131072,
             head_width=128, sliding_window=1024, global_every=6,
             rope_scale=8.0),
        131072, "gemmateam2025gemma3",
    ),
    "Mixtral 8x7B": _llama(
        32000, 4096, 14336, 32, 32, 8, 32768, "jiang2024mixtral",
        num_experts=8, top_k=2, rope_base=1e6, norm_eps=1e-5,
    ),
    "Qwen3-30B-A3B": _llama(
        151936, 2048, 768, 32, 48, 4, 40960, "yang2025qwen3",
        head_width=128, qk_norm=True, rope_base=1e6, num_experts=128,
        top_k=8,
    ),
    "DeepSeek-V3": Published(
        DeepSeekV3,
        dict(vocab_size=129280, num_hiddens=7168, ffn_num_hiddens=18432,
             num_heads=128, num_blks=61, max_len=163840, kv_rank=512,
             nope_width=128, rope_width=64, value_width=128, q_rank=1536,
             num_dense=3, expert_width=2048, num_experts=256, top_k=8,
             num_shared=1, num_groups=8, top_groups=4, routed_scale=2.5),
        163840, "deepseekai2024v3",
    ),
    "T5 v1.1 base": Published(
        T5,
        dict(vocab_size=32128, num_hiddens=768, ffn_num_hiddens=2048,
             num_heads=12, head_width=64, num_blks=12),
        512, "raffel2020exploring",
    ),
}
# fmt: on
"""The released checkpoints, by name; sizes from each one's ``config.json``
(Gemma 3: the text model; DeepSeek-V3: without its multi-token-prediction
module; T5: ``num_blks`` blocks in each of its two stacks, trained on inputs
of 512 tokens)."""


def _published(name: object) -> Published:
    if isinstance(name, Published):
        return name
    if not isinstance(name, str):
        raise TypeError(
            f"name must be a str or a Published, got {type(name).__name__}"
        )
    if name not in PUBLISHED:
        raise ValueError(
            f"name must be one of {list(PUBLISHED)}, got {name!r}"
        )
    return PUBLISHED[name]


def build(name: str | Published, num_blks: int | None = None) -> nn.Module:
    """The course's model at a published configuration, on the meta device
    (every shape, no memory, no numbers).

    Args:
        name: a key of :data:`PUBLISHED`, or a :class:`Published` of one's
            own (every function of this module takes either).
        num_blks: build only this many blocks (default: all).
    Raises:
        TypeError/ValueError: an unknown name, or num_blks not an int in
            [1, N] (for DeepSeek-V3, more than its dense blocks).
    """
    model = _check_build(name, num_blks)
    kwargs = dict(model.kwargs)
    if num_blks is not None:
        kwargs["num_blks"] = num_blks
    with torch.device("meta"):
        return model.family(**kwargs)


def _check_build(name: object, num_blks: object) -> Published:
    """name a key of PUBLISHED or a Published (returned); num_blks None or
    an int in [num_dense + 1, N]."""
    model = _published(name)
    if num_blks is not None:
        low = model.kwargs.get("num_dense", 0) + 1
        if not isinstance(num_blks, int) or isinstance(num_blks, bool):
            raise TypeError(
                f"num_blks must be an int, got {type(num_blks).__name__}"
            )
        if not low <= num_blks <= model.num_blks:
            raise ValueError(
                f"num_blks must be in [{low}, {model.num_blks}], "
                f"got {num_blks}"
            )
    return model


def _looked_up(model: nn.Module) -> set[int]:
    """The ids of the embedding tables that no product uses: those not
    shared with a linear layer (a tied output layer multiplies by its
    table)."""
    linear = {
        id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)
    }
    return {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, nn.Embedding) and id(m.weight) not in linear
    }


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(total, active) parameters of a model: active ones are those a token
    uses, all but E - k routed experts in each block with experts.

    Raises:
        TypeError: if model is not an nn.Module.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be an nn.Module, got {type(model).__name__}"
        )
    return _total_active(model, lambda p: True)


def _total_active(
    model: nn.Module, counted: Callable[[nn.Parameter], bool]
) -> tuple[int, int]:
    """(total, active) over the parameters p with counted(p)."""
    total = sum(p.numel() for p in model.parameters() if counted(p))
    idle = 0
    for layer in model.modules():
        if isinstance(layer, (MoEFeedForward, DeepSeekMoE)):
            expert = layer.experts[0].parameters()
            per_expert = sum(p.numel() for p in expert if counted(p))
            idle += (layer.num_experts - layer.top_k) * per_expert
    return total, total - idle


def _counts(name: str | Published) -> tuple[int, int, int]:
    """(total, active, active matrices) of :func:`parameter_counts`: the
    last, the weights of matrix products (no vectors: norm gains, biases;
    no table that is only looked up)."""
    model = _published(name)
    if model.family is T5:  # two stacks of small blocks: built whole
        built, repeats = build(model), 0
    else:  # the dense blocks and one more; the others are copies of it
        built = build(model, model.get("num_dense", 0) + 1)
        repeats = model.num_blks - len(built.blks)
    looked_up = _looked_up(built)

    def is_matrix(p: nn.Parameter) -> bool:
        return p.dim() >= 2 and id(p) not in looked_up

    totals = []
    for counted in (lambda p: True, is_matrix):
        whole = _total_active(built, counted)
        if repeats:
            last = _total_active(built.blks[-1], counted)
            whole = tuple(w + repeats * n for w, n in zip(whole, last))
        totals.append(whole)
    (total, active), (_, matrices) = totals
    return total, active, matrices


def parameter_counts(name: str | Published) -> tuple[int, int]:
    """The parameters of the course's model at a published configuration:
    (total, active), where a token uses every parameter but the routed
    experts it was not sent to (the token embedding counts in both, as the
    model cards count it).

    The model is built on the meta device with its dense blocks and one
    block past them; every later block is a copy of that one (Gemma 3's
    local and global blocks have the same weights), so it counts N - built
    times.

    Raises:
        TypeError/ValueError: an unknown name.
    """
    total, active, _ = _counts(name)
    return total, active


def cache_numel_per_token(name: str | Published, context: int) -> float:
    """Numbers a decoder caches for one token, averaged over a context of c
    tokens: per block 2 G d (keys and values; GPT-2: G = H), or r + d_R
    for DeepSeek-V3's latent attention; a block with a window w keeps only
    w positions, so past w its share per token is w / c.

    Raises:
        TypeError/ValueError: an unknown name, T5 (an encoder-decoder: its
            cross-attention caches the input, not the tokens it writes),
            or context not an int >= 1.
    """
    model = _check_cache_numel_per_token(name, context)
    N = model.num_blks
    if model.family is DeepSeekV3:
        return N * (model.get("kv_rank") + model.get("rope_width"))
    G = model.get("num_kv_heads") or model.get("num_heads")
    per_block = 2 * G * model.head_width
    window = model.get("sliding_window")
    if window is None:
        return N * per_block
    num_global = N // model.get("global_every", N + 1)  # Gemma: 1 in 6
    share = min(context, window) / context
    return per_block * (num_global + (N - num_global) * share)


def _check_cache_numel_per_token(name: object, context: object) -> Published:
    """name a decoder-only key of PUBLISHED or a Published (returned; not
    T5); context an int >= 1."""
    model = _published(name)
    if model.family is T5:
        raise ValueError(
            "name must be a decoder-only model; T5's cache depends on its "
            "input's length"
        )
    check_positive_int("context", context)
    return model


def flops_per_token(name: str | Published, context: int) -> float:
    """Floating-point operations of one token's forward pass when it
    attends over c positions (itself and the c - 1 before it, cached): 2 (a
    multiply and an add) per weight of the matrix products it passes
    through (its active parameters less the norm gains, the biases and the
    tables only looked up), and 2 per product of attention,
    H (d_qk + d_v) per position attended in each block (at most w where the
    block has a window). DeepSeek-V3's attention is counted as multi-head
    attention of its head widths (rebuilding the keys and values, or
    absorbing the up-projections, adds to it).

    Raises:
        TypeError/ValueError: as :func:`cache_numel_per_token`.
    """
    model = _published(name)
    cache_numel_per_token(name, context)  # the same checks
    matrices = _counts(model)[2]
    d_qk = d_v = model.head_width
    if model.family is DeepSeekV3:
        d_qk = model.get("nope_width") + model.get("rope_width")
        d_v = model.get("value_width")
    N, H = model.num_blks, model.get("num_heads")
    window = model.get("sliding_window")
    if window is None:
        attended = N * context
    else:
        num_global = N // model.get("global_every", N + 1)
        attended = num_global * context + (N - num_global) * min(
            context, window
        )
    return 2 * matrices + 2 * H * (d_qk + d_v) * attended
