"""The paged cache: bit-for-bit equal to a contiguous cache in float64 for
random interleavings of sequences that grow and finish; blocks never shared
by two live sequences; freed blocks reused; waste counted exactly."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.inference.paged_cache import (
    PagedKVCache,
    contiguous_waste,
    paged_waste,
)
from course_pkg.nn.sliding_window import sliding_window_attention

GROUPS, HEADS, WIDTH = 2, 4, 3

# An event: (sequence 0-4, what: 0 = grow by n positions, 1 = finish), n.
events = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(1, 5)),
    min_size=1,
    max_size=40,
)


def _check_blocks(cache: PagedKVCache) -> None:
    live = [b for table in cache.block_tables.values() for b in table]
    assert len(live) == len(set(live)), "a block is shared"
    assert not set(live) & set(cache.free_blocks), "a live block is free"
    assert len(live) + len(cache.free_blocks) == cache.keys.shape[0]
    for seq_id, table in cache.block_tables.items():
        assert len(table) == -(-cache.lengths[seq_id] // cache.block_size)


@settings(max_examples=60)
@given(events, st.integers(1, 4), st.integers(0, 2**16))
def test_paged_equals_contiguous_bit_for_bit(events, block_size, seed):
    gen = torch.Generator().manual_seed(seed)
    cache = PagedKVCache(64, block_size, GROUPS, WIDTH, dtype=torch.float64)
    contiguous: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for seq_id, what, n in events:
        if what == 1 and seq_id in contiguous:  # finish
            cache.free(seq_id)
            del contiguous[seq_id]
            _check_blocks(cache)
            continue
        if seq_id not in contiguous:
            cache.add_sequence(seq_id)
            empty = torch.zeros(GROUPS, 0, WIDTH, dtype=torch.float64)
            contiguous[seq_id] = (empty, empty)
        keys, values = torch.randn(
            2, GROUPS, n, WIDTH, generator=gen, dtype=torch.float64
        )
        cache.append(seq_id, keys, values)
        old_keys, old_values = contiguous[seq_id]
        contiguous[seq_id] = (
            torch.cat([old_keys, keys], 1),
            torch.cat([old_values, values], 1),
        )
        _check_blocks(cache)
        queries = torch.randn(
            HEADS, n, WIDTH, generator=gen, dtype=torch.float64
        )
        paged = cache.attend(seq_id, queries)
        full_keys, full_values = contiguous[seq_id]
        expected = sliding_window_attention(
            queries[None], full_keys[None], full_values[None], None
        )[0]
        assert torch.equal(paged, expected)
        assert all(
            torch.equal(a, b)
            for a, b in zip(cache.gather(seq_id), contiguous[seq_id])
        )
    assert cache.used_positions() == sum(
        k.shape[1] for k, _ in contiguous.values()
    )
    lengths = [k.shape[1] for k, _ in contiguous.values()]
    assert cache.allocated_positions() - cache.used_positions() == paged_waste(
        lengths, block_size
    )


def test_freed_blocks_are_reused():
    cache = PagedKVCache(4, 2, 1, 2)
    one = torch.zeros(1, 3, 2)
    cache.add_sequence(7)
    cache.append(7, one, one)  # 3 positions: 2 blocks
    first = list(cache.block_tables[7])
    cache.free(7)
    cache.add_sequence(8)
    cache.append(8, one, one)
    assert sorted(cache.block_tables[8]) == sorted(first)
    # All four blocks in use: one more block is refused, nothing written.
    cache.add_sequence(9)
    cache.append(9, one, one)
    with pytest.raises(ValueError, match="cache full"):
        cache.append(9, torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))
    assert cache.lengths[9] == 3 and cache.free_blocks == []


def test_appending_no_position_changes_nothing():
    # Review D8: zero positions on a new sequence raised IndexError (the
    # empty block table became a float tensor).
    cache = PagedKVCache(3, 2, 1, 2)
    nothing = torch.zeros(1, 0, 2)
    cache.add_sequence(0)
    cache.append(0, nothing, nothing)
    assert cache.block_tables[0] == [] and cache.lengths[0] == 0
    keys, values = cache.gather(0)
    assert keys.shape == values.shape == (1, 0, 2)
    three = torch.arange(6.0).reshape(1, 3, 2)
    cache.append(0, three, three)
    cache.append(0, nothing, nothing)  # on a sequence with blocks, too
    assert cache.lengths[0] == 3 and len(cache.block_tables[0]) == 2
    assert torch.equal(cache.gather(0)[0], three)
    assert cache.free_blocks == [2]


def test_a_shared_block_is_caught():
    # The block check fails on a cache whose two sequences share a block.
    cache = PagedKVCache(4, 2, 1, 2)
    for seq_id in (0, 1):
        cache.add_sequence(seq_id)
        cache.append(seq_id, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    cache.block_tables[1] = list(cache.block_tables[0])
    with pytest.raises(AssertionError, match="shared"):
        _check_blocks(cache)


def test_waste_by_hand():
    lengths = [1, 5, 8, 9]
    assert contiguous_waste(lengths, 16) == 15 + 11 + 8 + 7
    assert paged_waste(lengths, 4) == 3 + 3 + 0 + 3
    assert paged_waste(lengths, 1) == 0
    with pytest.raises(ValueError, match="max_len"):
        contiguous_waste(lengths, 8)


@pytest.mark.parametrize("waste", [contiguous_waste, paged_waste])
def test_lengths_that_are_not_lengths_are_refused(waste):
    # a negative length used to count as waste: -3 % 4 == 1, 16 - -3 == 19
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        waste([2, -3], 16)
    with pytest.raises(TypeError, match="lengths"):
        waste([2, 3.5], 16)
    with pytest.raises(TypeError, match="lengths"):
        waste(5, 16)


def test_meta_device():
    cache = PagedKVCache(8, 4, 2, 8, device="meta")
    cache.add_sequence(0)
    keys = torch.randn(2, 6, 8, device="meta")
    cache.append(0, keys, keys)
    out = cache.attend(0, torch.randn(4, 2, 8, device="meta"))
    assert out.shape == (4, 2, 8) and out.device.type == "meta"


def test_bad_input():
    with pytest.raises(ValueError, match="block_size"):
        PagedKVCache(4, 0, 1, 2)
    with pytest.raises(TypeError, match="num_blocks"):
        PagedKVCache(4.0, 2, 1, 2)
    cache = PagedKVCache(4, 2, 1, 2)
    with pytest.raises(ValueError, match="seq_id 3 is not"):
        cache.append(3, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    with pytest.raises(ValueError, match="seq_id 3 is not"):
        cache.free(3)
    cache.add_sequence(3)
    with pytest.raises(ValueError, match="already"):
        cache.add_sequence(3)
    with pytest.raises(ValueError, match="keys"):
        cache.append(3, torch.zeros(2, 1, 2), torch.zeros(2, 1, 2))
    with pytest.raises(TypeError, match="seq_id"):
        cache.gather("3")
