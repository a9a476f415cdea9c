"""Multi-head attention, with a small key/value cache API.

Chapters: "Multi-head attention" (heads as parallel subspaces, checked
against ``torch.nn.MultiheadAttention``), "Self-attention and positional
encoding" and "The Transformer". The scoring functions it builds on live in
:mod:`course_pkg.nn.scoring`, the masks in :mod:`course_pkg.nn.masks`.

Shape letters (see the package docstring): ``B`` batch, ``Q`` queries, ``K``
key–value pairs, ``T`` sequence length, ``D`` width (``num_hiddens``), ``H``
heads.

Which path computes the attention. ``need_weights=True`` (the default, as in
``torch.nn.MultiheadAttention``) computes the weights explicitly and keeps
them in ``attention_weights`` for plots; ``need_weights=False`` takes the
fused kernel (:func:`course_pkg.nn.scoring.fused_attention`), which is faster
and stores nothing. Both give the same outputs within 1e-5 in float32.

The models (GPT, the Transformer's encoder and decoder, BERT, Llama) share one
rule, :func:`resolve_need_weights`: their ``forward`` takes ``need_weights:
bool | None = None``; None reads the model's ``need_weights`` attribute, and
an attribute left at None means "keep the weights in eval mode": a training
step never reads them and takes the fused path, decoding and plots get them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from course_pkg.checks import (
    check_attention_inputs,
    check_features,
    check_positive_int,
    check_probability,
    check_tensor,
)
from course_pkg.nn.scoring import DotProductAttention, _fused_attention


def transpose_qkv(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the last axis into heads and fold the heads into the batch.

    Args:
        X: (B, T, D) with D divisible by H = num_heads.
    Returns:
        (B * H, T, D / H); rows b*H .. b*H + H - 1 are the heads of example b.
    """
    _check_head_split(X, num_heads, -1, "(B, T, D)")
    batch_size, num_steps, num_hiddens = X.shape
    X = X.reshape(
        batch_size, num_steps, num_heads, num_hiddens // num_heads
    )  # (B, T, H, D/H)
    return X.permute(0, 2, 1, 3).reshape(
        batch_size * num_heads, num_steps, num_hiddens // num_heads
    )


def transpose_output(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo :func:`transpose_qkv`: heads back side by side.

    Args:
        X: (B * H, T, D / H).
    Returns:
        (B, T, D), the heads concatenated along the last axis.
    """
    _check_head_split(X, num_heads, 0, "(B * H, T, D / H)")
    folded, num_steps, head_width = X.shape
    X = X.reshape(
        folded // num_heads, num_heads, num_steps, head_width
    )  # (B, H, T, D/H)
    return X.permute(0, 2, 1, 3).reshape(
        folded // num_heads, num_steps, num_heads * head_width
    )


def resolve_need_weights(model: nn.Module, need_weights: bool | None) -> bool:
    """The models' rule for ``need_weights`` (module docstring).

    Args:
        model: a module with a ``need_weights`` attribute (bool or None).
        need_weights: what the caller asked for; None: the model's attribute.
    Returns:
        True (explicit path, weights kept) or False (fused path).
    Raises:
        TypeError: if model is not a module with a ``need_weights``
            attribute, or need_weights (or the attribute) is not a bool or
            None.
    """
    need_weights = _check_resolve_need_weights(model, need_weights)
    return not model.training if need_weights is None else need_weights


def _check_resolve_need_weights(
    model: object, need_weights: object
) -> bool | None:
    """model a module with a ``need_weights`` attribute; need_weights (or,
    when None, that attribute) a bool or None. Returns the one that counts."""
    if not isinstance(model, nn.Module) or not hasattr(model, "need_weights"):
        raise TypeError(
            "model must be a module with a need_weights attribute, got "
            f"{type(model).__name__}"
        )
    if need_weights is None:
        need_weights = model.need_weights
    if need_weights is not None and not isinstance(need_weights, bool):
        raise TypeError(
            f"need_weights must be a bool or None, got {need_weights!r}"
        )
    return need_weights


class KVCache(NamedTuple):
    """Keys and values already projected by a :class:`MultiHeadAttention`.

    ``keys`` (B, K, D) is ``W_k`` applied to the K keys seen so far,
    ``values`` (B, K, D) is ``W_v`` applied to the same positions.
    """

    keys: torch.Tensor
    values: torch.Tensor

    def extend(self, new: KVCache, dim: int) -> KVCache:
        """This cache followed by ``new`` along the position axis ``dim``.

        Args:
            new: the cache of the next positions, with the same shape as
                this one except along ``dim``.
            dim: the position axis: 1 for (B, K, D), 2 for (B, G, K, d).
        Returns:
            A new cache; neither this one nor ``new`` is changed.
        """
        return KVCache(
            torch.cat([self.keys, new.keys], dim=dim),
            torch.cat([self.values, new.values], dim=dim),
        )


class MultiHeadAttention(nn.Module):
    """Multi-head attention: H scaled dot-product attentions on learned
    projections, concatenated: head_i = attention(W_q^i q, W_k^i k, W_v^i v),
    output = W_o [head_1; ...; head_H].

    Args:
        num_hiddens: D, the width of every projection and of the output;
            divisible by num_heads.
        num_heads: H. dropout: on the attention weights.
        bias: whether the four projections have a bias.
        query_size, key_size, value_size: input widths (default D).
        kv_width: the output width of W_k and W_v (default D; narrower in
            :class:`course_pkg.nn.grouped_query.GroupedQueryAttention`).
        output_size: the output width of W_o (default D; a model's width
            when its heads together are not as wide, as in Gemma).
    Attributes:
        attention_weights: (B, H, Q, K) weights of the last forward call, or
            None after a fused call.
    Raises:
        TypeError, ValueError: naming a size that is not an int >= 1, a
            dropout outside [0, 1), or widths that do not divide.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        *,
        query_size: int | None = None,
        key_size: int | None = None,
        value_size: int | None = None,
        kv_width: int | None = None,
        output_size: int | None = None,
    ):
        super().__init__()
        _check_heads(
            num_hiddens,
            num_heads,
            dropout,
            query_size=query_size,
            key_size=key_size,
            value_size=value_size,
            kv_width=kv_width,
            output_size=output_size,
        )
        self.num_hiddens, self.num_heads = num_hiddens, num_heads
        self.query_size = num_hiddens if query_size is None else query_size
        self.key_size = num_hiddens if key_size is None else key_size
        self.value_size = num_hiddens if value_size is None else value_size
        self.kv_width = num_hiddens if kv_width is None else kv_width
        self.output_size = num_hiddens if output_size is None else output_size
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(self.query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(self.key_size, self.kv_width, bias=bias)
        self.W_v = nn.Linear(self.value_size, self.kv_width, bias=bias)
        self.W_o = nn.Linear(num_hiddens, self.output_size, bias=bias)
        self.attention_weights: torch.Tensor | None = None

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
        """Attend with H heads.

        Args:
            queries: (B, Q, query_size). keys: (B, K, key_size).
            values: (B, K, value_size).
            valid_lens: None, (B,) or (B, Q) numbers of valid keys.
            causal: hide keys after each query.
            need_weights: False takes the fused path (module docstring).
        Returns:
            (B, Q, D).
        Raises:
            TypeError, ValueError: on inputs that do not fit each other or
                the layer, before any computation.
        """
        self._check(queries, keys, values, valid_lens, causal, projected=False)
        queries = self.W_q(queries)  # (B, Q, D)
        keys, values = self.W_k(keys), self.W_v(values)  # (B, K, D) each
        if not need_weights:
            return self._fused(queries, keys, values, valid_lens, causal)
        return self._explicit(queries, keys, values, valid_lens, causal)

    def _explicit(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        """Projected queries (B, Q, D), keys and values (B, K, D) -> (B, Q, D):
        H attentions side by side, concatenated, mixed by W_o."""
        batch_size, num_queries = queries.shape[:2]
        heads = self.num_heads
        queries = transpose_qkv(queries, heads)  # (B*H, Q, D/H)
        keys = transpose_qkv(keys, heads)  # (B*H, K, D/H)
        values = transpose_qkv(values, heads)  # (B*H, K, D/H)
        if valid_lens is not None:  # the same valid keys in every head
            valid_lens = torch.repeat_interleave(
                valid_lens, repeats=heads, dim=0
            )  # (B*H,) or (B*H, Q)
        output = self.attention._attend(
            queries, keys, values, valid_lens, causal
        )  # (B*H, Q, D/H)
        self.attention_weights = self.attention.attention_weights.reshape(
            batch_size, heads, num_queries, keys.shape[1]
        )
        return self.W_o(transpose_output(output, heads))  # (B, Q, D)

    # -- Serving machinery (chapters "GPT" and "Attention at scale"): the
    # key/value cache, with which a decoder that feeds its target a few
    # positions at a time projects each key and value once, and the fused
    # kernel, which keeps no weights.

    def cache(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        past: KVCache | None = None,
    ) -> KVCache:
        """Project new keys and values and append them to those of ``past``.

        Args:
            keys: (B, K_new, key_size). values: (B, K_new, value_size).
            past: None, or the cache of the K_past positions before.
        Returns:
            A new :class:`KVCache` of K_past + K_new positions; ``past`` is
            not changed.
        """
        _check_multi_head_attention_cache(self, keys, values)
        new = KVCache(self.W_k(keys), self.W_v(values))  # (B, K_new, D) each
        return new if past is None else past.extend(new, dim=1)

    def attend(
        self,
        queries: torch.Tensor,
        cache: KVCache,
        valid_lens: torch.Tensor | None = None,
        *,
        causal: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """Attend from new queries over the keys and values of a cache.

        Args:
            queries: (B, Q, query_size), not yet projected.
            cache: from :meth:`cache`, K positions.
            valid_lens, causal, need_weights: as in :meth:`forward`; with
                ``causal`` the queries are the last Q of the K positions.
        Returns:
            (B, Q, D).
        Raises:
            TypeError, ValueError: on inputs that do not fit each other or
                the layer.
        """
        self._check(queries, *cache, valid_lens, causal, projected=True)
        attend = self._explicit if need_weights else self._fused
        return attend(self.W_q(queries), *cache, valid_lens, causal)

    def _fused(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        """:meth:`_explicit` in one fused kernel, keeping no weights."""
        batch_size, num_queries = queries.shape[:2]
        output = _fused_attention(
            self._split_heads(queries),
            self._split_heads(keys),
            self._split_heads(values),
            valid_lens,
            causal,
            self.attention.dropout.p if self.training else 0.0,
        )  # (B, H, Q, D/H)
        self.attention_weights = self.attention.attention_weights = None
        return self.W_o(
            output.transpose(1, 2).reshape(
                batch_size, num_queries, self.num_hiddens
            )
        )

    def _check(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None,
        causal: bool,
        projected: bool,
    ) -> None:
        """The checks of :meth:`forward` (raw keys and values) and of
        :meth:`attend` (projected ones, of width kv_width)."""
        width = self.kv_width
        check_attention_inputs(
            queries,
            keys,
            values,
            valid_lens,
            query_size=self.query_size,
            key_size=width if projected else self.key_size,
            value_size=width if projected else self.value_size,
            causal=causal,
        )
        weight = self.W_q.weight
        if queries.dtype != weight.dtype and not torch.is_autocast_enabled(
            queries.device.type
        ):
            raise TypeError(
                f"queries must have the layer's dtype {weight.dtype}, "
                f"got {queries.dtype}"
            )

    def _split_heads(
        self, X: torch.Tensor, num_heads: int | None = None
    ) -> torch.Tensor:
        """(B, T, num_heads * D/H) -> (B, num_heads, T, D/H) as a view
        (num_heads: default H): the fused path copies nothing, which makes it
        as fast as ``torch.nn.MultiheadAttention`` (bench/attention.py)."""
        heads = self.num_heads if num_heads is None else num_heads
        head_width = (
            self.num_hiddens // self.num_heads
        )  # not -1: B, T may be 0
        return X.view(X.shape[0], X.shape[1], heads, head_width).transpose(
            1, 2
        )


def _check_multi_head_attention_cache(
    layer: MultiHeadAttention, keys: object, values: object
) -> None:
    """keys (B, K_new, key_size) and values (B, K_new, value_size) tensors
    of the widths of the layer's W_k and W_v."""
    check_features("keys", keys, layer.W_k.in_features, layer)
    check_features("values", values, layer.W_v.in_features, layer)


@torch.no_grad()
def copy_weights_from_torch(
    ours: MultiHeadAttention, theirs: nn.MultiheadAttention
) -> None:
    """Give ``ours`` the weights of a ``torch.nn.MultiheadAttention``.

    Torch stacks ``[W_q; W_k; W_v]`` in ``in_proj_weight`` (and the biases in
    ``in_proj_bias``); ``out_proj`` is ``W_o``.

    Args:
        ours: a MultiHeadAttention of width D, every input, kv_width and
            output_size D.
        theirs: a ``torch.nn.MultiheadAttention`` with ``embed_dim`` D, as
            many heads, the same bias setting and one input width.
    Raises:
        TypeError: if ours or theirs is not of those classes.
        ValueError: if the widths, head counts or bias settings differ;
            nothing is copied then.
    """
    width = _check_copy_weights_from_torch(ours, theirs)
    for k, linear in enumerate((ours.W_q, ours.W_k, ours.W_v)):
        rows = slice(k * width, (k + 1) * width)
        linear.weight.copy_(theirs.in_proj_weight[rows])
        if linear.bias is not None:
            linear.bias.copy_(theirs.in_proj_bias[rows])
    ours.W_o.weight.copy_(theirs.out_proj.weight)
    if ours.W_o.bias is not None:
        ours.W_o.bias.copy_(theirs.out_proj.bias)


def _check_copy_weights_from_torch(ours: object, theirs: object) -> int:
    """ours a MultiHeadAttention of width D with every input, kv_width and
    output_size D; theirs a ``torch.nn.MultiheadAttention`` of embed_dim D,
    packed, with as many heads and the same bias setting. Returns D."""
    if not isinstance(ours, MultiHeadAttention):
        raise TypeError(
            f"ours must be a MultiHeadAttention, got {type(ours).__name__}"
        )
    if not isinstance(theirs, nn.MultiheadAttention):
        raise TypeError(
            "theirs must be a torch.nn.MultiheadAttention, "
            f"got {type(theirs).__name__}"
        )
    width = ours.num_hiddens
    widths = (
        ours.query_size,
        ours.key_size,
        ours.value_size,
        ours.kv_width,
        ours.output_size,
    )
    if set(widths) != {width}:
        raise ValueError(
            "ours must have query_size, key_size, value_size, kv_width and "
            f"output_size equal to num_hiddens ({width}), got {widths}"
        )
    if theirs.embed_dim != width or theirs.in_proj_weight is None:
        raise ValueError(
            "theirs must have embed_dim == ours.num_hiddens "
            f"({width}) and a packed in_proj_weight"
        )
    if theirs.num_heads != ours.num_heads:
        raise ValueError(
            f"theirs must have num_heads == ours.num_heads ({ours.num_heads}), "
            f"got {theirs.num_heads}"
        )
    if (ours.W_q.bias is None) != (theirs.in_proj_bias is None):
        raise ValueError("ours and theirs must both have biases or neither")
    return width


def _check_head_split(X: Any, num_heads: Any, axis: int, shape: str) -> None:
    """Refuse an X that is not a 3-D tensor whose ``axis`` splits into
    num_heads (an int >= 1) equal parts: TypeError, ValueError. Any dtype
    passes (splitting heads only moves numbers)."""
    check_tensor("X", X, 3, shape)
    check_positive_int("num_heads", num_heads)
    if X.shape[axis] % num_heads:
        raise ValueError(
            f"X must have shape {shape} with a dimension divisible by "
            f"num_heads={num_heads}, got {tuple(X.shape)}"
        )


def _check_heads(
    num_hiddens: Any,
    num_heads: Any,
    dropout: Any,
    **widths: Any,
) -> None:
    """A multi-head attention layer's sizes: num_hiddens D and num_heads H
    (ints >= 1, H dividing D), dropout in [0, 1), and the optional widths
    query_size, key_size, value_size, output_size (ints >= 1) and kv_width (a
    multiple of D / H); None means the default.

    Raises:
        TypeError: if a size is not an int or dropout not a number.
        ValueError: if a size is < 1, dropout is outside [0, 1), D is not
            divisible by H, or kv_width not by D / H.
    """
    check_positive_int("num_hiddens", num_hiddens)
    check_positive_int("num_heads", num_heads)
    check_probability("dropout", dropout)
    kv_width = widths.pop("kv_width", None)
    for name, size in widths.items():
        if size is not None:
            check_positive_int(name, size)
    if num_hiddens % num_heads != 0:
        raise ValueError(
            f"num_hiddens ({num_hiddens}) must be divisible by "
            f"num_heads ({num_heads})"
        )
    head_width = num_hiddens // num_heads
    if kv_width is not None:
        check_positive_int("kv_width", kv_width)
        if kv_width % head_width != 0:
            raise ValueError(
                f"kv_width ({kv_width}) must be a multiple of the head "
                f"width num_hiddens / num_heads = {head_width}"
            )
