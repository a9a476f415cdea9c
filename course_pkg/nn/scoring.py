"""Attention scoring functions: additive, scaled dot-product and Luong.

Chapter: "Attention scoring functions". Each layer scores every query
against every key, turns the scores into weights with
:func:`course_pkg.nn.masks.masked_softmax`, and returns the weighted sum of the
values (:class:`ScoredAttention`). :class:`DotProductAttention` also has a fused path
(:func:`fused_attention`, PyTorch's ``scaled_dot_product_attention``) that
never stores the weights.

Shape letters (see the package docstring): ``B`` batch, ``Q`` queries, ``K``
key–value pairs; ``D_q``, ``D_k``, ``d_v`` the widths of queries, keys and
values.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_attention_inputs,
    check_last_dim,
    check_probability,
    check_same_float_dtype,
    check_shape,
    check_sizes,
    check_tensor_type,
    check_valid_lens,
)
from course_pkg.nn.masks import _attention_mask, _hide_unseen, _masked_softmax


class ScoredAttention(nn.Module):
    """Attention from a score function: the weights are the masked softmax
    of ``scores(queries, keys)`` (a subclass's, e.g. :class:`LuongAttention`),
    the output their average of the values.

    Args:
        query_size: D_q. key_size: D_k. dropout: on the attention weights.
    Attributes:
        attention_weights: (B, Q, K) weights of the last forward call.
    """

    def __init__(self, query_size: int, key_size: int, dropout: float):
        super().__init__()
        _check_scored_attention_args(query_size, key_size, dropout)
        self.query_size, self.key_size = query_size, key_size
        self.projected_key_size = key_size  # a subclass may project keys
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """The keys as :meth:`scores` reads them, here unchanged: (B, K, D_k);
        query-free, so a decoder may pass it once as ``projected_keys``."""
        return keys

    def scores(
        self, queries: torch.Tensor, keys: torch.Tensor
    ) -> torch.Tensor:  # pragma: no cover - abstract
        """Unnormalised scores: queries (B, Q, D_q), keys
        ``project_keys(keys)`` (B, K, ·) -> (B, Q, K)."""
        raise NotImplementedError

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        projected_keys: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend: queries (B, Q, D_q), keys (B, K, D_k), values (B, K, d_v),
        valid_lens None, (B,) or (B, Q) numbers of valid keys -> (B, Q, d_v).

        projected_keys: None, or ``project_keys(keys)`` (B, K,
        ``projected_key_size``) computed once by the caller.
        Raises TypeError, ValueError: see :func:`~course_pkg.checks.check_attention_inputs`.
        """
        projected_keys = _checked_keys(
            self, queries, keys, values, valid_lens, projected_keys
        )
        mask = _attention_mask(
            valid_lens, queries.shape[1], keys.shape[1], False, values.device
        )  # None or (B, 1 or Q, K)
        scores = self.scores(queries, projected_keys)  # (B, Q, K)
        self.attention_weights = _masked_softmax(scores, mask)
        return torch.bmm(
            self.dropout(self.attention_weights), _hide_unseen(values, mask)
        )


def _check_scored_attention_args(
    query_size: object, key_size: object, dropout: object
) -> None:
    """query_size D_q and key_size D_k ints >= 1; dropout in [0, 1)."""
    check_sizes(query_size=query_size, key_size=key_size)
    check_probability("dropout", dropout)


def _checked_keys(
    attention: ScoredAttention,
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
    projected_keys: torch.Tensor | None,
) -> torch.Tensor:
    """Check :meth:`ScoredAttention.forward`'s arguments; return projected_keys
    (B, K, ``projected_key_size``), ``project_keys(keys)`` if it is None."""
    check_attention_inputs(
        queries,
        keys,
        values,
        valid_lens,
        query_size=attention.query_size,
        key_size=attention.key_size,
    )
    if projected_keys is None:
        return attention.project_keys(keys)
    shape = (*keys.shape[:2], attention.projected_key_size)
    check_shape("projected_keys", projected_keys, shape, "(B, K, ·)")
    return projected_keys


class AdditiveAttention(ScoredAttention):
    """Additive (Bahdanau) attention: score(q, k) = w_v^T tanh(W_q q + W_k k).

    Args:
        num_hiddens: the width of the hidden layer inside the score.
        dropout: dropout probability on the attention weights.
        query_size: D_q (default num_hiddens).
        key_size: D_k (default num_hiddens).
    """

    def __init__(
        self,
        num_hiddens: int,
        dropout: float,
        *,
        query_size: int | None = None,
        key_size: int | None = None,
    ):
        check_sizes(num_hiddens=num_hiddens)
        super().__init__(
            num_hiddens if query_size is None else query_size,
            num_hiddens if key_size is None else key_size,
            dropout,
        )
        self.W_k = nn.Linear(self.key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(self.query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.projected_key_size = num_hiddens

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """keys (B, K, D_k) -> W_k k (B, K, num_hiddens): computed once per
        sequence by a decoder, as Bahdanau et al. (2015, App. A.1.2) do."""
        return self.W_k(keys)

    def scores(
        self, queries: torch.Tensor, keys: torch.Tensor
    ) -> torch.Tensor:
        """queries (B, Q, D_q), keys W_k k (B, K, num_hiddens) -> (B, Q, K)."""
        features = torch.tanh(
            self.W_q(queries).unsqueeze(2) + keys.unsqueeze(1)
        )  # (B, Q, K, num_hiddens)
        return self.w_v(features).squeeze(-1)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention: softmax(Q K^T / sqrt(d)) V.

    ``need_weights=True`` (default) computes the weights explicitly and keeps
    them in ``attention_weights`` for plots; ``need_weights=False`` calls the
    faster :func:`fused_attention`, which stores no (B, Q, K) matrix. Both
    give the same numbers within 1e-5 in float32.

    Args:
        dropout: on the attention weights.
    Attributes:
        attention_weights: (B, Q, K) of the last call (None after a fused one).
    """

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        check_probability("dropout", dropout)
        self.dropout = nn.Dropout(dropout)
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
        """Attend: queries (B, Q, d), keys (B, K, d), values (B, K, d_v) ->
        (B, Q, d_v).

        Args:
            valid_lens: None, (B,) or (B, Q) numbers of valid keys.
            causal: hide keys after each query. need_weights: explicit path
                (keeps the weights) or fused path.
        Raises:
            TypeError, ValueError: on inputs that do not fit (or K < Q when
                causal).
        """
        _check_dot_product(queries, keys, values, valid_lens, causal)
        return self._attend(
            queries, keys, values, valid_lens, causal, need_weights
        )

    def _attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None,
        causal: bool,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """:meth:`forward` on checked inputs: queries (B, Q, d), keys (B, K, d),
        values (B, K, d_v) -> (B, Q, d_v)."""
        if not need_weights:
            self.attention_weights = None
            p = self.dropout.p if self.training else 0.0
            return _fused_attention(
                queries, keys, values, valid_lens, causal, p
            )
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        mask = _attention_mask(
            valid_lens, *scores.shape[1:], causal, values.device
        )
        self.attention_weights = _masked_softmax(scores, mask)  # (B, Q, K)
        return torch.bmm(
            self.dropout(self.attention_weights), _hide_unseen(values, mask)
        )


def _check_dot_product(
    queries: Any, keys: Any, values: Any, valid_lens: Any, causal: Any
) -> None:
    """The checks of :meth:`DotProductAttention.forward`: the attention inputs,
    and keys as wide as the queries."""
    check_attention_inputs(queries, keys, values, valid_lens, causal=causal)
    check_last_dim(
        "keys", keys, queries.shape[-1], "(B, K, d) with d that of queries"
    )


def fused_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
    causal: bool,
    dropout_p: float,
) -> torch.Tensor:
    """Scaled dot-product attention through ``F.scaled_dot_product_attention``,
    with the masks of :func:`course_pkg.nn.masks.masked_softmax`.

    Args:
        queries: (B, Q, d) or (B, H, Q, d) (heads kept as their own axis).
        keys: (B, K, d) or (B, H, K, d).
        values: (B, K, d_v) or (B, H, K, d_v).
        valid_lens: None, (B,) or (B, Q); the same lengths serve every head.
        causal: hide later keys.
        dropout_p: dropout on the weights (0 in eval).
    Returns:
        (B, Q, d_v) or (B, H, Q, d_v); a query with no valid key gets zeros, as
        in :func:`course_pkg.nn.masks.masked_softmax`, and non-finite keys or
        values that no query may see do not reach the output
        (:func:`course_pkg.nn.masks.hide_unseen`).
    Raises:
        TypeError/ValueError: naming the argument that does not fit the
            shapes above, one float dtype and device, or dropout_p in [0, 1).
    """
    _check_fused_inputs(queries, keys, values, valid_lens, dropout_p)
    return _fused_attention(
        queries, keys, values, valid_lens, causal, dropout_p
    )


def _fused_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
    causal: bool,
    dropout_p: float,
) -> torch.Tensor:
    """:func:`fused_attention` on checked inputs."""
    num_queries, num_keys = queries.shape[-2], keys.shape[-2]
    if valid_lens is None and (not causal or num_queries == num_keys):
        # No explicit mask lets torch pick its fastest kernel.
        return F.scaled_dot_product_attention(
            queries, keys, values, dropout_p=dropout_p, is_causal=causal
        )
    mask = _attention_mask(
        valid_lens, num_queries, num_keys, causal, queries.device
    )
    mask = mask.expand(queries.shape[0], num_queries, num_keys)
    # Non-finite keys or values in padding must not reach real rows.
    keys, values = _hide_unseen(keys, mask), _hide_unseen(values, mask)
    has_any = mask.any(dim=-1, keepdim=True)  # (B, Q, 1)
    if queries.dim() == 4:  # broadcast over the heads
        mask, has_any = mask[:, None], has_any[:, None]
    # A row with nothing valid would make the fused kernel return NaN: let it
    # see everything, then give it zeros; nan_to_num first, as 0 * NaN is NaN
    # (the product keeps the zeros' signs those rows always had).
    out = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask | ~has_any, dropout_p=dropout_p
    )
    if out.device.type == "cpu" and bool(out.isfinite().all()):
        return out * has_any  # the same values, a shallower graph
    return torch.where(has_any, out, out.nan_to_num() * 0)


class LuongAttention(ScoredAttention):
    """Luong et al. (2015) scores: ``dot`` q·k, ``general`` q^T W k, ``concat``
    v^T tanh(W [q; k]).

    Args:
        score: "dot", "general" or "concat".
        query_size: D_q.
        key_size: D_k (must equal D_q for "dot").
        num_hiddens: hidden width of "concat" (default D_q).
        dropout: dropout probability on the weights.
    Raises:
        TypeError: if score is not a str or a size not an int.
        ValueError: on an unknown score, a size < 1, or "dot" with
            D_q != D_k.
    """

    def __init__(
        self,
        score: str,
        query_size: int,
        key_size: int,
        num_hiddens: int | None = None,
        dropout: float = 0.0,
    ):
        _check_luong_score(score, query_size, key_size, num_hiddens)
        super().__init__(query_size, key_size, dropout)
        self.score = score
        if score == "general":
            self.W = nn.Linear(key_size, query_size, bias=False)
        elif score == "concat":
            hidden = query_size if num_hiddens is None else num_hiddens
            self.W = nn.Linear(query_size + key_size, hidden, bias=False)
            self.v = nn.Linear(hidden, 1, bias=False)

    def scores(
        self, queries: torch.Tensor, keys: torch.Tensor
    ) -> torch.Tensor:
        """queries (B, Q, D_q), keys (B, K, D_k) -> (B, Q, K) scores."""
        if self.score == "dot":
            return torch.bmm(queries, keys.transpose(1, 2))
        if self.score == "general":
            return torch.bmm(queries, self.W(keys).transpose(1, 2))
        num_queries, num_keys = queries.shape[1], keys.shape[1]
        pairs = torch.cat(
            [
                queries.unsqueeze(2).expand(-1, -1, num_keys, -1),
                keys.unsqueeze(1).expand(-1, num_queries, -1, -1),
            ],
            dim=-1,
        )  # (B, Q, K, D_q + D_k)
        return self.v(torch.tanh(self.W(pairs))).squeeze(-1)


def _check_luong_score(
    score: Any, query_size: Any, key_size: Any, num_hiddens: Any
) -> None:
    """Luong attention's score ("dot", "general" or "concat"; "dot" needs
    query_size == key_size) and num_hiddens (None or an int >= 1).

    Raises:
        TypeError: if score is not a str or num_hiddens not an int.
        ValueError: on an unknown score, num_hiddens < 1, or "dot" with
            query_size != key_size.
    """
    if not isinstance(score, str):
        raise TypeError(f"score must be a str, got {type(score).__name__}")
    if num_hiddens is not None:
        check_sizes(num_hiddens=num_hiddens)
    if score not in ("dot", "general", "concat"):
        raise ValueError(
            f"score must be 'dot', 'general' or 'concat', got {score!r}"
        )
    if score == "dot" and query_size != key_size:
        raise ValueError(
            "score='dot' needs query_size == key_size, "
            f"got {query_size} and {key_size}"
        )


def _check_fused_inputs(
    queries: Any, keys: Any, values: Any, valid_lens: Any, dropout_p: Any
) -> None:
    """What a fused attention call needs: queries (B, [H,] Q, d), keys
    (B, [H,] K, d), values (B, [H,] K, d_v) of one rank, one float dtype and
    one device; valid_lens None, (B,) or (B, Q) integer lengths on the CPU or
    that device (their values are not read: a length outside [0, K] acts
    clamped, as off the CPU); dropout_p in [0, 1). TypeError, ValueError
    naming the argument."""
    for name, X in (("queries", queries), ("keys", keys), ("values", values)):
        check_tensor_type(name, X)
        if X.dim() not in (3, 4) or X.dim() != queries.dim():
            raise ValueError(
                f"{name} must have shape (B, Q or K, d) or (B, H, Q or K, d) "
                f"like queries {tuple(queries.shape)}, got {tuple(X.shape)}"
            )
    check_same_float_dtype(queries=queries, keys=keys, values=values)
    check_valid_lens(
        "valid_lens",
        valid_lens,
        queries.shape[0],
        keys.shape[-2],
        num_queries=queries.shape[-2],
        like=("queries", queries),
        values=False,  # the kernel's callers check the range
    )
    check_probability("dropout_p", dropout_p)
