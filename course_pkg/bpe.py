"""Byte-level byte-pair encoding (BPE), trained from scratch.

Chapter "Tokenization". Text becomes UTF-8 bytes; the base vocabulary is the
256 byte values, so every string has an encoding and there is no ``<unk>``.
Training starts from the text cut into pre-tokens ("words", :data:`PATTERN`)
and repeatedly merges the most frequent adjacent pair of tokens into a new
token; merges never cross a word boundary.

Ids: bytes are ``0..255`` (id ``b`` is the byte ``b``), merge ``i`` creates
id ``256 + i``, and the special tokens follow the merges, in the order given:
``256 + len(merges) + j``, as GPT-2's ``<|endoftext|>`` is its last id.
``V = len(tokenizer)`` counts all three.

Tie-breaking: among pairs of equal count, the smallest pair ``(a, b)`` of ids
wins (compared as tuples), so training is deterministic: the same text gives
the same merges on every machine (integer work only).

Training is incremental: the words are counted once, then the pair counts are
kept up to date after each merge by revisiting only the words that hold the
merged pair (an index pair -> words), instead of recounting the whole text.
"""

from __future__ import annotations

import collections
import heapq
import operator
import re
from collections.abc import Iterable, Sequence

from course_pkg.checks import check_int, check_str

Pair = tuple[int, int]

# GPT-2's pre-tokenizer with the standard library's ``re``, which has no
# ``\p{L}`` (letter) or ``\p{N}`` (number) classes: letters are ``[^\W\d_]``
# (word characters that are neither decimal digits nor "_"), numbers ``\d``
# (decimal digits). Where they differ from GPT-2's classes: characters that
# are numeric but not decimal digits ("²", "½", "Ⅻ") count as letters here,
# numbers there; and ``\s`` here also matches the separators \x1c-\x1f.
# On ASCII text without those separators the two agree exactly.
#: The pre-tokenizer's regular expression (GPT-2's, for Python's ``re``).
PATTERN = (
    r"'s|'t|'re|'ve|'m|'ll|'d"  # English contractions, as GPT-2
    r"| ?[^\W\d_]+"  # letters, with one optional leading space
    r"| ?\d+"  # digits
    r"| ?(?:[^\s\w]|_)+"  # anything else: punctuation, symbols
    r"|\s+(?!\S)|\s+"  # whitespace, leaving one space to the next word
)
_WORDS = re.compile(PATTERN)


def pretokenize(text: str) -> list[str]:
    """Cut text into the words BPE merges within (:data:`PATTERN`).

    Returns:
        The words in order: ``"".join(pretokenize(text)) == text``.
    Raises:
        TypeError: if text is not a str.
    """
    check_str("text", text)
    return _WORDS.findall(text)


def _merge_word(word: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """Replace each occurrence of ``pair`` in word by ``new_id``, left to
    right (``aaa`` with the pair ``aa`` gives ``[aa, a]``)."""
    merged, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            merged.append(new_id)
            i += 2
        else:
            merged.append(word[i])
            i += 1
    return merged


def _pairs(word: Sequence[int]) -> collections.Counter:
    """How many times each adjacent pair occurs in word (overlaps count:
    ``aaa`` holds the pair ``aa`` twice)."""
    return collections.Counter(zip(word, word[1:]))


def _word_counts(texts: Iterable[str]) -> collections.Counter:
    """Each distinct word of the texts (as bytes) and its count."""
    counts = collections.Counter()
    for text in texts:
        counts.update(w.encode("utf-8") for w in _WORDS.findall(text))
    return counts


class _PairCounts:
    """The words being merged, their counts, the count of every pair and an
    index pair -> words that hold it, updated merge by merge."""

    def __init__(self, word_counts: collections.Counter):
        self.words = [list(word) for word in word_counts]
        self.freqs = list(word_counts.values())
        self.counts = collections.Counter()
        self.where = collections.defaultdict(set)
        for w, word in enumerate(self.words):
            for pair, n in _pairs(word).items():
                self.counts[pair] += n * self.freqs[w]
                self.where[pair].add(w)
        # a max-heap by (count, then the smallest pair): entries may be stale
        self.heap = [(-n, pair) for pair, n in self.counts.items()]
        heapq.heapify(self.heap)

    def best(self) -> tuple[Pair, int] | None:
        """The pair to merge next and its count, or None if no pair is left."""
        while self.heap:
            negative, pair = self.heap[0]
            if -negative == self.counts[pair] > 0:
                return pair, -negative
            heapq.heappop(self.heap)  # stale: its count changed since
            if self.counts[pair] > 0:
                heapq.heappush(self.heap, (-self.counts[pair], pair))
        return None

    def merge(self, pair: Pair, new_id: int) -> None:
        """Merge pair into new_id in every word that holds it, and update the
        pair counts of those words only."""
        changed = collections.Counter()
        for w in sorted(self.where.pop(pair)):
            old, freq = self.words[w], self.freqs[w]
            new = _merge_word(old, pair, new_id)
            old_pairs, new_pairs = _pairs(old), _pairs(new)
            changed.subtract({p: n * freq for p, n in old_pairs.items()})
            changed.update({p: n * freq for p, n in new_pairs.items()})
            for gone in old_pairs.keys() - new_pairs.keys():
                self.where[gone].discard(w)
            for p in new_pairs:
                self.where[p].add(w)
            self.words[w] = new
        for p, delta in changed.items():
            if delta:
                self.counts[p] += delta
                if delta > 0:  # a decrease is found stale by best()
                    heapq.heappush(self.heap, (-self.counts[p], p))
        self.counts.pop(pair, None)


def train_bpe(
    text: str, vocab_size: int, special_tokens: Sequence[str] = ()
) -> BPETokenizer:
    """Learn ``vocab_size - 256 - len(special_tokens)`` merges from text.

    Args:
        text: the training text; special tokens in it only cut it.
        vocab_size: V, counting the 256 bytes, the merges and the special
            tokens; fewer merges are learned when no pair is left to merge
            (then ``len(tokenizer) < vocab_size``).
        special_tokens: strings that encode to one id each (e.g.
            ``"<|endoftext|>"``), distinct and non-empty.
    Returns:
        The :class:`BPETokenizer`, its ``merge_counts`` filled.
    Raises:
        TypeError: if text is not a str, vocab_size not an int or
            special_tokens not a list/tuple of str.
        ValueError: if vocab_size < 256 + len(special_tokens), or a special
            token is empty or repeated.
    """
    check_str("text", text)
    check_int("vocab_size", vocab_size)
    specials = _check_special_tokens(special_tokens)
    if vocab_size < 256 + len(specials):
        raise ValueError(
            f"vocab_size must be >= 256 + len(special_tokens) = "
            f"{256 + len(specials)}, got {vocab_size}"
        )
    pieces = _split_specials(text, specials)[::2]  # the text between them
    state = _PairCounts(_word_counts(pieces))
    merges, merge_counts = [], []
    while len(merges) < vocab_size - 256 - len(specials):
        best = state.best()
        if best is None:
            break
        pair, count = best
        state.merge(pair, 256 + len(merges))
        merges.append(pair)
        merge_counts.append(count)
    return BPETokenizer(merges, specials, merge_counts=merge_counts)


def _check_special_tokens(special_tokens: Sequence[str]) -> list[str]:
    if isinstance(special_tokens, str) or not isinstance(
        special_tokens, (list, tuple)
    ):
        raise TypeError(
            "special_tokens must be a list or tuple of str, got "
            f"{type(special_tokens).__name__}"
        )
    for token in special_tokens:
        if not isinstance(token, str):
            raise TypeError(
                f"special_tokens must hold str, got {type(token).__name__}"
            )
        if not token:
            raise ValueError("special_tokens must not hold an empty string")
    if len(set(special_tokens)) != len(special_tokens):
        raise ValueError(
            f"special_tokens must be distinct, got {list(special_tokens)}"
        )
    return list(special_tokens)


def _split_specials(text: str, specials: Sequence[str]) -> list[str]:
    """``[text, special, text, special, ..., text]``: the text cut at each
    special token (the longest first where two start at one place)."""
    if not specials:
        return [text]
    longest_first = sorted(specials, key=len, reverse=True)
    pattern = "(" + "|".join(map(re.escape, longest_first)) + ")"
    return re.split(pattern, text)


class BPETokenizer:
    """A byte-level BPE tokenizer: its merges, its vocabulary, its special
    tokens. To save one, keep ``merges`` and ``list(special_tokens)`` (JSON
    turns the pairs into lists, which are accepted back).

    Args:
        merges: pairs of ids in training order; merge ``i`` creates id
            ``256 + i`` and may only use ids below it.
        special_tokens: strings encoded as one id each, after the merges.
        merge_counts: optional, the count of each merge when it was learned
            (:func:`train_bpe` fills it; kept for reading, not used).
    Attributes:
        merges: the pairs, in training order.
        vocab: id -> bytes, for the V ids.
        special_tokens: str -> id.
        merge_counts: as given (empty if not).
        ranks: pair -> its index in merges (the encoder's priority).
    Raises:
        TypeError: if merges is not a list/tuple of pairs of ints, or
            special_tokens not a list/tuple of str.
        ValueError: if a merge uses an id that it does not come after, or a
            special token is empty or repeated.
    """

    def __init__(
        self,
        merges: Sequence[Pair],
        special_tokens: Sequence[str] = (),
        merge_counts: Sequence[int] | None = None,
    ):
        self.merges = _check_merges(merges)
        specials = _check_special_tokens(special_tokens)
        self.merge_counts = list(merge_counts or ())
        self.vocab = {b: bytes([b]) for b in range(256)}
        for i, (a, b) in enumerate(self.merges):
            self.vocab[256 + i] = self.vocab[a] + self.vocab[b]
        first = 256 + len(self.merges)
        self.special_tokens = {t: first + j for j, t in enumerate(specials)}
        for token, i in self.special_tokens.items():
            self.vocab[i] = token.encode("utf-8")
        self.ranks = {pair: i for i, pair in enumerate(self.merges)}
        self._cache: dict[bytes, list[int]] = {}

    def __len__(self) -> int:
        return len(self.vocab)

    def _encode_word(self, word: bytes) -> list[int]:
        """The ids of one pre-token: merge the pair of lowest rank (earliest
        learned) until none of its pairs is a merge; cached per word."""
        if word in self._cache:
            return self._cache[word]
        ids = list(word)
        while len(ids) > 1:
            pair = min(zip(ids, ids[1:]), key=self._rank)
            if pair not in self.ranks:
                break
            ids = _merge_word(ids, pair, 256 + self.ranks[pair])
        self._cache[word] = ids
        return ids

    def _rank(self, pair: Pair) -> float:
        return self.ranks.get(pair, float("inf"))

    def encode(self, text: str) -> list[int]:
        """The ids of text: special tokens first, then word by word.

        Returns:
            A list of ids in ``[0, V)``.
        Raises:
            TypeError: if text is not a str.
            ValueError: if it holds a lone surrogate (no UTF-8 bytes).
        """
        check_str("text", text)
        _check_utf8(text)
        ids = []
        pieces = _split_specials(text, list(self.special_tokens))
        for k, piece in enumerate(pieces):
            if k % 2:
                ids.append(self.special_tokens[piece])
                continue
            for word in _WORDS.findall(piece):
                ids.extend(self._encode_word(word.encode("utf-8")))
        return ids

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of a sequence of ids (ints in ``[0, V)``).

        Raises:
            TypeError, ValueError: as :meth:`decode`.
        """
        return b"".join(self.vocab[i] for i in self._check_ids(ids))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of a sequence of ids: ``decode(encode(s)) == s``.

        Ids that cut a character's UTF-8 bytes (a single id of a multi-byte
        character) decode to U+FFFD there.

        Raises:
            TypeError: if ids is not a sequence of ints (bools refused).
            ValueError: if an id is outside ``[0, V)``.
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def _check_ids(self, ids: Sequence[int]) -> list[int]:
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(
                f"ids must be a sequence of ints, got {type(ids).__name__}"
            )
        checked = []
        for i in ids:
            if isinstance(i, bool):
                raise TypeError("ids must hold ints, got bool")
            try:
                i = operator.index(i)
            except TypeError:
                raise TypeError(
                    f"ids must hold ints, got {type(i).__name__}"
                ) from None
            if not 0 <= i < len(self.vocab):
                raise ValueError(
                    f"ids must lie in [0, {len(self.vocab)}), got {i}"
                )
            checked.append(i)
        return checked


def _check_merges(merges: Sequence[Pair]) -> list[Pair]:
    if not isinstance(merges, (list, tuple)):
        raise TypeError(
            f"merges must be a list of (int, int) pairs, got "
            f"{type(merges).__name__}"
        )
    checked = []
    for i, pair in enumerate(merges):
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in pair
            )
        ):
            raise TypeError(
                f"merges[{i}] must be a pair of ints, got {pair!r}"
            )
        if not all(0 <= x < 256 + i for x in pair):
            raise ValueError(
                f"merges[{i}] = {tuple(pair)} must use ids in [0, {256 + i})"
            )
        checked.append((pair[0], pair[1]))
    return checked


def _check_utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"text must be encodable as UTF-8, got a lone surrogate at "
            f"position {error.start}"
        ) from None


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's table from bytes to printable characters, which byte-level
    tokenizers (GPT-2's files, Hugging Face ``tokenizers``) write tokens in.

    The 188 printable bytes (``!`` to ``~``, ``¡`` to ``¬``, ``®`` to ``ÿ``)
    stand for themselves; the 68 others (the space, control bytes, ...) take
    ``chr(256 + n)`` in byte order: the space is ``Ġ``, the newline ``Ċ``.
    """
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in table]
    table.update({b: chr(256 + n) for n, b in enumerate(others)})
    return dict(sorted(table.items()))
