"""The generated English–French corpus that every chapter trains on.

A random grammar (:mod:`course_pkg.data.corpus_grammar`) picks the *meaning* of a
sentence; the ``pyrealb`` realizer writes it in English and in French, so
conjugation, agreement, elision, contraction and the place of French
adjectives come from its lexicons, not from tables written here. A small
model learns it in a minute on a CPU. No download: the corpus is made in
code, the same for a given seed on every machine.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path

from course_pkg.checks import check_seed, check_size
from course_pkg.data import corpus_grammar
from course_pkg.data.corpus_grammar import (
    TENSES,
    Clause,
    NounPhrase,
    Person,
    sample_clause,
)
from course_pkg.data.translation import Pair, normalise
from course_pkg.files import cached_json

# -- Writing a meaning in English and in French with pyrealb ----------------------------------


class _Realizer:
    """Builds pyrealb trees for a :class:`Clause` in one language ("en" or "fr")."""

    def __init__(self, lang: str):
        import pyrealb

        self.p = pyrealb
        self.lang = lang
        self.fr = lang == "fr"

    def noun(self, entry: tuple[str, str, str]):
        p = self.p
        if not self.fr:
            return p.N(entry[0], "en")
        noun = p.N(entry[1], "fr")
        # Nouns whose gender pyrealb lists as "x" (either) are used as masculines here.
        if p.getLexicon("fr")[entry[1]]["N"]["g"] == "x":
            noun = noun.g("m")
        return noun

    def determiner(self, np: NounPhrase):
        p, lang = self.p, self.lang
        if np.determiner == "possessive":
            owner = np.owner
            if not self.fr:
                return p.D("my", lang).pe(owner.pe).ow(owner.n).g(owner.g)
            # French possessives agree with the thing owned; the owner only picks the stem.
            return p.D("mon" if owner.n == "s" else "notre", lang).pe(owner.pe)
        word = {
            "the": ("the", "le"),
            "a": ("a", "un"),
            "this": ("this", "ce"),
        }[np.determiner]
        return p.D(word[1] if self.fr else word[0], lang)

    def noun_phrase(self, np: NounPhrase):
        p, lang = self.p, self.lang
        adjectives = [
            p.A(a[1] if self.fr else a[0], lang) for a in np.adjectives
        ]
        return p.NP(
            self.determiner(np), *adjectives, self.noun(np.noun), lang=lang
        ).n(np.number)

    def subject(self, subject: Person | NounPhrase):
        if isinstance(subject, NounPhrase):
            return self.noun_phrase(subject)
        return (
            self.p.Pro("je" if self.fr else "I", self.lang)
            .pe(subject.pe)
            .n(subject.n)
            .g(subject.g)
        )

    def pronoun_object(self, person: Person):
        p, lang = self.p, self.lang
        if not self.fr:
            return p.Pro("me", lang).pe(person.pe).n(person.n).g(person.g)
        # .pro() on an NP makes pyrealb move the clitic before the verb and agree the participle.
        return p.NP(
            p.Pro("moi", lang).pe(person.pe).n(person.n).g(person.g), lang=lang
        ).pro()

    def complement(self, thing: Person | NounPhrase):
        return (
            self.pronoun_object(thing)
            if isinstance(thing, Person)
            else self.noun_phrase(thing)
        )

    def prepositional_phrase(
        self, preposition: tuple[str, str], np: NounPhrase
    ):
        p, lang = self.p, self.lang
        if not self.fr:
            return p.PP(
                p.P(preposition[0], lang), self.noun_phrase(np), lang=lang
            )
        if (
            preposition[1] == "près de"
        ):  # a two-word preposition: "près" + "de" (-> "près du parc")
            return p.PP(
                p.P("près", lang),
                p.PP(p.P("de", lang), self.noun_phrase(np), lang=lang),
                lang=lang,
            )
        return p.PP(p.P(preposition[1], lang), self.noun_phrase(np), lang=lang)

    def recipient(self, recipient: Person | NounPhrase):
        p, lang = self.p, self.lang
        if not self.fr:
            return p.PP(p.P("to", lang), self.complement(recipient), lang=lang)
        if isinstance(
            recipient, Person
        ):  # "à elle" -> "lui", placed before the verb by pyrealb
            person = recipient
            inner = p.NP(
                p.Pro("moi", lang).pe(person.pe).n(person.n).g(person.g),
                lang=lang,
            )
            return p.PP(p.P("à", lang), inner, lang=lang).pro()
        return p.PP(p.P("à", lang), self.noun_phrase(recipient), lang=lang)

    def clause(self, clause: Clause):
        p, lang = self.p, self.lang
        verb = p.V(clause.verb[1] if self.fr else clause.verb[0], lang)
        parts = []
        if clause.kind == "copula":
            adjective = clause.adjective[1] if self.fr else clause.adjective[0]
            parts.append(p.A(adjective, lang))
        if clause.obj is not None:
            parts.append(self.complement(clause.obj))
        if clause.recipient is not None:
            parts.append(self.recipient(clause.recipient))
        if clause.place is not None:
            parts.append(
                self.prepositional_phrase(clause.preposition, clause.place)
            )
        english_tense, french_tense = TENSES[clause.tense]
        if self.fr and clause.kind == "copula" and clause.tense == "past":
            french_tense = "i"  # "la voiture était rouge": a state in the past is imperfect
        sentence_parts = [
            self.subject(clause.subject),
            p.VP(verb, *parts, lang=lang),
        ]
        if self.fr and clause.question:
            sentence_parts = [
                p.Q("est-ce", lang),
                p.C("que", lang),
            ] + sentence_parts
        sentence = p.S(*sentence_parts, lang=lang).t(
            french_tense if self.fr else english_tense
        )
        if clause.negated:
            sentence = sentence.typ({"neg": True})
        if clause.question:
            if (
                self.fr
            ):  # "est-ce que" + statement: French questions without inversion
                sentence = sentence.a("?", True)
            else:
                sentence = sentence.typ({"int": "yon"})
        return sentence

    def realize(self, clause: Clause) -> str:
        text = self.clause(clause).realize()
        if (
            "[[" in text
        ):  # pyrealb marks words missing from its lexicon with [[...]]
            raise RuntimeError(f"pyrealb could not realize {clause}: {text!r}")
        return normalise(text)


def _realize_all(clauses: Sequence[Clause], lang: str) -> list[str]:
    import pyrealb

    previous = pyrealb.getLanguage()
    pyrealb.load(lang)
    try:
        realizer = _Realizer(lang)
        return [realizer.realize(clause) for clause in clauses]
    finally:
        pyrealb.load(previous)


def english_french_corpus(
    seed: int = 0, num_pairs: int = 8000
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """A synthetic English–French corpus, split 80/10/10 into train, validation and test.

    Random meanings are drawn with ``random.Random(seed)`` from a small grammar (pronouns of all
    persons, determiners and possessives, adjectives before and after the French noun, present,
    past and future, negation, yes/no questions, prepositional phrases, pronoun objects) and
    written in both languages by pyrealb. Each English sentence has exactly one French
    translation: "you" is always "vous", "they" always "ils", "I" and "we" are masculine.
    Generation takes a few seconds, so the result is kept in memory and on disk
    (:func:`course_pkg.files.cached_json`, keyed by the generator's code, pyrealb's version and
    the arguments: a notebook after the first reads it); every call returns fresh lists, so
    changing them does not change the next call's result.

    Args:
        seed: seed of the random grammar.
        num_pairs: number of pairs in all (at least 10), no two with the same English sentence.
    Returns:
        (train, validation, test): lists of (english, french) strings in the normal form of
        :func:`course_pkg.data.translation.preprocess_nmt` (lower case, tokens separated by single spaces); no pair and no
        English sentence is in two splits.
    Raises:
        TypeError: if seed or num_pairs is not an int.
        ValueError: if num_pairs < 10, or the grammar cannot produce that many distinct English
            sentences.
    """
    _check_english_french_corpus(seed, num_pairs)
    return tuple(list(split) for split in _generate_corpus(seed, num_pairs))


def _check_english_french_corpus(seed: object, num_pairs: object) -> None:
    """seed an int; num_pairs an int >= 10."""
    check_seed("seed", seed)
    check_size("num_pairs", num_pairs, 10)


def _kept_on_disk(
    what: str, seed: int, num_pairs: int, compute: Callable[[], Sequence]
) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """``compute()`` (splits of rows of strings) through the disk cache, as tuples.

    The key is what the result depends on: this code, the grammar's, pyrealb's version and the
    arguments.
    """
    digest = hashlib.sha256()
    for module in (__file__, corpus_grammar.__file__):
        digest.update(Path(module).read_bytes())
    digest.update(repr((version("pyrealb"), what, seed, num_pairs)).encode())
    splits = cached_json(
        f"{what}-{seed}-{num_pairs}", digest.hexdigest(), compute
    )
    return tuple(tuple(tuple(row) for row in split) for split in splits)


@functools.lru_cache(maxsize=8)
def _generate_corpus(
    seed: int, num_pairs: int
) -> tuple[tuple[Pair, ...], tuple[Pair, ...], tuple[Pair, ...]]:
    return _kept_on_disk(
        "corpus", seed, num_pairs, lambda: _generate_pairs(seed, num_pairs)
    )


def _generate_pairs(
    seed: int, num_pairs: int
) -> tuple[tuple[Pair, ...], tuple[Pair, ...], tuple[Pair, ...]]:
    rng = random.Random(seed)
    seen_clauses: set[Clause] = set()
    pairs: list[Pair] = []
    # One pair per English sentence: a second meaning that reads the same in English ("i read
    # the newspapers": present or past) is dropped, so no English sentence has two translations
    # or sits in two splits. A stream without such repeats is kept as it is.
    seen_english: set[str] = set()
    for _ in range(
        20
    ):  # rounds: two meanings rarely give the same pair, so one round is the rule
        clauses = []
        for _ in range(20 * num_pairs):
            if len(clauses) == num_pairs - len(pairs):
                break
            clause = sample_clause(rng)
            if clause not in seen_clauses:
                seen_clauses.add(clause)
                clauses.append(clause)
        if not clauses:
            break
        for pair in zip(
            _realize_all(clauses, "en"), _realize_all(clauses, "fr")
        ):
            if pair[0] not in seen_english:
                seen_english.add(pair[0])
                pairs.append(pair)
        if len(pairs) == num_pairs:
            break
    if len(pairs) < num_pairs:
        raise ValueError(
            f"the grammar gave only {len(pairs)} pairs with distinct English sentences, "
            f"fewer than num_pairs={num_pairs}"
        )
    # Sampling order is already random; cutting it keeps the split a function of the seed.
    num_train, num_val = int(0.8 * num_pairs), int(0.1 * num_pairs)
    return (
        tuple(pairs[:num_train]),
        tuple(pairs[num_train : num_train + num_val]),
        tuple(pairs[num_train + num_val :]),
    )


# -- The meaning behind each sentence, as labels (chapter "Pretraining an encoder: BERT") ------


@functools.lru_cache(maxsize=4)
def english_sentence_labels(
    seed: int = 0, num_pairs: int = 8000
) -> tuple[tuple[tuple[str, str, str, str], ...], ...]:
    """Tense, mood and frame of every English sentence of ``english_french_corpus(seed, num_pairs)``.

    The corpus keeps only the sentences, not the meanings drawn to write them. This replays the
    same stream of meanings (``random.Random(seed)``, the same grammar) and writes each in English
    until every sentence of the corpus is found; a sentence's labels are those of the first
    meaning that wrote it, as the corpus keeps the first pair of each English sentence.

    Args:
        seed, num_pairs: as in :func:`english_french_corpus`.
    Returns:
        (train, validation, test), aligned with that corpus' splits: tuples of
        ``(english, tense, mood, frame)`` with tense in {"present", "past", "future"}, mood in
        {"statement", "negation", "question"} and frame, what the verb takes, in
        {"transitive", "ditransitive", "motion", "activity", "copula"} ("sees a cat", "gives a
        book to a girl", "goes to the park", "sleeps", "is old").
    Raises:
        TypeError, ValueError: as :func:`english_french_corpus`.
    """
    splits = english_french_corpus(seed, num_pairs)
    return _kept_on_disk(
        "labels", seed, num_pairs, lambda: _replay_labels(seed, splits)
    )


def _replay_labels(
    seed: int, splits: tuple[list[Pair], ...]
) -> tuple[tuple[tuple[str, str, str, str], ...], ...]:
    wanted = {english for split in splits for english, _ in split}
    rng, labels, seen = random.Random(seed), {}, set()
    while not wanted <= labels.keys():
        clauses = []
        for _ in range(20_000):
            if len(clauses) == 1000:
                break
            clause = sample_clause(rng)
            if clause not in seen:
                seen.add(clause)
                clauses.append(clause)
        if not clauses:  # cannot happen for pairs the same stream wrote; guards against a hang
            raise RuntimeError(
                f"the meanings of seed={seed} ran out before every pair was found"
            )
        for clause, sentence in zip(clauses, _realize_all(clauses, "en")):
            if sentence in wanted and sentence not in labels:
                mood = (
                    "negation"
                    if clause.negated
                    else "question"
                    if clause.question
                    else "statement"
                )
                labels[sentence] = (clause.tense, mood, clause.kind)
    return tuple(
        tuple((english, *labels[english]) for english, _ in split)
        for split in splits
    )
