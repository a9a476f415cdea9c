"""English–French sentence pairs, vocabularies and batches (chapters on seq2seq and the Transformer).

Two sources of pairs share one normal form (lower case, punctuation split off by a space, one
space between tokens), so one tokenizer (split on spaces) and one :class:`Vocab` serve both:

- :func:`english_french_corpus`: a synthetic corpus that a small model learns in a minute on a
  CPU. A random grammar picks the *meaning* of a sentence; the ``pyrealb`` realizer writes it in
  English and in French, so conjugation, agreement, elision, contraction and the place of French
  adjectives come from its lexicons, not from tables written here.
- :func:`load_tatoeba` / :func:`download_fra_eng`: the real Tatoeba pairs that d2l uses.

Then the pipeline the chapters run: :func:`tokenize_pairs` -> :class:`Vocab` ->
:func:`build_arrays` -> :func:`translation_dataloaders`.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
import pathlib
import random
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

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


def _normalise(text: str) -> str:
    """The canonical form of a sentence: :func:`preprocess_nmt`, then single spaces, no ends."""
    return " ".join(preprocess_nmt(text).split())


def tokenize(sentence: str) -> list[str]:
    """Split a normalised sentence on whitespace: ``"je la vois ."`` -> ``["je", "la", "vois", "."]``."""
    return sentence.split()


def tokenize_pairs(pairs: Iterable[Pair]) -> tuple[list[list[str]], list[list[str]]]:
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


# ---------------------------------------------------------------------------------------------
# The synthetic corpus: a lexicon of translation pairs, a grammar of meanings, pyrealb to write them
# ---------------------------------------------------------------------------------------------

# Each noun: (english, french, semantic class). Classes decide which verbs, prepositions and
# adjectives may go with a noun, so that sentences stay plausible. Genders come from pyrealb.
_NOUNS: tuple[tuple[str, str, str], ...] = (
    ("man", "homme", "person"), ("woman", "femme", "person"), ("boy", "garçon", "person"),
    ("girl", "fille", "person"), ("child", "enfant", "person"), ("friend", "ami", "person"),
    ("teacher", "professeur", "person"), ("doctor", "médecin", "person"),
    ("cat", "chat", "animal"), ("dog", "chien", "animal"), ("horse", "cheval", "animal"),
    ("bird", "oiseau", "animal"), ("mouse", "souris", "animal"),
    ("apple", "pomme", "food"), ("cake", "gâteau", "food"), ("banana", "banane", "food"),
    ("orange", "orange", "food"),
    ("book", "livre", "object"), ("letter", "lettre", "object"), ("key", "clé", "object"),
    ("bag", "sac", "object"), ("box", "boîte", "object"), ("ball", "balle", "object"),
    ("hat", "chapeau", "object"), ("cup", "tasse", "object"), ("newspaper", "journal", "object"),
    ("car", "voiture", "large"), ("table", "table", "large"), ("tree", "arbre", "large"),
    ("bed", "lit", "large"), ("window", "fenêtre", "large"),
    ("garden", "jardin", "place"), ("park", "parc", "place"), ("school", "école", "place"),
    ("station", "gare", "place"), ("market", "marché", "place"), ("house", "maison", "place"),
    ("kitchen", "cuisine", "place"), ("hotel", "hôtel", "place"), ("room", "chambre", "place"),
)

# Adjectives: (english, french, classes of nouns they describe). Whether French puts one before
# or after the noun is pyrealb's business (its lexicon marks "petit", "vieux", ... as preposed).
# English puts size/age before colour or state, so an NP takes at most one adjective of each list.
_SIZE_AGE_ADJECTIVES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("small", "petit", frozenset({"animal", "object", "large", "place"})),
    ("big", "grand", frozenset({"animal", "object", "large", "place"})),
    ("old", "vieux", frozenset({"person", "animal", "object", "large", "place"})),
    ("young", "jeune", frozenset({"person", "animal"})),
    ("new", "nouveau", frozenset({"object", "large", "place"})),
)
_QUALITY_ADJECTIVES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("red", "rouge", frozenset({"food", "object", "large"})),
    ("green", "vert", frozenset({"food", "object", "large"})),
    ("black", "noir", frozenset({"animal", "object", "large"})),
    ("white", "blanc", frozenset({"animal", "object", "large"})),
    ("happy", "content", frozenset({"person"})),
    ("tired", "fatigué", frozenset({"person", "animal"})),
)

# Verbs: (english, french, classes of subjects, classes of objects). Subjects are people or
# animals; pronoun objects (me, him, ...) are allowed when "person" is among the object classes.
# A class set may also name single nouns ("book"), for verbs as narrow as "read". Verbs starting
# with a consonant keep French small: "aider" would add "j'aide", "n'aide", "l'aide", "m'aide", ...
_TRANSITIVE_VERBS: tuple[tuple[str, str, frozenset[str], frozenset[str]], ...] = (
    ("see", "voir", frozenset({"person", "animal"}),
     frozenset({"person", "animal", "food", "object", "large", "place"})),
    ("like", "aimer", frozenset({"person", "animal"}), frozenset({"animal", "food", "object", "place"})),
    ("watch", "regarder", frozenset({"person", "animal"}),
     frozenset({"person", "animal", "object", "large"})),
    ("find", "trouver", frozenset({"person", "animal"}), frozenset({"person", "animal", "food", "object"})),
    ("meet", "rencontrer", frozenset({"person"}), frozenset({"person"})),
    ("carry", "porter", frozenset({"person", "animal"}), frozenset({"animal", "food", "object"})),
    ("eat", "manger", frozenset({"person", "animal"}), frozenset({"food"})),
    ("take", "prendre", frozenset({"person"}), frozenset({"food", "object"})),
    ("read", "lire", frozenset({"person"}), frozenset({"book", "letter", "newspaper"})),
)

_DITRANSITIVE_VERBS: tuple[tuple[str, str], ...] = (("give", "donner"),)
# Motion verbs take "être" in the passé composé, so their participle agrees with the subject.
_MOTION_VERBS: tuple[tuple[str, str, str, str], ...] = (
    ("go", "aller", "to", "à"),
    ("come", "venir", "from", "de"),
)
_ACTIVITY_VERBS: tuple[tuple[str, str], ...] = (("sleep", "dormir"), ("play", "jouer"))

# Prepositions of place: (english, french, classes or single nouns they take).
_PLACE_PREPOSITIONS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("in", "dans", frozenset({"place"})),
    ("near", "près de", frozenset({"place", "large"})),
    ("behind", "derrière", frozenset({"place", "large"})),
    ("under", "sous", frozenset({"table", "bed", "car", "tree"})),
    ("on", "sur", frozenset({"table", "bed", "car"})),
    ("with", "avec", frozenset({"person", "animal"})),
)

_TENSES = {"present": ("p", "p"), "past": ("ps", "pc"), "future": ("f", "f")}


@dataclass(frozen=True)
class _Person:
    """A grammatical person: 1-3, number "s"/"p", gender "m"/"f".

    English "you" is realized as French "vous" (person 2, plural) everywhere, and "they" as "ils",
    so that every English sentence has exactly one French translation.
    """

    pe: int
    n: str
    g: str = "m"


# I, you, he, she, we, they.
_PERSONS = (_Person(1, "s"), _Person(2, "p"), _Person(3, "s", "m"), _Person(3, "s", "f"),
            _Person(1, "p"), _Person(3, "p"))


@dataclass(frozen=True)
class _NounPhrase:
    """The meaning of a noun phrase: "my small red cars" / "mes petites voitures rouges"."""

    noun: tuple[str, str, str]
    number: str  # "s" or "p"
    determiner: str  # "the", "a", "this" or "possessive"
    owner: _Person | None  # for possessive determiners
    adjectives: tuple[tuple[str, str, frozenset[str]], ...]  # size/age first, then quality


@dataclass(frozen=True)
class _Clause:
    """The meaning of a sentence, independent of the language it is written in."""

    kind: str  # transitive, ditransitive, motion, activity, copula
    subject: _Person | _NounPhrase
    verb: tuple[str, str]  # (english lemma, french lemma)
    obj: _Person | _NounPhrase | None = None
    recipient: _Person | _NounPhrase | None = None
    preposition: tuple[str, str] | None = None
    place: _NounPhrase | None = None
    adjective: tuple[str, str] | None = None
    tense: str = "present"
    negated: bool = False
    question: bool = False


# -- Sampling meanings ------------------------------------------------------------------------


def _noun_matches(noun: tuple[str, str, str], classes: frozenset[str]) -> bool:
    return noun[2] in classes or noun[0] in classes


def _sample_noun_phrase(rng: random.Random, classes: frozenset[str], with_size_age: bool = True,
                        with_quality: bool = True) -> _NounPhrase:
    noun = rng.choice([n for n in _NOUNS if _noun_matches(n, classes)])
    number = "p" if rng.random() < 0.35 else "s"
    determiner = rng.choices(["the", "a", "this", "possessive"], weights=[40, 20, 15, 25])[0]
    if determiner == "a" and number == "p":
        determiner = "the"  # English has no plural "a"; "des" would need a bare English plural
    owner = rng.choice(_PERSONS) if determiner == "possessive" else None
    size_age = [a for a in _SIZE_AGE_ADJECTIVES if noun[2] in a[2]] if with_size_age else []
    quality = [a for a in _QUALITY_ADJECTIVES if noun[2] in a[2]] if with_quality else []
    how_many = rng.choices([0, 1, 2], weights=[45, 40, 15])[0]
    adjectives: list[tuple[str, str, frozenset[str]]] = []
    if how_many == 2 and size_age and quality:
        adjectives = [rng.choice(size_age), rng.choice(quality)]
    elif how_many >= 1 and (size_age or quality):
        adjectives = [rng.choice(size_age + quality)]
    return _NounPhrase(noun, number, determiner, owner, tuple(adjectives))


def _sample_person(rng: random.Random, avoid: _Person | _NounPhrase | None = None) -> _Person:
    """A pronoun's person; 1st and 2nd persons never refer back to a subject of the same person."""
    excluded = avoid.pe if isinstance(avoid, _Person) and avoid.pe in (1, 2) else None
    return rng.choice([p for p in _PERSONS if p.pe != excluded])


def _sample_subject(rng: random.Random, classes: frozenset[str]) -> _Person | _NounPhrase:
    if "person" in classes and rng.random() < 0.3:
        return rng.choice(_PERSONS)
    return _sample_noun_phrase(rng, classes)


def _sample_clause(rng: random.Random) -> _Clause:
    kind = rng.choices(["transitive", "ditransitive", "motion", "activity", "copula"],
                       weights=[45, 12, 15, 13, 15])[0]
    tense = rng.choice(["present", "past", "future"])
    mood = rng.choices(["statement", "negation", "question"], weights=[50, 25, 25])[0]
    fields: dict = {"kind": kind, "tense": tense, "negated": mood == "negation", "question": mood == "question"}
    if kind == "transitive":
        en, fr, subject_classes, object_classes = rng.choice(_TRANSITIVE_VERBS)
        subject = _sample_subject(rng, subject_classes)
        if "person" in object_classes and rng.random() < 0.25:
            obj: _Person | _NounPhrase = _sample_person(rng, avoid=subject)
        else:
            obj = _sample_noun_phrase(rng, object_classes)
        fields.update(subject=subject, verb=(en, fr), obj=obj)
        if rng.random() < 0.3:
            prep_en, prep_fr, place_classes = rng.choice([p for p in _PLACE_PREPOSITIONS if p[0] != "with"])
            fields.update(preposition=(prep_en, prep_fr), place=_sample_noun_phrase(rng, place_classes))
    elif kind == "ditransitive":
        subject = _sample_subject(rng, frozenset({"person"}))
        obj = _sample_noun_phrase(rng, frozenset({"food", "object"}))
        if rng.random() < 0.35:
            recipient: _Person | _NounPhrase = _sample_person(rng, avoid=subject)
        else:
            recipient = _sample_noun_phrase(rng, frozenset({"person"}))
        fields.update(subject=subject, verb=rng.choice(_DITRANSITIVE_VERBS), obj=obj, recipient=recipient)
    elif kind == "motion":
        en, fr, prep_en, prep_fr = rng.choice(_MOTION_VERBS)
        fields.update(subject=_sample_subject(rng, frozenset({"person", "animal"})), verb=(en, fr),
                      preposition=(prep_en, prep_fr), place=_sample_noun_phrase(rng, frozenset({"place"})))
    elif kind == "activity":
        en, fr = rng.choice(_ACTIVITY_VERBS)
        fields.update(subject=_sample_subject(rng, frozenset({"person", "animal"})), verb=(en, fr))
        if rng.random() < 0.75:
            prep_en, prep_fr, place_classes = rng.choice(_PLACE_PREPOSITIONS)
            fields.update(preposition=(prep_en, prep_fr), place=_sample_noun_phrase(rng, place_classes))
    else:  # copula: "the car is red" / "la voiture est rouge"
        subject_class = rng.choice(["person", "animal", "food", "object", "large", "place"])
        choices = [a for a in _SIZE_AGE_ADJECTIVES + _QUALITY_ADJECTIVES if subject_class in a[2]]
        en_adj, fr_adj, _ = predicate = rng.choice(choices)
        if subject_class == "person" and rng.random() < 0.4:
            subject: _Person | _NounPhrase = rng.choice(_PERSONS)
        else:  # no "the green car is black": the noun phrase takes adjectives of the other kind only
            size_age = predicate in _SIZE_AGE_ADJECTIVES
            subject = _sample_noun_phrase(rng, frozenset({subject_class}), with_size_age=not size_age,
                                          with_quality=size_age)
        fields.update(subject=subject, verb=("be", "être"), adjective=(en_adj, fr_adj))
    return _Clause(**fields)


# -- Writing a meaning in English and in French with pyrealb ----------------------------------


class _Realizer:
    """Builds pyrealb trees for a :class:`_Clause` in one language ("en" or "fr")."""

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

    def determiner(self, np: _NounPhrase):
        p, lang = self.p, self.lang
        if np.determiner == "possessive":
            owner = np.owner
            if not self.fr:
                return p.D("my", lang).pe(owner.pe).ow(owner.n).g(owner.g)
            # French possessives agree with the thing owned; the owner only picks the stem.
            return p.D("mon" if owner.n == "s" else "notre", lang).pe(owner.pe)
        word = {"the": ("the", "le"), "a": ("a", "un"), "this": ("this", "ce")}[np.determiner]
        return p.D(word[1] if self.fr else word[0], lang)

    def noun_phrase(self, np: _NounPhrase):
        p, lang = self.p, self.lang
        adjectives = [p.A(a[1] if self.fr else a[0], lang) for a in np.adjectives]
        return p.NP(self.determiner(np), *adjectives, self.noun(np.noun), lang=lang).n(np.number)

    def subject(self, subject: _Person | _NounPhrase):
        if isinstance(subject, _NounPhrase):
            return self.noun_phrase(subject)
        return self.p.Pro("je" if self.fr else "I", self.lang).pe(subject.pe).n(subject.n).g(subject.g)

    def pronoun_object(self, person: _Person):
        p, lang = self.p, self.lang
        if not self.fr:
            return p.Pro("me", lang).pe(person.pe).n(person.n).g(person.g)
        # .pro() on an NP makes pyrealb move the clitic before the verb and agree the participle.
        return p.NP(p.Pro("moi", lang).pe(person.pe).n(person.n).g(person.g), lang=lang).pro()

    def complement(self, thing: _Person | _NounPhrase):
        return self.pronoun_object(thing) if isinstance(thing, _Person) else self.noun_phrase(thing)

    def prepositional_phrase(self, preposition: tuple[str, str], np: _NounPhrase):
        p, lang = self.p, self.lang
        if not self.fr:
            return p.PP(p.P(preposition[0], lang), self.noun_phrase(np), lang=lang)
        if preposition[1] == "près de":  # a two-word preposition: "près" + "de" (-> "près du parc")
            return p.PP(p.P("près", lang), p.PP(p.P("de", lang), self.noun_phrase(np), lang=lang), lang=lang)
        return p.PP(p.P(preposition[1], lang), self.noun_phrase(np), lang=lang)

    def recipient(self, recipient: _Person | _NounPhrase):
        p, lang = self.p, self.lang
        if not self.fr:
            return p.PP(p.P("to", lang), self.complement(recipient), lang=lang)
        if isinstance(recipient, _Person):  # "à elle" -> "lui", placed before the verb by pyrealb
            person = recipient
            inner = p.NP(p.Pro("moi", lang).pe(person.pe).n(person.n).g(person.g), lang=lang)
            return p.PP(p.P("à", lang), inner, lang=lang).pro()
        return p.PP(p.P("à", lang), self.noun_phrase(recipient), lang=lang)

    def clause(self, clause: _Clause):
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
            parts.append(self.prepositional_phrase(clause.preposition, clause.place))
        english_tense, french_tense = _TENSES[clause.tense]
        if self.fr and clause.kind == "copula" and clause.tense == "past":
            french_tense = "i"  # "la voiture était rouge": a state in the past is imperfect
        sentence_parts = [self.subject(clause.subject), p.VP(verb, *parts, lang=lang)]
        if self.fr and clause.question:
            sentence_parts = [p.Q("est-ce", lang), p.C("que", lang)] + sentence_parts
        sentence = p.S(*sentence_parts, lang=lang).t(french_tense if self.fr else english_tense)
        if clause.negated:
            sentence = sentence.typ({"neg": True})
        if clause.question:
            if self.fr:  # "est-ce que" + statement: French questions without inversion
                sentence = sentence.a("?", True)
            else:
                sentence = sentence.typ({"int": "yon"})
        return sentence

    def realize(self, clause: _Clause) -> str:
        text = self.clause(clause).realize()
        if "[[" in text:  # pyrealb marks words missing from its lexicon with [[...]]
            raise RuntimeError(f"pyrealb could not realize {clause}: {text!r}")
        return _normalise(text)


def _realize_all(clauses: Sequence[_Clause], lang: str) -> list[str]:
    import pyrealb

    previous = pyrealb.getLanguage()
    pyrealb.load(lang)
    try:
        realizer = _Realizer(lang)
        return [realizer.realize(clause) for clause in clauses]
    finally:
        pyrealb.load(previous)


def english_french_corpus(seed: int = 0, num_pairs: int = 8000) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """A synthetic English–French corpus, split 80/10/10 into train, validation and test.

    Random meanings are drawn with ``random.Random(seed)`` from a small grammar (pronouns of all
    persons, determiners and possessives, adjectives before and after the French noun, present,
    past and future, negation, yes/no questions, prepositional phrases, pronoun objects) and
    written in both languages by pyrealb. Each English sentence has exactly one French
    translation: "you" is always "vous", "they" always "ils", "I" and "we" are masculine.
    Generation takes a few seconds; it is cached per (seed, num_pairs) and every call returns
    fresh lists, so changing them does not change the next call's result.

    Args:
        seed: seed of the random grammar.
        num_pairs: number of distinct pairs in all (at least 10).
    Returns:
        (train, validation, test): lists of (english, french) strings in the normal form of
        :func:`preprocess_nmt` (lower case, tokens separated by single spaces); no pair and no
        English sentence is in two splits.
    Raises:
        ValueError: if num_pairs < 10, or the grammar cannot produce that many distinct pairs.
    """
    if num_pairs < 10:
        raise ValueError(f"num_pairs must be >= 10, got {num_pairs}")
    return tuple(list(split) for split in _generate_corpus(seed, num_pairs))


@functools.lru_cache(maxsize=8)
def _generate_corpus(seed: int, num_pairs: int) -> tuple[tuple[Pair, ...], tuple[Pair, ...], tuple[Pair, ...]]:
    rng = random.Random(seed)
    seen_clauses: set[_Clause] = set()
    pairs: list[Pair] = []
    seen_pairs: set[Pair] = set()
    for _ in range(20):  # rounds: two meanings rarely give the same pair, so one round is the rule
        clauses = []
        for _ in range(20 * num_pairs):
            if len(clauses) == num_pairs - len(pairs):
                break
            clause = _sample_clause(rng)
            if clause not in seen_clauses:
                seen_clauses.add(clause)
                clauses.append(clause)
        if not clauses:
            break
        for pair in zip(_realize_all(clauses, "en"), _realize_all(clauses, "fr")):
            if pair not in seen_pairs:
                seen_pairs.add(pair)
                pairs.append(pair)
        if len(pairs) == num_pairs:
            break
    if len(pairs) < num_pairs:
        raise ValueError(f"the grammar gave only {len(pairs)} distinct pairs, fewer than num_pairs={num_pairs}")
    # Sampling order is already random; cutting it keeps the split a function of the seed.
    num_train, num_val = int(0.8 * num_pairs), int(0.1 * num_pairs)
    return tuple(pairs[:num_train]), tuple(pairs[num_train:num_train + num_val]), tuple(pairs[num_train + num_val:])


# -- The meaning behind each sentence, as labels (chapter "Pretraining an encoder: BERT") ------


@functools.lru_cache(maxsize=4)
def english_sentence_labels(
    seed: int = 0, num_pairs: int = 8000
) -> tuple[tuple[tuple[str, str, str], ...], ...]:
    """Tense and mood of every English sentence of ``english_french_corpus(seed, num_pairs)``.

    The corpus keeps only the sentences, not the meanings drawn to write them. This replays the
    same stream of meanings (``random.Random(seed)``, the same grammar) and writes each in English
    until every pair of the corpus is found; a pair's labels are those of the first meaning that
    wrote it, as the corpus keeps the first. An English sentence that two pairs share ("i read
    the book": present or past) is told apart by writing its meanings in French too.

    Args:
        seed, num_pairs: as in :func:`english_french_corpus`.
    Returns:
        (train, validation, test), aligned with that corpus' splits: tuples of
        ``(english, tense, mood)`` with tense in {"present", "past", "future"} and mood in
        {"statement", "negation", "question"}.
    Raises:
        ValueError: as :func:`english_french_corpus`.
    """
    splits = english_french_corpus(seed, num_pairs)
    counts = collections.Counter(
        english for split in splits for english, _ in split
    )
    # A sentence no other pair shares is its own key; a shared one is keyed with its French.
    wanted = {
        english if counts[english] == 1 else (english, french)
        for split in splits
        for english, french in split
    }
    rng, labels, seen = random.Random(seed), {}, set()
    while not wanted <= labels.keys():
        clauses = []
        for _ in range(20_000):
            if len(clauses) == 1000:
                break
            clause = _sample_clause(rng)
            if clause not in seen:
                seen.add(clause)
                clauses.append(clause)
        if not clauses:  # cannot happen for pairs the same stream wrote; guards against a hang
            raise RuntimeError(
                f"the meanings of seed={seed} ran out before every pair was found"
            )
        english = _realize_all(clauses, "en")
        shared = [
            i for i, sentence in enumerate(english) if counts[sentence] > 1
        ]
        french = dict(
            zip(shared, _realize_all([clauses[i] for i in shared], "fr"))
        )
        for i, (clause, sentence) in enumerate(zip(clauses, english)):
            key = (sentence, french[i]) if i in french else sentence
            if key in wanted and key not in labels:
                mood = (
                    "negation"
                    if clause.negated
                    else "question"
                    if clause.question
                    else "statement"
                )
                labels[key] = (clause.tense, mood)
    return tuple(
        tuple(
            (
                english,
                *labels[
                    english if counts[english] == 1 else (english, french)
                ],
            )
            for english, french in split
        )
        for split in splits
    )


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
        stats[f"{side}_types"] = len({token for sentence in tokens for token in sentence})
    for side, tokens in (("src", src_tokens), ("tgt", tgt_tokens)):
        lengths = [len(sentence) for sentence in tokens]
        stats[f"{side}_min_len"] = min(lengths)
        stats[f"{side}_max_len"] = max(lengths)
        stats[f"{side}_mean_len"] = round(sum(lengths) / len(lengths), 2)
    return stats


# ---------------------------------------------------------------------------------------------
# The real data: Tatoeba pairs as packaged by manythings.org and d2l
# ---------------------------------------------------------------------------------------------

FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"


def load_tatoeba(path: str | os.PathLike, max_examples: int | None = None) -> list[Pair]:
    """Read tab-separated sentence pairs (English, a tab, French, optionally a tab and an attribution).

    Args:
        path: a UTF-8 text file in the Tatoeba/manythings format, e.g. d2l's ``fra-eng/fra.txt``.
        max_examples: keep only the first that many pairs (all if None).
    Returns:
        (english, french) pairs in the normal form of :func:`preprocess_nmt` (single spaces, no
        spaces at the ends). Blank lines are skipped.
    Raises:
        ValueError: if max_examples is negative or a non-blank line has no tab.
    """
    if max_examples is not None and max_examples < 0:
        raise ValueError(f"max_examples must be None or >= 0, got {max_examples}")
    pairs: list[Pair] = []
    with open(path, encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if max_examples is not None and len(pairs) >= max_examples:
                break
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise ValueError(f"{path}, line {line_number}: expected 'english<TAB>french', got {line!r}")
            pairs.append((_normalise(fields[0]), _normalise(fields[1])))
    return pairs


def _sha1(path: pathlib.Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomically(target: pathlib.Path, chunks: Iterable[bytes], sha1: str | None = None) -> None:
    """Write chunks to a temporary file next to target, check its sha1, then rename it into place.

    The rename is atomic on one file system, so target is either absent, the old file or the
    complete new one; the temporary file is removed after any failure.
    """
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        digest = hashlib.sha1()
        with os.fdopen(descriptor, "wb") as file:
            for chunk in chunks:
                digest.update(chunk)
                file.write(chunk)
        if sha1 is not None and digest.hexdigest() != sha1:
            raise ValueError(f"sha1 of the download for {target.name} is {digest.hexdigest()}, expected sha1={sha1}")
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _checked_chunks(response) -> Iterable[bytes]:
    """The body of an HTTP response in blocks, refusing one shorter than its Content-Length."""
    expected = response.headers.get("Content-Length")
    received = 0
    for chunk in iter(lambda: response.read(1 << 20), b""):
        received += len(chunk)
        yield chunk
    if expected is not None and received != int(expected):
        raise urllib.error.ContentTooShortError(f"download cut short: {received} of {expected} bytes", None)


def download_fra_eng(cache_dir: str | os.PathLike, url: str = FRA_ENG_URL, sha1: str = FRA_ENG_SHA1,
                     timeout: float = 30) -> pathlib.Path:
    """Download (once) and extract d2l's English–French zip; return the path of ``fra-eng/fra.txt``.

    A zip already in cache_dir whose sha1 matches is used without touching the network. Files are
    written to a temporary file in cache_dir and renamed into place, so no partial file is left
    behind by a failed or interrupted download.

    Args:
        cache_dir: folder for the zip and the extracted text (created if missing).
        url: where to download the zip from (an ``http(s)://`` or ``file://`` URL).
        sha1: expected SHA-1 hex digest of the zip.
        timeout: seconds to wait for the server.
    Returns:
        Path of the extracted ``<cache_dir>/fra-eng/fra.txt``.
    Raises:
        ValueError: if the downloaded file's sha1 differs from sha1 (nothing is kept).
        urllib.error.URLError, OSError: if the download fails or is cut short (nothing is kept).
        KeyError: if the zip holds no ``fra-eng/fra.txt``.
    """
    cache_dir = pathlib.Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    zip_path = cache_dir / (pathlib.PurePosixPath(urllib.parse.urlparse(url).path).name or "fra-eng.zip")
    text_path = cache_dir / "fra-eng" / "fra.txt"
    if zip_path.is_file() and _sha1(zip_path) == sha1:
        if text_path.is_file():
            return text_path
    else:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            _write_atomically(zip_path, _checked_chunks(response), sha1=sha1)
    text_path.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(zip_path) as archive, archive.open("fra-eng/fra.txt") as member:
        _write_atomically(text_path, iter(lambda: member.read(1 << 20), b""))
    return text_path


# ---------------------------------------------------------------------------------------------
# Vocabulary, arrays and batches
# ---------------------------------------------------------------------------------------------

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
        TypeError: if tokens is not a list or tuple.
    """

    def __init__(self, tokens: Sequence[str] | Sequence[Sequence[str]] = (), min_freq: int = 0,
                 reserved_tokens: Sequence[str] | None = None):
        if not isinstance(tokens, (list, tuple)):
            raise TypeError(f"tokens must be a list of token lists or of tokens, got {type(tokens).__name__}")
        if tokens and isinstance(tokens[0], (list, tuple)):
            tokens = [token for sentence in tokens for token in sentence]
        self.token_freqs = sorted(collections.Counter(tokens).items(), key=lambda item: (-item[1], item[0]))
        specials = list(RESERVED_TOKENS)
        for token in reserved_tokens or ():
            if token not in specials:
                specials.append(token)
        self.idx_to_token = specials + [t for t, freq in self.token_freqs if freq >= min_freq and t not in specials]
        self.token_to_idx = {token: idx for idx, token in enumerate(self.idx_to_token)}

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Index of a token (``unk`` if unknown), or the list of indices of a list/tuple of tokens."""
        if isinstance(tokens, (list, tuple)):
            return [self.token_to_idx.get(token, self.unk) for token in tokens]
        return self.token_to_idx.get(tokens, self.unk)

    def to_tokens(self, indices: int | Sequence[int] | torch.Tensor) -> str | list[str]:
        """Token of an index, or the list of tokens of a list / 1-D tensor of indices.

        Raises:
            IndexError: if an index is outside [0, len(self)).
        """
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        if isinstance(indices, (list, tuple)):
            return [self.idx_to_token[int(index)] for index in indices]
        return self.idx_to_token[int(indices)]

    @property
    def pad(self) -> int:
        return 0

    @property
    def bos(self) -> int:
        return 1

    @property
    def eos(self) -> int:
        return 2

    @property
    def unk(self) -> int:
        return 3


def truncate_pad(ids: Sequence[int], num_steps: int, pad: int) -> list[int]:
    """Cut ids to num_steps, or pad them to num_steps with pad.

    Args:
        ids: token indices. num_steps: T, the length wanted. pad: the padding index.
    Returns:
        A list of exactly num_steps indices.
    Raises:
        ValueError: if num_steps is negative.
    """
    if num_steps < 0:
        raise ValueError(f"num_steps must be >= 0, got {num_steps}")
    ids = list(ids[:num_steps])
    return ids + [pad] * (num_steps - len(ids))


def source_array(sentences: Sequence[str], src_vocab: Vocab, num_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's input for source sentences: ids + ``<eos>``, cut or padded to num_steps.

    Args:
        sentences: N source strings in normal form. src_vocab: the source vocabulary.
        num_steps: T.
    Returns:
        (src, src_valid_len): src (N, T) long; src_valid_len (N,) long, the number of non-pad
        positions of each row. On the CPU.
    Raises:
        ValueError: if num_steps < 1.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    rows = [truncate_pad(src_vocab[tokenize(s)] + [src_vocab.eos], num_steps, src_vocab.pad) for s in sentences]
    src = torch.tensor(rows, dtype=torch.long).reshape(len(rows), num_steps)
    return src, (src != src_vocab.pad).sum(dim=1)


def build_arrays(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab, num_steps: int
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
    src, src_valid_len = source_array([src for src, _ in pairs], src_vocab, num_steps)
    tgt_tokens = [tokenize(tgt) for _, tgt in pairs]
    tgt_in = [truncate_pad([tgt_vocab.bos] + tgt_vocab[t], num_steps, tgt_vocab.pad) for t in tgt_tokens]
    tgt_out = [truncate_pad(tgt_vocab[t] + [tgt_vocab.eos], num_steps, tgt_vocab.pad) for t in tgt_tokens]
    return (src, src_valid_len, torch.tensor(tgt_in, dtype=torch.long).reshape(len(pairs), num_steps),
            torch.tensor(tgt_out, dtype=torch.long).reshape(len(pairs), num_steps))


class TranslationLoaders(NamedTuple):
    """Train/validation/test DataLoaders and the two vocabularies they were built with."""

    train: DataLoader
    val: DataLoader
    test: DataLoader
    src_vocab: Vocab
    tgt_vocab: Vocab


def _batch_to_device(batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    return tuple(tensor.to(device) for tensor in batch)


def translation_dataloaders(splits: Sequence[Sequence[Pair]], batch_size: int, num_steps: int,
                            min_freq: int = 1, device: torch.device | str | None = None,
                            seed: int = 0) -> TranslationLoaders:
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
        ValueError: if splits does not hold 3 lists, the training split is empty, or
            batch_size / num_steps < 1.
    """
    if len(splits) != 3:
        raise ValueError(f"splits must be (train, validation, test), got {len(splits)} items")
    if len(splits[0]) == 0:
        raise ValueError("splits[0] (the training split) must not be empty")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    device = torch.device("cpu") if device is None else torch.device(device)
    src_tokens, tgt_tokens = tokenize_pairs(splits[0])
    src_vocab, tgt_vocab = Vocab(src_tokens, min_freq=min_freq), Vocab(tgt_tokens, min_freq=min_freq)
    to_device = functools.partial(_batch_to_device, device=device)
    loaders = []
    for i, pairs in enumerate(splits):
        dataset = TensorDataset(*build_arrays(pairs, src_vocab, tgt_vocab, num_steps))
        # Whole batches are indexed at once (dataset[list of indices]): much faster than stacking
        # B single examples, and batch_size=None tells the DataLoader the sampler already batches.
        if i == 0:
            order = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
        else:
            order = SequentialSampler(dataset)
        loaders.append(DataLoader(dataset, sampler=BatchSampler(order, batch_size, drop_last=False),
                                  batch_size=None, collate_fn=to_device))
    return TranslationLoaders(*loaders, src_vocab, tgt_vocab)
