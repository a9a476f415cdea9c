"""Tests for course_pkg.evaluation.bleu: parity with d2l's sentence BLEU and with sacrebleu's corpus BLEU."""

from __future__ import annotations

import math
import random

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.data.corpus import english_french_corpus
from course_pkg.evaluation.bleu import bleu, corpus_bleu

# A small alphabet so that random sequences share many n-grams (and sometimes none).
words = st.sampled_from(["a", "b", "c", "d", "e", "f"])
sentences = st.lists(words, min_size=1, max_size=14)


def d2l_bleu(pred: list[str], label: list[str], k: int) -> float:
    import d2l.torch as d2l

    return d2l.bleu(" ".join(pred), " ".join(label), k)


def sacre(hypotheses: list[list[str]], references: list[list[str]]) -> float:
    score = sacrebleu.corpus_bleu(
        [" ".join(h) for h in hypotheses],
        [[" ".join(r) for r in references]],
        tokenize="none",
    )
    return score.score / 100


# --------------------------------------------------------------------------- sentence BLEU (d2l)


@settings(max_examples=300)
@given(sentences, sentences, st.integers(1, 6))
def test_bleu_matches_d2l(pred, label, k):
    assert bleu(pred, label, k) == pytest.approx(
        d2l_bleu(pred, label, k), rel=1e-12, abs=1e-15
    )


@settings(max_examples=100)
@given(sentences, sentences)
def test_bleu_accepts_strings_and_stays_in_unit_interval(pred, label):
    score = bleu(pred, label)
    assert bleu(" ".join(pred), " ".join(label)) == score
    assert 0.0 <= score <= 1.0


def test_bleu_on_known_cases():
    sentence = "je n'aime pas la voiture rouge .".split()
    assert bleu(sentence, sentence) == 1.0
    assert bleu(sentence, "il voit un chien noir".split()) == 0.0
    assert (
        bleu([], sentence) == 0.0
    )  # empty prediction: 0, not a ZeroDivisionError
    # A prediction shorter than k is judged on the n-gram orders it has, times the brevity penalty.
    assert bleu(
        ["la", "voiture"], ["la", "voiture", "rouge"], k=4
    ) == pytest.approx(math.exp(1 - 3 / 2))
    # Clipping: "la la la" matches "la" only as often as the label holds it.
    assert bleu(
        ["la", "la", "la"], ["la", "voiture", "la"], k=1
    ) == pytest.approx((2 / 3) ** 0.5)


def test_bleu_refuses_bad_input():
    with pytest.raises(ValueError, match="k"):
        bleu(["a"], ["a"], k=0)
    with pytest.raises(TypeError, match="pred_tokens"):
        bleu(3, ["a"])


# --------------------------------------------------------------------------- corpus BLEU (sacrebleu)


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.lists(words, max_size=14), sentences),
        min_size=1,
        max_size=8,
    )
)
def test_corpus_bleu_matches_sacrebleu_on_random_corpora(corpus):
    hypotheses, references = (
        [list(h) for h, _ in corpus],
        [list(r) for _, r in corpus],
    )
    assert corpus_bleu(hypotheses, references) == pytest.approx(
        sacre(hypotheses, references), abs=1e-9
    )


def _imperfect(
    tokens: list[str], rng: random.Random, vocabulary: list[str]
) -> list[str]:
    """A plausible model error: drop, repeat, swap, replace a token, or stop early."""
    tokens = list(tokens)
    if not tokens:
        return tokens
    edit = rng.choice(
        ["same", "drop", "repeat", "swap", "replace", "truncate"]
    )
    i = rng.randrange(len(tokens))
    if edit == "drop":
        del tokens[i]
    elif edit == "repeat":
        tokens.insert(i, tokens[i])
    elif edit == "swap" and i + 1 < len(tokens):
        tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    elif edit == "replace":
        tokens[i] = rng.choice(vocabulary)
    elif edit == "truncate":
        tokens = tokens[:i]
    return tokens


@pytest.mark.parametrize("seed", range(5))
def test_corpus_bleu_matches_sacrebleu_on_imperfect_translations(seed):
    _, _, test = english_french_corpus(seed, num_pairs=300)
    references = [tgt.split() for _, tgt in test]
    vocabulary = sorted({t for r in references for t in r})
    rng = random.Random(seed)
    hypotheses = [
        _imperfect(_imperfect(r, rng, vocabulary), rng, vocabulary)
        for r in references
    ]
    ours = corpus_bleu(hypotheses, references)
    assert 0.3 < ours < 1.0  # realistic: good but imperfect translations
    assert ours == pytest.approx(sacre(hypotheses, references), abs=1e-9)
    for size in (
        1,
        2,
        5,
    ):  # tiny corpora, where smoothing and brevity matter most
        assert corpus_bleu(
            hypotheses[:size], references[:size]
        ) == pytest.approx(
            sacre(hypotheses[:size], references[:size]), abs=1e-9
        )


def test_corpus_bleu_edge_cases_agree_with_sacrebleu():
    cases = [
        (
            [["a", "b", "c", "d"]],
            [["a", "b", "d", "c"]],
        ),  # no 3- or 4-gram match: smoothed, not 0
        (
            [["a", "b", "c"]],
            [["a", "b", "c"]],
        ),  # no hypothesis 4-gram at all: 0
        ([["x", "y"]], [["a", "b"]]),  # no match at all: 0
        ([[]], [["a", "b"]]),  # empty hypothesis
        (
            [["a", "b", "c", "d", "e"], ["a"]],
            [["a", "b", "c", "d", "e"], ["a", "b", "c"]],
        ),  # brevity
        (
            [["a", "b", "c", "d", "e", "f"]],
            [["a", "b", "c", "d"]],
        ),  # longer than the reference: no penalty
    ]
    for hypotheses, references in cases:
        assert corpus_bleu(hypotheses, references) == pytest.approx(
            sacre(hypotheses, references), abs=1e-12
        )
    assert corpus_bleu([["a", "b", "c", "d"]], [["a", "b", "d", "c"]]) > 0
    assert corpus_bleu([["a", "b", "c"]], [["a", "b", "c"]]) == 0.0


def test_corpus_bleu_perfect_empty_and_string_input():
    references = [
        s.split() for s in ("je la vois .", "il ne mange pas la pomme rouge .")
    ]
    assert corpus_bleu(references, references) == pytest.approx(1.0)
    assert corpus_bleu([], []) == 0.0
    assert corpus_bleu(
        [" ".join(r) for r in references], references
    ) == corpus_bleu(references, references)


def test_corpus_bleu_refuses_bad_input():
    with pytest.raises(ValueError, match="hypotheses and references"):
        corpus_bleu([["a"]], [["a"], ["b"]])
    with pytest.raises(ValueError, match="max_n"):
        corpus_bleu([["a"]], [["a"]], max_n=0)
    with pytest.raises(TypeError, match=r"hypotheses\[0\]"):
        corpus_bleu([5], [["a"]])
