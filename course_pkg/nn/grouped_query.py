"""Grouped-query attention: query heads that share key/value heads.

Chapter: "Attention at scale". :class:`GroupedQueryAttention` is multi-head
attention whose query heads share ``num_kv_heads`` key/value heads (Ainslie
et al. 2023; 1 is multi-query attention, Shazeer 2019), so that its
key/value cache is ``num_heads / num_kv_heads`` times smaller.

Shape letters (see the package docstring): ``B`` batch, ``H`` heads, ``Q``
queries, ``K`` key-value pairs, ``D`` model width (``num_hiddens``), ``d``
width of one head, ``G`` key/value heads (``num_kv_heads``).

Masks follow :func:`course_pkg.nn.masks.masked_softmax`: ``valid_lens`` is
None, (B,) or (B, Q) numbers of valid keys (values checked on the CPU only);
``causal`` lets query i see keys 0..i + (K - Q); a query with no valid key
gets weight 0 on every key, so its output is zeros, never NaN.
"""

from __future__ import annotations

import math

import torch

from course_pkg.checks import (
    check_axes,
    check_last_dim,
    check_masks,
    check_positive_int,
    check_same_float_dtype,
    check_sizes,
    check_tensor,
)
from course_pkg.nn.attention import KVCache, MultiHeadAttention
from course_pkg.nn.masks import _attention_mask, _masked_softmax
from course_pkg.nn.position_scaling import alibi_bias
from course_pkg.nn.rotary import RotaryEmbedding


class GroupedQueryAttention(MultiHeadAttention):
    """Multi-head attention whose H query heads share num_kv_heads key/value
    heads.

    Query head h uses key/value head h // (H / num_kv_heads), the grouping of
    ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``.
    With num_kv_heads == H it is :class:`course_pkg.nn.attention.MultiHeadAttention`
    (same parameter names and shapes); with num_kv_heads == 1 it is
    multi-query attention. It inherits the checks of
    :class:`~course_pkg.nn.attention.MultiHeadAttention`; what differs is the
    cache (the key/value heads, each d wide) and :meth:`attend`, through
    which ``forward`` goes.

    Args:
        num_hiddens: D, the width of the queries and of the output;
            divisible by num_heads unless head_width is given.
        num_heads: H, the number of query heads.
        dropout: dropout probability on the attention weights.
        bias: whether the four projections have a bias.
        num_kv_heads: number of key/value heads, dividing H (default H).
        rotary: rotate every head's queries and keys by their positions
            (True: a :class:`course_pkg.nn.rotary.RotaryEmbedding`; or the
            embedding to use, e.g. a scaled one); keys sit at positions
            0..K - 1 and queries at the last Q of them.
        alibi: add ALiBi's bias -m_h * abs(i - j) to head h's scores
            (:func:`course_pkg.nn.position_scaling.alibi_bias`).
        query_size, key_size, value_size: input widths (default D).
        head_width: d, each head's width (default D / H). Given, the heads
            together are H d wide, which need not be D (Gemma, Qwen3): W_q
            projects to H d and W_o back from H d to D.
    Attributes:
        head_width: d. W_k, W_v: project to num_kv_heads * d.
        num_hiddens: H d, the heads' total width (D unless head_width is
            given); output_size: D.
        attention_weights: (B, H, Q, K) weights of the last forward call.
    Raises:
        TypeError: if a size is not an int.
        ValueError: if num_hiddens is not divisible by num_heads (without a
            head_width) or num_heads by num_kv_heads.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        *,
        num_kv_heads: int | None = None,
        rotary: bool | RotaryEmbedding = False,
        alibi: bool = False,
        query_size: int | None = None,
        key_size: int | None = None,
        value_size: int | None = None,
        head_width: int | None = None,
    ):
        num_kv_heads = _check_grouped_query_attention_args(
            num_hiddens, num_heads, num_kv_heads, head_width
        )
        if head_width is None:  # d = D / H (MultiHeadAttention checks H | D)
            heads_width, head_width = num_hiddens, num_hiddens // num_heads
        else:
            heads_width = num_heads * head_width
        super().__init__(
            heads_width,
            num_heads,
            dropout,
            bias,
            query_size=num_hiddens if query_size is None else query_size,
            key_size=num_hiddens if key_size is None else key_size,
            value_size=num_hiddens if value_size is None else value_size,
            kv_width=num_kv_heads * head_width,
            output_size=num_hiddens,
        )
        self.num_kv_heads, self.head_width = num_kv_heads, head_width
        if rotary is True:
            rotary = RotaryEmbedding(head_width)
        self.rotary = rotary or None
        self.alibi = alibi

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        causal: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """As :meth:`~course_pkg.nn.attention.MultiHeadAttention.forward`
        (queries (B, Q, query_size) -> (B, Q, D)), through :meth:`cache` and
        :meth:`attend`."""
        self._check(queries, keys, values, valid_lens, causal, projected=False)
        cache = self._cache(keys, values, None)
        return self._attend(queries, cache, valid_lens, causal, need_weights)

    def kv_cache_numel(self, batch_size: int, num_steps: int) -> int:
        """Number of cached numbers for batch_size sequences of num_steps
        positions: 2 (keys and values) * B * T * num_kv_heads * d.
        """
        check_sizes(batch_size=batch_size, num_steps=num_steps)
        return 2 * batch_size * num_steps * self.num_kv_heads * self.head_width

    def cache(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        past: KVCache | None = None,
    ) -> KVCache:
        """Project new keys and values, split them into their key/value
        heads, and append them to those of ``past``: what a decoder caches.

        Args:
            keys: (B, K_new, key_size).
            values: (B, K_new, value_size).
            past: None, or the cache of the K_past positions before (with
                rotary, the new keys sit at positions K_past, K_past + 1, ...).
        Returns:
            A :class:`~course_pkg.nn.attention.KVCache` of keys and values
            (B, G, K_past + K_new, d); ``past`` is not changed.
            Together they hold :meth:`kv_cache_numel` (B, K) numbers.
        Raises:
            TypeError/ValueError: on shapes that do not fit the layer.
        """
        _check_grouped_query_attention_cache(self, keys, values)
        return self._cache(keys, values, past)

    def _cache(
        self, keys: torch.Tensor, values: torch.Tensor, past: KVCache | None
    ) -> KVCache:
        """:meth:`cache` on checked inputs."""
        offset = 0 if past is None else past.keys.shape[2]
        keys = self._split_heads(self.W_k(keys), self.num_kv_heads)
        if self.rotary is not None:
            keys = self.rotary._rotate(keys, offset)  # (B, G, K_new, d)
        new = KVCache(
            keys, self._split_heads(self.W_v(values), self.num_kv_heads)
        )
        return new if past is None else past.extend(new, dim=2)

    def attend(
        self,
        queries: torch.Tensor,
        cache: KVCache,
        valid_lens: torch.Tensor | None = None,
        *,
        causal: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """Attend from new queries (B, Q, query_size), not yet projected,
        over the key/value heads of a cache (keys and values (B, G, K, d)
        from :meth:`cache`) -> (B, Q, D).

        valid_lens (None, (B,) or (B, Q)) and causal as in ``forward``, the
        queries being the last Q of the K positions; need_weights=False
        keeps no weights (``attention_weights`` is None after the call), as in
        :class:`~course_pkg.nn.attention.MultiHeadAttention`. Raises
        TypeError, ValueError on inputs that do not fit.
        """
        self._check_attend(queries, cache, valid_lens, causal)
        return self._attend(queries, cache, valid_lens, causal, need_weights)

    def _attend(
        self,
        queries: torch.Tensor,
        cache: KVCache,
        valid_lens: torch.Tensor | None,
        causal: bool,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """:meth:`attend` on checked inputs: queries (B, Q, query_size), keys
        and values (B, G, K, d) -> (B, Q, D)."""
        keys, values = cache
        batch_size, num_queries = queries.shape[:2]
        num_keys = keys.shape[2]
        groups = (batch_size, self.num_kv_heads, -1)  # -1: heads per group
        grouped_queries = (
            self.W_q(queries)
            .view(batch_size, num_queries, *groups[1:], self.head_width)
            .permute(0, 2, 3, 1, 4)
        )  # (B, G, H / G, Q, d)
        if self.rotary is not None:
            grouped_queries = self.rotary._rotate(
                grouped_queries, num_keys - num_queries
            )
        # Each key/value head serves its group by broadcasting, not copying.
        scores = grouped_queries @ keys[:, :, None].transpose(3, 4)
        scores = scores / math.sqrt(self.head_width)  # (..., Q, K)
        if self.alibi:
            bias = alibi_bias(
                self.num_heads,
                num_queries,
                num_keys,
                scores.device,
                scores.dtype,
            )  # (H, Q, K)
            scores = scores + bias.view(*groups[1:], num_queries, num_keys)
        if valid_lens is not None:
            valid_lens = valid_lens.repeat_interleave(self.num_heads, dim=0)
        mask = _attention_mask(
            valid_lens, num_queries, num_keys, causal, scores.device
        )
        weights = _masked_softmax(
            scores.reshape(-1, num_queries, num_keys), mask
        )  # (B * H, Q, K)
        self.attention_weights = (
            weights.view(batch_size, -1, *weights.shape[1:])
            if need_weights
            else None
        )
        heads = self.attention.dropout(weights).view(
            *groups, num_queries, num_keys
        )
        heads = heads @ values[:, :, None]  # (B, G, H / G, Q, d)
        concatenated = heads.permute(0, 3, 1, 2, 4).reshape(
            batch_size, num_queries, self.num_hiddens
        )
        return self.W_o(concatenated)  # (B, Q, D)

    def _check_attend(
        self, queries: object, cache: object, valid_lens: object, causal: bool
    ) -> None:
        """The checks of :meth:`attend`: queries (B, Q, query_size) in the
        layer's dtype, a cache of keys and values (B, G, K, d), valid_lens
        None, (B,) or (B, Q) in [0, K], and K >= Q when causal."""
        shape = "(B, Q, query_size)"
        check_tensor("queries", queries, 3, shape)
        check_last_dim("queries", queries, self.query_size, shape)
        if not (isinstance(cache, tuple) and len(cache) == 2):
            raise TypeError(
                "cache must be a KVCache of keys and values (B, G, K, d), "
                f"got {type(cache).__name__}"
            )
        batch_size = queries.shape[0]
        groups, width = self.num_kv_heads, self.head_width
        keys, values = cache
        check_axes(
            "cache.keys", keys, "BGKd", (batch_size, groups, None, width)
        )
        num_keys = keys.shape[2]
        sizes = (batch_size, groups, num_keys, width)
        check_axes("cache.values", values, "BGKd", sizes)
        check_same_float_dtype(
            queries=queries,
            keys=keys,
            values=values,
            layer_weights=self.W_q.weight,
        )
        check_masks(valid_lens, causal, num_keys, like=("queries", queries))


def _check_grouped_query_attention_args(
    num_hiddens: object,
    num_heads: object,
    num_kv_heads: object,
    head_width: object,
) -> int:
    """num_hiddens, num_heads H, num_kv_heads G (None: H) and head_width
    (unless None) ints >= 1, G dividing H. Returns G."""
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_positive_int("num_hiddens", num_hiddens)
    check_positive_int("num_heads", num_heads)
    check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads ({num_heads}) must be divisible by num_kv_heads "
            f"({num_kv_heads})"
        )
    if head_width is not None:
        check_positive_int("head_width", head_width)
    return num_kv_heads


def _check_grouped_query_attention_cache(
    layer: GroupedQueryAttention, keys: object, values: object
) -> None:
    """keys (B, K, key_size) and values (B, K, value_size) of the layer's
    float dtype and device."""
    check_axes("keys", keys, "BKk", (None, None, layer.key_size))
    check_axes("values", values, "BKv", (*keys.shape[:2], layer.value_size))
    check_same_float_dtype(keys=keys, values=values, layer=layer.W_k.weight)
