"""BERT's inputs from the course's corpus: vocabulary, segments, labels.

Chapter: "Pretraining an encoder: BERT". One vocabulary for both languages
with ``<cls>``, ``<sep>`` and ``<mask>`` (:func:`bert_vocab`), single
sentences ``<cls> A <sep>`` (:func:`encode_sentences`), pairs
``<cls> A <sep> B <sep>`` (:func:`add_second_segment`), the pair task "is B
the translation of A?" (:func:`translation_pairs`) and the labels of the
fine-tuning tasks, tense and frame (:func:`label_dataset`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from course_pkg.checks import (
    check_ids,
    check_positive_int,
    check_same_device,
    check_sentences,
    check_token_ids,
    check_valid_lens,
)
from course_pkg.data.translation import RESERVED_TOKENS, Vocab, tokenize

BERT_TOKENS = ("<cls>", "<sep>", "<mask>")
# Ids below this are special: <pad> <bos> <eos> <unk> <cls> <sep> <mask>.
NUM_SPECIAL = len(RESERVED_TOKENS) + len(BERT_TOKENS)

# ------------------------------------------------------------------ inputs


def bert_vocab(sentences: Sequence[str]) -> Vocab:
    """One vocabulary for every sentence, with BERT's three tokens.

    Args:
        sentences: strings in the corpus' normal form (both languages).
    Returns:
        A :class:`~course_pkg.data.translation.Vocab` whose special ids are
        ``0 .. 6``: ``<pad> <bos> <eos> <unk> <cls> <sep> <mask>``; so
        ``num_special = 7``.
    Raises:
        TypeError: if sentences is not a list of str.
    """
    check_sentences("sentences", sentences)
    return Vocab(
        [tokenize(sentence) for sentence in sentences],
        reserved_tokens=list(BERT_TOKENS),
    )


def encode_sentences(
    vocab: Vocab, sentences: Sequence[str], num_steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Single-segment inputs ``<cls> A <sep>``, padded to num_steps.

    Args:
        vocab: from :func:`bert_vocab`. sentences: N strings.
        num_steps: T, at least 2 + the longest sentence.
    Returns:
        (tokens (N, T), segments (N, T) all 0, valid_lens (N,)), long, on
        the CPU.
    Raises:
        TypeError: if sentences is not a list/tuple of str (a str would be
            read one character per sentence).
        ValueError: if a sentence does not fit in num_steps.
    """
    check_sentences("sentences", sentences)
    cls_id, sep_id = vocab["<cls>"], vocab["<sep>"]
    rows, lens = [], []
    for sentence in sentences:
        ids = [cls_id] + vocab[tokenize(sentence)] + [sep_id]
        if len(ids) > num_steps:
            raise ValueError(
                f"num_steps={num_steps} is too short for {sentence!r} "
                f"({len(ids)} ids with <cls> and <sep>)"
            )
        lens.append(len(ids))
        rows.append(ids + [vocab.pad] * (num_steps - len(ids)))
    tokens = torch.tensor(rows, dtype=torch.long).reshape(-1, num_steps)
    valid_lens = torch.tensor(lens, dtype=torch.long)  # also when N = 0
    return tokens, torch.zeros_like(tokens), valid_lens


def add_second_segment(
    first: torch.Tensor,
    first_lens: torch.Tensor,
    seconds: Sequence[Sequence[int]],
    sep_id: int,
    pad_id: int,
    num_steps: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Append ``B <sep>`` (segment 1) after each row's ``<cls> A <sep>``.

    Args:
        first: (N, T_A) rows ``<cls> A <sep>`` (masked or not).
        first_lens: (N,) their lengths.
        seconds: N lists of ids (segment B without its <sep>).
        sep_id, pad_id: the ids of <sep> and <pad>. num_steps: T.
    Returns:
        (tokens (N, T), segments (N, T), valid_lens (N,)), long, on
        first's device.
    Raises:
        TypeError: if first is not integer ids, first_lens not integer
            lengths, or an id or num_steps not an int.
        ValueError: if the shapes do not fit, a length is outside [0, T_A],
            the two are on different devices, or a pair does not fit in
            num_steps.
    """
    _check_add_second_segment(first, first_lens, sep_id, pad_id, num_steps)
    rows, segment_rows, lens = [], [], []
    for row, length, second in zip(
        first.tolist(), first_lens.tolist(), seconds
    ):
        ids = row[:length] + list(second) + [sep_id]
        if len(ids) > num_steps:
            raise ValueError(
                f"num_steps={num_steps} is too short for a pair of "
                f"{len(ids)} ids"
            )
        padding = num_steps - len(ids)
        rows.append(ids + [pad_id] * padding)
        segment_rows.append(
            [0] * length + [1] * (len(second) + 1) + [0] * padding
        )
        lens.append(len(ids))

    def as_tensor(values: list) -> torch.Tensor:
        tensor = torch.tensor(values, dtype=torch.long, device=first.device)
        return (
            tensor.reshape(len(values), -1)
            if values and isinstance(values[0], list)
            else tensor
        )

    return as_tensor(rows), as_tensor(segment_rows), as_tensor(lens)


def _check_add_second_segment(
    first: object,
    first_lens: object,
    sep_id: object,
    pad_id: object,
    num_steps: object,
) -> None:
    """first (N, T_A) integer ids; first_lens (N,) integer lengths in
    [0, T_A] on first's device; sep_id, pad_id ids; num_steps an int >= 1."""
    check_token_ids("first", first, None)
    check_valid_lens("first_lens", first_lens, *first.shape)
    check_same_device(first=first, first_lens=first_lens)  # both are read
    check_ids(sep_id=sep_id, pad_id=pad_id)
    check_positive_int("num_steps", num_steps)


def translation_pairs(
    num_pairs: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which French sentence goes with each English one in the pair task.

    Half of the time (on average) the true translation, else another
    sentence drawn uniformly among the others.

    Args:
        num_pairs: N, the number of (English, French) pairs.
        generator: a CPU ``torch.Generator``.
    Returns:
        (partner (N,), is_translation (N,)): the index of the French sentence
        paired with English sentence i, and 1 where it is i's translation.
    Raises:
        ValueError: if num_pairs < 2.
    """
    if num_pairs < 2:
        raise ValueError(f"num_pairs must be >= 2, got {num_pairs}")
    is_translation = (torch.rand(num_pairs, generator=generator) < 0.5).long()
    # A shift in 1 .. N-1 never lands on i, and is uniform over the rest.
    shift = torch.randint(1, num_pairs, (num_pairs,), generator=generator)
    own = torch.arange(num_pairs)
    other = (own + shift) % num_pairs
    return torch.where(is_translation.bool(), own, other), is_translation


TENSES = ("present", "past", "future")
FRAMES = ("transitive", "ditransitive", "motion", "activity", "copula")
#: The fine-tuning tasks: task -> (its column in the rows of
#: english_sentence_labels, its classes in the order of their ids).
TASKS = {"tense": (1, TENSES), "frame": (3, FRAMES)}


def label_dataset(
    vocab: Vocab,
    rows: Sequence[tuple[str, str, str, str]],
    num_steps: int,
    task: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs ``<cls> sentence <sep>`` and one task's classes.

    Args:
        vocab: from :func:`bert_vocab`. rows: ``(english, tense, mood,
            frame)`` as :func:`~course_pkg.data.corpus.english_sentence_labels`
            gives them. num_steps: T. task: a key of :data:`TASKS`.
    Returns:
        (tokens (N, T), segments (N, T), valid_lens (N,), labels (N,)), a
        label being the index of the row's class in ``TASKS[task][1]``.
    Raises:
        TypeError: if rows is not a list/tuple of rows (e.g. a str).
        ValueError: if task is not a key of TASKS.
    """
    _check_label_dataset(rows, task)
    column, classes = TASKS[task]
    tokens, segments, valid_lens = encode_sentences(
        vocab, [row[0] for row in rows], num_steps
    )
    labels = [classes.index(row[column]) for row in rows]
    labels = torch.tensor(labels, dtype=torch.long)
    return tokens, segments, valid_lens, labels


def _check_label_dataset(rows: object, task: object) -> None:
    """rows a list/tuple of (english, tense, mood, frame) rows; task a key of
    TASKS."""
    if not isinstance(rows, (list, tuple)):
        raise TypeError(
            "rows must be a list of (english, tense, mood, frame) rows, "
            f"got {type(rows).__name__}"
        )
    if task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
