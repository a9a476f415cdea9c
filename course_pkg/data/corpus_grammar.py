"""The grammar of the generated corpus: its words, its meanings, and how a
meaning is drawn.

Chapter "The encoder–decoder architecture" (the corpus every chapter trains
on). The word tables pair each English word with its French translation and
the classes of nouns it goes with; a :class:`Clause` is the meaning of a
sentence independent of its language; :func:`sample_clause` draws one at
random. :mod:`course_pkg.data.corpus` writes clauses in English and French.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Each noun: (english, french, semantic class). Classes decide which verbs, prepositions and
# adjectives may go with a noun, so that sentences stay plausible. Genders come from pyrealb.
NOUNS: tuple[tuple[str, str, str], ...] = (
    ("man", "homme", "person"),
    ("woman", "femme", "person"),
    ("boy", "garçon", "person"),
    ("girl", "fille", "person"),
    ("child", "enfant", "person"),
    ("friend", "ami", "person"),
    ("teacher", "professeur", "person"),
    ("doctor", "médecin", "person"),
    ("cat", "chat", "animal"),
    ("dog", "chien", "animal"),
    ("horse", "cheval", "animal"),
    ("bird", "oiseau", "animal"),
    ("mouse", "souris", "animal"),
    ("apple", "pomme", "food"),
    ("cake", "gâteau", "food"),
    ("banana", "banane", "food"),
    ("orange", "orange", "food"),
    ("book", "livre", "object"),
    ("letter", "lettre", "object"),
    ("key", "clé", "object"),
    ("bag", "sac", "object"),
    ("box", "boîte", "object"),
    ("ball", "balle", "object"),
    ("hat", "chapeau", "object"),
    ("cup", "tasse", "object"),
    ("newspaper", "journal", "object"),
    ("car", "voiture", "large"),
    ("table", "table", "large"),
    ("tree", "arbre", "large"),
    ("bed", "lit", "large"),
    ("window", "fenêtre", "large"),
    ("garden", "jardin", "place"),
    ("park", "parc", "place"),
    ("school", "école", "place"),
    ("station", "gare", "place"),
    ("market", "marché", "place"),
    ("house", "maison", "place"),
    ("kitchen", "cuisine", "place"),
    ("hotel", "hôtel", "place"),
    ("room", "chambre", "place"),
)

# Adjectives: (english, french, classes of nouns they describe). Whether French puts one before
# or after the noun is pyrealb's business (its lexicon marks "petit", "vieux", ... as preposed).
# English puts size/age before colour or state, so an NP takes at most one adjective of each list.
SIZE_AGE_ADJECTIVES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("small", "petit", frozenset({"animal", "object", "large", "place"})),
    ("big", "grand", frozenset({"animal", "object", "large", "place"})),
    (
        "old",
        "vieux",
        frozenset({"person", "animal", "object", "large", "place"}),
    ),
    ("young", "jeune", frozenset({"person", "animal"})),
    ("new", "nouveau", frozenset({"object", "large", "place"})),
)
QUALITY_ADJECTIVES: tuple[tuple[str, str, frozenset[str]], ...] = (
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
TRANSITIVE_VERBS: tuple[
    tuple[str, str, frozenset[str], frozenset[str]], ...
] = (
    (
        "see",
        "voir",
        frozenset({"person", "animal"}),
        frozenset({"person", "animal", "food", "object", "large", "place"}),
    ),
    (
        "like",
        "aimer",
        frozenset({"person", "animal"}),
        frozenset({"animal", "food", "object", "place"}),
    ),
    (
        "watch",
        "regarder",
        frozenset({"person", "animal"}),
        frozenset({"person", "animal", "object", "large"}),
    ),
    (
        "find",
        "trouver",
        frozenset({"person", "animal"}),
        frozenset({"person", "animal", "food", "object"}),
    ),
    ("meet", "rencontrer", frozenset({"person"}), frozenset({"person"})),
    (
        "carry",
        "porter",
        frozenset({"person", "animal"}),
        frozenset({"animal", "food", "object"}),
    ),
    ("eat", "manger", frozenset({"person", "animal"}), frozenset({"food"})),
    ("take", "prendre", frozenset({"person"}), frozenset({"food", "object"})),
    (
        "read",
        "lire",
        frozenset({"person"}),
        frozenset({"book", "letter", "newspaper"}),
    ),
)

DITRANSITIVE_VERBS: tuple[tuple[str, str], ...] = (("give", "donner"),)
# Motion verbs take "être" in the passé composé, so their participle agrees with the subject.
MOTION_VERBS: tuple[tuple[str, str, str, str], ...] = (
    ("go", "aller", "to", "à"),
    ("come", "venir", "from", "de"),
)
ACTIVITY_VERBS: tuple[tuple[str, str], ...] = (
    ("sleep", "dormir"),
    ("play", "jouer"),
)

# Prepositions of place: (english, french, classes or single nouns they take).
PLACE_PREPOSITIONS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("in", "dans", frozenset({"place"})),
    ("near", "près de", frozenset({"place", "large"})),
    ("behind", "derrière", frozenset({"place", "large"})),
    ("under", "sous", frozenset({"table", "bed", "car", "tree"})),
    ("on", "sur", frozenset({"table", "bed", "car"})),
    ("with", "avec", frozenset({"person", "animal"})),
)

TENSES = {"present": ("p", "p"), "past": ("ps", "pc"), "future": ("f", "f")}


@dataclass(frozen=True)
class Person:
    """A grammatical person: 1-3, number "s"/"p", gender "m"/"f".

    English "you" is realized as French "vous" (person 2, plural) everywhere, and "they" as "ils",
    so that every English sentence has exactly one French translation.
    """

    pe: int
    n: str
    g: str = "m"


# I, you, he, she, we, they.
PERSONS = (
    Person(1, "s"),
    Person(2, "p"),
    Person(3, "s", "m"),
    Person(3, "s", "f"),
    Person(1, "p"),
    Person(3, "p"),
)


@dataclass(frozen=True)
class NounPhrase:
    """The meaning of a noun phrase: "my small red cars" / "mes petites voitures rouges"."""

    noun: tuple[str, str, str]
    number: str  # "s" or "p"
    determiner: str  # "the", "a", "this" or "possessive"
    owner: Person | None  # for possessive determiners
    adjectives: tuple[
        tuple[str, str, frozenset[str]], ...
    ]  # size/age first, then quality


@dataclass(frozen=True)
class Clause:
    """The meaning of a sentence, independent of the language it is written in."""

    kind: str  # transitive, ditransitive, motion, activity, copula
    subject: Person | NounPhrase
    verb: tuple[str, str]  # (english lemma, french lemma)
    obj: Person | NounPhrase | None = None
    recipient: Person | NounPhrase | None = None
    preposition: tuple[str, str] | None = None
    place: NounPhrase | None = None
    adjective: tuple[str, str] | None = None
    tense: str = "present"
    negated: bool = False
    question: bool = False


# -- Sampling meanings ------------------------------------------------------------------------


def _noun_matches(noun: tuple[str, str, str], classes: frozenset[str]) -> bool:
    return noun[2] in classes or noun[0] in classes


def _sample_noun_phrase(
    rng: random.Random,
    classes: frozenset[str],
    with_size_age: bool = True,
    with_quality: bool = True,
) -> NounPhrase:
    noun = rng.choice([n for n in NOUNS if _noun_matches(n, classes)])
    number = "p" if rng.random() < 0.35 else "s"
    determiner = rng.choices(
        ["the", "a", "this", "possessive"], weights=[40, 20, 15, 25]
    )[0]
    if determiner == "a" and number == "p":
        determiner = "the"  # English has no plural "a"; "des" would need a bare English plural
    owner = rng.choice(PERSONS) if determiner == "possessive" else None
    size_age = (
        [a for a in SIZE_AGE_ADJECTIVES if noun[2] in a[2]]
        if with_size_age
        else []
    )
    quality = (
        [a for a in QUALITY_ADJECTIVES if noun[2] in a[2]]
        if with_quality
        else []
    )
    how_many = rng.choices([0, 1, 2], weights=[45, 40, 15])[0]
    adjectives: list[tuple[str, str, frozenset[str]]] = []
    if how_many == 2 and size_age and quality:
        adjectives = [rng.choice(size_age), rng.choice(quality)]
    elif how_many >= 1 and (size_age or quality):
        adjectives = [rng.choice(size_age + quality)]
    return NounPhrase(noun, number, determiner, owner, tuple(adjectives))


def _sample_person(
    rng: random.Random, avoid: Person | NounPhrase | None = None
) -> Person:
    """A pronoun's person; 1st and 2nd persons never refer back to a subject of the same person."""
    excluded = (
        avoid.pe if isinstance(avoid, Person) and avoid.pe in (1, 2) else None
    )
    return rng.choice([p for p in PERSONS if p.pe != excluded])


def _sample_subject(
    rng: random.Random, classes: frozenset[str]
) -> Person | NounPhrase:
    if "person" in classes and rng.random() < 0.3:
        return rng.choice(PERSONS)
    return _sample_noun_phrase(rng, classes)


def sample_clause(rng: random.Random) -> Clause:
    """Draw the meaning of one sentence: its kind, tense, mood and words.

    Args:
        rng: the source of randomness (the corpus's seeded generator).
    Returns:
        A :class:`Clause`.
    """
    kind = rng.choices(
        ["transitive", "ditransitive", "motion", "activity", "copula"],
        weights=[45, 12, 15, 13, 15],
    )[0]
    tense = rng.choice(["present", "past", "future"])
    mood = rng.choices(
        ["statement", "negation", "question"], weights=[50, 25, 25]
    )[0]
    fields: dict = {
        "kind": kind,
        "tense": tense,
        "negated": mood == "negation",
        "question": mood == "question",
    }
    if kind == "transitive":
        en, fr, subject_classes, object_classes = rng.choice(TRANSITIVE_VERBS)
        subject = _sample_subject(rng, subject_classes)
        if "person" in object_classes and rng.random() < 0.25:
            obj: Person | NounPhrase = _sample_person(rng, avoid=subject)
        else:
            obj = _sample_noun_phrase(rng, object_classes)
        fields.update(subject=subject, verb=(en, fr), obj=obj)
        if rng.random() < 0.3:
            prep_en, prep_fr, place_classes = rng.choice(
                [p for p in PLACE_PREPOSITIONS if p[0] != "with"]
            )
            fields.update(
                preposition=(prep_en, prep_fr),
                place=_sample_noun_phrase(rng, place_classes),
            )
    elif kind == "ditransitive":
        subject = _sample_subject(rng, frozenset({"person"}))
        obj = _sample_noun_phrase(rng, frozenset({"food", "object"}))
        if rng.random() < 0.35:
            recipient: Person | NounPhrase = _sample_person(rng, avoid=subject)
        else:
            recipient = _sample_noun_phrase(rng, frozenset({"person"}))
        fields.update(
            subject=subject,
            verb=rng.choice(DITRANSITIVE_VERBS),
            obj=obj,
            recipient=recipient,
        )
    elif kind == "motion":
        en, fr, prep_en, prep_fr = rng.choice(MOTION_VERBS)
        fields.update(
            subject=_sample_subject(rng, frozenset({"person", "animal"})),
            verb=(en, fr),
            preposition=(prep_en, prep_fr),
            place=_sample_noun_phrase(rng, frozenset({"place"})),
        )
    elif kind == "activity":
        en, fr = rng.choice(ACTIVITY_VERBS)
        fields.update(
            subject=_sample_subject(rng, frozenset({"person", "animal"})),
            verb=(en, fr),
        )
        if rng.random() < 0.75:
            prep_en, prep_fr, place_classes = rng.choice(PLACE_PREPOSITIONS)
            fields.update(
                preposition=(prep_en, prep_fr),
                place=_sample_noun_phrase(rng, place_classes),
            )
    else:  # copula: "the car is red" / "la voiture est rouge"
        subject_class = rng.choice(
            ["person", "animal", "food", "object", "large", "place"]
        )
        choices = [
            a
            for a in SIZE_AGE_ADJECTIVES + QUALITY_ADJECTIVES
            if subject_class in a[2]
        ]
        en_adj, fr_adj, _ = predicate = rng.choice(choices)
        if subject_class == "person" and rng.random() < 0.4:
            subject: Person | NounPhrase = rng.choice(PERSONS)
        else:  # no "the green car is black": the noun phrase takes adjectives of the other kind only
            size_age = predicate in SIZE_AGE_ADJECTIVES
            subject = _sample_noun_phrase(
                rng,
                frozenset({subject_class}),
                with_size_age=not size_age,
                with_quality=size_age,
            )
        fields.update(
            subject=subject, verb=("be", "être"), adjective=(en_adj, fr_adj)
        )
    return Clause(**fields)
