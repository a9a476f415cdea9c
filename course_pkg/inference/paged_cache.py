"""A paged key/value cache: fixed-size blocks and a block table per sequence.

Chapter: "Attention at inference time". A server that reserves, for each
sequence, a contiguous cache as long as the longest sequence it might
produce wastes what the sequence never fills. A paged cache (the idea of
PagedAttention, Kwon et al. 2023) cuts one pool of memory into blocks of a
fixed number of positions. A sequence gets a block when it needs one, its
block table lists its blocks in order, and when it finishes its blocks go
back to the pool for the next sequence. A sequence then wastes less than one
block.

Shape letters (see the package docstring): ``G`` key/value heads, ``H``
query heads, ``t`` positions a sequence holds, ``Q`` queries, ``d`` width.
"""

from __future__ import annotations

import torch

from course_pkg.checks import (
    check_axes,
    check_device,
    check_int,
    check_nonnegative_int,
    check_positive_int,
    check_same_float_dtype,
)
from course_pkg.nn.sliding_window import sliding_window_attention


class PagedKVCache:
    """Keys and values of many sequences, in blocks of ``block_size``.

    Args:
        num_blocks: blocks in the pool. block_size: positions per block.
        num_kv_heads: G. head_width: d (keys and values alike).
        dtype, device: of the pool, keys and values (num_blocks, G,
            block_size, d) each, allocated once.
    Attributes:
        block_tables: sequence id -> list of its block indices, in order.
        lengths: sequence id -> positions it holds.
    Raises:
        TypeError, ValueError: if a size is not an int >= 1 (block_size <= 0
            included).
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_width: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        device = _check_paged_kv_cache_args(
            num_blocks, block_size, num_kv_heads, head_width, device
        )
        shape = (num_blocks, num_kv_heads, block_size, head_width)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        # Popped from the end: the block freed last is reused first.
        self.free_blocks = list(range(num_blocks - 1, -1, -1))
        self.block_tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def add_sequence(self, seq_id: int) -> None:
        """Start an empty sequence (no block until its first position)."""
        _check_paged_kv_cache_add_sequence(self, seq_id)
        self.block_tables[seq_id], self.lengths[seq_id] = [], 0

    def append(
        self, seq_id: int, keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        """Add n positions, keys and values (G, n, d), to a sequence, taking
        free blocks as its last one fills. n = 0 changes nothing.

        Raises:
            TypeError, ValueError: on an unknown seq_id, keys and values
                whose shape, dtype or device do not fit the pool, or a cache
                full (not enough free blocks); nothing is written.
        """
        table, length, new, needed = _check_paged_kv_cache_append(
            self, seq_id, keys, values
        )
        table.extend(self.free_blocks.pop() for _ in range(needed))
        if new == 0:
            return
        device = self.keys.device
        positions = torch.arange(length, length + new, device=device)
        blocks = torch.tensor(table, dtype=torch.long, device=device)[
            positions // self.block_size
        ]
        offsets = positions % self.block_size
        self.keys[blocks, :, offsets] = keys.transpose(0, 1)  # (n, G, d)
        self.values[blocks, :, offsets] = values.transpose(0, 1)
        self.lengths[seq_id] = length + new

    def gather(self, seq_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values (G, t, d) of a sequence, in position order,
        read through its block table."""
        table = torch.tensor(
            self._table(seq_id), dtype=torch.long, device=self.keys.device
        )
        length = self.lengths[seq_id]

        def read(pool: torch.Tensor) -> torch.Tensor:
            blocks = pool[table]  # (blocks of the sequence, G, size, d)
            return blocks.transpose(0, 1).flatten(1, 2)[:, :length]

        return read(self.keys), read(self.values)

    def attend(self, seq_id: int, queries: torch.Tensor) -> torch.Tensor:
        """Causal attention of queries (H, Q, d), the sequence's last Q
        positions, over its t cached positions: (H, Q, d).

        Raises:
            TypeError, ValueError: on an unknown seq_id, or queries that are
                not (H, Q, d) of the cache's width, dtype and device.
        """
        _check_paged_kv_cache_attend(self, seq_id, queries)
        keys, values = self.gather(seq_id)
        return sliding_window_attention(
            queries[None], keys[None], values[None], None
        )[0]

    def free(self, seq_id: int) -> None:
        """End a sequence: its blocks go back to the pool."""
        table = self._table(seq_id)
        self.free_blocks.extend(reversed(table))
        del self.block_tables[seq_id], self.lengths[seq_id]

    def allocated_positions(self) -> int:
        """Positions in the blocks live sequences hold."""
        return self.block_size * sum(map(len, self.block_tables.values()))

    def used_positions(self) -> int:
        """Positions live sequences have filled."""
        return sum(self.lengths.values())

    def _table(self, seq_id: int) -> list[int]:
        check_int("seq_id", seq_id)
        if seq_id not in self.block_tables:
            raise ValueError(f"seq_id {seq_id} is not in the cache")
        return self.block_tables[seq_id]


def _check_paged_kv_cache_args(
    num_blocks: object,
    block_size: object,
    num_kv_heads: object,
    head_width: object,
    device: object,
) -> torch.device | None:
    """The four sizes ints >= 1; device None or a device of this machine.
    Returns device as a torch.device (None stays None)."""
    check_positive_int("num_blocks", num_blocks)
    check_positive_int("block_size", block_size)
    check_positive_int("num_kv_heads", num_kv_heads)
    check_positive_int("head_width", head_width)
    return check_device("device", device)


def _check_paged_kv_cache_add_sequence(
    cache: PagedKVCache, seq_id: object
) -> None:
    """seq_id an int not yet in the cache."""
    check_int("seq_id", seq_id)
    if seq_id in cache.block_tables:
        raise ValueError(f"seq_id {seq_id} is already in the cache")


def _check_paged_kv_cache_append(
    cache: PagedKVCache, seq_id: object, keys: object, values: object
) -> tuple[list[int], int, int, int]:
    """seq_id in the cache; keys, values (G, n, d) of one shape, the pool's
    G, d, dtype and device; enough free blocks for n more positions.
    Returns the block table, the length t, n and the blocks needed."""
    table = cache._table(seq_id)
    sizes = (*cache.keys.shape[1:2], None, cache.keys.shape[3])
    check_axes("keys", keys, "Gnd", sizes)
    check_axes("values", values, "Gnd", tuple(keys.shape))
    check_same_float_dtype(keys=keys, values=values, cache=cache.keys)
    length, new = cache.lengths[seq_id], keys.shape[1]
    needed = -(-(length + new) // cache.block_size) - len(table)
    if needed > len(cache.free_blocks):
        raise ValueError(
            f"cache full: seq_id {seq_id} needs {needed} more blocks, "
            f"{len(cache.free_blocks)} are free"
        )
    return table, length, new, needed


def _check_paged_kv_cache_attend(
    cache: PagedKVCache, seq_id: object, queries: object
) -> None:
    """seq_id in the cache; queries (H, Q, d) of the cache's width d, dtype
    and device."""
    cache._table(seq_id)
    width = cache.keys.shape[3]
    check_axes("queries", queries, "HQd", (None, None, width))
    check_same_float_dtype(queries=queries, cache=cache.keys)


def contiguous_waste(lengths: list[int], max_len: int) -> int:
    """Positions reserved but never filled when each sequence gets max_len
    contiguous slots: sum(max_len - length).

    Raises:
        TypeError/ValueError: if max_len is not an int >= 1, or lengths not
            ints in [0, max_len].
    """
    _check_contiguous_waste(lengths, max_len)
    return sum(max_len - length for length in lengths)


def _check_contiguous_waste(lengths: object, max_len: object) -> None:
    """max_len an int >= 1; lengths a list of ints in [0, max_len]."""
    check_positive_int("max_len", max_len)
    _check_lengths(lengths)
    if any(length > max_len for length in lengths):
        raise ValueError(f"lengths must be <= max_len={max_len}")


def paged_waste(lengths: list[int], block_size: int) -> int:
    """Positions allocated but not filled with blocks of block_size: the
    unfilled tail of each sequence's last block.

    Raises:
        TypeError/ValueError: if block_size is not an int >= 1, or lengths
            not ints >= 0.
    """
    _check_paged_waste(lengths, block_size)
    return sum(-length % block_size for length in lengths)


def _check_paged_waste(lengths: object, block_size: object) -> None:
    """block_size an int >= 1; lengths a list of ints >= 0."""
    check_positive_int("block_size", block_size)
    _check_lengths(lengths)


def _check_lengths(lengths: list[int]) -> None:
    """Refuse lengths that are not a list of ints >= 0 (a negative length
    used to count as waste)."""
    if not isinstance(lengths, (list, tuple)):
        raise TypeError(
            f"lengths must be a list of ints, got {type(lengths).__name__}"
        )
    for length in lengths:
        check_nonnegative_int("lengths", length)
