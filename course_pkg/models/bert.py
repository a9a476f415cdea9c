"""BERT: a Transformer encoder pretrained by masked language modelling.

Chapter: "Pretraining an encoder: BERT" (Devlin et al., 2019). The encoder
reuses the post-norm :class:`~course_pkg.nn.blocks.TransformerEncoderBlock`
of "The Transformer"; what is new is the input (token, segment and learned
position embeddings, summed), the two pretraining heads and the masking of
the inputs. Names and arguments follow d2l, without its lazy layers.

One difference from d2l: its ``MaskLM.forward(X, pred_positions)`` and
``BERTModel.forward(..., pred_positions)`` gather the masked positions
inside the model; here :class:`MaskLM` scores whatever positions it is
given and the caller gathers them (:func:`course_pkg.training.bert_pretraining.pretrain_bert`
passes ``encoded[selected]``). The selected positions differ in number from
row to row, so d2l pads them to a fixed count per row and weights the padded
ones out of the loss; a boolean mask over the (B, T) labels needs neither.

An input holds one or two segments: ``<cls> A <sep>`` or
``<cls> A <sep> B <sep>``; ``segments`` is 0 on the first part, 1 on B.
Shape letters: ``B`` batch, ``T`` sequence length, ``D`` model width
(``num_hiddens``), ``H`` heads, ``V`` vocabulary size, ``C`` classes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from course_pkg.checks import (
    check_features,
    check_float_tensor,
    check_generator,
    check_on_device,
    check_positive_number,
    check_sizes,
    check_stack_args,
    check_tensor_type,
    check_token_ids,
    check_valid_lens,
)
from course_pkg.nn.attention import resolve_need_weights
from course_pkg.nn.blocks import (
    TransformerEncoderBlock,
    init_normal,
)

# The label of unselected positions (cross_entropy's default ignore_index).
IGNORE_INDEX = -100

# ----------------------------------------------------------------- masking


def mask_tokens(
    tokens: torch.Tensor,
    valid_lens: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    num_special: int,
    mask_prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt a batch for masked language modelling, as BERT does.

    Each position before its row's valid length whose token is not special
    (ids ``0 .. num_special - 1`` are) is selected with probability
    mask_prob. A selected token becomes ``mask_id`` with probability 0.8, a
    uniformly drawn non-special token with probability 0.1, and stays as it
    is with probability 0.1. The same random numbers are drawn whatever the
    outcome, so a seeded generator gives the same result every time.

    Args:
        tokens: (B, T) integer ids in [0, vocab_size).
        valid_lens: (B,) number of real tokens per row; positions from there
            on (padding) are never selected.
        mask_id: the id of ``<mask>``, a special id (< num_special).
        vocab_size: V. num_special: the ids below it are special, >= 1.
        mask_prob: selection probability, in [0, 1].
        generator: a ``torch.Generator`` on tokens' device, or None.
    Returns:
        (inputs, labels), both (B, T) and of tokens' dtype and device:
        inputs is the corrupted batch; labels holds the original token at
        selected positions and -100 (``IGNORE_INDEX``) everywhere else.
    Raises:
        TypeError, ValueError: naming the argument (the checks of
            mask_tokens, at the end of this module).
    """
    _check_masking(
        tokens, valid_lens, mask_id, vocab_size, num_special, mask_prob,
        generator,
    )  # fmt: skip
    shape, device = tokens.shape, tokens.device
    selector = torch.rand(shape, generator=generator, device=device)
    action = torch.rand(shape, generator=generator, device=device)
    random_ids = torch.randint(
        num_special, vocab_size, shape, generator=generator, device=device
    ).to(tokens.dtype)
    positions = torch.arange(shape[1], device=device)
    # The lengths may live on the CPU while the tokens are on a GPU.
    valid_lens = valid_lens.to(device)
    real = positions[None, :] < valid_lens[:, None]  # (B, T)
    selected = real & (tokens >= num_special) & (selector < mask_prob)
    masked = selected & (action < 0.8)
    swapped = selected & (action >= 0.8) & (action < 0.9)
    inputs = torch.where(masked, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(swapped, random_ids, inputs)
    labels = torch.where(
        selected, tokens, torch.full_like(tokens, IGNORE_INDEX)
    )
    return inputs, labels


# ----------------------------------------------------------------- encoder


class BERTEncoder(nn.Module):
    """Token + segment + learned position embeddings, then num_blks blocks.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: FFN width.
        num_heads: H. num_blks: number of encoder blocks.
        dropout: on the embedding sum and in every block. max_len: longest T.
    Attributes:
        token_embedding (V, D), segment_embedding (2, D), pos_embedding (1,
            max_len, D); blks: :class:`TransformerEncoderBlock` s (biases on).
        need_weights: False: the fused path unless told (the chapters read
            no BERT weights); None keeps them in eval mode, as the other
            models do (:func:`course_pkg.nn.attention.resolve_need_weights`).
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        max_len: int = 1000,
    ):
        super().__init__()
        sizes = (vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks)
        check_stack_args(*sizes, max_len, dropout=dropout)
        self.vocab_size, self.num_hiddens = vocab_size, num_hiddens
        self.max_len = max_len
        self.token_embedding = nn.Embedding(vocab_size, num_hiddens)
        self.segment_embedding = nn.Embedding(2, num_hiddens)
        self.pos_embedding = nn.Parameter(torch.randn(1, max_len, num_hiddens))
        self.embedding_norm = nn.Identity()  # PublishedBERT: a LayerNorm
        self.dropout = nn.Dropout(dropout)
        self.blks = nn.ModuleList(
            TransformerEncoderBlock(
                num_hiddens, ffn_num_hiddens, num_heads, dropout, True
            )
            for _ in range(num_blks)
        )
        self.need_weights: bool | None = False

    def forward(
        self,
        tokens: torch.Tensor,
        segments: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool | None = None,
    ) -> torch.Tensor:
        """Contextual vectors (B, T, D) of every position.

        Args:
            tokens: (B, T) ids in [0, V). segments: (B, T) ids in {0, 1}.
            valid_lens: None or (B,) numbers of real tokens; padded keys are
                masked, so padded tokens never change a real position.
            need_weights: keep each block's attention weights (True,
                explicit path) or not (False, fused, faster); None: the
                model's ``need_weights`` attribute.
        Raises:
            TypeError, ValueError: naming the argument (a wrong dtype or
                shape, ids out of range, T > max_len).
        """
        _check_bert_input(tokens, segments, valid_lens, self)
        need_weights = resolve_need_weights(self, need_weights)
        X = self.token_embedding(tokens) + self.segment_embedding(segments)
        X = X + self.pos_embedding[:, : tokens.shape[1]]
        X = self.dropout(self.embedding_norm(X))
        for blk in self.blks:
            X = blk(X, valid_lens, need_weights=need_weights)  # (B, T, D)
        return X


class PublishedBERT(BERTEncoder):
    """BERT as published (Devlin et al. 2019): the encoder with GELU (erf)
    FFNs, layer norms of eps 1e-12, a layer norm on the embedding sum,
    weights drawn from N(0, 0.02^2), and the pooler.

    The pooler is what BERT's next-sentence head and its classifiers read:
    ``tanh(dense(X[:, 0]))``, the <cls> vector through one more layer
    (:meth:`pool`). :func:`course_pkg.models.hf_weights.bert_from_hf` fills it with the
    weights of a Hugging Face ``BertModel``.

    Args:
        vocab_size: V. num_hiddens: D. num_heads: H. num_blks: number of
            blocks. max_len: number of positions (BERT: 512).
        dropout: on the embedding sum, the attention weights and each
            sublayer's output.
        ffn_num_hiddens: FFN width (default 4 D). eps: the layer norms'.
    Attributes:
        as :class:`BERTEncoder`; pooler: ``Sequential(Linear(D, D), Tanh())``.
    Raises:
        TypeError/ValueError: naming the size, dropout or eps refused.
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        num_heads: int,
        num_blks: int,
        max_len: int,
        dropout: float = 0.0,
        ffn_num_hiddens: int | None = None,
        eps: float = 1e-12,
    ):
        _check_published_bert_args(num_hiddens, eps)
        if ffn_num_hiddens is None:
            ffn_num_hiddens = 4 * num_hiddens
        sizes = (num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout)
        super().__init__(vocab_size, *sizes, max_len)
        self.embedding_norm = nn.LayerNorm(num_hiddens, eps=eps)
        self.blks = nn.ModuleList(
            TransformerEncoderBlock(
                num_hiddens,
                ffn_num_hiddens,
                num_heads,
                dropout,
                True,
                activation="gelu",
                eps=eps,
            )
            for _ in range(num_blks)
        )
        self.pooler = nn.Sequential(
            nn.Linear(num_hiddens, num_hiddens), nn.Tanh()
        )
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """BERT's initialisation: every weight N(0, 0.02^2) (the position
        table too), biases 0, norms 1 and 0."""
        init_normal(self, 0.02)
        nn.init.normal_(self.pos_embedding, std=0.02)

    def pool(self, encoded: torch.Tensor) -> torch.Tensor:
        """encoded (B, T, D) from :meth:`BERTEncoder.forward` -> (B, D)
        pooled output, tanh(dense(encoded[:, 0])).

        Raises TypeError if encoded is not a tensor, ValueError if it is
        not (B, T >= 1, D).
        """
        _check_outputs(encoded, self, 1, name="encoded")
        return self.pooler(encoded[:, 0])


# ------------------------------------------------------------------- heads


class MaskLM(nn.Module):
    """The masked-language-model head: an MLP from D to V scores.

    Args:
        vocab_size: V. num_hiddens: D.
    """

    def __init__(self, vocab_size: int, num_hiddens: int):
        super().__init__()
        check_sizes(vocab_size=vocab_size, num_hiddens=num_hiddens)
        self.num_hiddens = num_hiddens
        self.mlp = nn.Sequential(
            nn.Linear(num_hiddens, num_hiddens),
            nn.ReLU(),
            nn.LayerNorm(num_hiddens),
            nn.Linear(num_hiddens, vocab_size),
        )

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (B, T, D) encoder outputs -> (B, T, V) scores at every position.

        Callers may pass only the positions a loss reads, as (1, n, D).
        Raises TypeError if X is not a tensor, ValueError if not (B, T, D).
        """
        _check_outputs(X, self, 0)
        return self.mlp(X)


class CLSClassifier(nn.Module):
    """A classifier of the whole input, read from the <cls> position:
    ``Linear -> tanh -> Linear`` on the vector at position 0, as BERT's
    next-sentence head and its fine-tuning classifiers do.

    Args:
        num_hiddens: D. num_classes: C.
    """

    def __init__(self, num_hiddens: int, num_classes: int):
        super().__init__()
        check_sizes(num_hiddens=num_hiddens, num_classes=num_classes)
        self.num_hiddens = num_hiddens
        self.hidden = nn.Sequential(
            nn.Linear(num_hiddens, num_hiddens), nn.Tanh()
        )
        self.output = nn.Linear(num_hiddens, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (B, T, D) encoder outputs -> (B, C) scores from X[:, 0].

        Raises TypeError if X is not a tensor, ValueError if it is not
        (B, T, D) with T >= 1.
        """
        _check_outputs(X, self, 1)
        return self.output(self.hidden(X[:, 0]))


class BERTModel(nn.Module):
    """The encoder with its two pretraining heads: MLM and the pair task.

    Args:
        as :class:`BERTEncoder`.
    Attributes:
        encoder: the :class:`BERTEncoder`. mlm: a :class:`MaskLM`.
        pair: a two-class :class:`CLSClassifier` ("is segment B the
            translation of segment A?").
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        max_len: int = 1000,
    ):
        super().__init__()
        sizes = (num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout)
        self.encoder = BERTEncoder(vocab_size, *sizes, max_len)
        self.mlm = MaskLM(vocab_size, num_hiddens)
        self.pair = CLSClassifier(num_hiddens, 2)

    def forward(
        self,
        tokens: torch.Tensor,
        segments: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode, then score every position and the pair.

        Args:
            tokens, segments: (B, T). valid_lens: None or (B,).
        Returns:
            (encoded (B, T, D), mlm_scores (B, T, V), pair_scores (B, 2)).
        """
        encoded = self.encoder(tokens, segments, valid_lens)
        return encoded, self.mlm(encoded), self.pair(encoded)


class BERTClassifier(nn.Module):
    """An encoder (pretrained or not) with a fresh classifier of the input.

    Args:
        encoder: a :class:`BERTEncoder`; it is used (and fine-tuned) in
            place, so pass a copy to keep the original.
        num_classes: C.
        pooling: ``"cls"`` reads the vector at <cls> (BERT's choice);
            ``"mean"`` averages the vectors of the valid positions, which an
            encoder pretrained without a sentence-level task has trained.
    Raises:
        TypeError/ValueError: on another encoder type or pooling.
    """

    def __init__(
        self, encoder: BERTEncoder, num_classes: int, pooling: str = "cls"
    ):
        super().__init__()
        _check_bert_classifier_args(encoder, num_classes, pooling)
        self.encoder, self.pooling = encoder, pooling
        self.classifier = CLSClassifier(encoder.num_hiddens, num_classes)

    def forward(
        self,
        tokens: torch.Tensor,
        segments: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens, segments (B, T), valid_lens None or (B,) -> (B, C)."""
        encoded = self.encoder(tokens, segments, valid_lens)  # (B, T, D)
        if self.pooling == "mean":
            if valid_lens is None:
                valid_lens = torch.full_like(tokens[:, 0], tokens.shape[1])
            encoded = mean_over_valid(encoded, valid_lens)[
                :, None
            ]  # (B, 1, D)
        return self.classifier(encoded)


def mean_over_valid(
    encoded: torch.Tensor, valid_lens: torch.Tensor
) -> torch.Tensor:
    """The mean of each row's vectors over its first valid_lens positions.

    Args:
        encoded: (B, T, D). valid_lens: (B,), on any device.
    Returns:
        (B, D) in encoded's dtype; zeros for a row with no valid position.
    Raises:
        TypeError: if encoded is not a float tensor or valid_lens not an
            integer one.
        ValueError: if the shapes do not fit, a length is outside [0, T], or
            valid_lens is neither on the CPU nor on encoded's device.
    """
    _check_mean_over_valid(encoded, valid_lens)
    positions = torch.arange(encoded.shape[1], device=encoded.device)
    valid_lens = valid_lens.to(encoded.device)  # may be on the CPU
    real = (positions[None] < valid_lens[:, None]).to(encoded.dtype)  # (B, T)
    total = (encoded * real[..., None]).sum(dim=1)  # (B, D)
    # clamp: an empty row gives zeros, not NaN
    return total / real.sum(dim=1).clamp(min=1)[:, None]


# ------------------------------------------------------------ input checks


def _check_outputs(
    X: torch.Tensor, head: nn.Module, min_len: int, *, name: str = "X"
) -> None:
    """X: floats (B, T >= min_len, D) of the head's dtype, on its device."""
    check_tensor_type(name, X)
    num_hiddens = head.num_hiddens
    if X.dim() != 3 or X.shape[1] < min_len or X.shape[-1] != num_hiddens:
        raise ValueError(
            f"{name} must have shape (B, T >= {min_len}, {num_hiddens}), "
            f"got {tuple(X.shape)}"
        )
    check_features(name, X, num_hiddens, head)


def _check_bert_input(
    tokens: Any, segments: Any, valid_lens: Any, layer: Any
) -> None:
    """A BERT encoder's input: tokens (B, T) ids in [0, layer.vocab_size),
    segments (B, T) ids in {0, 1}, valid_lens None or (B,) in [0, T], and
    T <= layer.max_len.

    Raises:
        TypeError, ValueError: naming the argument, on a wrong dtype or
            shape, ids out of range or T > max_len.
    """
    max_len = layer.max_len
    check_token_ids("tokens", tokens, layer.token_embedding)
    check_token_ids("segments", segments, layer.segment_embedding)
    if segments.shape != tokens.shape:
        raise ValueError(
            "segments must have the shape of tokens, "
            f"{tuple(tokens.shape)}, got {tuple(segments.shape)}"
        )
    check_valid_lens(
        "valid_lens", valid_lens, *tokens.shape, like=("tokens", tokens)
    )
    if tokens.shape[1] > max_len:
        raise ValueError(
            f"tokens must have T <= max_len={max_len}, got T={tokens.shape[1]}"
        )


def _check_masking(
    tokens: Any,
    valid_lens: Any,
    mask_id: Any,
    vocab_size: Any,
    num_special: Any,
    mask_prob: Any,
    generator: Any = None,
) -> None:
    """Masked language modelling's arguments: vocab_size >= 2, num_special in
    [1, vocab_size), mask_id in [0, num_special), tokens (B, T) ids in
    [0, vocab_size), valid_lens (B,) in [0, T], mask_prob in [0, 1],
    generator None or a torch.Generator.

    Raises:
        TypeError, ValueError: naming the argument.
    """
    _check_bounded_int("vocab_size", vocab_size, 2, None)
    _check_bounded_int("num_special", num_special, 1, vocab_size)
    _check_bounded_int("mask_id", mask_id, 0, num_special)
    check_token_ids("tokens", tokens, vocab_size)
    if valid_lens is None:
        raise TypeError("valid_lens must be a torch.Tensor of shape (B,)")
    check_valid_lens(
        "valid_lens", valid_lens, *tokens.shape, like=("tokens", tokens)
    )
    if not isinstance(mask_prob, (int, float)) or isinstance(mask_prob, bool):
        raise TypeError(f"mask_prob must be a float, got {mask_prob!r}")
    if not 0.0 <= mask_prob <= 1.0:
        raise ValueError(f"mask_prob must lie in [0, 1], got {mask_prob}")
    check_generator(generator)


def _check_published_bert_args(num_hiddens: object, eps: object) -> None:
    """num_hiddens D an int >= 1; eps a number > 0."""
    check_sizes(num_hiddens=num_hiddens)
    check_positive_number("eps", eps)


def _check_bert_classifier_args(
    encoder: object, num_classes: object, pooling: object
) -> None:
    """encoder a BERTEncoder; pooling "cls" or "mean"; num_classes C an
    int >= 1."""
    if not isinstance(encoder, BERTEncoder):
        raise TypeError(
            f"encoder must be a BERTEncoder, got {type(encoder).__name__}"
        )
    if pooling not in ("cls", "mean"):
        raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
    check_sizes(num_classes=num_classes)


def _check_mean_over_valid(encoded: object, valid_lens: object) -> None:
    """encoded a float (B, T, D) tensor; valid_lens (B,) ints in [0, T], on
    the CPU or on encoded's device."""
    check_float_tensor("encoded", encoded, 3, "(B, T, D)")
    check_valid_lens("valid_lens", valid_lens, *encoded.shape[:2])
    if valid_lens.device.type != "cpu":
        check_on_device("valid_lens", valid_lens, encoded.device)


def _check_bounded_int(
    name: str, value: Any, low: int, high: int | None
) -> None:
    """TypeError unless an int, ValueError unless low <= value (< high)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value >= high):
        upper = "" if high is None else f" and < {high}"
        raise ValueError(f"{name} must be >= {low}{upper}, got {value}")
