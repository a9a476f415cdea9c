"""Tests for course_pkg.data.translation: the synthetic corpus, the real-data loaders, Vocab and batches."""

from __future__ import annotations

import hashlib
import http.server
import io
import re
import threading
import urllib.error
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.data.corpus import _generate_corpus, english_french_corpus
from course_pkg.data.tatoeba import (
    FRA_ENG_SHA1,
    FRA_ENG_URL,
    download_fra_eng,
    load_tatoeba,
)
from course_pkg.data.translation import (
    TranslationLoaders,
    Vocab,
    build_arrays,
    corpus_stats,
    preprocess_nmt,
    source_array,
    tokenize,
    tokenize_pairs,
    translation_dataloaders,
    truncate_pad,
)
from tests.ci import missing

FRA_ENG_HEAD = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "fra-eng-head.txt"
)


@pytest.fixture(scope="module")
def corpus():
    return english_french_corpus(0)


@pytest.fixture(scope="module")
def pairs(corpus):
    train, val, test = corpus
    return train + val + test


# --------------------------------------------------------------------------- the synthetic corpus


def test_corpus_is_deterministic_per_seed_and_differs_across_seeds():
    generate = (
        _generate_corpus.__wrapped__
    )  # bypass the cache: really generate twice
    first, again, other = (
        generate(0, num_pairs=300),
        generate(0, num_pairs=300),
        generate(1, num_pairs=300),
    )
    assert first == again
    assert first != other
    assert set(first[0]) != set(other[0])
    assert english_french_corpus(0, num_pairs=300) == tuple(
        list(split) for split in first
    )


def test_corpus_calls_return_fresh_lists():
    train, _, _ = english_french_corpus(0, num_pairs=300)
    expected = list(train)
    train.clear()
    assert english_french_corpus(0, num_pairs=300)[0] == expected


def test_corpus_size_vocabulary_and_seed(pairs):
    other_seed = _generate_corpus.__wrapped__(
        1, len(pairs)
    )  # the default size, uncached
    for corpus_pairs in (pairs, [p for split in other_seed for p in split]):
        assert len(corpus_pairs) >= 5000
        assert len(set(corpus_pairs)) == len(corpus_pairs)
        english, french = tokenize_pairs(corpus_pairs)
        english_types = {t for sentence in english for t in sentence}
        french_types = {t for sentence in french for t in sentence}
        assert 150 <= len(english_types) <= 450
        assert 150 <= len(french_types) <= 450
        # every sentence ends with its punctuation, and French is never empty
        assert all(
            en[-1] in {".", "?"} and fr[-1] in {".", "?"}
            for en, fr in zip(english, french)
        )
    assert set(pairs) != {p for split in other_seed for p in split}


def test_splits_are_disjoint_and_80_10_10(corpus):
    train, val, test = corpus
    n = len(train) + len(val) + len(test)
    assert len(train) == int(0.8 * n) and len(val) == int(0.1 * n)
    assert (
        not set(train) & set(val)
        and not set(train) & set(test)
        and not set(val) & set(test)
    )
    # Also no English sentence is shared: the test set holds only unseen sources.
    sources = [{src for src, _ in split} for split in corpus]
    assert (
        not sources[0] & sources[1]
        and not sources[0] & sources[2]
        and not sources[1] & sources[2]
    )


def test_sentences_are_normalised(pairs):
    for sentence in (s for pair in pairs for s in pair):
        assert sentence == " ".join(preprocess_nmt(sentence).split())
        assert sentence == sentence.lower() and "[[" not in sentence
        assert sentence.endswith((" .", " ?"))


def test_lengths_range_from_3_to_at_least_15_tokens(pairs):
    lengths = [len(tokenize(src)) for src, _ in pairs]
    assert min(lengths) == 3
    assert max(lengths) >= 15
    stats = corpus_stats(pairs)
    assert stats["src_min_len"] == 3 and stats["src_max_len"] >= 15


def test_every_english_sentence_has_one_translation(pairs):
    translations: dict[str, set[str]] = {}
    for src, tgt in pairs:
        translations.setdefault(src, set()).add(tgt)
    assert all(len(t) == 1 for t in translations.values())


PARTICIPLE = re.compile(r"\S+(é|ée|és|ées|i|is|u|ue|us|ues)")
AUXILIARY = re.compile(
    r"(\S+')?(ai|a|avons|avez|ont|suis|est|sommes|êtes|sont)"
)


def test_past_tense_is_passe_compose(pairs):
    # "did not" + verb: French "ne/n' [clitic] auxiliary pas participle" ("je ne l'ai pas vue").
    negated_past = [tgt.split() for src, tgt in pairs if " did not " in src]
    assert len(negated_past) > 100
    for words in negated_past:
        at = words.index("pas")
        assert AUXILIARY.fullmatch(words[at - 1]) and PARTICIPLE.fullmatch(
            words[at + 1]
        ), words
        assert "ne" in words[:at] or any(
            w.startswith("n'") for w in words[:at]
        )
    assert ("i slept .", "j'ai dormi .") in pairs or (
        "we slept .",
        "nous avons dormi .",
    ) in pairs


def test_motion_verbs_take_etre_and_agree(pairs):
    for src, tgt in pairs:
        if re.fullmatch(r"she went to .* \.", src):
            assert tgt.startswith("elle est allée ")
        if re.fullmatch(r"they came from .* \.", src):
            assert tgt.startswith("ils sont venus ")


def test_future_and_negation(pairs):
    future = [tgt for src, tgt in pairs if " will " in src]
    assert len(future) > 500
    assert all(re.search(r"\S+r(ai|a|ons|ez|ont)\b", tgt) for tgt in future)
    negated = [tgt for src, tgt in pairs if " not " in src]
    assert len(negated) > 1000
    assert all(re.search(r"\b(ne|n'\S+) .*\bpas\b", tgt) for tgt in negated)


def test_questions(pairs):
    questions = [(src, tgt) for src, tgt in pairs if src.endswith("?")]
    assert len(questions) > 1000
    for src, tgt in questions:
        assert tgt.endswith(" ?") and tgt.startswith(
            ("est-ce que ", "est-ce qu'")
        )
        assert src.split()[0] in {
            "do",
            "does",
            "did",
            "will",
            "am",
            "is",
            "are",
            "was",
            "were",
        }
    assert all(
        not tgt.endswith("?") for src, tgt in pairs if not src.endswith("?")
    )


def test_colour_adjectives_follow_the_french_noun_and_agree(pairs):
    # "the red car" -> "la voiture rouge"; "white car(s)" -> "voiture(s) blanche(s)" (feminine).
    red_cars = [
        (src, tgt) for src, tgt in pairs if re.search(r"\bred cars?\b", src)
    ]
    assert red_cars
    for _, tgt in red_cars:
        assert re.search(r"\bvoitures? rouges?\b", tgt) and not re.search(
            r"\brouges? voitures?\b", tgt
        )
    for src, tgt in pairs:
        if re.search(r"\bwhite car\b", src):
            assert "voiture blanche" in tgt
        if re.search(r"\bwhite cars\b", src):
            assert "voitures blanches" in tgt
        if re.search(r"\bblack horses\b", src):
            assert "chevaux noirs" in tgt


def test_object_pronouns_come_before_the_french_verb(pairs):
    clitic = {"him": "le", "her": "la", "them": "les"}
    present = past = 0
    for src, tgt in pairs:
        words = tgt.split()
        if re.fullmatch(
            r"[^?]* (sees|watches|finds|meets|see|watch|find|meet) (him|her|them) \.",
            src,
        ) and not re.search(
            r"\b(not|will|do|does)\b", src
        ):  # "she sees him ." -> "elle le voit ."
            assert words[-3] == clitic[src.split()[-2]], (src, tgt)
            present += 1
        match = re.fullmatch(
            r"[^?]* (saw|watched|found|met|did not see|did not watch|did not find|did not meet) "
            r"(her|them) \.",
            src,
        )
        if match:  # the participle agrees with the object before it: "il l'a vue .", "il ne les a pas vus ."
            participle = {
                "see": "vu",
                "watch": "regardé",
                "find": "trouvé",
                "meet": "rencontré",
                "saw": "vu",
                "watched": "regardé",
                "found": "trouvé",
                "met": "rencontré",
            }[match.group(1).split()[-1]]
            if match.group(2) == "her":
                assert (
                    any(w.startswith("l'") for w in words)
                    and words[-2] == participle + "e"
                ), (src, tgt)
            else:
                assert "les" in words and words[-2] == participle + "s", (
                    src,
                    tgt,
                )
            past += 1
    assert present > 10 and past > 10


def test_persons_determiners_prepositions_and_contractions_are_covered(pairs):
    english = {t for src, _ in pairs for t in src.split()}
    french = {t for _, tgt in pairs for t in tgt.split()}
    assert {
        "i",
        "you",
        "he",
        "she",
        "we",
        "they",
        "me",
        "him",
        "her",
        "us",
        "them",
    } <= english
    assert {
        "je",
        "j'ai",
        "vous",
        "il",
        "elle",
        "nous",
        "ils",
        "lui",
        "leur",
    } <= french
    assert {
        "the",
        "a",
        "an",
        "this",
        "these",
        "my",
        "your",
        "his",
        "her",
        "our",
        "their",
    } <= english
    assert {
        "le",
        "la",
        "les",
        "un",
        "une",
        "ce",
        "cet",
        "cette",
        "ces",
        "mon",
        "ma",
        "mes",
        "votre",
        "vos",
        "son",
        "sa",
        "ses",
        "notre",
        "nos",
        "leurs",
    } <= french
    assert {
        "in",
        "near",
        "under",
        "on",
        "behind",
        "with",
        "to",
        "from",
    } <= english
    assert {
        "dans",
        "près",
        "sous",
        "sur",
        "derrière",
        "avec",
        "à",
        "de",
        "au",
        "aux",
        "du",
        "des",
    } <= french
    assert {"l'homme", "l'école", "vieil"} <= french  # elision before a vowel


def test_corpus_stats_on_a_small_fixture():
    stats = corpus_stats([("a b c", "x y"), ("a d", "x z w v")])
    assert stats == {
        "num_pairs": 2,
        "src_types": 4,
        "tgt_types": 5,
        "src_min_len": 2,
        "src_max_len": 3,
        "src_mean_len": 2.5,
        "tgt_min_len": 2,
        "tgt_max_len": 4,
        "tgt_mean_len": 3.0,
    }
    with pytest.raises(ValueError, match="pairs"):
        corpus_stats([])


def test_corpus_refuses_too_few_pairs():
    with pytest.raises(ValueError, match="num_pairs"):
        english_french_corpus(0, num_pairs=5)


# --------------------------------------------------------------------------- normalisation and real data


def test_preprocess_nmt_on_a_fixture():
    assert preprocess_nmt("Va\u202f!") == "va !"
    assert preprocess_nmt("Bonjour,\xa0Marie.") == "bonjour , marie ."
    assert preprocess_nmt("Hi! How are you?") == "hi ! how are you ?"
    assert (
        preprocess_nmt("J'ai vu Tom .") == "j'ai vu tom ."
    )  # already spaced: unchanged
    assert preprocess_nmt("") == ""
    with pytest.raises(TypeError, match="text"):
        preprocess_nmt(b"Go.")


@settings(max_examples=80)
@given(st.text(alphabet="aBc Z,.!?'\u202f\xa0é", max_size=30))
def test_preprocess_nmt_matches_d2l(text):
    import d2l.torch as d2l

    assert preprocess_nmt(text) == d2l.MTFraEng._preprocess(None, text)


def test_load_tatoeba_on_the_real_prefix():
    if not FRA_ENG_HEAD.is_file():
        missing(f"{FRA_ENG_HEAD} is missing")
    pairs = load_tatoeba(FRA_ENG_HEAD)
    assert len(pairs) == 6120
    assert pairs[0] == ("go .", "va !")
    assert all(
        src and tgt and src == " ".join(preprocess_nmt(src).split())
        for src, tgt in pairs
    )
    assert load_tatoeba(FRA_ENG_HEAD, max_examples=10) == pairs[:10]


def test_load_tatoeba_with_attribution_column(tmp_path):
    path = tmp_path / "fra.txt"
    path.write_text(
        "Go.\tVa\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM)\n"
        "\n"
        "I'm OK.\tÇa va.\tCC-BY 2.0 (France) Attribution: tatoeba.org #433763 (CK)\n",
        encoding="utf-8",
    )
    assert load_tatoeba(path) == [("go .", "va !"), ("i'm ok .", "ça va .")]
    assert load_tatoeba(path, max_examples=1) == [("go .", "va !")]
    assert load_tatoeba(path, max_examples=0) == []


def test_load_tatoeba_refuses_bad_input(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("Go.\tVa !\nno tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        load_tatoeba(path)
    with pytest.raises(ValueError, match="max_examples"):
        load_tatoeba(path, max_examples=-1)


def test_fra_eng_constants():
    assert (
        FRA_ENG_URL
        == "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
    )
    assert re.fullmatch(r"[0-9a-f]{40}", FRA_ENG_SHA1)


# --------------------------------------------------------------------------- download_fra_eng


FRA_TEXT = "Go.\tVa !\nHi.\tSalut !\n"


@pytest.fixture()
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving a fra-eng.zip: /ok/, /error/ (500), /truncated/."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("fra-eng/fra.txt", FRA_TEXT)
        archive.writestr("fra-eng/_about.txt", "about")
    payload = buffer.getvalue()
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            if self.path.startswith("/error/"):
                self.send_error(500)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.path.startswith("/truncated/"):
                self.wfile.write(
                    payload[: len(payload) // 2]
                )  # then the connection closes
                self.close_connection = True
            else:
                self.wfile.write(payload)

        def log_message(self, *args):  # keep the test output clean
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield (
            f"http://127.0.0.1:{httpd.server_address[1]}",
            hashlib.sha1(payload).hexdigest(),
            hits,
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_download_extracts_and_caches(server, tmp_path):
    base, sha1, hits = server
    cache = tmp_path / "cache"
    path = download_fra_eng(
        cache, url=f"{base}/ok/fra-eng.zip", sha1=sha1, timeout=5
    )
    assert path == cache / "fra-eng" / "fra.txt"
    assert path.read_text(encoding="utf-8") == FRA_TEXT
    assert len(hits) == 1
    again = download_fra_eng(
        cache, url=f"{base}/ok/fra-eng.zip", sha1=sha1, timeout=5
    )
    assert again == path and len(hits) == 1  # served from the cache
    assert _files(cache) == [
        cache / "fra-eng" / "fra.txt",
        cache / "fra-eng.zip",
    ]  # no temporary files
    assert load_tatoeba(path) == [("go .", "va !"), ("hi .", "salut !")]


def test_download_replaces_a_corrupt_cached_zip(server, tmp_path):
    base, sha1, hits = server
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "fra-eng.zip").write_bytes(b"not the right file")
    path = download_fra_eng(
        cache, url=f"{base}/ok/fra-eng.zip", sha1=sha1, timeout=5
    )
    assert len(hits) == 1 and path.read_text(encoding="utf-8") == FRA_TEXT


def test_download_with_wrong_sha1_keeps_nothing(server, tmp_path):
    base, _, hits = server
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="sha1"):
        download_fra_eng(
            cache, url=f"{base}/ok/fra-eng.zip", sha1="0" * 40, timeout=5
        )
    assert len(hits) == 1 and _files(cache) == []


@pytest.mark.parametrize(
    "path, error",
    [
        ("error", urllib.error.HTTPError),  # the server fails
        ("truncated", urllib.error.ContentTooShortError),  # cut short
    ],
)
def test_failed_download_keeps_no_file(server, tmp_path, path, error):
    base, sha1, _ = server
    cache = tmp_path / "cache"
    with pytest.raises(error):
        download_fra_eng(
            cache, url=f"{base}/{path}/fra-eng.zip", sha1=sha1, timeout=5
        )
    assert _files(cache) == []


# --------------------------------------------------------------------------- Vocab


def test_vocab_reserves_special_tokens_and_orders_by_frequency():
    vocab = Vocab([["b", "a", "c"], ["a", "b", "a"], ["d"]])
    assert vocab.idx_to_token == [
        "<pad>",
        "<bos>",
        "<eos>",
        "<unk>",
        "a",
        "b",
        "c",
        "d",
    ]
    assert (vocab.pad, vocab.bos, vocab.eos, vocab.unk) == (0, 1, 2, 3)
    assert [vocab[t] for t in ("<pad>", "<bos>", "<eos>", "<unk>")] == [
        0,
        1,
        2,
        3,
    ]
    assert len(vocab) == 8 and vocab.token_to_idx["a"] == 4
    assert vocab["never seen"] == vocab.unk
    assert vocab[["a", "zzz", "d"]] == [4, 3, 7]
    assert vocab[("a",)] == [4]


def test_vocab_min_freq_flat_input_and_extra_reserved_tokens():
    tokens = ["x", "y", "x", "z", "x", "y"]
    vocab = Vocab(tokens, min_freq=2, reserved_tokens=["<sep>", "<pad>"])
    assert vocab.idx_to_token == [
        "<pad>",
        "<bos>",
        "<eos>",
        "<unk>",
        "<sep>",
        "x",
        "y",
    ]
    assert vocab["z"] == vocab.unk
    assert Vocab([]).idx_to_token == ["<pad>", "<bos>", "<eos>", "<unk>"]
    with pytest.raises(TypeError, match="tokens"):
        Vocab("a b c")


def test_vocab_round_trip(corpus):
    src_tokens, _ = tokenize_pairs(corpus[0][:200])
    vocab = Vocab(src_tokens)
    for sentence in src_tokens:
        assert vocab.to_tokens(vocab[sentence]) == sentence
        assert vocab.to_tokens(torch.tensor(vocab[sentence])) == sentence
    assert vocab.to_tokens(vocab.eos) == "<eos>"
    assert sorted(vocab.idx_to_token[4:]) == sorted(
        {t for s in src_tokens for t in s}
    )
    assert (
        Vocab(list(reversed(src_tokens))).idx_to_token == vocab.idx_to_token
    )  # order-independent
    with pytest.raises(ValueError, match="indices"):
        vocab.to_tokens(len(vocab))


# --------------------------------------------------------------------------- arrays and batches


@settings(max_examples=100)
@given(
    st.lists(st.integers(0, 50), max_size=20),
    st.integers(0, 25),
    st.integers(-1, 60),
)
def test_truncate_pad(ids, num_steps, pad):
    out = truncate_pad(ids, num_steps, pad)
    assert len(out) == num_steps
    kept = min(len(ids), num_steps)
    assert out[:kept] == ids[:kept]
    assert out[kept:] == [pad] * (num_steps - kept)


def test_truncate_pad_refuses_negative_length():
    with pytest.raises(ValueError, match="num_steps"):
        truncate_pad([1, 2], -1, 0)


def test_build_arrays_shapes_and_special_tokens():
    pairs = [
        ("a b .", "x y z ."),
        ("b .", "y ."),
        ("a a a a a a .", "x x x x x x x x ."),
    ]
    src_vocab = Vocab(tokenize_pairs(pairs)[0])
    tgt_vocab = Vocab(tokenize_pairs(pairs)[1])
    num_steps = 6
    src, src_valid_len, tgt_in, tgt_out = build_arrays(
        pairs, src_vocab, tgt_vocab, num_steps
    )
    for array in (src, tgt_in, tgt_out):
        assert array.shape == (3, num_steps) and array.dtype == torch.long
    assert src_valid_len.shape == (3,) and src_valid_len.dtype == torch.long
    assert src[0].tolist() == src_vocab[["a", "b", "."]] + [
        src_vocab.eos,
        src_vocab.pad,
        src_vocab.pad,
    ]
    assert src_valid_len.tolist() == [
        4,
        3,
        6,
    ]  # the last source is cut before its <eos>
    assert (tgt_in[:, 0] == tgt_vocab.bos).all()
    assert (
        tgt_in[1].tolist()
        == [tgt_vocab.bos] + tgt_vocab[["y", "."]] + [tgt_vocab.pad] * 3
    )
    assert (
        tgt_out[1].tolist()
        == tgt_vocab[["y", "."]] + [tgt_vocab.eos] + [tgt_vocab.pad] * 3
    )
    for row in range(
        2
    ):  # what the decoder reads at t+1 is what it had to predict at t
        n = len(tokenize(pairs[row][1]))
        assert tgt_in[row, 1 : n + 1].tolist() == tgt_out[row, :n].tolist()
        assert tgt_out[row, n] == tgt_vocab.eos
    assert tgt_vocab.eos not in tgt_out[2].tolist()  # cut: 8 tokens > 6 steps
    assert (src == src_vocab.pad).sum(dim=1).tolist() == (
        num_steps - src_valid_len
    ).tolist()
    with pytest.raises(ValueError, match="num_steps"):
        build_arrays(pairs, src_vocab, tgt_vocab, 0)


def test_source_array_agrees_with_build_arrays(corpus):
    loaders = translation_dataloaders(corpus, batch_size=32, num_steps=12)
    pairs = corpus[2][:50]
    src, src_valid_len, _, _ = build_arrays(
        pairs, loaders.src_vocab, loaders.tgt_vocab, 12
    )
    src2, valid2 = source_array([s for s, _ in pairs], loaders.src_vocab, 12)
    assert torch.equal(src, src2) and torch.equal(src_valid_len, valid2)


def _rows(loader) -> list[tuple]:
    return [
        tuple(int(x) for x in row)
        for batch in loader
        for row in torch.cat(
            [batch[0], batch[1][:, None], batch[2], batch[3]], dim=1
        )
    ]


def test_dataloaders_batches(corpus):
    loaders = translation_dataloaders(
        corpus, batch_size=64, num_steps=20, seed=3
    )
    assert isinstance(loaders, TranslationLoaders)
    train, val, test = corpus
    assert len(loaders.train) == -(-len(train) // 64) and len(
        loaders.test
    ) == -(-len(test) // 64)
    src, src_valid_len, tgt_in, tgt_out = next(iter(loaders.train))
    assert src.shape == tgt_in.shape == tgt_out.shape == (64, 20)
    assert src_valid_len.shape == (64,)
    assert all(
        t.dtype == torch.long and t.device.type == "cpu"
        for t in (src, src_valid_len, tgt_in, tgt_out)
    )
    # Vocabularies come from the training split only.
    train_src, train_tgt = tokenize_pairs(train)
    assert set(loaders.src_vocab.idx_to_token[4:]) == {
        t for s in train_src for t in s
    }
    assert set(loaders.tgt_vocab.idx_to_token[4:]) == {
        t for s in train_tgt for t in s
    }
    # Validation and test keep their order; training is a permutation of the whole split.
    expected = build_arrays(test, loaders.src_vocab, loaders.tgt_vocab, 20)
    assert _rows(loaders.test) == [
        tuple(int(x) for x in row)
        for row in torch.cat(
            [expected[0], expected[1][:, None], expected[2], expected[3]],
            dim=1,
        )
    ]
    train_rows = _rows(loaders.train)
    expected_train = build_arrays(
        train, loaders.src_vocab, loaders.tgt_vocab, 20
    )
    assert sorted(train_rows) == sorted(
        tuple(int(x) for x in row)
        for row in torch.cat(
            [
                expected_train[0],
                expected_train[1][:, None],
                expected_train[2],
                expected_train[3],
            ],
            dim=1,
        )
    )


def test_dataloader_order_is_seeded(corpus):
    small = (corpus[0][:300], corpus[1][:50], corpus[2][:50])
    first = translation_dataloaders(small, batch_size=32, num_steps=16, seed=0)
    again = translation_dataloaders(small, batch_size=32, num_steps=16, seed=0)
    other = translation_dataloaders(small, batch_size=32, num_steps=16, seed=1)
    epoch1, epoch2 = _rows(first.train), _rows(first.train)
    assert epoch1 == _rows(again.train) and epoch2 == _rows(
        again.train
    )  # same epochs in every run
    assert epoch1 != epoch2  # each epoch reshuffles
    assert epoch1 != _rows(other.train)
    assert _rows(first.val) == _rows(other.val)


def test_dataloaders_serve_any_device(corpus, device):
    small = (corpus[0][:100], corpus[1][:20], corpus[2][:20])
    loaders = translation_dataloaders(
        small, batch_size=16, num_steps=10, device=device
    )
    for loader in (loaders.train, loaders.test):
        batch = next(iter(loader))
        assert all(t.device.type == device.type for t in batch)
        assert [tuple(t.shape) for t in batch] == [
            (16, 10),
            (16,),
            (16, 10),
            (16, 10),
        ]


def test_dataloaders_refuse_bad_input(corpus):
    with pytest.raises(ValueError, match="splits"):
        translation_dataloaders(corpus[:2], batch_size=8, num_steps=10)
    with pytest.raises(ValueError, match="batch_size"):
        translation_dataloaders(corpus, batch_size=0, num_steps=10)
    with pytest.raises(ValueError, match="num_steps"):
        translation_dataloaders(corpus, batch_size=8, num_steps=0)
    with pytest.raises(ValueError, match="splits"):
        translation_dataloaders(
            ([], corpus[1], corpus[2]), batch_size=8, num_steps=10
        )
