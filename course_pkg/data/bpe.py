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

Special tokens in text to encode are refused by default, as ``tiktoken``
does: a user's text that contains ``"<|endoftext|>"`` must not become the
control token (it would end a document, or a turn, where the user chose).
:meth:`BPETokenizer.encode` turns them into their ids only when asked
(``allowed_special``), or encodes them as ordinary text
(``disallowed_special=()``).

A trained tokenizer is saved as a readable JSON file (:meth:`BPETokenizer.save`,
:meth:`BPETokenizer.load`): a format tag, the special tokens, and each merge
as its two ids with the token it makes, written in GPT-2's printable
characters (:func:`byte_to_unicode`; ``Ġ`` is the space).

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
import json
import operator
import os
import re
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from course_pkg.checks import (
    check_nonnegative_int,
    check_path,
    check_size,
    check_str,
)
from course_pkg.files import write_atomically

if TYPE_CHECKING:
    from tokenizers import Tokenizer

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
    specials = _check_train_bpe(text, vocab_size, special_tokens)
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


def _check_train_bpe(
    text: object, vocab_size: object, special_tokens: object
) -> list[str]:
    """text a str; special_tokens a list/tuple of distinct non-empty str;
    vocab_size an int >= 256 + len(special_tokens). Returns them as a list."""
    check_str("text", text)
    check_size("vocab_size", vocab_size, 256)
    specials = _check_special_tokens(special_tokens)
    if vocab_size < 256 + len(specials):
        raise ValueError(
            f"vocab_size must be >= 256 + len(special_tokens) = "
            f"{256 + len(specials)}, got {vocab_size}"
        )
    return specials


def merge_ties(
    text: str, num_merges: int, special_tokens: Sequence[str] = ()
) -> list[int]:
    """For each of the first num_merges merges :func:`train_bpe` learns from
    text, how many pairs had its count when it was chosen: 1 where it was
    the only one, 2 or more at a tie (broken by the smallest pair).

    Trains again, scanning every pair's count at each merge: for reading a
    few hundred merges, not for training.

    Args:
        text, special_tokens: as :func:`train_bpe`. num_merges: >= 0.
    Returns:
        One count per merge (fewer if no pair is left to merge).
    Raises:
        TypeError: if text is not a str or num_merges not an int.
        ValueError: if num_merges < 0, or special_tokens as in train_bpe.
    """
    specials = _check_merge_ties(text, num_merges, special_tokens)
    state = _PairCounts(_word_counts(_split_specials(text, specials)[::2]))
    ties: list[int] = []
    while len(ties) < num_merges:
        best = state.best()
        if best is None:
            break
        pair, count = best
        ties.append(sum(n == count for n in state.counts.values()))
        state.merge(pair, 256 + len(ties) - 1)
    return ties


def _check_merge_ties(
    text: object, num_merges: object, special_tokens: object
) -> list[str]:
    """text a str; num_merges an int >= 0; special_tokens as in
    :func:`train_bpe`. Returns the special tokens as a list."""
    check_str("text", text)
    check_nonnegative_int("num_merges", num_merges)
    return _check_special_tokens(special_tokens)


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


#: The format tag of a saved tokenizer (:meth:`BPETokenizer.save`).
FILE_FORMAT = "course_pkg.data.bpe/1"


class BPETokenizer:
    """A byte-level BPE tokenizer: its merges, its vocabulary, its special
    tokens. :meth:`save` writes it to a JSON file, :meth:`load` reads it
    back (merges given as lists, as JSON returns them, are accepted too).

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
        self.merges, specials = _check_bpe_tokenizer_args(
            merges, special_tokens
        )
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

    def encode(
        self,
        text: str,
        *,
        allowed_special: Collection[str] | Literal["all"] = frozenset(),
        disallowed_special: Collection[str] | Literal["all"] = "all",
    ) -> list[int]:
        """The ids of text: special tokens first, then word by word.

        A special token's string in text is refused by default, as
        ``tiktoken`` refuses it: a user's text must not become a control
        token. ``allowed_special``: those to encode as their ids ("all":
        every one); ``disallowed_special``: those to refuse ("all", the
        default: every one not allowed; ``()``: none). A special token
        neither allowed nor refused is encoded as ordinary text.

        Returns:
            A list of ids in ``[0, V)``.
        Raises:
            TypeError: if text is not a str, or allowed_special or
                disallowed_special is neither "all" nor a collection of str.
            ValueError: if text holds a lone surrogate (no UTF-8 bytes) or a
                refused special token (named, with its position), or the
                two arguments name a string that is not a special token of
                this tokenizer, or the same token.
        """
        allowed, refused = _check_bpe_tokenizer_encode(
            self, text, allowed_special, disallowed_special
        )
        ids = []
        for k, piece in enumerate(_split_specials(text, sorted(allowed))):
            if k % 2:
                ids.append(self.special_tokens[piece])
                continue
            for word in _WORDS.findall(piece):
                ids.extend(self._encode_word(word.encode("utf-8")))
        return ids

    def _allowed_and_refused(
        self, allowed_special: object, disallowed_special: object
    ) -> tuple[set[str], set[str]]:
        """The special tokens :meth:`encode` encodes as ids, and those it
        refuses, from its two arguments."""
        allowed = self._special_set("allowed_special", allowed_special)
        refused = self._special_set("disallowed_special", disallowed_special)
        if disallowed_special == "all":
            refused -= allowed
        if allowed & refused:
            raise ValueError(
                "allowed_special and disallowed_special must not share a "
                f"token, got {sorted(allowed & refused)} in both"
            )
        return allowed, refused

    def _special_set(self, name: str, tokens: object) -> set[str]:
        """The special tokens a parameter names: "all" or a collection of
        this tokenizer's special tokens."""
        if isinstance(tokens, str):
            if tokens != "all":
                raise TypeError(
                    f"{name} must be 'all' or a collection of special tokens, "
                    f"got the str {tokens!r}"
                )
            return set(self.special_tokens)
        if not isinstance(tokens, Collection) or not all(
            isinstance(t, str) for t in tokens
        ):
            raise TypeError(
                f"{name} must be 'all' or a collection of str, got "
                f"{type(tokens).__name__}"
            )
        unknown = sorted(set(tokens) - set(self.special_tokens))
        if unknown:
            raise ValueError(
                f"{name}: {unknown} are not special tokens of this tokenizer "
                f"({sorted(self.special_tokens)})"
            )
        return set(tokens)

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer to a JSON file (atomically): the format tag
        :data:`FILE_FORMAT`, the special tokens in order, and one line per
        merge, ``[a, b, "token"]``: the two ids and the token they make, in
        GPT-2's printable characters (:func:`byte_to_unicode`), for
        reading; :meth:`load` checks it.

        Raises:
            TypeError: if path is not a str or os.PathLike.
            OSError: if the file system refuses.
        """
        check_path("path", path)
        table = byte_to_unicode()

        def text(value: object) -> str:  # JSON, non-ASCII characters as is
            return json.dumps(value, ensure_ascii=False)

        lines = [
            "{",
            f'  "format": {json.dumps(FILE_FORMAT)},',
            f'  "special_tokens": {text(list(self.special_tokens))},',
            '  "merges": [',
        ]
        for i, (a, b) in enumerate(self.merges):
            shown = "".join(table[byte] for byte in self.vocab[256 + i])
            comma = "," if i + 1 < len(self.merges) else ""
            lines.append(f"    [{a}, {b}, {text(shown)}]{comma}")
        lines += ["  ]", "}", ""]
        data = "\n".join(lines).encode("utf-8")
        write_atomically(path, lambda handle: handle.write(data))

    @classmethod
    def load(cls, path: str | os.PathLike) -> BPETokenizer:
        """A tokenizer from a file :meth:`save` wrote.

        Raises:
            TypeError: if path is not a str or os.PathLike, or the file's
                merges are not [int, int, str] entries.
            ValueError: if the file is not JSON with the format tag
                :data:`FILE_FORMAT`, or a merge's token is not the one its
                ids make, or the merges or special tokens are invalid (as in
                the constructor).
            OSError: if the file cannot be read.
        """
        check_path("path", path)
        try:
            saved = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(
                f"path: {path} is not a JSON file: {error}"
            ) from None
        if not isinstance(saved, dict) or saved.get("format") != FILE_FORMAT:
            raise ValueError(
                f"path: {path} is not a saved tokenizer (format "
                f"{FILE_FORMAT!r} expected)"
            )
        entries = saved.get("merges")
        if not isinstance(entries, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[2], str)
            for e in entries
        ):
            raise TypeError(
                f"path: {path}: merges must be [a, b, token] entries"
            )
        tokenizer = cls(
            [tuple(e[:2]) for e in entries], saved.get("special_tokens", ())
        )
        table = byte_to_unicode()
        for i, entry in enumerate(entries):
            made = "".join(table[byte] for byte in tokenizer.vocab[256 + i])
            if entry[2] != made:
                raise ValueError(
                    f"path: {path}: merge {i} reads {entry[2]!r}, but its ids "
                    f"make {made!r}"
                )
        return tokenizer

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


def _check_bpe_tokenizer_args(
    merges: object, special_tokens: object
) -> tuple[list[Pair], list[str]]:
    """merges a list/tuple of (int, int) pairs, merge i using ids in
    [0, 256 + i); special_tokens a list/tuple of distinct non-empty str.
    Returns both as lists."""
    checked = _check_merges(merges)
    return checked, _check_special_tokens(special_tokens)


def _check_bpe_tokenizer_encode(
    tokenizer: BPETokenizer,
    text: object,
    allowed_special: object,
    disallowed_special: object,
) -> tuple[set[str], set[str]]:
    """text a str of UTF-8-encodable characters holding no refused special
    token; allowed_special and disallowed_special "all" or collections of
    the tokenizer's special tokens, disjoint. Returns (allowed, refused)."""
    check_str("text", text)
    allowed, refused = tokenizer._allowed_and_refused(
        allowed_special, disallowed_special
    )
    _check_utf8(text)
    _refuse_specials(text, refused)
    return allowed, refused


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


def _refuse_specials(text: str, refused: set[str]) -> None:
    """ValueError naming the first refused special token in text, if any."""
    pieces = _split_specials(text, sorted(refused))
    if len(pieces) > 1:
        token = pieces[1]
        raise ValueError(
            f"text holds the special token {token!r} at position "
            f"{len(pieces[0])}; pass allowed_special={{{token!r}}} (or "
            "'all') to encode it as its id, or disallowed_special=() to "
            "encode it as ordinary text"
        )


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


def train_hf_bpe(text: str, vocab_size: int) -> Tokenizer:
    """Hugging Face ``tokenizers``' byte-level BPE, set up as
    :func:`train_bpe` is and trained on text: GPT-2's pre-tokenizer without
    a prefix space, the 256 bytes (as :func:`byte_to_unicode`'s characters)
    as the initial alphabet, no frequency threshold, no special tokens.

    The peer that ``tests/test_bpe.py`` and ``bench/bpe.py`` compare ours
    with; it imports ``tokenizers``, which nothing else here needs.

    Args:
        text: the training text. vocab_size: V, counting the 256 bytes.
    Returns:
        The trained ``tokenizers.Tokenizer``, with a ``ByteLevel`` decoder.
    Raises:
        TypeError: if text is not a str or vocab_size not an int.
        ValueError: if vocab_size < 256.
    """
    _check_train_hf_bpe(text, vocab_size)
    import tokenizers as tk

    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(
        add_prefix_space=False, use_regex=True
    )
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([text], trainer=trainer)
    return tokenizer


def _check_train_hf_bpe(text: object, vocab_size: object) -> None:
    """text a str; vocab_size an int >= 256."""
    check_str("text", text)
    check_size("vocab_size", vocab_size, 256)
