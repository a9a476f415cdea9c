"""Tests of course_pkg.nn.relative_position: T5's buckets and relative position bias.

Peer nobody here wrote: Hugging Face's ``T5Attention`` (``_relative_position_bucket`` and
``compute_bias``), built from a small ``T5Config``, its bias table copied.
"""

from __future__ import annotations

import pytest
import torch
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention

from course_pkg.nn.relative_position import (
    RelativePositionBias,
    relative_position_bucket,
)

# (num_buckets, max_distance): T5's own, small ones, odd counts, a max_distance just past the
# exact buckets.
SETTINGS = [(32, 128), (8, 20), (4, 3), (9, 17), (16, 9), (2, 2)]
OFFSETS = torch.arange(
    -600, 601
)  # every offset in a range wider than each max_distance


def hf_bucket(offsets, bidirectional, num_buckets, max_distance):
    return T5Attention._relative_position_bucket(
        offsets,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )


# bidirectional needs num_buckets >= 4 (fewer is refused, tested below)
CASES = [
    (bidirectional, n, m)
    for bidirectional in (True, False)
    for n, m in SETTINGS
    if n >= 4 or not bidirectional
]


@pytest.mark.parametrize("bidirectional, num_buckets, max_distance", CASES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_buckets_equal_t5s_for_every_offset(
    bidirectional, num_buckets, max_distance, dtype
):
    offsets = OFFSETS.to(dtype)
    ours = relative_position_bucket(
        offsets, bidirectional, num_buckets, max_distance
    )
    theirs = hf_bucket(offsets, bidirectional, num_buckets, max_distance)
    assert ours.dtype == torch.int64 and ours.shape == offsets.shape
    assert torch.equal(ours, theirs.long())
    assert 0 <= ours.min() and ours.max() < num_buckets


def test_buckets_t5_defaults_known_values():
    # exact buckets 0..7, then logarithmic up to 128; later keys in the upper half
    offsets = torch.tensor(
        [0, -1, -7, -8, -12, -16, -127, -128, -1000, 1, 1000]
    )
    assert relative_position_bucket(offsets).tolist() == [
        0, 1, 7, 8, 9, 10, 15, 15, 15, 17, 31
    ]  # fmt: skip


def test_buckets_keep_the_input_shape():
    offsets = torch.arange(-6, 6).reshape(3, 4)
    out = relative_position_bucket(offsets, True, 8, 20)
    assert out.shape == (3, 4)


def make_pair(num_heads, num_buckets, max_distance, is_decoder, seed=0):
    """(ours, Hugging Face's T5Attention) in float64 with the same bias table."""
    config = T5Config(
        d_model=8,
        d_kv=4,
        num_heads=num_heads,
        relative_attention_num_buckets=num_buckets,
        relative_attention_max_distance=max_distance,
        is_decoder=is_decoder,
    )
    theirs = T5Attention(
        config, has_relative_attention_bias=True, layer_idx=0
    ).double()
    ours = RelativePositionBias(
        num_heads, num_buckets, max_distance, bidirectional=not is_decoder
    ).double()
    torch.manual_seed(seed)
    with torch.no_grad():
        theirs.relative_attention_bias.weight.normal_()
        ours.embedding.weight.copy_(theirs.relative_attention_bias.weight)
    return ours, theirs


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize(
    "num_queries, num_keys", [(1, 1), (7, 7), (50, 50), (3, 40), (1, 200)]
)
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 20)])
def test_bias_equals_t5_compute_bias(
    is_decoder, num_queries, num_keys, num_buckets, max_distance
):
    ours, theirs = make_pair(3, num_buckets, max_distance, is_decoder)
    bias = ours(num_queries, num_keys)
    # the queries are the last Q of the K positions: T5's past_seen_tokens = K - Q
    expected = theirs.compute_bias(
        num_queries, num_keys, past_seen_tokens=num_keys - num_queries
    )
    assert bias.shape == (1, 3, num_queries, num_keys)
    assert bias.dtype == torch.float64
    # a lookup: the same numbers, bit for bit
    assert torch.equal(bias, expected)


def test_bias_of_the_other_direction_differs():
    # the wrong variant: an encoder's bias is not a decoder's (later keys have own buckets)
    ours, theirs = make_pair(2, 32, 128, is_decoder=True)
    other = RelativePositionBias(2, 32, 128, bidirectional=True).double()
    other.load_state_dict(ours.state_dict())
    expected = theirs.compute_bias(9, 9)
    assert torch.equal(ours(9, 9), expected)
    assert not torch.equal(other(9, 9), expected)


def test_gradient_reaches_only_the_used_buckets():
    ours = RelativePositionBias(2, 32, 128).double()
    ours(4, 4).sum().backward()
    used = relative_position_bucket(
        torch.arange(-3, 4), True, 32, 128
    ).unique()
    rows = ours.embedding.weight.grad.abs().sum(1).nonzero().flatten()
    assert torch.equal(rows, used)


def test_meta_device_forward_and_backward():
    ours = RelativePositionBias(4, 32, 128).to("meta")
    bias = ours(5, 9)
    assert bias.device.type == "meta" and bias.shape == (1, 4, 5, 9)
    bias.sum().backward()
    assert ours.embedding.weight.grad.shape == (32, 4)
    buckets = relative_position_bucket(
        torch.arange(-3, 3, device="meta"), False, 8, 20
    )
    assert buckets.device.type == "meta" and buckets.dtype == torch.int64


@pytest.mark.parametrize(
    "args, error, match",
    [
        (([1, 2],), TypeError, "relative_position"),
        ((torch.tensor([1.0, 2.0]),), TypeError, "relative_position"),
        ((torch.tensor([True]),), TypeError, "relative_position"),
        ((torch.tensor([1]), 1), TypeError, "bidirectional"),
        ((torch.tensor([1]), True, 32.0), TypeError, "num_buckets"),
        ((torch.tensor([1]), True, 3), ValueError, "num_buckets"),
        ((torch.tensor([1]), False, 1), ValueError, "num_buckets"),
        ((torch.tensor([1]), True, 32, 8), ValueError, "max_distance"),
        ((torch.tensor([1]), True, 32, 0), ValueError, "max_distance"),
        ((torch.tensor([1]), True, 32, "128"), TypeError, "max_distance"),
    ],
)
def test_bucket_refuses_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        relative_position_bucket(*args)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(num_heads=0), ValueError, "num_heads"),
        (dict(num_heads=2.0), TypeError, "num_heads"),
        (dict(num_heads=2, num_buckets=3), ValueError, "num_buckets"),
        (dict(num_heads=2, max_distance=4), ValueError, "max_distance"),
        (dict(num_heads=2, bidirectional="yes"), TypeError, "bidirectional"),
    ],
)
def test_constructor_refuses_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        RelativePositionBias(**kwargs)


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((0, 4), ValueError, "num_queries"),
        ((2.0, 4), TypeError, "num_queries"),
        ((2, True), TypeError, "num_keys"),
        ((5, 4), ValueError, "num_keys must be >= num_queries"),
    ],
)
def test_forward_refuses_bad_input(args, error, match):
    ours = RelativePositionBias(2, 8, 20)
    with pytest.raises(error, match=match):
        ours(*args)
