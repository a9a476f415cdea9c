"""The BERT chapter's experiment: does pretraining help, does the pair task?

Chapter: "Pretraining an encoder: BERT". :func:`compare_pretraining` pretrains
with :func:`~course_pkg.training.bert_pretraining.pretrain_bert` (MLM alone, and MLM with the
pair task), fine-tunes the pretrained encoders and one from scratch with
:func:`~course_pkg.training.bert_pretraining.fine_tune` on each task of
:data:`~course_pkg.data.bert_inputs.TASKS`, and scores the test split;
:func:`pair_task_accuracy` scores the pair head, and :func:`linear_probe` what
a frozen encoder's outputs make easy to read (the chapter's exercise 4).
``make claims CHAPTERS=bert`` runs the chapter, and so these functions, over
seeds 0-9 (``bench/claims.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_bert_batch,
    check_choice,
    check_float_tensor,
    check_integer_dtype,
    check_nonnegative_number,
    check_positive_int,
    check_same_device,
    check_seed,
    check_tensor,
)
from course_pkg.data.bert_inputs import (
    TASKS,
    add_second_segment,
    bert_vocab,
    encode_sentences,
    label_dataset,
    translation_pairs,
)
from course_pkg.data.corpus import (
    english_french_corpus,
    english_sentence_labels,
)
from course_pkg.data.translation import Vocab, tokenize
from course_pkg.models.bert import (
    BERTClassifier,
    BERTEncoder,
    BERTModel,
    mean_over_valid,
)
from course_pkg.training.bert_pretraining import (
    SETTINGS,
    BERTSettings,
    fine_tune,
    predict,
    pretrain_bert,
)


def new_bert(vocab_size: int, settings: BERTSettings, seed: int) -> BERTModel:
    """A fresh :class:`BERTModel` of the settings' sizes; weights set by seed.

    Raises:
        TypeError/ValueError: if vocab_size is not an int >= 1 or seed not an
            int (before any seeding).
    """
    _check_new_bert(vocab_size, seed)
    torch.manual_seed(seed)
    return BERTModel(
        vocab_size,
        settings.num_hiddens,
        settings.ffn_num_hiddens,
        settings.num_heads,
        settings.num_blks,
        settings.dropout,
        settings.max_len,
    )


def _check_new_bert(vocab_size: object, seed: object) -> None:
    """vocab_size an int >= 1; seed an int."""
    check_positive_int("vocab_size", vocab_size)
    check_seed("seed", seed)


def fine_tune_encoders(
    encoders: dict[str, nn.Module],
    vocab: Vocab,
    labelled: Sequence[Any],
    test_rows: Sequence[Any],
    settings: BERTSettings,
    seed: int,
) -> tuple[dict[str, dict[str, BERTClassifier]], dict[str, dict[str, float]]]:
    """Fine-tune a copy of each encoder on each task of
    :data:`~course_pkg.data.bert_inputs.TASKS` from the first
    ``settings.num_labelled`` labelled sentences (the same fresh head and
    budget for every encoder) and score it on the test rows.

    Returns:
        classifiers and accuracy: task -> encoder name -> the fine-tuned
        :class:`BERTClassifier` and its test accuracy (float).
    Raises:
        TypeError: if seed is not an int (checked before any seeding).
    """
    check_seed("seed", seed)
    num_steps = (settings.max_len + 1) // 2
    classifiers: dict[str, dict[str, BERTClassifier]] = {}
    accuracy: dict[str, dict[str, float]] = {}
    for task, (_, classes) in TASKS.items():
        few = label_dataset(
            vocab, labelled[: settings.num_labelled], num_steps, task
        )
        test = label_dataset(vocab, test_rows, num_steps, task)
        classifiers[task], accuracy[task] = {}, {}
        for name, encoder in encoders.items():
            torch.manual_seed(seed)  # the same fresh head for every encoder
            classifier = BERTClassifier(
                copy.deepcopy(encoder), len(classes), settings.pooling
            )
            fine_tune(classifier, *few, settings, seed)
            predictions = predict(classifier, *test[:3])
            classifiers[task][name] = classifier
            accuracy[task][name] = float(
                (predictions == test[3]).float().mean()
            )
    return classifiers, accuracy


def compare_pretraining(
    seed: int = 0, settings: BERTSettings = SETTINGS
) -> dict[str, Any]:
    """The chapter's experiment: pretrain two ways, fine-tune three encoders.

    On ``english_french_corpus(0)``: pretrain one BERT with MLM alone for
    ``settings.pretrain_steps``; copy it twice and continue each copy for
    ``settings.continue_steps``, one with MLM alone, one with MLM and the
    pair task (same batches and masks). Then fine-tune the two encoders and
    a fresh one of the same initial weights (from scratch) on each task
    (:func:`fine_tune_encoders`).

    Args:
        seed: seeds the weights, batches, masks, pairs and fine-tuning order.
        settings: sizes and budgets.
    Returns:
        dict with ``vocab``; ``models`` {"MLM", "MLM + pair"} -> pretrained
        :class:`BERTModel`; ``histories`` {"shared", "MLM", "MLM + pair"}
        (:func:`~course_pkg.training.bert_pretraining.pretrain_bert` results); ``classifiers``
        and ``accuracy`` from :func:`fine_tune_encoders`, with the encoders
        "scratch", "MLM" and "MLM + pair".
    """
    check_seed("seed", seed)
    train, _, _ = english_french_corpus(0)
    labelled, _, test_rows = english_sentence_labels(0)
    english = [pair[0] for pair in train]
    french = [pair[1] for pair in train]
    vocab = bert_vocab(english + french)
    shared = new_bert(len(vocab), settings, seed)
    histories = {
        "shared": pretrain_bert(
            shared, english, french, vocab, False, settings, seed
        )
    }
    models = {}
    for name, use_pair in (("MLM", False), ("MLM + pair", True)):
        models[name] = copy.deepcopy(shared)
        histories[name] = pretrain_bert(
            models[name],
            english,
            french,
            vocab,
            use_pair,
            settings,
            seed + 1,  # new batches and masks, the same for both
            steps=settings.continue_steps,
        )
    encoders = {"scratch": new_bert(len(vocab), settings, seed).encoder}
    encoders.update({name: model.encoder for name, model in models.items()})
    classifiers, accuracy = fine_tune_encoders(
        encoders, vocab, labelled, test_rows, settings, seed
    )
    return {
        "vocab": vocab,
        "models": models,
        "histories": histories,
        "classifiers": classifiers,
        "accuracy": accuracy,
    }


@torch.no_grad()
def pair_task_accuracy(
    model: BERTModel,
    vocab: Vocab,
    settings: BERTSettings = SETTINGS,
    seed: int = 0,
) -> float:
    """Accuracy of the pair head on the test split of the corpus (seed 0).

    Each English test sentence goes with its translation or with another test
    sentence's French (:func:`~course_pkg.data.bert_inputs.translation_pairs`,
    seeded by seed).

    Args:
        model: a pretrained :class:`BERTModel`. vocab: its vocabulary.
        settings: for max_len. seed: the draw of the pairs.
    Returns:
        The fraction of pairs whose class the head gets right.
    """
    check_seed("seed", seed)
    _, _, test = english_french_corpus(0)
    first, _, first_lens = encode_sentences(
        vocab, [english for english, _ in test], (settings.max_len + 1) // 2
    )
    partner, is_translation = translation_pairs(
        len(test), torch.Generator().manual_seed(seed)
    )
    seconds = [vocab[tokenize(test[int(j)][1])] for j in partner]
    tokens, segments, valid_lens = add_second_segment(
        first, first_lens, seconds, vocab["<sep>"], vocab.pad, settings.max_len
    )
    device = next(model.parameters()).device
    model.eval()
    _, _, scores = model(
        tokens.to(device), segments.to(device), valid_lens.to(device)
    )
    return float(
        (scores.argmax(dim=-1).cpu() == is_translation).float().mean()
    )


@torch.no_grad()
def mean_outputs(
    encoder: BERTEncoder,
    tokens: torch.Tensor,
    segments: torch.Tensor,
    valid_lens: torch.Tensor,
) -> torch.Tensor:
    """The mean of the encoder's outputs over each input's valid positions.

    Args:
        encoder: used in eval mode. tokens, segments: (N, T).
        valid_lens: (N,), each at least 1.
    Returns:
        (N, D) float64, on the encoder's device. The encoder is left in
        eval mode.
    """
    check_bert_batch(encoder, tokens, segments, valid_lens)
    device = next(encoder.parameters()).device
    tokens, segments = tokens.to(device), segments.to(device)
    valid_lens = valid_lens.to(device)
    encoder.eval()
    encoded = encoder(tokens, segments, valid_lens).double()  # (N, T, D)
    return mean_over_valid(encoded, valid_lens)


def linear_probe(
    encoder: BERTEncoder,
    vocab: Vocab,
    task: str,
    settings: BERTSettings = SETTINGS,
    l2: float = 1e-3,
) -> float:
    """Test accuracy of a logistic regression on a frozen encoder's outputs.

    The features are :func:`mean_outputs` of each sentence, standardised by
    the labelled sentences' mean and deviation; the first
    ``settings.num_labelled`` training sentences of
    ``english_sentence_labels(0)`` fit a linear classifier (cross-entropy
    plus ``l2`` times the squared weights, a convex loss minimised by
    L-BFGS in float64); the test split scores it. The encoder's weights
    are not changed; it is left in eval mode.

    Args:
        encoder: the encoder to probe. vocab: its vocabulary.
        task: a key of :data:`~course_pkg.data.bert_inputs.TASKS`.
        settings: for max_len and num_labelled. l2: the weight penalty.
    Returns:
        The fraction of test sentences whose class the probe gets right.
    """
    check_nonnegative_number("l2", l2)
    check_choice("task", task, sorted(TASKS))
    labelled, _, test_rows = english_sentence_labels(0)
    num_steps = (settings.max_len + 1) // 2
    few = label_dataset(
        vocab, labelled[: settings.num_labelled], num_steps, task
    )
    test = label_dataset(vocab, test_rows, num_steps, task)
    train_x, test_x = (
        mean_outputs(encoder, *few[:3]),
        mean_outputs(encoder, *test[:3]),
    )  # (N, D) each
    mean, std = train_x.mean(dim=0), train_x.std(dim=0).clamp(min=1e-8)
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    train_y, test_y = few[3].to(train_x.device), test[3].to(test_x.device)
    weight, bias = fit_linear_classifier(
        train_x, train_y, len(TASKS[task][1]), l2
    )
    predictions = (test_x @ weight + bias).argmax(dim=-1)
    return float((predictions == test_y).double().mean())


def fit_linear_classifier(
    X: torch.Tensor, y: torch.Tensor, num_classes: int, l2: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression: minimise the mean cross-entropy of
    ``X @ weight + bias`` plus ``l2`` times the sum of squared weights (the
    bias is not penalised), a convex loss, by L-BFGS.

    Args:
        X: (N, F) features. y: (N,) classes in [0, num_classes).
        num_classes: C. l2: the penalty, > 0 (it makes the minimum unique).
    Returns:
        weight (F, C) and bias (C,), detached, in X's dtype and device.
    """
    _check_fit_linear_classifier(X, y, num_classes, l2)
    weight = torch.zeros(
        X.shape[1], num_classes, dtype=X.dtype, device=X.device
    ).requires_grad_()
    bias = torch.zeros(
        num_classes, dtype=X.dtype, device=X.device
    ).requires_grad_()
    optimizer = torch.optim.LBFGS(
        [weight, bias],
        max_iter=500,
        tolerance_grad=1e-9,
        line_search_fn="strong_wolfe",
    )

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        value = F.cross_entropy(X @ weight + bias, y)
        value = value + l2 * weight.square().sum()
        value.backward()
        return value

    with torch.enable_grad():
        optimizer.step(loss)
    return weight.detach(), bias.detach()


def _check_fit_linear_classifier(
    X: object, y: object, num_classes: object, l2: object
) -> None:
    """X (N, F) float; y (N,) integer class ids on X's device; num_classes
    an int >= 1; l2 a number >= 0."""
    check_float_tensor("X", X, 2, "(N, F)")
    check_tensor("y", y, 1, "(N,)")
    check_integer_dtype("y", y, "class ids")
    check_same_device(X=X, y=y)
    check_positive_int("num_classes", num_classes)
    check_nonnegative_number("l2", l2)
