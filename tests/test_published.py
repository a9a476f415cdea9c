"""Tests of course_pkg.models.published: the released configurations, built on the meta device,
and what they cost a token.

Peers: the model cards' parameter counts (GPT-2's and Llama 3.1 8B's exact, the others as
published, to the digits they give), a full build against the count that multiplies one block,
the gradients a token leaves (the parameters it used), the caches our models fill, and
PyTorch's FlopCounterMode for the arithmetic.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from course_pkg.models.deepseek import DeepSeekV3
from course_pkg.models.gemma import Gemma3
from course_pkg.models.gpt2 import GPT2
from course_pkg.models.llama import Llama
from course_pkg.models.published import (
    PUBLISHED,
    Published,
    build,
    cache_numel_per_token,
    count_parameters,
    flops_per_token,
    parameter_counts,
)

# The model cards, in billions (total, active) to the digits they give (rounded or cut:
# Qwen3-30B-A3B's 3.35 is "3.3"); GPT-2 small and Llama 3.1 8B exactly (transformers'
# num_parameters() of the released checkpoints).
CARDS = {
    "Mistral 7B": (7.2, 7.2),
    "Qwen3-8B": (8.2, 8.2),
    "Gemma 3 27B": (27.0, 27.0),
    "Mixtral 8x7B": (46.7, 12.9),
    "Qwen3-30B-A3B": (30.5, 3.3),
    "DeepSeek-V3": (671, 37),
}


def test_counts_are_the_model_cards():
    assert parameter_counts("GPT-2 small") == (124_439_808, 124_439_808)
    assert parameter_counts("Llama 3.1 8B") == (8_030_261_248, 8_030_261_248)
    assert parameter_counts("T5 v1.1 base")[0] == 247_577_856
    for name, (total, active) in CARDS.items():
        step = 1.0 if name == "DeepSeek-V3" else 0.1  # the card's last digit
        got = parameter_counts(name)
        for count, card in zip(got, (total, active)):
            assert abs(count / 1e9 - card) < 0.6 * step, (name, count)


@pytest.mark.parametrize("name", [n for n in PUBLISHED if n != "DeepSeek-V3"])
def test_the_count_from_one_block_equals_a_full_build(name):
    assert parameter_counts(name) == count_parameters(build(name))


def test_deepseek_blocks_past_the_dense_ones_are_alike():
    # its full build takes seconds: the rule the count relies on, checked on two blocks
    blks = build("DeepSeek-V3", 5).blks
    assert count_parameters(blks[3]) == count_parameters(blks[4])
    assert count_parameters(blks[2])[0] < count_parameters(blks[3])[0]


def _small_moes():
    return {
        "llama": _built(FLOP_MODELS["llama, experts"]),
        "deepseek": _built(SMALL["deepseek"]),
    }


@pytest.mark.parametrize("kind", ["llama", "deepseek"])
def test_active_parameters_are_those_one_token_reaches(kind):
    torch.manual_seed(0)
    model = _small_moes()[kind]
    model(torch.tensor([[3]])).sum().backward()
    reached = sum(p.numel() for p in model.parameters() if p.grad is not None)
    total, active = count_parameters(model)
    assert reached == active < total


def _cache_numel(cache) -> int:
    if isinstance(cache, torch.Tensor):
        return cache.numel()
    return sum(_cache_numel(part) for part in cache)


def _small(family: type, **kwargs) -> Published:
    """A small configuration of family, for a context of 32 (no paper)."""
    return Published(family, kwargs, 32, "")


def _built(published: Published) -> torch.nn.Module:
    return published.family(**published.kwargs)


# the sizes the small decoders share
DECODER = dict(
    vocab_size=30, num_hiddens=16, ffn_num_hiddens=12, num_heads=4,
    num_kv_heads=2,
)  # fmt: skip
SMALL = {
    "gpt2": _small(
        GPT2, vocab_size=30, num_hiddens=16, num_heads=4, num_blks=2,
        max_len=32,
    ),
    "qwen-like": _small(
        Llama, **DECODER, num_blks=3, head_width=6, qk_norm=True
    ),
    "deepseek": _small(
        DeepSeekV3, vocab_size=30, num_hiddens=16, ffn_num_hiddens=24,
        num_heads=2, num_blks=3, kv_rank=8, nope_width=4, rope_width=4,
        value_width=4, num_dense=1, expert_width=6, num_experts=8, top_k=2,
        num_groups=4, top_groups=2,
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(SMALL))
def test_the_cache_per_token_is_what_the_model_caches(kind):
    model = _built(SMALL[kind]).eval()
    T = 11
    with torch.no_grad():
        _, cache = model.forward_with_cache(
            torch.zeros(2, T, dtype=torch.long)
        )
    assert _cache_numel(cache) == 2 * T * cache_numel_per_token(SMALL[kind], T)


def test_a_window_keeps_its_share_of_the_cache():
    mistral = PUBLISHED["Mistral 7B"]
    full = dataclasses.replace(
        mistral, kwargs={**mistral.kwargs, "sliding_window": None}
    )
    for c in (1, 4096):
        assert cache_numel_per_token(mistral, c) == cache_numel_per_token(
            full, c
        )
    assert (
        cache_numel_per_token(mistral, 8192)
        == cache_numel_per_token(full, 1) / 2
    )
    # Gemma 3: 10 global blocks of 62 keep every position
    gemma = PUBLISHED["Gemma 3 27B"]
    per_block = 2 * 16 * 128
    assert cache_numel_per_token(gemma, 1024) == 62 * per_block
    assert cache_numel_per_token(gemma, 2**20) == pytest.approx(
        per_block * (10 + 52 / 1024)
    )


FLOP_MODELS = {
    "gpt2 (tied)": SMALL["gpt2"],
    "llama": _small(Llama, **DECODER, num_blks=2),
    "llama, experts": _small(
        Llama, **DECODER, num_blks=2, num_experts=4, top_k=2
    ),
    "gemma, windows": _small(
        Gemma3, **DECODER, num_blks=3, sliding_window=4, global_every=3
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(FLOP_MODELS))
def test_flops_per_token_agree_with_pytorchs_counter(kind):
    """One new token after c - 1 cached: FlopCounterMode counts 2 per multiply-add of
    every matrix product (linear layers, attention scores and sums); norms, RoPE and
    lookups are not products. Gemma at c = w: our windowed attention scores the whole
    cache and masks it, so past w it does more products than the rule counts (the rule's
    window term is checked in test_a_window_keeps_its_share_of_the_cache's terms)."""
    published = FLOP_MODELS[kind]
    torch.manual_seed(0)
    model = _built(published).eval()
    c = published.get("sliding_window") or 10
    with torch.no_grad():
        _, cache = model.forward_with_cache(torch.randint(0, 30, (1, c - 1)))
        with FlopCounterMode(display=False) as counter:
            model.forward_with_cache(
                torch.tensor([[5]]), cache, need_weights=True
            )
    assert counter.get_total_flops() == flops_per_token(published, c)


@pytest.mark.parametrize(
    "call, error, word",
    [
        (lambda: build("Llama 4"), ValueError, "name"),
        (lambda: build(3), TypeError, "name"),
        (lambda: build("DeepSeek-V3", 3), ValueError, "num_blks"),
        (lambda: build("Mistral 7B", 33), ValueError, "num_blks"),
        (lambda: build("Mistral 7B", 2.0), TypeError, "num_blks"),
        (
            lambda: cache_numel_per_token("T5 v1.1 base", 10),
            ValueError,
            "name",
        ),
        (
            lambda: cache_numel_per_token("Mistral 7B", 0),
            ValueError,
            "context",
        ),
        (lambda: flops_per_token("Mistral 7B", 1.5), TypeError, "context"),
        (lambda: count_parameters("model"), TypeError, "model"),
    ],
)
def test_bad_arguments_are_refused(call, error, word):
    with pytest.raises(error, match=word):
        call()


def test_the_meta_build_holds_no_memory():
    model = build("Mixtral 8x7B")
    assert {p.device.type for p in model.parameters()} == {"meta"}
