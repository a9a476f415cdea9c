"""What a key/value cache costs: bytes per token and per sequence.

Chapter: "Attention at inference time". A decoder keeps, in each of its
layers, one key and one value vector of width d per key/value head and per
position it has seen. So a token costs

    2 (keys and values) * layers * G (key/value heads) * d * bytes per number

whatever the number of query heads: grouped-query and multi-query attention
shrink the cache by H / G. A sliding window of w positions caps the
positions a sequence keeps at w.

Shape letters (see the package docstring): ``G`` key/value heads, ``d`` width
of one head.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_pkg.checks import check_positive_int, check_positive_number


@dataclass(frozen=True)
class CacheConfig:
    """The sizes of a decoder that decide its cache.

    Args:
        name: what to print.
        num_layers: decoder layers. num_kv_heads: G. head_width: d.
        num_heads: H, query heads (for the ratio to multi-head attention).
        bytes_per_number: 2 for float16/bfloat16, 4 for float32.
        window: None, or the w positions a sliding-window cache keeps.
        num_params: the model's nominal parameter count (for the weights'
            size next to the cache).
        source: the bibliography key the sizes come from.
    Raises:
        TypeError, ValueError: if a size is not a positive int (window:
            None or one), or num_heads is not a multiple of num_kv_heads.
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_width: int
    bytes_per_number: int = 2
    window: int | None = None
    num_params: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        _check_cache_config_args(self)


def _check_cache_config_args(config: CacheConfig) -> None:
    """num_layers, num_heads (H), num_kv_heads (G), head_width,
    bytes_per_number ints >= 1, H a multiple of G; window None or an int
    >= 1."""
    for field in ("num_layers", "num_heads", "num_kv_heads", "head_width"):
        check_positive_int(field, getattr(config, field))
    check_positive_int("bytes_per_number", config.bytes_per_number)
    if config.window is not None:
        check_positive_int("window", config.window)
    if config.num_heads % config.num_kv_heads:
        raise ValueError(
            f"num_heads ({config.num_heads}) must be a multiple of "
            f"num_kv_heads ({config.num_kv_heads})"
        )


def kv_bytes_per_token(config: CacheConfig) -> int:
    """Bytes the cache grows by for one token of one sequence:
    2 * layers * G * d * bytes_per_number."""
    return (
        2
        * config.num_layers
        * config.num_kv_heads
        * config.head_width
        * config.bytes_per_number
    )


def kv_cache_bytes(
    config: CacheConfig, num_tokens: int, batch_size: int = 1
) -> int:
    """Bytes of the cache of batch_size sequences of num_tokens tokens each
    (at most ``window`` of them kept, with a window).

    Raises:
        TypeError, ValueError: if num_tokens or batch_size is not an int
            >= 1.
    """
    _check_kv_cache_bytes(num_tokens, batch_size)
    kept = (
        num_tokens if config.window is None else min(num_tokens, config.window)
    )
    return batch_size * kept * kv_bytes_per_token(config)


def _check_kv_cache_bytes(num_tokens: object, batch_size: object) -> None:
    """num_tokens and batch_size ints >= 1."""
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("batch_size", batch_size)


def weight_bytes(config: CacheConfig) -> float:
    """Bytes of the weights, num_params numbers of bytes_per_number each."""
    check_positive_number("num_params", config.num_params)
    return config.num_params * config.bytes_per_number


# Sizes from each model's paper or model card (the key in ``source``), in
# 16-bit numbers. The parameter counts are the nominal ones in the names.
PUBLISHED_CONFIGS = (
    CacheConfig(
        "GPT-2 small", 12, 12, 12, 64, num_params=117e6,
        source="radford2019language",
    ),
    CacheConfig(
        "Llama-2-7B", 32, 32, 32, 128, num_params=7e9,
        source="touvron2023llama2",
    ),
    CacheConfig(
        "Llama-3-8B", 32, 32, 8, 128, num_params=8e9,
        source="dubey2024llama3",
    ),
    CacheConfig(
        "Mistral-7B", 32, 32, 8, 128, window=4096, num_params=7e9,
        source="jiang2023mistral",
    ),
    CacheConfig(
        "Falcon-7B (MQA)", 32, 71, 1, 64, num_params=7e9,
        source="tii2023falcon7b",
    ),
)  # fmt: skip
