"""Byte-level BPE (:mod:`course_pkg.data.bpe`).

- round trip ``decode(encode(s)) == s`` on drawn text (non-ASCII, emoji,
  whitespace runs, special tokens inside the text, the empty string);
- special tokens in the text refused by default, encoded as ids or as
  ordinary text when asked, as ``tiktoken`` does (the same ids, the same
  refusals);
- save and load: a readable JSON file, the same tokenizer back;
- bits per byte count UTF-8 bytes, not characters;
- training against a naive reference written here, which recounts every pair
  of every word before each merge: the same merges and counts, and the
  incremental counts equal a recount after every merge;
- determinism: the same text gives the same merges, under another hash seed;
- encoding against a second reference (the merges applied one by one in
  training order, to every word);
- parity with implementations nobody here wrote: Hugging Face ``tokenizers``
  (its pre-tokenizer, with the differences the docs state, among them
  letters newer than Python's Unicode database; its trainer's merges up to
  the first tie its id order breaks otherwise, its encoder fed our merges)
  and ``tiktoken``'s encoder fed our merges;
- bad input refused by name.

Times are measured by ``bench/bpe.py``, never asserted here.
"""

from __future__ import annotations

import collections
import functools
import json
import math
import os
import pathlib
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_pkg.data import bpe, shakespeare
from course_pkg.training.lm_pretraining import bits_per_byte

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPECIALS = ["<|endoftext|>", "<pad>"]

# A small training text with non-ASCII letters, digits and punctuation.
SAMPLE = (
    (
        "The quick brown fox jumps over the lazy dog. "
        "Le renard brun saute par-dessus le chien paresseux, déjà vu ! "
        "Der schnelle braune Fuchs springt über den faulen Hund; "
        "In 1599, 12 players read 3 plays... "
        "Тот же текст по-русски.  Ελληνικά.\n\n"
    )
    * 20
    + "<|endoftext|>"
    + "the end, the end.\n" * 10
)


@pytest.fixture(scope="module")
def sample_tokenizer() -> bpe.BPETokenizer:
    return bpe.train_bpe(SAMPLE, 400, SPECIALS)


@pytest.fixture(scope="module")
def shakespeare_text(shakespeare_works) -> tuple[str, str]:
    """The first 200,000 characters of the training text, the validation
    text."""
    train, valid = shakespeare.train_valid_text(shakespeare_works)
    return train[:200_000], valid


@pytest.fixture(scope="module")
def shakespeare_tokenizer(shakespeare_text) -> bpe.BPETokenizer:
    return bpe.train_bpe(shakespeare_text[0], 1000, ["<|endoftext|>"])


# ------------------------------------------------------------- references


def _merge(word: tuple, pair: tuple, new_id: int) -> tuple:
    out, i = [], 0
    while i < len(word):
        if word[i : i + 2] == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def _recount(words: dict[tuple, int]) -> collections.Counter:
    counts = collections.Counter()
    for word, freq in words.items():
        for i in range(len(word) - 1):
            counts[word[i : i + 2]] += freq
    return counts


def naive_train(text: str, num_merges: int, order=lambda pair: pair):
    """The merges, their counts and whether each was a tie, by recounting
    every pair of every distinct word before each merge; among equal counts
    the pair whose ``order(pair)`` is smallest wins."""
    words = collections.Counter(
        tuple(w.encode("utf-8")) for w in bpe.pretokenize(text)
    )
    merges, counts, ties = [], [], []
    for i in range(num_merges):
        pairs = _recount(words)
        if not pairs:
            break
        top = max(pairs.values())
        best = sorted((p for p, n in pairs.items() if n == top), key=order)
        merges.append(best[0])
        counts.append(top)
        ties.append(len(best) > 1)
        merged = collections.Counter()
        for word, freq in words.items():
            merged[_merge(word, best[0], 256 + i)] += freq
        words = merged
    return merges, counts, ties


def naive_encode(tokenizer: bpe.BPETokenizer, text: str) -> list[int]:
    """Each word's bytes with every merge applied in training order."""
    ids = []
    for word in bpe.pretokenize(text):
        tokens = tuple(word.encode("utf-8"))
        for i, pair in enumerate(tokenizer.merges):
            tokens = _merge(tokens, pair, 256 + i)
        ids.extend(tokens)
    return ids


# ------------------------------------------------------------- round trip

EMOJI = ["🙂", "👍🏽", "👩‍👩‍👧", "🇫🇷", "❤️"]
PIECES = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="aeiou tTh\n'.,", max_size=12),
    st.sampled_from(SPECIALS + ["<|endoftext", "<pad", "|>"]),
    st.sampled_from(EMOJI),
    st.text(alphabet=" \t\n\r\x0b\x0c\xa0\u2003\u3000", min_size=1),
)


@given(st.lists(PIECES, max_size=8).map("".join))
def test_decode_inverts_encode(sample_tokenizer, text):
    ids = sample_tokenizer.encode(text, allowed_special="all")
    assert sample_tokenizer.decode(ids) == text
    assert all(0 <= i < len(sample_tokenizer) for i in ids)
    # as ordinary text the special tokens are bytes and merges like any other
    plain = sample_tokenizer.encode(text, disallowed_special=())
    assert sample_tokenizer.decode(plain) == text
    assert not set(plain) & set(sample_tokenizer.special_tokens.values())


@given(st.text())
def test_pretokenize_keeps_every_character(text):
    assert "".join(bpe.pretokenize(text)) == text


@pytest.mark.parametrize(
    "text", ["", " ", "   \n\n\t ", "🙂👍🏽", "<|endoftext|><|endoftext|>"]
)
def test_edge_cases_round_trip(sample_tokenizer, text):
    ids = sample_tokenizer.encode(text, allowed_special="all")
    assert sample_tokenizer.decode(ids) == text
    assert (ids == []) == (text == "")


def test_special_tokens_are_one_id_each_after_the_merges(sample_tokenizer):
    tok = sample_tokenizer
    first = 256 + len(tok.merges)
    assert tok.special_tokens == {"<|endoftext|>": first, "<pad>": first + 1}
    ids = tok.encode("the<pad>end<|endoftext|>", allowed_special="all")
    assert ids.count(first) == ids.count(first + 1) == 1
    assert ids[-1] == first
    assert tok.decode([first + 1]) == "<pad>"
    # the special token in the training text cut it: no merge reaches into it
    assert not any(b"<|" in tok.vocab[256 + i] for i in range(len(tok.merges)))
    # "<|endoftext" is not the special token: it is spelled out in bytes
    assert first not in tok.encode("<|endoftext")


def test_an_unfinished_character_decodes_to_the_replacement_character(
    sample_tokenizer,
):
    assert "é".encode() == bytes([0xC3, 0xA9])
    assert sample_tokenizer.decode([0xC3]) == "\ufffd"
    assert sample_tokenizer.decode([0xC3, 0xA9]) == "é"
    assert sample_tokenizer.decode_bytes([0xC3]) == b"\xc3"


# ------------------------------------------------------------- training


def test_training_equals_the_naive_recount():
    ours = bpe.train_bpe(SAMPLE.replace("<|endoftext|>", ""), 256 + 150)
    merges, counts, _ = naive_train(SAMPLE.replace("<|endoftext|>", ""), 150)
    assert ours.merges == merges
    assert ours.merge_counts == counts


def test_incremental_pair_counts_equal_a_recount_after_every_merge():
    state = bpe._PairCounts(bpe._word_counts([SAMPLE]))
    for i in range(120):
        pair, count = state.best()
        state.merge(pair, 256 + i)
        words = collections.Counter()
        for word, freq in zip(state.words, state.freqs):
            words[tuple(word)] += freq
        recount = _recount(words)
        assert +state.counts == recount
        for p, holders in state.where.items():  # the index is exact too
            assert holders == {
                w
                for w, word in enumerate(state.words)
                if p in zip(word, word[1:])
            }


def test_merge_ties_are_the_naive_trainers_ties(shakespeare_text):
    text = shakespeare_text[0][:8_000]
    _, _, ties = naive_train(text, 120)
    counted = bpe.merge_ties(text, 120)
    assert [n > 1 for n in counted] == ties
    assert any(ties) and not all(ties)
    assert bpe.merge_ties("abab", 5) == [1, 1]  # (a, b) twice, then (ab, ab)
    assert bpe.merge_ties("ab", 0) == []


def test_ties_go_to_the_smallest_pair():
    # "ab" and "cd" occur equally often: (97, 98) < (99, 100) is merged first
    tok = bpe.train_bpe("cd.ab.cd.ab", 258)
    assert tok.merges[0] == (97, 98)
    assert tok.merge_counts[0] == tok.merge_counts[1] == 2


def test_the_same_text_gives_the_same_merges_under_another_hash_seed():
    first = bpe.train_bpe(SAMPLE, 400, SPECIALS)
    again = bpe.train_bpe(SAMPLE, 400, SPECIALS)
    assert first.merges == again.merges
    code = (
        "import json, sys; from course_pkg.data import bpe; "
        "from tests.test_bpe import SAMPLE, SPECIALS; "
        "print(json.dumps(bpe.train_bpe(SAMPLE, 400, SPECIALS).merges))"
    )
    for seed in ("12345",):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert [tuple(p) for p in json.loads(out)] == first.merges


@pytest.mark.parametrize("vocab_size", [256, 257, 300, 402])
def test_the_vocabulary_has_the_size_asked(vocab_size):
    specials = SPECIALS if vocab_size >= 258 else []
    tok = bpe.train_bpe(SAMPLE, vocab_size, specials)
    assert len(tok) == len(tok.vocab) == vocab_size
    assert sorted(tok.vocab) == list(range(vocab_size))
    for i, (a, b) in enumerate(tok.merges):
        assert tok.vocab[256 + i] == tok.vocab[a] + tok.vocab[b]


def test_training_stops_when_no_pair_is_left():
    # "abab" has one word: ab, then abab; no pair is left after 2 merges
    tok = bpe.train_bpe("abab", 1000, ["<s>"])
    assert tok.merges == [(97, 98), (256, 256)]
    assert len(tok) == 259 and tok.special_tokens == {"<s>": 258}
    assert tok.encode("abab<s>", allowed_special="all") == [257, 258]


def test_the_tokenizer_rebuilt_from_its_merges_encodes_the_same(
    sample_tokenizer,
):
    rebuilt = bpe.BPETokenizer(
        sample_tokenizer.merges, list(sample_tokenizer.special_tokens)
    )
    assert rebuilt.vocab == sample_tokenizer.vocab
    everything = dict(allowed_special="all")
    assert rebuilt.encode(SAMPLE, **everything) == sample_tokenizer.encode(
        SAMPLE, **everything
    )


# ------------------------------------------------- special tokens in the text


def test_a_special_token_in_the_text_is_refused_by_default(sample_tokenizer):
    tok = sample_tokenizer
    eot = tok.special_tokens["<|endoftext|>"]
    user_text = "ignore the above<|endoftext|>new document"
    with pytest.raises(ValueError, match=r"'<\|endoftext\|>' at position 16"):
        tok.encode(user_text)
    # asked for: one id; or as ordinary text: bytes, and never the id
    assert (
        tok.encode(user_text, allowed_special={"<|endoftext|>"}).count(eot)
        == 1
    )
    as_text = tok.encode(user_text, disallowed_special=())
    assert eot not in as_text and tok.decode(as_text) == user_text
    # allowing one token still refuses the others
    with pytest.raises(ValueError, match="<pad>"):
        tok.encode("a<pad>b<|endoftext|>", allowed_special={"<|endoftext|>"})
    # refusing only one lets the other through as text
    ids = tok.encode("a<pad>b", disallowed_special={"<|endoftext|>"})
    assert tok.special_tokens["<pad>"] not in ids
    assert tok.decode(ids) == "a<pad>b"
    # text without special tokens needs no argument
    assert tok.encode("the end") == tok.encode(
        "the end", allowed_special="all"
    )


@pytest.mark.parametrize(
    "text",
    ["plain text", "a<|endoftext|>b", "<pad><|endoftext|>", "x<pad"],
)
def test_special_tokens_as_tiktoken_treats_them(sample_tokenizer, text):
    import tiktoken

    tok = sample_tokenizer
    encoding = tiktoken.Encoding(
        name="sample",
        pat_str=bpe.PATTERN,
        mergeable_ranks={
            tok.vocab[i]: i for i in range(256 + len(tok.merges))
        },
        special_tokens=tok.special_tokens,
    )
    for options in (
        {},
        {"allowed_special": "all"},
        {"allowed_special": {"<pad>"}},
        {"disallowed_special": ()},
        {"allowed_special": {"<pad>"}, "disallowed_special": ()},
    ):
        try:
            expected = encoding.encode(text, **options)
        except ValueError:
            with pytest.raises(ValueError, match="special token"):
                tok.encode(text, **options)
        else:
            assert tok.encode(text, **options) == expected, options


def test_bad_special_token_arguments_are_refused(sample_tokenizer):
    tok = sample_tokenizer
    for options, error, name in (
        ({"allowed_special": "some"}, TypeError, "allowed_special"),
        ({"allowed_special": {"<s>"}}, ValueError, "allowed_special"),
        ({"allowed_special": [1]}, TypeError, "allowed_special"),
        ({"disallowed_special": None}, TypeError, "disallowed_special"),
        ({"disallowed_special": {"<x>"}}, ValueError, "disallowed_special"),
        (
            {"allowed_special": {"<pad>"}, "disallowed_special": {"<pad>"}},
            ValueError,
            "both",
        ),
    ):
        with pytest.raises(error, match=name):
            tok.encode("text", **options)


# ---------------------------------------------------------- save and load


def test_save_and_load_give_the_same_tokenizer(sample_tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    sample_tokenizer.save(path)
    loaded = bpe.BPETokenizer.load(path)
    assert loaded.merges == sample_tokenizer.merges
    assert loaded.vocab == sample_tokenizer.vocab
    assert loaded.special_tokens == sample_tokenizer.special_tokens
    everything = dict(allowed_special="all")
    assert loaded.encode(SAMPLE, **everything) == sample_tokenizer.encode(
        SAMPLE, **everything
    )
    # the file is readable: its tag, its special tokens, a merge per line
    # with the token it makes (the space written as GPT-2's "Ġ")
    saved = json.loads(path.read_text())
    assert saved["format"] == bpe.FILE_FORMAT
    assert saved["special_tokens"] == ["<|endoftext|>", "<pad>"]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(sample_tokenizer.merges) + 6
    a, b = sample_tokenizer.merges[0]
    first = (sample_tokenizer.vocab[a] + sample_tokenizer.vocab[b]).decode()
    assert lines[4] == f'    [{a}, {b}, "{first.replace(" ", "Ġ")}"],'
    written = path.read_text(encoding="utf-8")
    assert "Ġ" in written and '"\\u' not in written  # Ġ, not "\u0120"
    # and saved again, it is the same file
    loaded.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_a_tokenizer_without_merges_saves_and_loads(tmp_path):
    empty = bpe.BPETokenizer([], ["<s>"])
    empty.save(tmp_path / "empty.json")
    loaded = bpe.BPETokenizer.load(tmp_path / "empty.json")
    assert loaded.merges == [] and loaded.special_tokens == {"<s>": 256}


def test_load_refuses_what_save_did_not_write(sample_tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    sample_tokenizer.save(path)
    saved = json.loads(path.read_text())
    cases = [
        ("not json", ValueError, "JSON"),
        (json.dumps({**saved, "format": "other/1"}), ValueError, "format"),
        (json.dumps([1, 2]), ValueError, "format"),
        (
            json.dumps({**saved, "merges": [[97, 98]]}),
            TypeError,
            "merges",
        ),
        (
            json.dumps({**saved, "merges": [[97, 98, "ac"]]}),
            ValueError,
            "merge 0 reads 'ac'",
        ),
        (
            json.dumps({**saved, "merges": [[97, 300, "a?"]]}),
            ValueError,
            "merges",
        ),
        (
            json.dumps({**saved, "special_tokens": ["<s>", "<s>"]}),
            ValueError,
            "special_tokens",
        ),
    ]
    for text, error, message in cases:
        path.write_text(text)
        with pytest.raises(error, match=message):
            bpe.BPETokenizer.load(path)
    for bad in (3, b"tokenizer.json", None):
        with pytest.raises(TypeError, match="path"):
            bpe.BPETokenizer.load(bad)
    with pytest.raises(FileNotFoundError):
        bpe.BPETokenizer.load(tmp_path / "missing.json")


# ------------------------------------------------- bits per byte, not char


def test_bits_per_byte_count_utf8_bytes_not_characters():
    # Non-ASCII text: 19 characters, 34 UTF-8 bytes (Greek letters take 2
    # or 3, ü 2, the emoji 4, the ellipsis 3). A byte-level tokenizer without merges gives one
    # token per byte; a model uniform over its 256 ids loses ln 256 nats per
    # token: 8 bits per byte, by hand.
    text = "Ῥωμαῖος, Zürich 🙂 …"
    num_bytes = len(text.encode("utf-8"))
    assert (len(text), num_bytes) == (19, 34)
    ids = bpe.BPETokenizer([]).encode(text)
    assert len(ids) == num_bytes
    uniform = bits_per_byte(math.log(256), len(ids), num_bytes)
    assert uniform == pytest.approx(8.0, abs=1e-12)
    # Characters in place of bytes would claim more than 8 bits per byte:
    # the test tells the two apart.
    per_char = bits_per_byte(math.log(256), len(ids), len(text))
    assert per_char == pytest.approx(8 * 34 / 19, abs=1e-12)  # 14.3
    # With merges: fewer, longer tokens, the same total information
    # divided by the same bytes.
    tok = bpe.train_bpe(text * 30, 300)
    merged = tok.encode(text)
    assert len(merged) < num_bytes
    nats = 2.5  # any mean loss per token
    expected = nats * len(merged) / math.log(2) / num_bytes
    assert bits_per_byte(nats, len(merged), num_bytes) == pytest.approx(
        expected, rel=1e-15
    )


@given(st.text(alphabet="the quick brown fox, déjà vu! 1599\n", max_size=60))
def test_encoding_applies_the_merges_in_training_order(sample_tokenizer, text):
    assert sample_tokenizer.encode(text) == naive_encode(
        sample_tokenizer, text
    )


def test_shakespeare_is_compressed(shakespeare_text, shakespeare_tokenizer):
    train, valid = shakespeare_text
    tok = shakespeare_tokenizer
    assert len(tok) == 1000
    ids = tok.encode(train)
    assert len(ids) < len(train.encode("utf-8")) / 2
    assert tok.decode(ids) == train
    # the first merges are what English text makes most often
    first = [tok.vocab[256 + i] for i in range(3)]
    assert first == [b" t", b"he", b" a"]
    assert naive_encode(tok, valid[:20_000]) == tok.encode(valid[:20_000])


# ------------------------------------------------------------- Hugging Face


@functools.cache
def _gpt2_byte(char: str) -> int:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}[char]


def _gpt2_bytes(piece: str) -> bytes:
    """Bytes from GPT-2's printable characters, by transformers' table."""
    return bytes(map(_gpt2_byte, piece))


def _hf_pretokenize(text: str) -> list[bytes]:
    from tokenizers import pre_tokenizers

    split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return [_gpt2_bytes(w) for w, _ in split.pre_tokenize_str(text)]


def test_byte_to_unicode_is_gpt2s():
    from tokenizers import pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    assert bpe.byte_to_unicode() == bytes_to_unicode()
    assert set(bpe.byte_to_unicode().values()) == set(
        pre_tokenizers.ByteLevel.alphabet()
    )


ASCII_WITHOUT_SEPARATORS = "".join(
    chr(c) for c in range(128) if c not in range(0x1C, 0x20)
)


@given(st.text(alphabet=ASCII_WITHOUT_SEPARATORS, max_size=40))
def test_pretokenization_equals_gpt2s_on_ascii(text):
    ours = [w.encode() for w in bpe.pretokenize(text)]
    assert ours == _hf_pretokenize(text)


@pytest.mark.parametrize(
    "text, ours, gpt2s",
    [
        # numbers that are not decimal digits are letters here, \p{N} there
        ("x²", ["x²"], ["x", "²"]),
        ("½3", ["½", "3"], ["½3"]),
        # \x1c-\x1f are whitespace to Python's re, not to Unicode
        ("a \x1cb", ["a", " ", "\x1c", "b"], ["a", " \x1c", "b"]),
    ],
)
def test_the_documented_differences_from_gpt2s_pretokenizer(text, ours, gpt2s):
    assert bpe.pretokenize(text) == ours
    assert [b.decode() for b in _hf_pretokenize(text)] == gpt2s


@pytest.mark.parametrize(
    "char",
    [
        "\u1c89",  # CYRILLIC CAPITAL LETTER TJE, Unicode 16.0
        "\ua7cb",  # LATIN CAPITAL LETTER RAMS HORN, Unicode 16.0
    ],
)
def test_letters_newer_than_pythons_unicode_database(char):
    # Python's re classes characters by the Unicode database of the running
    # Python (14.0 for 3.11), tokenizers by its own, newer one: a letter
    # added since is no letter to us (a symbol, cut apart), one to GPT-2's
    # pattern there (kept in the word).
    text = f"a{char}b"
    assert [b.decode() for b in _hf_pretokenize(text)] == [text]
    if unicodedata.category(char) == "Cn":  # unassigned in Python's database
        assert bpe.pretokenize(text) == ["a", char, "b"]
    else:
        assert bpe.pretokenize(text) == [text]
    if sys.version_info < (3, 14):  # Unicode 16.0 came with Python 3.14
        assert unicodedata.category(char) == "Cn"


def test_pretokenization_equals_gpt2s_on_shakespeare(shakespeare_text):
    train, valid = shakespeare_text
    for text in (train, valid):
        ours = [w.encode() for w in bpe.pretokenize(text)]
        assert ours == _hf_pretokenize(text)


def _hf_train(text: str, vocab_size: int) -> list[tuple[int, int]]:
    """Hugging Face's byte-level BPE trained on text: its merges as pairs of
    our ids (bytes, then 256 + i for merge i)."""
    hf = bpe.train_hf_bpe(text, vocab_size)
    ids: dict[bytes, int] = {bytes([b]): b for b in range(256)}
    merges = []
    for left, right in json.loads(hf.to_str())["model"]["merges"]:
        a, b = ids[_gpt2_bytes(left)], ids[_gpt2_bytes(right)]
        ids[_gpt2_bytes(left + right)] = 256 + len(merges)
        merges.append((a, b))
    return merges


def _hf_order(pair: tuple[int, int]) -> tuple[int, int]:
    """Hugging Face's id of each side: its alphabet sorted by character, so
    the space (Ġ, U+0120) comes after every printable byte; merges 256 + i."""
    chars = sorted(bpe.byte_to_unicode().values())
    rank = {b: chars.index(c) for b, c in bpe.byte_to_unicode().items()}
    return tuple(rank.get(i, i) for i in pair)


def test_hf_trainer_makes_our_merges_but_breaks_ties_in_its_id_order(
    shakespeare_text,
):
    text = shakespeare_text[0][:20_000]
    num_merges = 200
    theirs = _hf_train(text, 256 + num_merges)
    ours = bpe.train_bpe(text, 256 + num_merges).merges
    by_hf_order, _, _ = naive_train(text, num_merges, order=_hf_order)
    by_our_order, counts, ties = naive_train(text, num_merges)
    # the same rule (most frequent pair first), each with its own tie order
    assert theirs == by_hf_order
    assert ours == by_our_order
    # so the two agree up to a tie that the two orders break differently
    first = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
    assert ours[:first] == theirs[:first]
    assert ties[first]
    assert 0 < first < num_merges


def _their_vocab(tok: bpe.BPETokenizer) -> dict[str, int]:
    table = bpe.byte_to_unicode()
    return {
        "".join(table[b] for b in tok.vocab[i]): i
        for i in range(256 + len(tok.merges))
    }


def test_hf_encoder_fed_our_merges_encodes_as_we_do(
    shakespeare_text, shakespeare_tokenizer
):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = shakespeare_tokenizer
    vocab = _their_vocab(tok)
    assert len(vocab) == 256 + len(tok.merges)  # no two tokens share bytes
    table = bpe.byte_to_unicode()
    merges = [
        tuple("".join(table[c] for c in tok.vocab[x]) for x in pair)
        for pair in tok.merges
    ]
    hf = Tokenizer(models.BPE(vocab, merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=False, use_regex=True
    )
    hf.decoder = decoders.ByteLevel()
    valid = shakespeare_text[1]
    ids = hf.encode(valid).ids
    assert ids == tok.encode(valid)
    assert hf.decode(ids) == valid


def test_tiktoken_encoder_fed_our_merges_encodes_as_we_do(
    shakespeare_text, shakespeare_tokenizer
):
    import tiktoken

    tok = shakespeare_tokenizer
    ranks = {tok.vocab[i]: i for i in range(256 + len(tok.merges))}
    encoding = tiktoken.Encoding(
        name="shakespeare-bpe",
        pat_str=bpe.PATTERN,
        mergeable_ranks=ranks,
        special_tokens=tok.special_tokens,
    )
    text = shakespeare_text[1] + "<|endoftext|>" + shakespeare_text[1][:999]
    ids = encoding.encode(text, allowed_special="all")
    assert ids == tok.encode(text, allowed_special="all")
    assert encoding.decode(ids) == text


def test_tiktoken_gpt2_encoding_is_downloaded_not_shipped():
    # What the chapter says: the wheel has GPT-2's code but not its files.
    import inspect

    import tiktoken
    from tiktoken_ext import openai_public

    source = inspect.getsource(openai_public.gpt2)
    assert "https://openaipublic.blob.core.windows.net" in source
    shipped = [
        p.name
        for folder in (
            pathlib.Path(tiktoken.__file__).parent,
            pathlib.Path(openai_public.__file__).parent,
        )
        for p in folder.rglob("*")
    ]
    assert not [
        n for n in shipped if n.endswith((".tiktoken", ".bpe", ".json"))
    ]


# ------------------------------------------------------------- bad input


def test_bad_input_is_refused_by_name(sample_tokenizer):
    tok = sample_tokenizer
    cases = [
        (lambda: bpe.train_bpe(3, 300), TypeError, "text"),
        (lambda: bpe.train_bpe("ab", 300.0), TypeError, "vocab_size"),
        (lambda: bpe.train_bpe("ab", 255), ValueError, "vocab_size"),
        (lambda: bpe.train_bpe("ab", 257, SPECIALS), ValueError, "vocab_size"),
        (lambda: bpe.train_bpe("ab", 300, "<s>"), TypeError, "special_tokens"),
        (lambda: bpe.train_bpe("ab", 300, [""]), ValueError, "special_tokens"),
        (
            lambda: bpe.train_bpe("ab", 300, ["<s>", "<s>"]),
            ValueError,
            "special_tokens",
        ),
        (lambda: bpe.train_bpe("ab", 300, [1]), TypeError, "special_tokens"),
        (lambda: tok.encode(b"ab"), TypeError, "text"),
        (lambda: tok.encode("a\ud800b"), ValueError, "text"),
        (lambda: tok.encode("a<pad>"), ValueError, "text"),
        (lambda: tok.save(3), TypeError, "path"),
        (lambda: tok.decode([len(tok)]), ValueError, "ids"),
        (lambda: tok.decode([-1]), ValueError, "ids"),
        (lambda: tok.decode([1.0]), TypeError, "ids"),
        (lambda: tok.decode([True]), TypeError, "ids"),
        (lambda: tok.decode("ab"), TypeError, "ids"),
        (lambda: tok.decode(7), TypeError, "ids"),
        (lambda: bpe.BPETokenizer([(97, 256)]), ValueError, "merges"),
        (lambda: bpe.BPETokenizer([(97,)]), TypeError, "merges"),
        (lambda: bpe.BPETokenizer("ab"), TypeError, "merges"),
        (lambda: bpe.pretokenize(None), TypeError, "text"),
        (lambda: bpe.merge_ties("ab", -1), ValueError, "num_merges"),
        (lambda: bpe.merge_ties("ab", 1.0), TypeError, "num_merges"),
    ]
    for call, error, name in cases:
        with pytest.raises(error, match=name):
            call()
    assert tok.decode([]) == ""
