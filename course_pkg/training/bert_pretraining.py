"""Pretraining and fine-tuning BERT on the course's corpus.

Chapter: "Pretraining an encoder: BERT". With the inputs of
:mod:`course_pkg.data.bert_inputs`:

1. Pretraining (:func:`pretrain_bert`): MLM on the English sentences, with
   or without the pair objective.
2. Fine-tuning (:func:`fine_tune`, :func:`predict`) from a few labels.

The chapter's experiment, built on these, is in
:mod:`course_pkg.experiments.bert_comparison`.

The chapter's settings live in one frozen dataclass, :class:`BERTSettings`,
which the chapter prints and its experiment reads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_bert_batch,
    check_positive_int,
    check_seed,
)
from course_pkg.data.bert_inputs import (
    NUM_SPECIAL,
    add_second_segment,
    encode_sentences,
    translation_pairs,
)
from course_pkg.data.translation import Vocab, tokenize
from course_pkg.models.bert import (
    IGNORE_INDEX,
    BERTClassifier,
    BERTModel,
    mask_tokens,
)


@dataclass(frozen=True)
class BERTSettings:
    """Sizes and budgets of the chapter's BERT experiments."""

    num_hiddens: int = 32
    ffn_num_hiddens: int = 64
    num_heads: int = 2
    num_blks: int = 2
    dropout: float = 0.1
    # Longest input: <cls>, two sentences of at most 16 tokens, two <sep>.
    max_len: int = 40
    mask_prob: float = 0.15
    batch_size: int = 128
    lr: float = 6e-3
    # MLM alone, shared by both variants; then each continues for
    # continue_steps, with MLM alone or with MLM and the pair task.
    pretrain_steps: int = 600
    continue_steps: int = 600
    num_labelled: int = 100
    finetune_epochs: int = 30
    finetune_batch_size: int = 20
    finetune_lr: float = 2e-3
    # Mean of the valid positions: an encoder pretrained by MLM alone has
    # never trained its <cls> vector.
    pooling: str = "mean"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


SETTINGS = BERTSettings()


# ------------------------------------------------------------- pretraining


def pretrain_bert(
    model: BERTModel,
    english: Sequence[str],
    french: Sequence[str],
    vocab: Vocab,
    use_pair: bool,
    settings: BERTSettings = SETTINGS,
    seed: int = 0,
    steps: int | None = None,
) -> dict[str, Any]:
    """Pretrain with masked language modelling, with or without the pair task.

    Each step draws a batch of English sentences and masks them with
    :func:`~course_pkg.models.bert.mask_tokens`. Without the pair task the model
    reads ``<cls> A <sep>``; with it, ``<cls> A <sep> B <sep>`` where B is
    A's translation or another French sentence, and the loss adds the
    cross-entropy of "is B the translation of A?". The masked positions,
    the batches and the draws are the same in both variants for one seed:
    only the second segment and its loss differ.

    Args:
        model: a :class:`~course_pkg.models.bert.BERTModel` over vocab.
        english, french: aligned training sentences (French used only with
            the pair task).
        vocab: from :func:`~course_pkg.data.bert_inputs.bert_vocab`.
        use_pair: add the pair objective. settings: sizes and budgets.
        seed: seeds the batches, the masks and the pair draws.
        steps: how many Adam steps (a fresh optimizer);
            ``settings.pretrain_steps`` when None.
    Returns:
        dict with ``mlm_loss`` and ``pair_loss`` (lists, one per step; the
        latter empty without the pair task) and ``train_seconds``. The model
        is left in eval mode.
    Raises:
        ValueError: if english and french differ in length.
    """
    _check_pretrain_bert(english, french, seed, steps)
    device = next(model.parameters()).device
    first_steps = (settings.max_len + 1) // 2
    tokens, _, valid_lens = encode_sentences(vocab, english, first_steps)
    french_ids = [vocab[tokenize(sentence)] for sentence in french]
    order_gen = torch.Generator().manual_seed(seed)
    mask_gen = torch.Generator().manual_seed(seed + 1)
    pair_gen = torch.Generator().manual_seed(seed + 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    history: dict[str, Any] = {"mlm_loss": [], "pair_loss": []}
    order = torch.randperm(len(english), generator=order_gen)
    partner, is_translation = translation_pairs(len(english), pair_gen)
    cursor = 0
    model.train()
    start = time.perf_counter()
    for _ in range(settings.pretrain_steps if steps is None else steps):
        if cursor + settings.batch_size > len(english):
            order = torch.randperm(len(english), generator=order_gen)
            partner, is_translation = translation_pairs(len(english), pair_gen)
            cursor = 0
        batch = order[cursor : cursor + settings.batch_size]
        cursor += settings.batch_size
        inputs, labels = mask_tokens(
            tokens[batch],
            valid_lens[batch],
            vocab["<mask>"],
            len(vocab),
            NUM_SPECIAL,
            settings.mask_prob,
            mask_gen,
        )
        segments = torch.zeros_like(inputs)
        lens = valid_lens[batch]
        if use_pair:
            seconds = [french_ids[int(j)] for j in partner[batch]]
            inputs, segments, lens = add_second_segment(
                inputs,
                lens,
                seconds,
                vocab["<sep>"],
                vocab.pad,
                settings.max_len,
            )
            labels = F.pad(
                labels,
                (0, inputs.shape[1] - labels.shape[1]),
                value=IGNORE_INDEX,
            )
        inputs, segments, lens = (
            inputs.to(device),
            segments.to(device),
            lens.to(device),
        )
        encoded = model.encoder(inputs, segments, lens)  # (B, T, D)
        labels = labels.to(device)
        selected = labels != IGNORE_INDEX
        # Only the selected positions are scored: the (B, T, V) scores of
        # every position would cost more than the encoder.
        mlm_scores = model.mlm(encoded[selected][None])  # (1, n, V)
        if selected.any():
            loss = F.cross_entropy(mlm_scores[0], labels[selected])
        else:  # a batch of short sentences may have nothing selected
            loss = mlm_scores.sum()
        history["mlm_loss"].append(loss.item())
        if use_pair:
            pair_scores = model.pair(encoded)  # (B, 2)
            pair_loss = F.cross_entropy(
                pair_scores, is_translation[batch].to(device)
            )
            history["pair_loss"].append(pair_loss.item())
            loss = loss + pair_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    history["train_seconds"] = time.perf_counter() - start
    model.eval()
    return history


def _check_pretrain_bert(
    english: Sequence[str], french: Sequence[str], seed: object, steps: object
) -> None:
    """seed an int; steps None or an int >= 1; english and french of one
    length."""
    check_seed("seed", seed)
    if steps is not None:
        check_positive_int("steps", steps)
    if len(english) != len(french):
        raise ValueError(
            f"english and french must be aligned, got {len(english)} and "
            f"{len(french)} sentences"
        )


# ------------------------------------------------------------- fine-tuning


def fine_tune(
    classifier: BERTClassifier,
    tokens: torch.Tensor,
    segments: torch.Tensor,
    valid_lens: torch.Tensor,
    labels: torch.Tensor,
    settings: BERTSettings = SETTINGS,
    seed: int = 0,
) -> list[float]:
    """Train a classifier (encoder included) on a few labelled inputs.

    Adam with ``settings.finetune_lr`` for ``settings.finetune_epochs``
    passes in batches of ``settings.finetune_batch_size``, shuffled by seed.

    Args:
        classifier: a :class:`~course_pkg.models.bert.BERTClassifier`.
        tokens, segments: (N, T). valid_lens: (N,). labels: (N,) classes.
        settings: budgets. seed: the order of the batches.
    Returns:
        The loss of every step. The classifier is left in eval mode.
    Raises:
        ValueError: if labels is not (N,).
    """
    _check_fine_tune(classifier, tokens, segments, valid_lens, labels, seed)
    device = next(classifier.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(
        classifier.parameters(), lr=settings.finetune_lr
    )
    losses = []
    classifier.train()
    for _ in range(settings.finetune_epochs):
        order = torch.randperm(len(labels), generator=generator)
        for batch in order.split(settings.finetune_batch_size):
            scores = classifier(
                tokens[batch].to(device),
                segments[batch].to(device),
                valid_lens[batch].to(device),
            )
            loss = F.cross_entropy(scores, labels[batch].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    classifier.eval()
    return losses


def _check_fine_tune(
    classifier: nn.Module,
    tokens: object,
    segments: object,
    valid_lens: object,
    labels: object,
    seed: object,
) -> None:
    """tokens, segments (N, T), valid_lens (N,) and labels as
    :func:`check_bert_batch` checks them, labels (N,); seed an int."""
    check_bert_batch(classifier, tokens, segments, valid_lens, labels=labels)
    check_seed("seed", seed)
    if labels.shape != (tokens.shape[0],):
        raise ValueError(
            f"labels must have shape (N,)=({tokens.shape[0]},), "
            f"got {tuple(labels.shape)}"
        )


@torch.no_grad()
def predict(
    classifier: nn.Module,
    tokens: torch.Tensor,
    segments: torch.Tensor,
    valid_lens: torch.Tensor,
    batch_size: int = 256,
) -> torch.Tensor:
    """The class with the highest score for each input, in eval mode.

    Args:
        classifier: maps (tokens, segments, valid_lens) to (B, C) scores.
        tokens, segments: (N, T). valid_lens: (N,). batch_size: per call.
    Returns:
        (N,) long predictions on the CPU.
    """
    _check_predict(classifier, tokens, segments, valid_lens, batch_size)
    device = next(classifier.parameters()).device
    classifier.eval()
    predictions = [
        classifier(t.to(device), s.to(device), v.to(device))
        .argmax(dim=-1)
        .cpu()
        for t, s, v in zip(
            tokens.split(batch_size),
            segments.split(batch_size),
            valid_lens.split(batch_size),
        )
    ]
    return torch.cat(predictions)


def _check_predict(
    classifier: nn.Module,
    tokens: object,
    segments: object,
    valid_lens: object,
    batch_size: object,
) -> None:
    """tokens, segments (N, T) and valid_lens (N,) as
    :func:`check_bert_batch` checks them; batch_size an int >= 1."""
    check_bert_batch(classifier, tokens, segments, valid_lens)
    check_positive_int("batch_size", batch_size)
