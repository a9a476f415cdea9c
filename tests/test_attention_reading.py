"""Test-set statistics of attention argmaxes (Bahdanau, Transformer chapters)."""

from __future__ import annotations

import pytest
import torch

from course_pkg.attention_reading import (
    POSTPOSED_ADJECTIVES,
    adjective_attention,
)
from course_pkg.corpus import english_french_corpus


def one_hot_rows(argmaxes: list[list[int]], S: int, T: int) -> torch.Tensor:
    weights = torch.full((len(argmaxes), S, T), 0.01)
    for n, row in enumerate(argmaxes):
        for s, t in enumerate(row):
            weights[n, s, t] = 1.0
    return weights


SOURCE = "the black cat sleeps . <eos>".split()
REFERENCE = "le chat noir dort .".split()


def test_counts_hits_chance_and_reordering():
    outputs = [REFERENCE, REFERENCE, REFERENCE]
    # rows: le chat noir dort .
    argmaxes = [
        [0, 2, 1, 3, 4],  # noun row -> cat, adjective row -> black: both
        [0, 0, 1, 3, 4],  # adjective right, noun row elsewhere
        [0, 2, 2, 3, 4],  # adjective row on the noun: a miss
    ]
    reading = adjective_attention(
        [SOURCE] * 3, outputs, [REFERENCE] * 3, one_hot_rows(argmaxes, 5, 6)
    )
    assert reading.rows == 3 and reading.reorders == 3
    assert reading.on_adjective == pytest.approx(2 / 3)
    assert reading.reorder_followed == pytest.approx(1 / 3)
    assert reading.chance == pytest.approx(1 / 6)
    assert reading.reorder_chance == pytest.approx(1 / 36)


def test_wrong_or_untranslated_adjectives_are_not_counted():
    good = "le chat noir dort .".split()
    wrong = "le chat blanc dort .".split()  # not in the reference
    reading = adjective_attention(
        [SOURCE, SOURCE],
        [good, wrong],
        [REFERENCE, REFERENCE],
        one_hot_rows([[0, 2, 1, 3, 4], [0, 2, 1, 3, 4]], 5, 6),
    )
    assert reading.rows == 1 and reading.on_adjective == 1.0


def test_every_postposed_adjective_of_the_corpus_has_its_stem():
    # In every pair, a post-posed English adjective has a French form that
    # starts with its stem: the table matches the corpus.
    for pairs in english_french_corpus(seed=0):
        for english, french in pairs:
            for adjective, stem in POSTPOSED_ADJECTIVES.items():
                if adjective in english.split():
                    assert any(w.startswith(stem) for w in french.split())


def test_bad_input_is_refused_with_its_name():
    w = one_hot_rows([[0, 2, 1, 3, 4]], 5, 6)
    with pytest.raises(TypeError, match="weights"):
        adjective_attention([SOURCE], [REFERENCE], [REFERENCE], [[0.0]])
    with pytest.raises(TypeError, match="outputs"):
        adjective_attention([SOURCE], ["le chat"], [REFERENCE], w)
    with pytest.raises(ValueError, match="same length"):
        adjective_attention([SOURCE], [], [REFERENCE], w)
    with pytest.raises(ValueError, match="smaller"):
        adjective_attention([SOURCE], [REFERENCE], [REFERENCE], w[:, :3])
    with pytest.raises(ValueError, match="no correctly written"):
        adjective_attention([SOURCE], [["le", "chat"]], [REFERENCE], w)
