"""T5's relative position bias: a learned score per head for each bucket of
key-minus-query offsets (Raffel et al. 2020; the buckets of Mesh
TensorFlow).

Chapter: "Today's open models". T5 adds no position to the tokens. Each head
h adds a learned number b_h(bucket(j - i)) to the score of query i and key
j, shared by all layers (T5 computes it in the first layer and passes it
on). The offsets go into buckets: half of them (per direction) hold one
offset each, 0, 1, ..., n/2 - 1; the other half cover the offsets up to
``max_distance`` in logarithmically wider ranges, and every offset beyond
falls in the last bucket. Near offsets are told apart, far ones only
roughly, and any length works.

An encoder (``bidirectional=True``) splits the buckets between keys before
and after the query; a decoder, which sees only earlier keys, gives all
buckets to those (later keys, masked anyway, land in bucket 0).

Shape letters (see the package docstring): ``H`` heads, ``Q`` queries,
``K`` keys.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_pkg.checks import (
    check_bool,
    check_integer_dtype,
    check_sizes,
    check_tensor_type,
)
from course_pkg.nn.masks import query_key_distance


def relative_position_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """T5's bucket of each key-minus-query offset.

    With n = num_buckets (n // 2 per direction when bidirectional, later
    keys in the upper half) and m = n // 2 after that halving: an offset of
    size r < m is its own bucket r; a larger one goes to
    m + floor(log(r / m) / log(max_distance / m) * (n - m)), at most n - 1.
    The logarithm is taken in float32, as T5 (and Mesh TensorFlow) did, so
    that offsets on a boundary fall where they fell for the published
    models.

    Args:
        relative_position: integer (int64 or int32) tensor of any shape, key
            position minus query position (negative: an earlier key).
        bidirectional: True for an encoder (both directions), False for a
            decoder (later keys, offset > 0, all go to bucket 0).
        num_buckets: n >= 4 when bidirectional, n >= 2 otherwise.
        max_distance: offsets of this size and beyond share the last bucket;
            > m (the exact buckets).
    Returns:
        int64 tensor of relative_position's shape, values in [0, n).
    Raises:
        TypeError: if relative_position is not an integer tensor,
            bidirectional not a bool or a size not an int.
        ValueError: if num_buckets or max_distance is too small.
    """
    _check_relative_position_bucket(
        relative_position, bidirectional, num_buckets, max_distance
    )
    return _bucket(relative_position, bidirectional, num_buckets, max_distance)


def _check_relative_position_bucket(
    relative_position: object,
    bidirectional: object,
    num_buckets: object,
    max_distance: object,
) -> None:
    """relative_position an integer tensor of any shape; bidirectional a
    bool; num_buckets an int >= 4 (>= 2 one-way); max_distance an int above
    the exact buckets (:func:`_check_buckets`)."""
    check_tensor_type("relative_position", relative_position)
    check_integer_dtype("relative_position", relative_position, "offsets")
    _check_buckets(bidirectional, num_buckets, max_distance)


def _check_buckets(
    bidirectional: object, num_buckets: object, max_distance: object
) -> None:
    check_bool("bidirectional", bidirectional)
    check_sizes(num_buckets=num_buckets, max_distance=max_distance)
    least = 4 if bidirectional else 2
    if num_buckets < least:
        raise ValueError(
            f"num_buckets must be >= {least} (bidirectional={bidirectional}), "
            f"got {num_buckets}"
        )
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if max_distance <= exact:
        raise ValueError(
            f"max_distance must be > {exact} (the buckets of one offset each "
            f"for num_buckets={num_buckets}), got {max_distance}"
        )


def _bucket(
    relative_position: torch.Tensor,
    bidirectional: bool,
    num_buckets: int,
    max_distance: int,
) -> torch.Tensor:
    """:func:`relative_position_bucket` on checked arguments."""
    relative_position = relative_position.long()
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:  # later keys count as offset 0
        distance = (-relative_position).clamp(min=0)
    exact = num_buckets // 2
    # the log of a distance below `exact` is not used; clamp it away from 0
    far = distance.clamp(min=exact).float()
    log_bucket = (
        exact
        + (
            torch.log(far / exact)
            / math.log(max_distance / exact)
            * (num_buckets - exact)
        ).long()
    )
    log_bucket = log_bucket.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, log_bucket)


class RelativePositionBias(nn.Module):
    """T5's learned bias of the attention scores, one per head and bucket.

    Args:
        num_heads: H.
        num_buckets: n (T5: 32); see :func:`relative_position_bucket`.
        max_distance: offsets beyond share a bucket (T5: 128).
        bidirectional: True in an encoder, False in a decoder's
            self-attention.
    Attributes:
        embedding: ``nn.Embedding(num_buckets, num_heads)``: row b holds the
            H heads' bias for bucket b (Hugging Face's
            ``relative_attention_bias``, in the same layout).
    Raises:
        TypeError, ValueError: as :func:`relative_position_bucket`, and for a
            num_heads that is not an int >= 1.
    """

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        _check_relative_position_bias_args(
            num_heads, num_buckets, max_distance, bidirectional
        )
        self.num_heads, self.num_buckets = num_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.embedding = nn.Embedding(num_buckets, num_heads)

    def forward(self, num_queries: int, num_keys: int) -> torch.Tensor:
        """The bias to add to the scores: (1, H, Q, K), on the embedding's
        device and in its dtype. The queries are the last Q of the K
        positions (query i at K - Q + i), as in a decoder with a cache;
        Q = K in an encoder.

        Raises:
            TypeError, ValueError: if a size is not an int >= 1 or K < Q.
        """
        device = self.embedding.weight.device
        # (Q, K), key minus query (the course's distance is query minus key)
        offsets = -query_key_distance(num_queries, num_keys, device)
        buckets = _bucket(
            offsets, self.bidirectional, self.num_buckets, self.max_distance
        )
        return self.embedding(buckets).permute(2, 0, 1)[None]  # (1, H, Q, K)


def _check_relative_position_bias_args(
    num_heads: object,
    num_buckets: object,
    max_distance: object,
    bidirectional: object,
) -> None:
    """num_heads H an int >= 1; bidirectional a bool; num_buckets an int
    >= 4 (>= 2 one-way); max_distance an int above the exact buckets."""
    check_sizes(num_heads=num_heads)
    _check_buckets(bidirectional, num_buckets, max_distance)
