"""KV-cache sizes: the formula against a hand count, the published table, bad input."""

from __future__ import annotations

import pytest
import torch

from course_pkg.inference.kv_memory import (
    PUBLISHED_CONFIGS,
    CacheConfig,
    kv_bytes_per_token,
    kv_cache_bytes,
    weight_bytes,
)
from course_pkg.nn.grouped_query import GroupedQueryAttention
from tests._helpers import refusals


def test_bytes_per_token_by_hand():
    # Llama-3-8B: 32 layers x 8 KV heads x 128 wide, keys and values, 2 bytes
    # = 2 * 32 * 8 * 128 * 2 = 131072 bytes = 128 KiB per token.
    llama3 = next(c for c in PUBLISHED_CONFIGS if c.name == "Llama-3-8B")
    assert kv_bytes_per_token(llama3) == 131072
    # GPT-2 small: 2 * 12 * 12 * 64 * 2 = 36864 bytes.
    gpt2 = next(c for c in PUBLISHED_CONFIGS if c.name == "GPT-2 small")
    assert kv_bytes_per_token(gpt2) == 36864
    # 4096 tokens of Llama-2-7B: 2 * 32 * 32 * 128 * 2 * 4096 = 2 GiB.
    llama2 = next(c for c in PUBLISHED_CONFIGS if c.name == "Llama-2-7B")
    assert kv_cache_bytes(llama2, 4096) == 2 * 2**30


def test_window_caps_the_cache():
    mistral = next(c for c in PUBLISHED_CONFIGS if c.name == "Mistral-7B")
    per_token = kv_bytes_per_token(mistral)
    assert kv_cache_bytes(mistral, 1000) == 1000 * per_token
    assert kv_cache_bytes(mistral, 4096) == kv_cache_bytes(mistral, 131072)
    assert (
        kv_cache_bytes(mistral, 131072, batch_size=3) == 3 * 4096 * per_token
    )


def test_matches_what_a_layer_caches():
    layer = GroupedQueryAttention(64, 8, num_kv_heads=2)
    config = CacheConfig("one layer", 1, 8, 2, 8, bytes_per_number=4)
    X = torch.randn(3, 10, 64)
    keys, values = layer.cache(X, X)
    stored = sum(t.numel() * t.element_size() for t in (keys, values))
    assert kv_cache_bytes(config, 10, batch_size=3) == stored


def test_weights_and_ratios():
    gqa = next(c for c in PUBLISHED_CONFIGS if c.name == "Llama-3-8B")
    mha = next(c for c in PUBLISHED_CONFIGS if c.name == "Llama-2-7B")
    assert kv_bytes_per_token(mha) == 4 * kv_bytes_per_token(gqa)
    assert weight_bytes(gqa) == 16e9
    assert all(c.source for c in PUBLISHED_CONFIGS)


BAD_CONFIGS = [
    *refusals(ValueError, num_layers=0),
    *refusals(TypeError, head_width=1.5),
    *refusals(ValueError, window=0, num_kv_heads=3),
]


@pytest.mark.parametrize("kwargs, error, word", BAD_CONFIGS)
def test_bad_config(kwargs, error, word):
    sizes = dict(
        name="x", num_layers=2, num_heads=4, num_kv_heads=2, head_width=8
    )
    with pytest.raises(error, match=word):
        CacheConfig(**{**sizes, **kwargs})


def test_bad_lengths():
    config = PUBLISHED_CONFIGS[0]
    with pytest.raises(ValueError, match="num_tokens"):
        kv_cache_bytes(config, 0)
    with pytest.raises(TypeError, match="batch_size"):
        kv_cache_bytes(config, 4, batch_size=2.0)
    with pytest.raises(ValueError, match="num_params"):
        weight_bytes(CacheConfig("x", 1, 1, 1, 2))
