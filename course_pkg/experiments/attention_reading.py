"""Where a trained decoder looks: attention statistics over a whole test set.

Chapters "Bahdanau attention" and "The Transformer". A heatmap of one sentence
illustrates attention; a claim about it ("the weights follow the words, across
French's reordering") needs a count over many sentences. French writes the
colour and state adjectives of the course's corpus (*rouge, vert, noir, blanc,
content, fatigué*) after the noun, English before it, so every such noun phrase
is a reordering whose attention can be checked.

Section "Attention is not explanation" of the Bahdanau chapter: the weights
are one reading of what the decoder uses; :func:`seq2seq_attribution` gives
another (gradient × input, :func:`gradient_x_input`), and
:func:`compare_rankings` counts how often the two agree.

Letters: N sentences, S output positions, T source positions, E embedding
width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from course_pkg.checks import (
    check_float_tensor,
    check_floats,
    check_same_device,
    check_same_float_dtype,
    check_source_target,
    check_token_ids,
)

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
        TypeError, ValueError: if the lists or weights do not fit (above);
            ValueError if no adjective row was found (nothing to measure).
    """
    _check_reading(sources, outputs, references, weights)
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


# ------------------------------------------------- attention vs. attribution


def gradient_x_input(
    embeddings: torch.Tensor, objectives: torch.Tensor
) -> torch.Tensor:
    """Gradient × input attribution of each objective to each input position.

    For objective o and position t: sum over e of (d o / d x_{t,e}) x_{t,e}.
    For a model linear in its inputs this is exactly the contribution of x_t
    to o (the sum over t of the attributions is o minus the bias).

    Args:
        embeddings: (B, T, E) input vectors, part of the graph of
            ``objectives`` (a leaf, or a non-leaf on which the graph was
            built).
        objectives: (B, S) scalars; row b must depend on row b of
            embeddings only (rows are independent, as in a model in eval
            mode).
    Returns:
        (B, S, T) signed attributions, detached.
    Raises:
        TypeError: if either is not a tensor. ValueError: if the shapes
            do not fit (above) or embeddings does not require grad.
    """
    _check_attribution(embeddings, objectives)
    columns = []
    for s in range(objectives.shape[1]):
        # Rows are independent, so one backward of the column's sum gives
        # every row's gradient.
        (grad,) = torch.autograd.grad(
            objectives[:, s].sum(), embeddings, retain_graph=True
        )  # (B, T, E)
        columns.append((grad * embeddings).sum(dim=-1).detach())  # (B, T)
    return torch.stack(columns, dim=1)  # (B, S, T)


def seq2seq_attribution(
    model: torch.nn.Module,
    src: torch.Tensor,
    src_valid_len: torch.Tensor,
    tgt_in: torch.Tensor,
    tgt_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attribution of each output token's log-probability to the source
    tokens, and the attention weights of the same teacher-forced pass.

    The model (an EncoderDecoder whose encoder has an ``embedding`` layer,
    such as :class:`course_pkg.models.seq2seq.Seq2SeqEncoder`) runs in eval mode on
    ``tgt_in``; the objective of step s is log P(tgt_out[:, s]), attributed
    with :func:`gradient_x_input` to the source embeddings.

    Args:
        model: the trained encoder–decoder. src: (B, T) source ids.
        src_valid_len: (B,) source lengths. tgt_in: (B, S) decoder inputs
            (<bos> then the output shifted right). tgt_out: (B, S) the
            tokens whose log-probabilities are attributed.
    Returns:
        attributions (B, S, T) signed, and the decoder's attention weights
        (B, S, T) (None if the decoder keeps none).
    Raises:
        TypeError: if an argument is not a tensor of integer ids/lengths.
        ValueError: if tgt_in and tgt_out differ in shape, or a tensor is
            not on the model's device.
    """
    _check_seq2seq_attribution(model, src, src_valid_len, tgt_in, tgt_out)
    captured: list[torch.Tensor] = []

    def keep(module, inputs, output):  # output (T, B, E), time-major
        # The model reads the batch-major tensor back through a transpose,
        # so the gradient is taken with respect to a (B, T, E) graph node.
        captured.append(output.transpose(0, 1))
        return captured[-1].transpose(0, 1)

    was_training = model.training
    model.eval()
    handle = model.encoder.embedding.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            log_probs = torch.log_softmax(
                model(src, tgt_in, src_valid_len), dim=-1
            )  # (B, S, V)
            objectives = log_probs.gather(-1, tgt_out[..., None].long())
            attributions = gradient_x_input(captured[0], objectives[..., 0])
    finally:
        handle.remove()
        model.train(was_training)
    weights = getattr(model.decoder, "attention_weights", None)
    return attributions, None if weights is None else weights.detach()


class RankingAgreement(NamedTuple):
    """How two per-row importance scores over the source agree.

    ``rows``: (sentence, output step) rows compared. ``argmax_agree``: share
    of rows whose two argmaxes (over the real source positions) coincide.
    ``chance``: that share if one argmax were a uniformly random real
    position. ``spearman``: mean over rows of the Spearman rank correlation
    of the two scores (rows with fewer than 3 positions left out).
    """

    rows: int
    argmax_agree: float
    chance: float
    spearman: float


def _ranks(x: torch.Tensor) -> torch.Tensor:
    return x.argsort().argsort().to(torch.float64)


def compare_rankings(
    first: torch.Tensor,
    second: torch.Tensor,
    src_lens: Sequence[int],
    out_lens: Sequence[int],
) -> RankingAgreement:
    """Compare two (N, S, T) importance scores row by row.

    Args:
        first, second: (N, S, T), e.g. attention weights and absolute
            attributions. src_lens: N numbers of real source positions
            (columns read). out_lens: N numbers of output steps (rows read).
    Returns:
        A :class:`RankingAgreement`.
    Raises:
        TypeError: if first or second is not a tensor.
        ValueError: if their shapes differ or are not (N, S, T), a length
            is out of range, or no row is left.
    """
    _check_compare_rankings(first, second, src_lens, out_lens)
    rows = agree = 0
    chance = 0.0
    correlations = []
    for a, b, n_src, n_out in zip(first, second, src_lens, out_lens):
        a, b = a[:n_out, :n_src].double(), b[:n_out, :n_src].double()
        rows += n_out
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        chance += n_out / n_src
        if n_src >= 3:
            for x, y in zip(_ranks(a), _ranks(b)):
                x, y = x - x.mean(), y - y.mean()
                correlations.append(float((x @ y) / (x.norm() * y.norm())))
    if rows == 0:
        raise ValueError("no row to compare (every out_len is 0)")
    return RankingAgreement(
        rows=rows,
        argmax_agree=agree / rows,
        chance=chance / rows,
        spearman=sum(correlations) / max(len(correlations), 1),
    )


def _check_reading(
    sources: Any, outputs: Any, references: Any, weights: Any
) -> None:
    """N source, output and reference token lists and the (N, S, T)
    attention weights that produced the outputs, S and T at least the
    longest output and source.

    Raises:
        TypeError: if weights is not a tensor or a sentence is a string.
        ValueError: if the lengths disagree or weights is not (N, S, T) large
            enough.
    """
    check_floats("weights", weights)
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


def _check_attribution(embeddings: Any, objectives: Any) -> None:
    """Inputs of an attribution: float embeddings (B, T, E) that require
    grad and float objectives (B, S) with the same B, computed from them, on
    their device.

    Raises:
        TypeError: if either is not a float tensor.
        ValueError: if the shapes are not (B, T, E) and (B, S) with the same
            B, they are on two devices, embeddings does not require grad or
            objectives were not computed with grad.
    """
    check_float_tensor("embeddings", embeddings, 3, "(B, T, E)")
    check_float_tensor("objectives", objectives, 2, "(B, S)")
    check_same_device(embeddings=embeddings, objectives=objectives)
    if embeddings.shape[0] != objectives.shape[0]:
        raise ValueError(
            f"embeddings (B={embeddings.shape[0]}, T, E) and objectives "
            f"(B={objectives.shape[0]}, S) differ in B"
        )
    if not embeddings.requires_grad:
        raise ValueError("embeddings must require grad (be in the graph)")
    if not objectives.requires_grad:
        raise ValueError(
            "objectives must be computed from embeddings with grad enabled"
        )


def _check_seq2seq_attribution(
    model: object,
    src: object,
    src_valid_len: object,
    tgt_in: object,
    tgt_out: object,
) -> None:
    """src (B, T), src_valid_len (B,) and tgt_in (B, S) fit the model (ids,
    lengths, its device); tgt_out (B, S) integer ids on tgt_in's device."""
    check_source_target(
        model,
        src,
        tgt_in,
        src_valid_len,
        names=("src", "tgt_in", "src_valid_len"),
    )
    check_token_ids("tgt_out", tgt_out, None)
    check_same_device(tgt_in=tgt_in, tgt_out=tgt_out)
    if tgt_in.shape != tgt_out.shape:
        raise ValueError(
            f"tgt_in {tuple(tgt_in.shape)} and tgt_out "
            f"{tuple(tgt_out.shape)} must both be (B, S)"
        )


def _check_compare_rankings(
    first: object, second: object, src_lens: object, out_lens: object
) -> None:
    """first and second (N, S, T) float tensors of one dtype; src_lens N
    ints in [1, T]; out_lens N ints in [0, S]."""
    for name, value in (("first", first), ("second", second)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(value)}")
    check_same_float_dtype(first=first, second=second)
    if first.dim() != 3 or first.shape != second.shape:
        raise ValueError(
            "first and second must both be (N, S, T), got "
            f"{tuple(first.shape)} and {tuple(second.shape)}"
        )
    N, S, T = first.shape
    if len(src_lens) != N or len(out_lens) != N:
        raise ValueError(f"src_lens and out_lens must have N={N} entries")
    if any(not 1 <= n <= T for n in src_lens) or any(
        not 0 <= n <= S for n in out_lens
    ):
        raise ValueError(
            f"src_lens must lie in [1, T={T}] and out_lens in [0, S={S}]"
        )
