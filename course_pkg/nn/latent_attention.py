"""Multi-head latent attention (MLA): keys and values rebuilt from a small
cached latent (DeepSeek-V2, DeepSeek-AI 2024; DeepSeek-V3).

Chapter: "Today's open models". The
key/value cache of multi-head attention holds 2 H d numbers a position, that
of grouped-query attention (:mod:`course_pkg.nn.grouped_query`) 2 G d. MLA
caches one vector c_t of r numbers a position (``kv_rank``; 512 in
DeepSeek-V3) and one rotated key k^R_t of d_R numbers (``rope_width``; 64)
that every head shares; 576 numbers against the 2 * 128 * 128 = 32,768 of
its 128 heads as plain multi-head attention. For position t and head h:

- the latent c_t = RMSNorm(W_dkv x_t) (r,) and k^R_t = RoPE(W_kr x_t) (d_R,);
- the key [W_uk^h c_t ; k^R_t] (d_N + d_R,) and the value W_uv^h c_t (d_V,);
- the query [q^N_h ; RoPE(q^R_h)], from W_q x (or, with ``q_rank``, from
  W_uq RMSNorm(W_dq x), a low-rank query);
- the score (q^N_h . W_uk^h c_t + RoPE(q^R_h) . k^R_t) / sqrt(d_N + d_R).

RoPE would not commute with W_uk, so positions travel in the separate
d_R-wide part ("decoupled" RoPE). Without positions in it, the first term
can be regrouped: q^N_h . (W_uk^h c_t) = ((W_uk^h)^T q^N_h) . c_t. Absorbing
the key up-projection into the query means the keys are never rebuilt: each
head scores its r-wide query against the cached latents directly, and the
weighted sum of latents meets W_uv^h only once per query
(:meth:`MultiHeadLatentAttention.attend` with ``absorb=True``). The two ways
give the same outputs up to rounding, which the tests measure.

Shape letters (see the package docstring): ``B`` batch, ``Q`` queries fed in
one call, ``t`` positions cached so far, ``D`` width, ``H`` heads; here also
``r`` the latent width, ``dN``, ``dR``, ``dV`` the widths above.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_features,
    check_nonnegative_number,
    check_sizes,
    check_tensor,
)
from course_pkg.nn.masks import _attention_mask, _masked_softmax
from course_pkg.nn.modern_blocks import RMSNorm
from course_pkg.nn.rotary import RotaryEmbedding


class LatentCache(NamedTuple):
    """What MLA caches: ``latents`` (B, t, r), normalised, and ``rope_keys``
    (B, t, dR), already rotated to their positions."""

    latents: torch.Tensor
    rope_keys: torch.Tensor


class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention (module docstring).

    Args:
        num_hiddens: D, the input and output width.
        num_heads: H.
        kv_rank: r, the latent's width.
        nope_width: dN, each head's query/key part without positions.
        rope_width: dR, the rotated part (even), its key shared by the heads.
        value_width: dV, each head's value width.
        q_rank: None (queries W_q x), or the width of a low-rank query.
        rotary: the RoPE of the rotated part (default base 10000).
        norm_eps: eps of the latent's (and the low-rank query's) RMSNorm.
    Attributes:
        W_q: ``Linear(D, H (dN + dR))``, or ``Sequential(Linear(D, q_rank),
            RMSNorm, Linear(q_rank, H (dN + dR)))``.
        W_kv_down: ``Linear(D, r + dR)``: the latent and the rope key.
        kv_norm: RMSNorm(r). W_kv_up: ``Linear(r, H (dN + dV))``: each
            head's key part and value from the latent. W_o: ``Linear(H dV,
            D)``.
        attention_weights: (B, H, Q, t) weights of the last call.
    Raises:
        TypeError/ValueError: naming a width that is not an int >= 1, an odd
            rope_width, or a rotary of another width.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        kv_rank: int,
        *,
        nope_width: int,
        rope_width: int,
        value_width: int,
        q_rank: int | None = None,
        rotary: RotaryEmbedding | None = None,
        norm_eps: float = 1e-6,
    ):
        rotary = _check_options(
            num_hiddens, num_heads, kv_rank, nope_width, rope_width,
            value_width, q_rank, rotary, norm_eps,
        )  # fmt: skip
        super().__init__()
        H, query_width = num_heads, num_heads * (nope_width + rope_width)
        self.num_hiddens, self.num_heads, self.kv_rank = (
            num_hiddens,
            H,
            kv_rank,
        )
        self.nope_width, self.rope_width = nope_width, rope_width
        self.value_width = value_width
        if q_rank is None:
            self.W_q = nn.Linear(num_hiddens, query_width, bias=False)
        else:
            self.W_q = nn.Sequential(
                nn.Linear(num_hiddens, q_rank, bias=False),
                RMSNorm(q_rank, norm_eps),
                nn.Linear(q_rank, query_width, bias=False),
            )
        self.W_kv_down = nn.Linear(
            num_hiddens, kv_rank + rope_width, bias=False
        )
        self.kv_norm = RMSNorm(kv_rank, norm_eps)
        self.W_kv_up = nn.Linear(
            kv_rank, H * (nope_width + value_width), bias=False
        )
        self.W_o = nn.Linear(H * value_width, num_hiddens, bias=False)
        self.rotary = rotary
        self.attention_weights: torch.Tensor | None = None

    def forward(
        self,
        X: torch.Tensor,
        *,
        absorb: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """Causal self-attention over X (B, T, D) -> (B, T, D), through
        :meth:`cache` and :meth:`attend` (absorb, need_weights as there)."""
        self._check_input(X)
        return self._attend(X, self._cache(X, None), absorb, need_weights)

    def cache(
        self, X: torch.Tensor, past: LatentCache | None = None
    ) -> LatentCache:
        """The latents and rotated rope keys of X (B, Q, D), at the positions
        after those of ``past``, appended to it (which is not changed).

        Raises:
            TypeError/ValueError: if X is not (B, Q, D) of the layer's dtype,
                or past is not a LatentCache of this layer for X's batch.
        """
        _check_multi_head_latent_attention_cache(self, X, past)
        return self._cache(X, past)

    def attend(
        self,
        X: torch.Tensor,
        cache: LatentCache,
        *,
        absorb: bool = False,
        need_weights: bool = True,
    ) -> torch.Tensor:
        """Causal attention from the last Q positions, X (B, Q, D), over the
        t cached ones (X's among them) -> (B, Q, D).

        absorb: score the queries against the latents with W_uk moved to the
        query side, and apply W_uv after the weighted sum (module docstring);
        the same result, the keys and values never rebuilt. need_weights:
        False (without absorb) takes PyTorch's fused kernel and keeps no
        weights.
        """
        _check_multi_head_latent_attention_attend(self, X, cache)
        return self._attend(X, cache, absorb, need_weights)

    def cache_numel(self, batch_size: int, num_steps: int) -> int:
        """Numbers cached for batch_size sequences of num_steps positions:
        B T (r + dR)."""
        check_sizes(batch_size=batch_size, num_steps=num_steps)
        return batch_size * num_steps * (self.kv_rank + self.rope_width)

    def _cache(self, X: torch.Tensor, past: LatentCache | None) -> LatentCache:
        offset = 0 if past is None else past.latents.shape[1]
        latents, rope_keys = self.W_kv_down(X).split(
            [self.kv_rank, self.rope_width], dim=-1
        )  # (B, Q, r), (B, Q, dR)
        new = LatentCache(
            self.kv_norm._normalise(latents),
            self.rotary._rotate(rope_keys, offset),
        )
        if past is None:
            return new
        return LatentCache(*(torch.cat(pair, 1) for pair in zip(past, new)))

    def _attend(
        self,
        X: torch.Tensor,
        cache: LatentCache,
        absorb: bool,
        need_weights: bool = True,
    ) -> torch.Tensor:
        B, Q, H = X.shape[0], X.shape[1], self.num_heads
        t = cache.latents.shape[1]
        queries = self.W_q(X).view(B, Q, H, -1).transpose(1, 2)
        q_nope, q_rope = queries.split([self.nope_width, self.rope_width], -1)
        q_rope = self.rotary._rotate(q_rope, t - Q)  # (B, H, Q, dR)
        if not need_weights and not absorb:
            return self._fused(q_nope, q_rope, cache)
        scores = q_rope @ cache.rope_keys[:, None].transpose(-1, -2)
        up = self.W_kv_up.weight.view(H, -1, self.kv_rank)  # (H, dN + dV, r)
        W_uk, W_uv = up.split([self.nope_width, self.value_width], dim=1)
        if absorb:  # q^N . W_uk c = (W_uk^T q^N) . c
            q_latent = q_nope @ W_uk  # (B, H, Q, r)
            scores = scores + q_latent @ cache.latents[:, None].transpose(
                -1, -2
            )
        else:
            keys = (W_uk @ cache.latents[:, None].transpose(-1, -2)).transpose(
                -1, -2
            )
            scores = scores + q_nope @ keys.transpose(
                -1, -2
            )  # keys (B, H, t, dN)
        scores = scores / math.sqrt(self.nope_width + self.rope_width)
        mask = _attention_mask(None, Q, t, True, scores.device)  # (Q, t)
        weights = _masked_softmax(scores, mask)  # (B, H, Q, t)
        self.attention_weights = weights
        if absorb:  # the weighted sum of latents, then W_uv once per query
            heads = (weights @ cache.latents[:, None]) @ W_uv.transpose(-1, -2)
        else:
            values = cache.latents[:, None] @ W_uv.transpose(
                -1, -2
            )  # (B, H, t, dV)
            heads = weights @ values
        return self.W_o(
            heads.transpose(1, 2).reshape(B, Q, H * self.value_width)
        )

    def _fused(
        self, q_nope: torch.Tensor, q_rope: torch.Tensor, cache: LatentCache
    ) -> torch.Tensor:
        """The plain path through PyTorch's fused kernel: keys [W_uk c ; k^R]
        and values W_uv c rebuilt, (B, H, t, .), then causal
        scaled_dot_product_attention; no weights kept."""
        B, H, Q = q_nope.shape[:3]
        t = cache.latents.shape[1]
        kv = self.W_kv_up(cache.latents).view(B, t, H, -1).transpose(1, 2)
        k_nope, values = kv.split([self.nope_width, self.value_width], -1)
        rope_keys = cache.rope_keys[:, None].expand(B, H, t, self.rope_width)
        keys = torch.cat([k_nope, rope_keys], -1)  # (B, H, t, dN + dR)
        queries = torch.cat([q_nope, q_rope], -1)  # (B, H, Q, dN + dR)
        # Q = t: the kernel's own causal mask; one query sees every key;
        # otherwise the last Q of t positions, a (Q, t) mask
        mask = None
        if Q not in (1, t):
            mask = _attention_mask(None, Q, t, True, keys.device)
        heads = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask, is_causal=1 < Q == t
        )
        self.attention_weights = None
        return self.W_o(
            heads.transpose(1, 2).reshape(B, Q, H * self.value_width)
        )

    def _check_input(self, X: object) -> None:
        check_tensor("X", X, 3, f"(B, Q, {self.num_hiddens})")
        check_features("X", X, self.num_hiddens, self)

    def _check_cache(self, cache: object, batch_size: int) -> None:
        if cache is None:
            return
        if not isinstance(cache, LatentCache):
            raise TypeError(
                f"cache must be a LatentCache from cache(), got {type(cache).__name__}"
            )
        widths = (self.kv_rank, self.rope_width)
        for name, tensor, width in zip(LatentCache._fields, cache, widths):
            check_tensor(
                f"cache.{name}", tensor, 3, f"(B={batch_size}, t, {width})"
            )
            if tensor.shape[0] != batch_size or tensor.shape[2] != width:
                raise ValueError(
                    f"cache.{name} must have shape (B={batch_size}, t, {width}), "
                    f"got {tuple(tensor.shape)}"
                )
        if cache.latents.shape[1] != cache.rope_keys.shape[1]:
            raise ValueError(
                "cache.latents and cache.rope_keys must hold as many positions, got "
                f"{cache.latents.shape[1]} and {cache.rope_keys.shape[1]}"
            )


def _check_multi_head_latent_attention_cache(
    layer: MultiHeadLatentAttention, X: object, past: object
) -> None:
    """X (B, Q, D) of the layer's dtype and device; past None or a
    LatentCache of latents (B, t, r) and rope_keys (B, t, dR)."""
    layer._check_input(X)
    layer._check_cache(past, X.shape[0])


def _check_multi_head_latent_attention_attend(
    layer: MultiHeadLatentAttention, X: object, cache: object
) -> None:
    """X (B, Q, D) of the layer's dtype and device; cache a LatentCache of
    latents (B, t, r) and rope_keys (B, t, dR) with t >= Q."""
    layer._check_input(X)
    layer._check_cache(cache, X.shape[0])
    if cache.latents.shape[1] < X.shape[1]:
        raise ValueError(
            f"cache must hold at least X's Q={X.shape[1]} positions, got "
            f"{cache.latents.shape[1]}"
        )


def _check_options(
    num_hiddens: object,
    num_heads: object,
    kv_rank: object,
    nope_width: object,
    rope_width: object,
    value_width: object,
    q_rank: object,
    rotary: object,
    norm_eps: object = 1e-6,
) -> RotaryEmbedding:
    """The layer's sizes (ints >= 1, rope_width even), rotary (None or a
    RotaryEmbedding of rope_width) and norm_eps (a number >= 0), refused
    naming the argument; returns the rotary to use."""
    check_nonnegative_number("norm_eps", norm_eps)
    check_sizes(
        num_hiddens=num_hiddens, num_heads=num_heads, kv_rank=kv_rank,
        nope_width=nope_width, rope_width=rope_width,
        value_width=value_width,
    )  # fmt: skip
    if q_rank is not None:
        check_sizes(q_rank=q_rank)
    if rope_width % 2:
        raise ValueError(f"rope_width must be even, got {rope_width}")
    if rotary is None:
        return RotaryEmbedding(rope_width)
    if not isinstance(rotary, RotaryEmbedding):
        raise TypeError(
            f"rotary must be a RotaryEmbedding, got {type(rotary).__name__}"
        )
    if rotary.head_width != rope_width:
        raise ValueError(
            f"rotary must rotate rope_width={rope_width} features, got "
            f"{rotary.head_width}"
        )
    return rotary
