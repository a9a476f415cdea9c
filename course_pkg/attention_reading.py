"""Where a trained decoder looks: attention statistics over a whole test set.

Chapters "Bahdanau attention" and "The Transformer". A heatmap of one sentence
illustrates attention; a claim about it ("the weights follow the words, across
French's reordering") needs a count over many sentences. French writes the
colour and state adjectives of the course's corpus (*rouge, vert, noir, blanc,
content, fatigué*) after the noun, English before it, so every such noun phrase
is a reordering whose attention can be checked.

Letters: N sentences, S output positions, T source positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

# English adjective -> the start of every French form of it (agreement changes
# the ending only: noir, noire, noirs, noires; fatigué, fatiguée, ...).
POSTPOSED_ADJECTIVES: dict[str, str] = {
    "red": "roug",
    "green": "vert",
    "black": "noir",
    "white": "blanc",
    "happy": "content",
    "tired": "fatigu",
}


class AdjectiveReading(NamedTuple):
    """Counts over the post-posed adjectives a model wrote correctly.

    ``rows``: adjective tokens considered (the model wrote a form of a
    post-posed adjective that is in the reference, for an English adjective
    that is in the source). ``on_adjective``: share of those rows whose largest
    weight is on the English adjective. ``chance``: the same share if the row
    picked a uniformly random source position. ``reorders``: the subset of rows
    whose previous output token (the French noun) also exists.
    ``reorder_followed``: share of ``reorders`` where the noun's row points at
    the English word right after the adjective (the English noun) *and* the
    adjective's row at the adjective: the attention reorders with the words.
    ``reorder_chance``: that share for two uniformly random rows.
    """

    rows: int
    on_adjective: float
    chance: float
    reorders: int
    reorder_followed: float
    reorder_chance: float


def _english_adjective(french_word: str) -> str | None:
    for english, stem in POSTPOSED_ADJECTIVES.items():
        if french_word.startswith(stem):
            return english
    return None


def adjective_attention(
    sources: Sequence[Sequence[str]],
    outputs: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    weights: torch.Tensor,
) -> AdjectiveReading:
    """Count how often attention on a post-posed adjective finds its source.

    Args:
        sources: N source token lists as the model read them (``<eos>``
            included), so that position i of a list is column i of weights.
        outputs: N output token lists (cut at ``<eos>``); token s was produced
            from row s of weights.
        references: N reference token lists.
        weights: (N, S, T) attention weights, S >= every output length and
            T >= every source length; only the argmax of each row is used.
    Returns:
        An :class:`AdjectiveReading`.
    Raises:
        TypeError: if weights is not a tensor or a sentence is a string.
        ValueError: if the lengths disagree or weights is not (N, S, T) large
            enough, or no adjective row was found (nothing to measure).
    """
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a tensor, got {type(weights)}")
    for name, lists in (
        ("sources", sources),
        ("outputs", outputs),
        ("references", references),
    ):
        if any(isinstance(tokens, str) for tokens in lists):
            raise TypeError(f"{name} must hold token lists, not strings")
    if not len(sources) == len(outputs) == len(references):
        raise ValueError(
            "sources, outputs and references must have the same length, "
            f"got {len(sources)}, {len(outputs)}, {len(references)}"
        )
    if weights.dim() != 3 or weights.shape[0] != len(sources):
        raise ValueError(
            f"weights must be (N={len(sources)}, S, T), got "
            f"{tuple(weights.shape)}"
        )
    longest_out = max((len(o) for o in outputs), default=0)
    longest_src = max((len(s) for s in sources), default=0)
    if weights.shape[1] < longest_out or weights.shape[2] < longest_src:
        raise ValueError(
            f"weights (N, S, T) = {tuple(weights.shape)} is smaller than the "
            f"longest output ({longest_out}) or source ({longest_src})"
        )
    argmax = weights.argmax(dim=-1).tolist()  # (N, S)
    rows = hits = reorders = followed = 0
    chance = reorder_chance = 0.0
    for source, output, reference, looked in zip(
        sources, outputs, references, argmax
    ):
        source, reference = list(source), set(reference)
        for s, word in enumerate(output):
            adjective = _english_adjective(word)
            if adjective not in source or word not in reference:
                continue
            positions = [i for i, w in enumerate(source) if w == adjective]
            rows += 1
            hits += looked[s] in positions
            chance += len(positions) / len(source)
            if s == 0:
                continue
            reorders += 1
            followed += any(
                looked[s] == p and looked[s - 1] == p + 1 for p in positions
            )
            reorder_chance += len(positions) / len(source) ** 2
    if rows == 0:
        raise ValueError("no correctly written post-posed adjective found")
    return AdjectiveReading(
        rows=rows,
        on_adjective=hits / rows,
        chance=chance / rows,
        reorders=reorders,
        reorder_followed=followed / max(reorders, 1),
        reorder_chance=reorder_chance / max(reorders, 1),
    )
