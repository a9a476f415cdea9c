"""T5 (v1.1): the encoder-decoder whose positions are a learned bias on the scores.

Chapter: "Today's open models". T5 (Raffel et
al. 2020; v1.1 and Flan-T5 as here) is the Transformer of the course's
chapter 7 with these changes:

- no position encoding on the embeddings: each stack's first block learns a
  bias per head and per bucket of relative distance
  (:class:`~course_pkg.nn.relative_position.RelativePositionBias`,
  bidirectional in the encoder, causal in the decoder), added to the scores of
  every self-attention of that stack; the cross-attention gets none;
- the scores are not divided by sqrt(d): the initialisation absorbs it;
- pre-norm blocks with RMSNorm (no mean, no bias), a final norm per stack;
- GeGLU feed-forward networks (:class:`~course_pkg.nn.modern_blocks.GeGLUFFN`),
  no biases anywhere;
- one embedding matrix shared by the encoder and the decoder, an output layer
  of its own (v1.1; v1.0 tied it and scaled by D^-0.5 first, not built here).

:func:`t5_from_hf` and :func:`t5_to_hf` convert the state dicts of Hugging
Face's ``T5ForConditionalGeneration`` (``feed_forward_proj="gated-gelu"``,
``tie_word_embeddings=False``).

Shape letters (see the package docstring): ``B`` batch, ``S`` source length,
``T`` target length, ``D`` width, ``H`` heads, ``d`` head width, ``V``
vocabulary size.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from course_pkg.checks import (
    check_nonnegative_number,
    check_sizes,
    check_token_ids,
    check_valid_lens,
)
from course_pkg.models.hf_weights import (
    StateDict,
    _check_all_used,
    _check_state_dict,
    _count_blocks,
    _take,
)
from course_pkg.nn.attention import MultiHeadAttention
from course_pkg.nn.masks import _attention_mask, _masked_softmax
from course_pkg.nn.modern_blocks import GeGLUFFN, RMSNorm
from course_pkg.nn.relative_position import (
    RelativePositionBias,
    _check_buckets,
)


class _T5Attention(MultiHeadAttention):
    """Multi-head attention without the 1/sqrt(d) and with an additive bias:
    softmax(q k^T + bias) v per head, projections without biases.

    A :class:`~course_pkg.nn.attention.MultiHeadAttention` (W_q, W_k, W_v
    D -> H d, W_o H d -> D) whose ``forward`` takes the bias.

    Args:
        num_hiddens: D. num_heads: H. head_width: d.
    """

    def __init__(self, num_hiddens: int, num_heads: int, head_width: int):
        check_sizes(num_heads=num_heads, head_width=head_width)
        super().__init__(
            num_heads * head_width,
            num_heads,
            query_size=num_hiddens,
            key_size=num_hiddens,
            value_size=num_hiddens,
            output_size=num_hiddens,
        )

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        bias: torch.Tensor | None,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """queries (B, Q, D) over keys = values (B, K, D) -> (B, Q, D); bias
        None or (1, H, Q, K); mask None or bool, broadcastable to (B, H, Q, K),
        True where a query may attend. Its callers, the stacks below, check
        their inputs."""
        q = self._split_heads(self.W_q(queries))  # (B, H, Q, d)
        k, v = (
            self._split_heads(self.W_k(keys)),
            self._split_heads(self.W_v(keys)),
        )
        scores = q @ k.transpose(-1, -2)  # (B, H, Q, K), no 1/sqrt(d)
        if bias is not None:
            scores = scores + bias
        weights = _masked_softmax(scores, mask)
        self.attention_weights = weights
        heads = (weights @ v).transpose(1, 2)  # (B, Q, H, d)
        return self.W_o(heads.reshape(*heads.shape[:2], -1))


class _T5Stack(nn.Module):
    """The encoder (``decoder=False``) or the decoder of T5: N pre-norm blocks
    of self-attention (the first block's relative bias shared by all), for
    the decoder cross-attention, and a GeGLU FFN; a final RMSNorm.

    Args:
        num_hiddens: D. ffn_num_hiddens: F. num_heads: H. head_width: d.
        num_blks: N. decoder: causal self-attention and cross-attention.
        num_buckets, max_distance: of the relative bias (32, 128).
        norm_eps: eps of every RMSNorm.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        head_width: int,
        num_blks: int,
        *,
        decoder: bool,
        num_buckets: int = 32,
        max_distance: int = 128,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        self.decoder = decoder
        self.relative_bias = RelativePositionBias(
            num_heads, num_buckets, max_distance, bidirectional=not decoder
        )
        self.blks = nn.ModuleList()
        for _ in range(num_blks):
            blk = nn.Module()
            blk.norm1 = RMSNorm(num_hiddens, norm_eps)
            blk.self_attention = _T5Attention(
                num_hiddens, num_heads, head_width
            )
            if decoder:
                blk.norm_cross = RMSNorm(num_hiddens, norm_eps)
                blk.cross_attention = _T5Attention(
                    num_hiddens, num_heads, head_width
                )
            blk.norm2 = RMSNorm(num_hiddens, norm_eps)
            blk.ffn = GeGLUFFN(ffn_num_hiddens, num_hiddens)
            self.blks.append(blk)
        self.norm = RMSNorm(num_hiddens, norm_eps)

    def forward(
        self,
        X: torch.Tensor,
        mask: torch.Tensor | None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """X (B, T, D) embedded tokens -> (B, T, D). mask: the self-
        attention's (None or bool broadcastable to (B, H, T, T)); memory (B,
        S, D) the encoder's outputs and memory_mask (None or broadcastable
        to (B, H, T, S)), for the decoder."""
        bias = self.relative_bias(X.shape[1], X.shape[1])  # (1, H, T, T)
        for blk in self.blks:
            normed = blk.norm1(X)
            X = X + blk.self_attention(normed, normed, bias, mask)
            if self.decoder:
                normed = blk.norm_cross(X)
                X = X + blk.cross_attention(normed, memory, None, memory_mask)
            X = X + blk.ffn(blk.norm2(X))
        return self.norm(X)


class T5(nn.Module):
    """T5 v1.1: a shared embedding, an encoder and a decoder stack
    (``_T5Stack``), and an output layer.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: F. num_heads: H.
        head_width: d (T5 v1.1 base: 64 with D = 768, H = 12).
        num_blks: N, in each stack.
        num_buckets, max_distance: of the relative position bias (32, 128;
            :class:`~course_pkg.nn.relative_position.RelativePositionBias`).
        norm_eps: eps of every RMSNorm.
    Raises:
        TypeError/ValueError: naming a size that is not an int >= 1 or a bad
            eps, before anything is built.
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        head_width: int,
        num_blks: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        norm_eps: float = 1e-6,
    ):
        _check_t5_args(
            vocab_size, num_hiddens, ffn_num_hiddens, num_heads, head_width,
            num_blks, num_buckets, max_distance, norm_eps,
        )  # fmt: skip
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        sizes = (num_hiddens, ffn_num_hiddens, num_heads, head_width, num_blks)
        settings = dict(
            num_buckets=num_buckets,
            max_distance=max_distance,
            norm_eps=norm_eps,
        )
        self.encoder = _T5Stack(*sizes, decoder=False, **settings)
        self.decoder = _T5Stack(*sizes, decoder=True, **settings)
        self.dense = nn.Linear(num_hiddens, vocab_size, bias=False)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores for every target position, teacher-forced.

        Args:
            src: (B, S) source ids. tgt: (B, T) decoder input ids (the
                target shifted right behind the start token).
            src_valid_lens: None or (B,) numbers of real source tokens (the
                rest is padding, hidden from both attentions).
        Returns:
            (B, T, V) scores; row t depends on tgt[:, :t + 1] and src only.
        Raises:
            TypeError/ValueError: naming src, tgt or src_valid_lens.
        """
        _check_t5_forward(self, src, tgt, src_valid_lens)
        S, T, device = src.shape[1], tgt.shape[1], src.device
        src_mask = _attention_mask(src_valid_lens, S, S, False, device)
        memory_mask = _attention_mask(src_valid_lens, T, S, False, device)
        memory = self.encoder(self.embedding(src), _per_head(src_mask))
        causal = _attention_mask(None, T, T, True, device)  # (T, T)
        Y = self.decoder(
            self.embedding(tgt), causal, memory, _per_head(memory_mask)
        )
        return self.dense(Y)


def _check_t5_args(
    vocab_size: object,
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    head_width: object,
    num_blks: object,
    num_buckets: object,
    max_distance: object,
    norm_eps: object,
) -> None:
    """Sizes V, D, F, H, d, N ints >= 1; norm_eps a number >= 0; the
    encoder's and the decoder's buckets and max_distance."""
    check_sizes(
        vocab_size=vocab_size, num_hiddens=num_hiddens,
        ffn_num_hiddens=ffn_num_hiddens, num_heads=num_heads,
        head_width=head_width, num_blks=num_blks,
    )  # fmt: skip
    check_nonnegative_number("norm_eps", norm_eps)
    for bidirectional in (True, False):  # the encoder's, the decoder's
        _check_buckets(bidirectional, num_buckets, max_distance)


def _check_t5_forward(
    model: T5, src: object, tgt: object, src_valid_lens: object
) -> None:
    """src (B, S) and tgt (B, T) ids in [0, V) of one B; src_valid_lens None
    or (B,) ints in [0, S]."""
    check_token_ids("src", src, model.embedding)
    check_token_ids("tgt", tgt, model.embedding)
    if tgt.shape[0] != src.shape[0]:
        raise ValueError(
            f"tgt must have shape (B={src.shape[0]}, T) as src, got "
            f"{tuple(tgt.shape)}"
        )
    check_valid_lens(
        "src_valid_lens", src_valid_lens, *src.shape, like=("src", src)
    )


def _per_head(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A (B, 1, K) length mask with a head axis: (B, 1, 1, K)."""
    return None if mask is None else mask[:, None]


# --------------------------------------------------------------- converters


def _pairs(num_blks: int) -> list[tuple[str, str]]:
    """(our name, Hugging Face's name) of every tensor."""
    pairs = [
        ("embedding.weight", "shared.weight"),
        ("dense.weight", "lm_head.weight"),
    ]
    for stack in ("encoder", "decoder"):
        pairs.append(
            (
                f"{stack}.relative_bias.embedding.weight",
                f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            )
        )
        pairs.append(
            (f"{stack}.norm.weight", f"{stack}.final_layer_norm.weight")
        )
        ffn_layer = 2 if stack == "decoder" else 1
        for i in range(num_blks):
            ours, theirs = f"{stack}.blks.{i}.", f"{stack}.block.{i}.layer."
            pairs.append(
                (ours + "norm1.weight", theirs + "0.layer_norm.weight")
            )
            for w in "qkvo":
                pairs.append(
                    (
                        f"{ours}self_attention.W_{w}.weight",
                        f"{theirs}0.SelfAttention.{w}.weight",
                    )
                )
            if stack == "decoder":
                pairs.append(
                    (
                        ours + "norm_cross.weight",
                        theirs + "1.layer_norm.weight",
                    )
                )
                for w in "qkvo":
                    pairs.append(
                        (
                            f"{ours}cross_attention.W_{w}.weight",
                            f"{theirs}1.EncDecAttention.{w}.weight",
                        )
                    )
            pairs.append(
                (
                    ours + "norm2.weight",
                    f"{theirs}{ffn_layer}.layer_norm.weight",
                )
            )
            for our, their in (
                ("gate", "wi_0"),
                ("up", "wi_1"),
                ("down", "wo"),
            ):
                pairs.append(
                    (
                        f"{ours}ffn.{our}.weight",
                        f"{theirs}{ffn_layer}.DenseReluDense.{their}.weight",
                    )
                )
    return pairs


def t5_from_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """A :class:`T5` state dict from Hugging Face's
    ``T5ForConditionalGeneration`` (gated-gelu, untied head); the stacks'
    copies of the shared embedding (``encoder.embed_tokens``,
    ``decoder.embed_tokens``) may be there or not.

    Raises:
        TypeError: if state_dict is not a mapping of str to tensors.
        ValueError: naming a missing or left-over tensor, or a stack copy of
            the embedding that is not the shared one.
    """
    theirs = _check_state_dict("state_dict", state_dict)
    for copy in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        if copy in theirs:
            tensor = theirs.pop(copy)
            if "shared.weight" in theirs and not torch.equal(
                tensor, theirs["shared.weight"]
            ):
                raise ValueError(
                    f"state_dict[{copy!r}] must equal shared.weight"
                )
    num_blks = _count_blocks(
        theirs, r"encoder\.block\.(\d+)\.layer\.0\.layer_norm\.weight"
    )
    result: StateDict = {}
    used: set[str] = set()
    for ours, their in _pairs(num_blks):
        result[ours] = _take(theirs, their, used)
    _check_all_used(theirs, used)
    return result


def t5_to_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """Hugging Face's ``T5ForConditionalGeneration`` state dict (without the
    stacks' embedding copies) from a :class:`T5`'s: the inverse of
    :func:`t5_from_hf`, with its refusals."""
    ours = _check_state_dict("state_dict", state_dict)
    num_blks = _count_blocks(ours, r"encoder\.blks\.(\d+)\.norm1\.weight")
    result: StateDict = {}
    used: set[str] = set()
    for our, their in _pairs(num_blks):
        result[their] = _take(ours, our, used)
    _check_all_used(ours, used)
    return result
