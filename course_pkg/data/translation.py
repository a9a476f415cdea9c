"""From sentence pairs to batches: normal form, tokens, vocabularies, arrays
and loaders.

Chapters on seq2seq and the Transformer. Two sources of pairs,
:func:`course_pkg.data.corpus.english_french_corpus` (generated) and
:func:`course_pkg.data.tatoeba.load_tatoeba` (real), share one normal form (lower
case, punctuation split off by a space, one space between tokens), so one
tokenizer (split on spaces) and one :class:`Vocab` serve both.

The pipeline the chapters run: :func:`tokenize_pairs` -> :class:`Vocab` ->
:func:`build_arrays` -> :func:`translation_dataloaders`.

Shape letters (see the package docstring): ``N`` examples, ``B`` batch,
``T`` steps (``num_steps``).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from course_pkg.checks import (
    check_device,
    check_int,
    check_integer_dtype,
    check_nonnegative_int,
    check_positive_int,
    check_seed,
    check_sentences,
    check_str,
)

Pair = tuple[str, str]

# ---------------------------------------------------------------------------------------------
# Normalisation and tokens
# ---------------------------------------------------------------------------------------------


def preprocess_nmt(text: str) -> str:
    """Normalise raw text the way d2l does: no-break spaces to spaces, lower case, ``,.!?`` split off.

    Args:
        text: a sentence (or a whole file) as a string.
    Returns:
        The normalised string; a space is inserted before ``, . ! ?`` unless one is already there.
        Leading/trailing spaces are kept (use :func:`tokenize` to drop them).
    Raises:
        TypeError: if text is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = []
    for i, char in enumerate(text):
        if i > 0 and char in ",.!?" and text[i - 1] != " ":
            out.append(" ")
        out.append(char)
    return "".join(out)


def normalise(text: str) -> str:
    """The canonical form of a sentence: :func:`preprocess_nmt`, then single spaces, no ends."""
    return " ".join(preprocess_nmt(text).split())


def tokenize(sentence: str) -> list[str]:
    """Split a normalised sentence on whitespace: ``"je la vois ."`` -> ``["je", "la", "vois", "."]``.

    Raises:
        TypeError: if sentence is not a str.
    """
    check_str("sentence", sentence)
    return sentence.split()


def tokenize_pairs(
    pairs: Iterable[Pair],
) -> tuple[list[list[str]], list[list[str]]]:
    """Tokenize (source, target) pairs.

    Args:
        pairs: (english, french) string pairs.
    Returns:
        (src_tokens, tgt_tokens): two lists of token lists, aligned with pairs.
    """
    src_tokens, tgt_tokens = [], []
    for src, tgt in pairs:
        src_tokens.append(tokenize(src))
        tgt_tokens.append(tokenize(tgt))
    return src_tokens, tgt_tokens


def corpus_stats(pairs: Sequence[Pair]) -> dict:
    """Size, vocabulary and sentence lengths of a list of (source, target) pairs.

    Args:
        pairs: (english, french) strings in normal form.
    Returns:
        A dict with ``num_pairs``, ``src_types`` and ``tgt_types`` (distinct tokens per language),
        and, in tokens, ``src_min_len``, ``src_max_len``, ``src_mean_len`` and the same for ``tgt``
        (means rounded to 2 decimals so that printing them is reproducible).
    Raises:
        ValueError: if pairs is empty.
    """
    if len(pairs) == 0:
        raise ValueError("pairs must not be empty")
    src_tokens, tgt_tokens = tokenize_pairs(pairs)
    stats: dict = {"num_pairs": len(pairs)}
    for side, tokens in (("src", src_tokens), ("tgt", tgt_tokens)):
        stats[f"{side}_types"] = len(
            {token for sentence in tokens for token in sentence}
        )
    for side, tokens in (("src", src_tokens), ("tgt", tgt_tokens)):
        lengths = [len(sentence) for sentence in tokens]
        stats[f"{side}_min_len"] = min(lengths)
        stats[f"{side}_max_len"] = max(lengths)
        stats[f"{side}_mean_len"] = round(sum(lengths) / len(lengths), 2)
    return stats


# -- Vocabulary, arrays and batches

RESERVED_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")


class Vocab:
    """A bijection between tokens and indices, built from a corpus.

    Indices 0-3 are always ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``; then any other
    reserved_tokens; then the corpus tokens seen at least min_freq times, most frequent first and
    alphabetically among equals, so the same corpus always gives the same vocabulary.

    Args:
        tokens: a list of token lists (sentences) or a flat list of tokens.
        min_freq: tokens seen fewer times are left out (and map to ``<unk>``).
        reserved_tokens: extra special tokens to add after the four above.
    Raises:
        TypeError: if tokens or reserved_tokens is not a list or tuple (a str
            would be read as one token per character), or min_freq is not an
            int.
    """

    def __init__(
        self,
        tokens: Sequence[str] | Sequence[Sequence[str]] = (),
        min_freq: int = 0,
        reserved_tokens: Sequence[str] | None = None,
    ):
        tokens = _check_vocab_args(tokens, min_freq, reserved_tokens)
        self.token_freqs = sorted(
            collections.Counter(tokens).items(),
            key=lambda item: (-item[1], item[0]),
        )
        specials = list(RESERVED_TOKENS)
        for token in reserved_tokens or ():
            if token not in specials:
                specials.append(token)
        self.idx_to_token = specials + [
            t
            for t, freq in self.token_freqs
            if freq >= min_freq and t not in specials
        ]
        self.token_to_idx = {
            token: idx for idx, token in enumerate(self.idx_to_token)
        }

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Index of a token (``unk`` if unknown), or the list of indices of a list/tuple of tokens."""
        if isinstance(tokens, (list, tuple)):
            return [self.token_to_idx.get(token, self.unk) for token in tokens]
        return self.token_to_idx.get(tokens, self.unk)

    def to_tokens(
        self, indices: int | Sequence[int] | torch.Tensor
    ) -> str | list[str]:
        """Token of an index, or the list of tokens of a list / 1-D tensor of indices.

        Raises:
            TypeError: if an index is not an int (a float, a bool, a float
                tensor) or indices is not an int, list, tuple or tensor.
            ValueError: if an index is outside [0, len(self)) (-1 is not the
                last token), or a tensor is not 0-D or 1-D.
        """
        _check_vocab_to_tokens(indices)
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        if isinstance(indices, (list, tuple)):
            return [self._token(index) for index in indices]
        return self._token(indices)

    def _token(self, index: int) -> str:
        check_int("indices", index)
        if not 0 <= index < len(self.idx_to_token):
            raise ValueError(
                f"indices must be in [0, {len(self.idx_to_token)}), got {index}"
            )
        return self.idx_to_token[index]

    # The ids of RESERVED_TOKENS, the same in every vocabulary.
    pad, bos, eos, unk = 0, 1, 2, 3


def _check_vocab_args(
    tokens: object, min_freq: object, reserved_tokens: object
) -> Sequence[str]:
    """tokens a list/tuple of str or of lists of str; reserved_tokens None or
    a list/tuple; min_freq an int. Returns the tokens flattened to one list."""
    if not isinstance(tokens, (list, tuple)):
        raise TypeError(
            f"tokens must be a list of token lists or of tokens, got {type(tokens).__name__}"
        )
    if isinstance(reserved_tokens, str) or not isinstance(
        reserved_tokens, (list, tuple, type(None))
    ):
        raise TypeError(
            "reserved_tokens must be None or a list of str tokens, got "
            f"{type(reserved_tokens).__name__}"
        )
    check_nonnegative_int("min_freq", min_freq)
    if tokens and all(isinstance(item, (list, tuple)) for item in tokens):
        tokens = [token for sentence in tokens for token in sentence]
    if not all(isinstance(token, str) for token in tokens):
        raise TypeError(
            "tokens must be a list of str tokens or a list of lists of "
            "str (not a mix: a str among lists would be split into "
            "letters)"
        )
    return tokens


def _check_vocab_to_tokens(indices: object) -> None:
    """A tensor of indices must be 0-D or 1-D of an integer dtype (other
    indices are checked one by one as they are looked up)."""
    if isinstance(indices, torch.Tensor):
        check_integer_dtype("indices", indices, "integer token ids")
        if indices.dim() > 1:
            raise ValueError(
                "indices must be a 0-D or 1-D tensor, got shape "
                f"{tuple(indices.shape)}"
            )


def truncate_pad(ids: Sequence[int], num_steps: int, pad: int) -> list[int]:
    """Cut ids to num_steps, or pad them to num_steps with pad.

    Args:
        ids: token indices. num_steps: T, the length wanted. pad: the padding index.
    Returns:
        A list of exactly num_steps indices.
    Raises:
        ValueError: if num_steps is negative.
    """
    _check_truncate_pad(num_steps, pad)
    ids = list(ids[:num_steps])
    return ids + [pad] * (num_steps - len(ids))


def _check_truncate_pad(num_steps: object, pad: object) -> None:
    """num_steps an int >= 0; pad an int."""
    check_nonnegative_int("num_steps", num_steps)
    check_int("pad", pad)


def source_array(
    sentences: Sequence[str], src_vocab: Vocab, num_steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's input for source sentences: ids + ``<eos>``, cut or padded to num_steps.

    Args:
        sentences: N source strings in normal form. src_vocab: the source vocabulary.
        num_steps: T.
    Returns:
        (src, src_valid_len): src (N, T) long; src_valid_len (N,) long, the number of positions
        of each row that hold its tokens and <eos> (not padding). On the CPU.
    Raises:
        TypeError: if sentences is a str or not a list/tuple of str, or num_steps not an int.
        ValueError: if num_steps < 1.
    """
    _check_source_array(sentences, num_steps)
    ids = [src_vocab[tokenize(s)] + [src_vocab.eos] for s in sentences]
    rows = [truncate_pad(row, num_steps, src_vocab.pad) for row in ids]
    src = torch.tensor(rows, dtype=torch.long).reshape(len(rows), num_steps)
    # Counted from the lengths, not from the pad ids: a literal "<pad>" in a
    # sentence must not shorten it and hide its <eos>.
    valid_len = [min(len(row), num_steps) for row in ids]
    return src, torch.tensor(valid_len, dtype=torch.long)


def _check_source_array(sentences: object, num_steps: object) -> None:
    """sentences a list/tuple of N str; num_steps an int >= 1."""
    check_sentences("sentences", sentences)
    check_positive_int("num_steps", num_steps)


def build_arrays(
    pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab, num_steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Turn sentence pairs into the four index tensors a seq2seq model trains on.

    For a target ``y1 ... yn`` the decoder reads ``<bos> y1 ... yn`` (teacher forcing) and must
    predict ``y1 ... yn <eos>``: tgt_out[:, t] is the token that follows tgt_in[:, t].

    Args:
        pairs: N (source, target) strings in normal form.
        src_vocab, tgt_vocab: vocabularies of the two languages.
        num_steps: T; longer sequences are cut, shorter ones padded with ``<pad>``.
    Returns:
        (src, src_valid_len, tgt_in, tgt_out): src (N, T) long = source ids + ``<eos>``;
        src_valid_len (N,) long = number of non-pad positions of src; tgt_in (N, T) long =
        ``<bos>`` + target ids; tgt_out (N, T) long = target ids + ``<eos>``. All on the CPU.
    Raises:
        ValueError: if num_steps < 1.
    """
    src, src_valid_len = source_array(
        [src for src, _ in pairs], src_vocab, num_steps
    )
    tgt_tokens = [tokenize(tgt) for _, tgt in pairs]
    tgt_in = [
        truncate_pad([tgt_vocab.bos] + tgt_vocab[t], num_steps, tgt_vocab.pad)
        for t in tgt_tokens
    ]
    tgt_out = [
        truncate_pad(tgt_vocab[t] + [tgt_vocab.eos], num_steps, tgt_vocab.pad)
        for t in tgt_tokens
    ]
    return (
        src,
        src_valid_len,
        torch.tensor(tgt_in, dtype=torch.long).reshape(len(pairs), num_steps),
        torch.tensor(tgt_out, dtype=torch.long).reshape(len(pairs), num_steps),
    )


class TranslationLoaders(NamedTuple):
    """Train/validation/test DataLoaders and the two vocabularies they were built with."""

    train: DataLoader
    val: DataLoader
    test: DataLoader
    src_vocab: Vocab
    tgt_vocab: Vocab


def _batch_to_device(
    batch: tuple[torch.Tensor, ...], device: torch.device
) -> tuple[torch.Tensor, ...]:
    return tuple(tensor.to(device) for tensor in batch)


def translation_dataloaders(
    splits: Sequence[Sequence[Pair]],
    batch_size: int,
    num_steps: int,
    min_freq: int = 1,
    device: torch.device | str | None = None,
    seed: int = 0,
) -> TranslationLoaders:
    """DataLoaders of translation batches, with vocabularies built from the training split only.

    Each batch is ``(src, src_valid_len, tgt_in, tgt_out)`` with shapes (B, T), (B,), (B, T),
    (B, T) (see :func:`build_arrays`), long tensors on device; the data stay on the CPU and each
    batch is moved when it is made, so the loaders serve any device (``meta`` included).
    The training loader shuffles with a ``torch.Generator`` seeded with seed: the sequence of
    epochs is the same in every run. Validation and test keep their order.

    Args:
        splits: (train, validation, test) lists of (source, target) pairs.
        batch_size: B. num_steps: T. min_freq: see :class:`Vocab`.
        device: where batches go (default: CPU). seed: seed of the training order.
    Returns:
        A :class:`TranslationLoaders` (train, val, test, src_vocab, tgt_vocab).
    Raises:
        TypeError: if splits is not a list/tuple, a size or seed not an int, or device not a
            str/``torch.device``.
        ValueError: if splits does not hold 3 lists, the training split is empty,
            batch_size / num_steps < 1, or device is not available here (``"cuda"`` without a
            GPU is refused now, not at the first batch).
    """
    device = _check_translation_dataloaders(
        splits, batch_size, num_steps, min_freq, device, seed
    )
    src_tokens, tgt_tokens = tokenize_pairs(splits[0])
    src_vocab, tgt_vocab = (
        Vocab(src_tokens, min_freq=min_freq),
        Vocab(tgt_tokens, min_freq=min_freq),
    )
    to_device = functools.partial(_batch_to_device, device=device)
    loaders = []
    for i, pairs in enumerate(splits):
        dataset = TensorDataset(
            *build_arrays(pairs, src_vocab, tgt_vocab, num_steps)
        )
        # Whole batches are indexed at once (dataset[list of indices]): much faster than stacking
        # B single examples, and batch_size=None tells the DataLoader the sampler already batches.
        if i == 0:
            order = RandomSampler(
                dataset, generator=torch.Generator().manual_seed(seed)
            )
        else:
            order = SequentialSampler(dataset)
        loaders.append(
            DataLoader(
                dataset,
                sampler=BatchSampler(order, batch_size, drop_last=False),
                batch_size=None,
                collate_fn=to_device,
            )
        )
    return TranslationLoaders(*loaders, src_vocab, tgt_vocab)


def _check_translation_dataloaders(
    splits: object,
    batch_size: object,
    num_steps: object,
    min_freq: object,
    device: object,
    seed: object,
) -> torch.device:
    """splits a list/tuple of 3 splits, the first non-empty; batch_size and
    num_steps ints >= 1; min_freq and seed ints; device None or usable.
    Returns the device (the CPU for None)."""
    if not isinstance(splits, (list, tuple)):
        raise TypeError(
            f"splits must be a list or tuple, got {type(splits).__name__}"
        )
    if len(splits) != 3:
        raise ValueError(
            f"splits must be (train, validation, test), got {len(splits)} items"
        )
    if len(splits[0]) == 0:
        raise ValueError("splits[0] (the training split) must not be empty")
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_steps", num_steps)
    check_nonnegative_int("min_freq", min_freq)
    check_seed("seed", seed)
    return check_device("device", device) or torch.device("cpu")
