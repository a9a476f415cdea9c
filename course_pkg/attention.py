"""Attention scoring functions, masked softmax and multi-head attention.

Chapters: "Attention scoring functions" (masked softmax, additive, scaled
dot-product and Luong scores), "Multi-head attention", "Self-attention and
positional encoding" and "The Transformer".

Shape letters, used everywhere in the course: ``B`` batch, ``Q`` number of
queries, ``K`` number of key–value pairs, ``D`` model width (``num_hiddens``),
``H`` heads.

How ``valid_lens`` is checked. Its type, rank and batch size are checked on
every call: that reads only shapes, which costs nothing. Its *values*
(negative, or longer than the keys) are checked only when it lives on the CPU:
on a GPU, reading values forces a device-to-host synchronisation on every call,
and a ``meta`` tensor has no values at all. Off the CPU an out-of-range length
is therefore not refused; it behaves as if clamped to ``[0, K]`` (a negative
length masks every key, a too-long one masks none), so the result is still
finite.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------- input checks


def _check_rank(
    name: str, tensor: torch.Tensor, rank: int, shape: str
) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}, got {type(tensor).__name__}"
        )
    if tensor.dim() != rank:
        raise ValueError(
            f"{name} must have shape {shape}, got {tuple(tensor.shape)}"
        )


def _check_valid_lens(
    valid_lens: torch.Tensor | None,
    batch_size: int,
    num_queries: int,
    num_keys: int,
) -> None:
    """Refuse a valid_lens that cannot describe a (B, Q, K) score tensor (see
    module docstring).
    """
    if valid_lens is None:
        return
    if not isinstance(valid_lens, torch.Tensor):
        raise TypeError(
            f"valid_lens must be a torch.Tensor of shape (B,) or (B, Q), got {type(valid_lens).__name__}"
        )
    if (
        valid_lens.dtype.is_floating_point
        or valid_lens.dtype.is_complex
        or valid_lens.dtype == torch.bool
    ):
        raise TypeError(
            f"valid_lens must hold integers, got dtype {valid_lens.dtype}"
        )
    expected = f"(B,)=({batch_size},) or (B, Q)=({batch_size}, {num_queries})"
    if valid_lens.dim() == 1:
        if valid_lens.shape[0] != batch_size:
            raise ValueError(
                f"valid_lens must have shape {expected}, got {tuple(valid_lens.shape)}"
            )
    elif valid_lens.dim() == 2:
        if tuple(valid_lens.shape) != (batch_size, num_queries):
            raise ValueError(
                f"valid_lens must have shape {expected}, got {tuple(valid_lens.shape)}"
            )
    else:
        raise ValueError(
            f"valid_lens must have shape {expected}, got rank {valid_lens.dim()}"
        )
    if valid_lens.device.type == "cpu" and valid_lens.numel() > 0:
        if int(valid_lens.min()) < 0:
            raise ValueError(
                f"valid_lens must be >= 0, got minimum {int(valid_lens.min())}"
            )
        if int(valid_lens.max()) > num_keys:
            raise ValueError(
                f"valid_lens must be <= K={num_keys} (the number of keys), got {int(valid_lens.max())}"
            )


# ----------------------------------------------------------------------- masks


def sequence_mask(valid_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean mask that is True where a position holds a real token.

    Args:
        valid_lens: (B,) or (B, Q) integer lengths.
        max_len: K, the number of key positions.
    Returns:
        (B, 1, K) or (B, Q, K) bool tensor on valid_lens' device.
    Raises:
        ValueError: if valid_lens is not 1-D or 2-D.
    """
    if valid_lens.dim() not in (1, 2):
        raise ValueError(
            f"valid_lens must have shape (B,) or (B, Q), got {tuple(valid_lens.shape)}"
        )
    positions = torch.arange(max_len, device=valid_lens.device)
    lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens
    return positions < lens[..., None]  # (B, 1, K) or (B, Q, K)


def causal_mask(
    num_queries: int, num_keys: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean mask that lets query i see keys 0..i + (K - Q), i.e. never a
    later position.

    When Q < K (decoding one step with a cache of past keys) the queries are
    the *last* Q positions.

    Args:
        num_queries: Q.
        num_keys: K, with K >= Q.
        device: where to build the mask.
    Returns:
        (1, Q, K) bool tensor.
    Raises:
        ValueError: if K < Q.
    """
    if num_keys < num_queries:
        raise ValueError(
            f"a causal mask needs K >= Q, got Q={num_queries}, K={num_keys}"
        )
    query_pos = torch.arange(num_queries, device=device)[:, None] + (
        num_keys - num_queries
    )
    key_pos = torch.arange(num_keys, device=device)[None, :]
    return (key_pos <= query_pos)[None]


def attention_mask(
    valid_lens: torch.Tensor | None,
    num_queries: int,
    num_keys: int,
    causal: bool,
    device: torch.device,
) -> torch.Tensor | None:
    """Combine a padding mask and a causal mask (True = may attend); None when
    nothing is masked.

    Returns:
        None, or a bool tensor broadcastable to (B, Q, K).
    """
    if valid_lens is not None and valid_lens.device != device:
        valid_lens = valid_lens.to(
            device
        )  # lengths are often kept on the CPU next to GPU scores
    mask = None if valid_lens is None else sequence_mask(valid_lens, num_keys)
    if causal:
        tri = causal_mask(num_queries, num_keys, device)
        mask = tri if mask is None else mask & tri
    return mask


def masked_softmax(
    X: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Softmax over the last axis that gives weight 0 to masked key positions.

    A row with no valid position returns all zeros (never NaN), so a padded
    query contributes nothing.

    Args:
        X: (B, Q, K) scores.
        valid_lens: None, (B,) one length per example, or (B, Q) one per query.
        causal: also hide keys that come after each query (see
            :func:`causal_mask`).
    Returns:
        (B, Q, K) weights; each row sums to 1 over its valid positions, or is
        all 0.
    Raises:
        ValueError/TypeError: if X is not 3-D or valid_lens does not fit it
            (see module docstring).
    """
    _check_rank("X", X, 3, "(B, Q, K)")
    batch_size, num_queries, num_keys = X.shape
    _check_valid_lens(valid_lens, batch_size, num_queries, num_keys)
    mask = attention_mask(valid_lens, num_queries, num_keys, causal, X.device)
    if mask is None:
        return F.softmax(X, dim=-1)
    # The most negative finite number, not -inf: a fully masked row then stays
    # finite, and the multiplication below turns it into zeros.
    X = X.masked_fill(~mask, torch.finfo(X.dtype).min)
    return F.softmax(X, dim=-1) * mask


# ----------------------------------------------------------- scoring functions


def _check_qkv(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> None:
    _check_rank("queries", queries, 3, "(B, Q, d_q)")
    _check_rank("keys", keys, 3, "(B, K, d_k)")
    _check_rank("values", values, 3, "(B, K, d_v)")
    if not queries.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            "queries, keys and values must share the batch size B, got "
            f"{queries.shape[0]}, {keys.shape[0]}, {values.shape[0]}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            f"keys (B, K, d_k) and values (B, K, d_v) must have the same K, got {keys.shape[1]} and {values.shape[1]}"
        )


def _check_last_dim(
    name: str, tensor: torch.Tensor, expected: int, shape: str
) -> None:
    if tensor.shape[-1] != expected:
        raise ValueError(
            f"{name} must have shape {shape} with last dim {expected}, got {tuple(tensor.shape)}"
        )


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: score(q, k) = w_v^T tanh(W_q q + W_k k).

    Args:
        num_hiddens: h, the width of the hidden layer inside the score.
        dropout: dropout probability on the attention weights.
        query_size: d_q (default num_hiddens).
        key_size: d_k (default num_hiddens).
    Attributes:
        attention_weights: (B, Q, K) weights of the last forward call.
    """

    def __init__(
        self,
        num_hiddens: int,
        dropout: float,
        *,
        query_size: int | None = None,
        key_size: int | None = None,
    ):
        super().__init__()
        self.query_size = query_size or num_hiddens
        self.key_size = key_size or num_hiddens
        self.W_k = nn.Linear(self.key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(self.query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend.

        Args:
            queries: (B, Q, d_q).
            keys: (B, K, d_k).
            values: (B, K, d_v).
            valid_lens: None, (B,) or (B, Q) numbers of valid keys.
        Returns:
            (B, Q, d_v).
        Raises:
            ValueError/TypeError: on shapes that do not fit each other or the
                layer.
        """
        _check_qkv(queries, keys, values)
        _check_last_dim(
            "queries", queries, self.query_size, "(B, Q, query_size)"
        )
        _check_last_dim("keys", keys, self.key_size, "(B, K, key_size)")
        _check_valid_lens(
            valid_lens, queries.shape[0], queries.shape[1], keys.shape[1]
        )
        features = torch.tanh(
            self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        )  # (B, Q, K, h)
        scores = self.w_v(features).squeeze(-1)  # (B, Q, K)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention: softmax(Q K^T / sqrt(d)) V.

    Two paths give the same numbers (within 1e-5 in float32). With
    ``need_weights=True`` (default) the weights are computed explicitly and
    kept in ``attention_weights`` for plots; with ``need_weights=False`` the
    fused ``torch.nn.functional.scaled_dot_product_attention`` is used, which
    never stores the (B, Q, K) matrix and is faster, and ``attention_weights``
    is None.

    Args:
        dropout: dropout probability on the attention weights.
    Attributes:
        attention_weights: (B, Q, K) weights of the last forward call, or None
            after a fused call.
    """

    def __init__(self, dropout: float = 0.0):
        super().__init__()
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
        """Attend.

        Args:
            queries: (B, Q, d).
            keys: (B, K, d).
            values: (B, K, d_v).
            valid_lens: None, (B,) or (B, Q) numbers of valid keys.
            causal: hide keys after each query (see :func:`causal_mask`).
            need_weights: compute and keep the weights (explicit path) or not
                (fused path).
        Returns:
            (B, Q, d_v).
        Raises:
            ValueError/TypeError: on shapes that do not fit each other.
        """
        _check_qkv(queries, keys, values)
        _check_last_dim(
            "keys", keys, queries.shape[-1], "(B, K, d) with d that of queries"
        )
        batch_size, num_queries, d = queries.shape
        num_keys = keys.shape[1]
        _check_valid_lens(valid_lens, batch_size, num_queries, num_keys)
        if causal and num_keys < num_queries:
            raise ValueError(
                f"causal attention needs K >= Q, got Q={num_queries}, K={num_keys}"
            )
        if need_weights:
            scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(
                d
            )  # (B, Q, K)
            self.attention_weights = masked_softmax(scores, valid_lens, causal)
            return torch.bmm(self.dropout(self.attention_weights), values)
        self.attention_weights = None
        return fused_attention(
            queries,
            keys,
            values,
            valid_lens,
            causal,
            self.dropout.p if self.training else 0.0,
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
    same masks as ours.

    Args:
        queries: (B, Q, d) or (B, H, Q, d) (heads kept as their own axis).
        keys: (B, K, d) or (B, H, K, d).
        values: (B, K, d_v) or (B, H, K, d_v).
        valid_lens: None, (B,) or (B, Q); the same lengths serve every head.
        causal: hide later keys.
        dropout_p: dropout on the weights (0 in eval).
    Returns:
        (B, Q, d_v) or (B, H, Q, d_v); a query with no valid key gets zeros, as
        in :func:`masked_softmax`.
    """
    num_queries, num_keys = queries.shape[-2], keys.shape[-2]
    if valid_lens is None and (not causal or num_queries == num_keys):
        # No explicit mask lets torch pick its fastest kernel.
        return F.scaled_dot_product_attention(
            queries, keys, values, dropout_p=dropout_p, is_causal=causal
        )
    mask = attention_mask(
        valid_lens, num_queries, num_keys, causal, queries.device
    )
    mask = mask.expand(queries.shape[0], num_queries, num_keys)
    has_any = mask.any(dim=-1, keepdim=True)  # (B, Q, 1)
    if queries.dim() == 4:
        mask, has_any = (
            mask[:, None],
            has_any[:, None],
        )  # broadcast over the heads
    # A row with nothing valid would make the fused kernel return NaN: let it
    # see everything, then zero its output.
    out = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask | ~has_any, dropout_p=dropout_p
    )
    return out * has_any


class LuongAttention(nn.Module):
    """Luong et al. (2015) scores: ``dot`` q·k, ``general`` q^T W k, ``concat``
    v^T tanh(W [q; k]).

    Args:
        score: "dot", "general" or "concat".
        query_size: d_q.
        key_size: d_k (must equal d_q for "dot").
        num_hiddens: hidden width of "concat" (default d_q).
        dropout: dropout probability on the weights.
    Attributes:
        attention_weights: (B, Q, K) weights of the last forward call.
    Raises:
        ValueError: on an unknown score, or "dot" with d_q != d_k.
    """

    def __init__(
        self,
        score: str,
        query_size: int,
        key_size: int,
        num_hiddens: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        if score not in ("dot", "general", "concat"):
            raise ValueError(
                f"score must be 'dot', 'general' or 'concat', got {score!r}"
            )
        if score == "dot" and query_size != key_size:
            raise ValueError(
                f"score='dot' needs query_size == key_size, got {query_size} and {key_size}"
            )
        self.score, self.query_size, self.key_size = (
            score,
            query_size,
            key_size,
        )
        if score == "general":
            self.W = nn.Linear(key_size, query_size, bias=False)
        elif score == "concat":
            hidden = num_hiddens or query_size
            self.W = nn.Linear(query_size + key_size, hidden, bias=False)
            self.v = nn.Linear(hidden, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def scores(
        self, queries: torch.Tensor, keys: torch.Tensor
    ) -> torch.Tensor:
        """Unnormalised scores: queries (B, Q, d_q), keys (B, K, d_k) -> (B, Q,
        K).
        """
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
        )  # (B, Q, K, d_q + d_k)
        return self.v(torch.tanh(self.W(pairs))).squeeze(-1)

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """queries (B, Q, d_q), keys (B, K, d_k), values (B, K, d_v),
        valid_lens None/(B,)/(B, Q) -> (B, Q, d_v).
        """
        _check_qkv(queries, keys, values)
        _check_last_dim(
            "queries", queries, self.query_size, "(B, Q, query_size)"
        )
        _check_last_dim("keys", keys, self.key_size, "(B, K, key_size)")
        _check_valid_lens(
            valid_lens, queries.shape[0], queries.shape[1], keys.shape[1]
        )
        self.attention_weights = masked_softmax(
            self.scores(queries, keys), valid_lens
        )
        return torch.bmm(self.dropout(self.attention_weights), values)


# -------------------------------------------------------- multi-head attention


def transpose_qkv(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the last axis into heads and fold the heads into the batch.

    Args:
        X: (B, T, D) with D divisible by H = num_heads.
    Returns:
        (B * H, T, D / H); rows b*H .. b*H + H - 1 are the heads of example b.
    """
    batch_size, steps, width = X.shape
    X = X.reshape(
        batch_size, steps, num_heads, width // num_heads
    )  # (B, T, H, D/H)
    return X.permute(0, 2, 1, 3).reshape(
        batch_size * num_heads, steps, width // num_heads
    )


def transpose_output(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo :func:`transpose_qkv`: (B * H, T, D / H) -> (B, T, D), heads
    concatenated.
    """
    folded, steps, head_width = X.shape
    X = X.reshape(
        folded // num_heads, num_heads, steps, head_width
    )  # (B, H, T, D/H)
    return X.permute(0, 2, 1, 3).reshape(
        folded // num_heads, steps, num_heads * head_width
    )


class MultiHeadAttention(nn.Module):
    """Multi-head attention: H scaled dot-product attentions on learned
    projections, concatenated.

    head_i = attention(W_q^i q, W_k^i k, W_v^i v); output = W_o [head_1; ...;
    head_H].

    Args:
        num_hiddens: D, the width of every projection and of the output;
            divisible by num_heads.
        num_heads: H.
        dropout: dropout probability on the attention weights.
        bias: whether the four projections have a bias.
        query_size, key_size, value_size: input widths (default D).
    Attributes:
        attention_weights: (B, H, Q, K) weights of the last forward call, or
            None after a fused call.
    Raises:
        ValueError: if num_hiddens is not divisible by num_heads.
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
    ):
        super().__init__()
        if num_heads <= 0 or num_hiddens % num_heads != 0:
            raise ValueError(
                f"num_hiddens ({num_hiddens}) must be divisible by num_heads ({num_heads})"
            )
        self.num_hiddens, self.num_heads = num_hiddens, num_heads
        self.query_size = query_size or num_hiddens
        self.key_size = key_size or num_hiddens
        self.value_size = value_size or num_hiddens
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(self.query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(self.key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(self.value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
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
            queries: (B, Q, query_size).
            keys: (B, K, key_size).
            values: (B, K, value_size).
            valid_lens: None, (B,) or (B, Q) numbers of valid keys.
            causal: hide keys after each query.
            need_weights: explicit path (keeps weights) or fused.
        Returns:
            (B, Q, D).
        Raises:
            ValueError/TypeError: on shapes that do not fit each other or the
                layer.
        """
        _check_qkv(queries, keys, values)
        _check_last_dim(
            "queries", queries, self.query_size, "(B, Q, query_size)"
        )
        _check_last_dim("keys", keys, self.key_size, "(B, K, key_size)")
        _check_last_dim(
            "values", values, self.value_size, "(B, K, value_size)"
        )
        batch_size, num_queries = queries.shape[:2]
        _check_valid_lens(valid_lens, batch_size, num_queries, keys.shape[1])
        return self.attend_projected(
            queries,
            self.W_k(keys),
            self.W_v(values),
            valid_lens,
            causal=causal,
            need_weights=need_weights,
        )

    def attend_projected(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        causal: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """The forward pass after W_k and W_v: what a decoder calls when it
        caches projected keys/values.

        Args:
            queries: (B, Q, query_size), not yet projected.
            keys: (B, K, D), already W_k k.
            values: (B, K, D), already W_v v.
            valid_lens, causal, need_weights: as in :meth:`forward` (not
            checked again here).
        Returns:
            (B, Q, D).
        """
        batch_size, num_queries = queries.shape[:2]
        heads = self.num_heads
        if not need_weights:
            # Fused path: heads as a view (B, H, T, D/H), no copies; this is
            # what makes it as fast as torch.nn.MultiheadAttention
            # (bench/attention.py).
            def split(X: torch.Tensor) -> torch.Tensor:
                return X.view(batch_size, X.shape[1], heads, -1).transpose(
                    1, 2
                )

            output = fused_attention(
                split(self.W_q(queries)),
                split(keys),
                split(values),
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
        queries = transpose_qkv(self.W_q(queries), heads)  # (B*H, Q, D/H)
        keys = transpose_qkv(keys, heads)  # (B*H, K, D/H)
        values = transpose_qkv(values, heads)  # (B*H, K, D/H)
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(
                valid_lens, repeats=heads, dim=0
            )  # (B*H,) or (B*H, Q)
        output = self.attention(
            queries, keys, values, valid_lens, causal=causal
        )
        self.attention_weights = self.attention.attention_weights.reshape(
            batch_size, heads, num_queries, -1
        )
        return self.W_o(transpose_output(output, heads))  # (B, Q, D)
