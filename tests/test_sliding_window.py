"""Sliding-window attention: band mask, parity with SDPA, the rolling cache
equal to full attention with the band, its memory fixed by the window."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.nn.sliding_window import (
    RollingKVCache,
    sliding_window_attention,
    sliding_window_mask,
)


def test_mask_by_hand():
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(sliding_window_mask(5, 5, 2), expected)
    assert torch.equal(sliding_window_mask(2, 5, 2), expected[3:])
    assert torch.equal(
        sliding_window_mask(5, 5, None), torch.ones(5, 5).tril().bool()
    )


@settings(max_examples=40)
@given(
    st.integers(1, 3),
    st.sampled_from([(4, 4), (4, 2), (4, 1)]),
    st.integers(1, 12),
    st.integers(0, 5),
    st.integers(1, 14),
    st.integers(0, 2**16),
)
def test_equals_sdpa_with_band_mask(batch, heads, keys_n, extra, window, seed):
    num_heads, groups = heads
    num_queries = max(1, keys_n - extra)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(
        batch, num_heads, num_queries, 6, generator=gen, dtype=torch.float64
    )
    k = torch.randn(
        batch, groups, keys_n, 6, generator=gen, dtype=torch.float64
    )
    v = torch.randn(
        batch, groups, keys_n, 5, generator=gen, dtype=torch.float64
    )
    ours = sliding_window_attention(q, k, v, window)
    repeat = num_heads // groups
    theirs = F.scaled_dot_product_attention(
        q,
        k.repeat_interleave(repeat, 1),
        v.repeat_interleave(repeat, 1),
        attn_mask=sliding_window_mask(num_queries, keys_n, window),
    )
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def _decode_with_rolling_cache(q, k, v, window):
    cache = RollingKVCache(
        q.shape[0], k.shape[1], k.shape[-1], window,
        value_width=v.shape[-1], dtype=q.dtype,
    )  # fmt: skip
    outputs, sizes = [], set()
    for t in range(q.shape[2]):
        sl = slice(t, t + 1)
        outputs.append(cache.step(q[:, :, sl], k[:, :, sl], v[:, :, sl]))
        sizes.add(cache.nbytes)
    return torch.cat(outputs, dim=2), sizes


@pytest.mark.parametrize("window", [1, 3, 8, 40])
def test_rolling_cache_equals_full_attention_with_band(window):
    gen = torch.Generator().manual_seed(window)
    steps = 37
    q = torch.randn(2, 4, steps, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 2, steps, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 2, steps, 3, generator=gen, dtype=torch.float64)
    rolled, sizes = _decode_with_rolling_cache(q, k, v, window)
    full = sliding_window_attention(q, k, v, window)
    torch.testing.assert_close(rolled, full, rtol=0, atol=1e-12)
    # The cache's memory is that of the window, from the first step to the last.
    assert sizes == {2 * 2 * 2 * window * 8 * 8 // 2 + 2 * 2 * window * 3 * 8}


def test_a_bug_is_caught():
    # A cache that forgets to wrap (keeps only the first window positions)
    # differs from the band once the sequence is longer than the window.
    gen = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, 1, 12, 4, generator=gen, dtype=torch.float64)
    full = sliding_window_attention(q, k, v, 4)
    stale = sliding_window_attention(
        q[:, :, -1:], k[:, :, :4], v[:, :, :4], None
    )
    assert not torch.allclose(full[:, :, -1:], stale)


def test_memory_bounded_whatever_the_length():
    cache = RollingKVCache(1, 2, 4, window=16)
    before = cache.nbytes
    one = torch.zeros(1, 2, 1, 4)
    for _ in range(1000):
        cache.append(one, one)
    assert cache.nbytes == before == 2 * 2 * 16 * 4 * 4
    assert cache.length == 1000 and cache.keys.shape == (1, 2, 16, 4)


def test_meta_device():
    q = torch.randn(2, 4, 3, 8, device="meta")
    k = torch.randn(2, 2, 7, 8, device="meta")
    assert sliding_window_attention(q, k, k, 3).shape == (2, 4, 3, 8)
    cache = RollingKVCache(2, 2, 8, 4, device="meta")
    out = cache.step(q[:, :, :1], k[:, :, :1], k[:, :, :1])
    assert out.shape == (2, 4, 1, 8) and out.device.type == "meta"


def test_bad_input():
    q = torch.randn(1, 4, 2, 8)
    k = torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match="window"):
        sliding_window_attention(q, k, k, 0)
    with pytest.raises(ValueError, match="multiple"):
        sliding_window_attention(
            q, torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8), 2
        )
    with pytest.raises(ValueError, match="num_keys"):
        sliding_window_mask(4, 2, 1)
    with pytest.raises(ValueError, match="keys"):
        sliding_window_attention(q, torch.randn(1, 2, 5, 7), k, 2)
    with pytest.raises(TypeError, match="window"):
        RollingKVCache(1, 1, 4, window=2.5)
    with pytest.raises(ValueError, match="window"):
        RollingKVCache(1, 1, 4, window=0)
    cache = RollingKVCache(1, 2, 8, 4)
    with pytest.raises(ValueError, match="keys"):
        cache.append(torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8))


@pytest.mark.parametrize("bad", ["keys", "values"])
def test_a_refused_append_leaves_the_cache_as_it_was(bad):
    cache = RollingKVCache(1, 2, 4, 3, value_width=5, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(1, 2, 1, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 2, 1, 5, generator=gen, dtype=torch.float64)
    cache.append(k, v)
    before = (cache.keys.clone(), cache.values.clone(), cache.length)
    wrong = {"keys": k, "values": v}
    wrong[bad] = torch.ones(1, 2, 1, 7, dtype=torch.float64)  # a wrong width
    with pytest.raises(
        ValueError,
        match=rf"{bad} must have shape \(.*d={5 if bad == 'values' else 4}\)",
    ):
        cache.append(wrong["keys"] + 1, wrong["values"] + 1)
    assert torch.equal(cache.keys, before[0])
    assert torch.equal(cache.values, before[1])
    assert cache.length == before[2]
