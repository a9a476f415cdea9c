"""The generated corpus keeps its promises for many seeds, not only seed 0."""

import collections

import pytest

from course_pkg.data.corpus import (
    english_french_corpus,
    english_sentence_labels,
)


def assert_invariants(splits):
    """No English sentence in two splits; one French translation per English
    sentence; no pair twice."""
    splits_of = collections.defaultdict(set)
    french_of = collections.defaultdict(set)
    for index, split in enumerate(splits):
        for english, french in split:
            splits_of[english].add(index)
            french_of[english].add(french)
    in_two = [e for e, where in splits_of.items() if len(where) > 1]
    two_translations = {e: f for e, f in french_of.items() if len(f) > 1}
    assert not in_two, in_two[:3]
    assert not two_translations, list(two_translations.items())[:3]
    assert sum(map(len, splits)) == len(french_of)  # each English once


@pytest.mark.parametrize("seed", range(50))
def test_invariants_hold_for_many_seeds(seed):
    splits = english_french_corpus(seed, num_pairs=150)
    assert tuple(map(len, splits)) == (120, 15, 15)
    assert_invariants(splits)


def test_invariants_hold_where_the_old_generator_leaked():
    # Seed 1 with 1000 pairs gave "i read ..." two French translations
    # before English sentences were deduplicated.
    assert_invariants(english_french_corpus(1, num_pairs=1000))


def test_the_default_corpus_keeps_its_invariants():
    assert_invariants(english_french_corpus(0))


def test_labels_align_with_the_deduplicated_corpus():
    splits = english_french_corpus(1, num_pairs=1000)
    labels = english_sentence_labels(1, num_pairs=1000)
    for split, labelled in zip(splits, labels):
        assert [e for e, _ in split] == [row[0] for row in labelled]


@pytest.mark.parametrize(
    "seed, num_pairs, error",
    [("0", 100, TypeError), (0, 100.0, TypeError), (0, 9, ValueError)],
)
def test_bad_arguments_are_refused(seed, num_pairs, error):
    with pytest.raises(error, match="seed|num_pairs"):
        english_french_corpus(seed, num_pairs)
