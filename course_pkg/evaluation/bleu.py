"""BLEU: how close a translation is to a reference (chapters on seq2seq and the
Transformer).

BLEU counts the n-grams of the prediction that also occur in the reference,
each reference n-gram usable once ("clipped" counts), and penalises predictions
shorter than the reference.

- :func:`bleu` scores one sentence the way d2l does, with longer n-grams
  weighted less (p_n ** (1 / 2**n): a smaller exponent pulls p_n towards 1).
- :func:`corpus_bleu` is the standard corpus-level BLEU-4 of Papineni et al.,
  as sacrebleu computes it: counts are summed over the whole corpus before any
  ratio is taken.

Tokens may be given as lists of strings or as one string, which is split on
whitespace.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

Tokens = Sequence[str] | str


def _as_tokens(tokens: Tokens, name: str) -> list[str]:
    if isinstance(tokens, str):
        return tokens.split()
    if not isinstance(tokens, (list, tuple)):
        raise TypeError(
            f"{name} must be a list of tokens or a string, got {type(tokens).__name__}"
        )
    for token in tokens:
        if not isinstance(token, str):
            raise TypeError(
                f"{name} must hold str tokens, got {type(token).__name__}"
            )
    return list(tokens)


def _check_order(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _ngram_counts(tokens: Sequence[str], n: int) -> collections.Counter:
    return collections.Counter(
        tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)
    )


def bleu(pred_tokens: Tokens, label_tokens: Tokens, k: int = 4) -> float:
    """Sentence BLEU as in d2l: ``exp(min(0, 1 - len_label / len_pred)) *
    prod_n p_n ** (1 / 2**n)``.

    p_n is the clipped n-gram precision: the number of prediction n-grams
    matched by a distinct reference n-gram, over the number of prediction
    n-grams. Since p_n <= 1, the exponent 1/2**n, which shrinks as n grows,
    pulls the factor of a longer order towards 1: longer n-grams count less.
    A zero p_n still makes the score 0. Only n = 1 .. min(k, len_pred) enter
    the product: an n-gram order the prediction is too short to have counts as
    precision 1, so a short prediction is judged on the orders it has (and its
    brevity penalty). An empty prediction scores 0.0.

    Args:
        pred_tokens: the predicted tokens (or a string to split on whitespace).
        label_tokens: the reference tokens (or a string).
        k: the longest n-gram order, >= 1.
    Returns:
        A float in [0, 1]; 1.0 for a prediction equal to the label.
    Raises:
        ValueError: if k < 1. TypeError: if k is not an int, or a sequence is
            neither a list/tuple of str nor a str.
    """
    _check_order("k", k)
    pred = _as_tokens(pred_tokens, "pred_tokens")
    label = _as_tokens(label_tokens, "label_tokens")
    len_pred, len_label = len(pred), len(label)
    if len_pred == 0:
        return 0.0
    score = math.exp(min(0.0, 1 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        pred_counts, label_counts = (
            _ngram_counts(pred, n),
            _ngram_counts(label, n),
        )
        num_matches = sum(
            min(count, label_counts[ngram])
            for ngram, count in pred_counts.items()
        )
        score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


def corpus_bleu(
    hypotheses: Sequence[Tokens], references: Sequence[Tokens], max_n: int = 4
) -> float:
    """Corpus BLEU on a 0-1 scale, equal to sacrebleu's ``corpus_bleu(...,
    tokenize="none").score / 100``.

    For each order n, clipped matches and hypothesis n-grams are summed over
    the corpus; BLEU = BP * exp(mean_n log p_n) with BP = exp(1 - ref_len /
    hyp_len) if the corpus of hypotheses is shorter than the references, else
    1. Like sacrebleu's default ("exp") smoothing: the score is 0 if no n-gram
    matches at all, or if no hypothesis has an n-gram of some order n <= max_n;
    otherwise an order with no match gets p_n = 1 / (2**j * total_n), j
    counting the orders without a match so far. One reference per hypothesis.

    Args:
        hypotheses: the predicted token lists (or strings), one per sentence.
        references: the reference token lists (or strings), aligned with
            hypotheses.
        max_n: the longest n-gram order, >= 1.
    Returns:
        A float in [0, 1]; 0.0 for an empty corpus.
    Raises:
        ValueError: if hypotheses and references differ in length, or max_n <
            1.
        TypeError: if hypotheses or references is not a list/tuple (a str
            would be read as one sentence per character), max_n is not an
            int, or a sentence is neither a list/tuple of str nor a str.
    """
    _check_corpus_bleu(hypotheses, references, max_n)
    matches, totals = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for i, (hypothesis, reference) in enumerate(zip(hypotheses, references)):
        hyp = _as_tokens(hypothesis, f"hypotheses[{i}]")
        ref = _as_tokens(reference, f"references[{i}]")
        hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
        for n in range(1, max_n + 1):
            hyp_counts, ref_counts = (
                _ngram_counts(hyp, n),
                _ngram_counts(ref, n),
            )
            matches[n - 1] += sum(
                min(count, ref_counts[ngram])
                for ngram, count in hyp_counts.items()
            )
            totals[n - 1] += max(0, len(hyp) - n + 1)
    if not any(matches) or not all(totals):
        return 0.0
    brevity_penalty = (
        math.exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    )
    # Precisions in percent, as sacrebleu computes them, so that the two agree
    # to the last bits.
    log_precisions, smoothing = [], 1.0
    for match, total in zip(matches, totals):
        if match == 0:
            smoothing *= 2
            log_precisions.append(math.log(100.0 / (smoothing * total)))
        else:
            log_precisions.append(math.log(100.0 * match / total))
    return brevity_penalty * math.exp(sum(log_precisions) / max_n) / 100.0


def _check_corpus_bleu(
    hypotheses: object, references: object, max_n: object
) -> None:
    """max_n an int >= 1; hypotheses and references lists (or tuples) of one
    length."""
    _check_order("max_n", max_n)
    for name, sentences in (
        ("hypotheses", hypotheses),
        ("references", references),
    ):
        if not isinstance(sentences, (list, tuple)):
            raise TypeError(
                f"{name} must be a list with one sentence (a token list or a "
                f"str) per entry, got {type(sentences).__name__}"
            )
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have the same length, got {len(hypotheses)} "
            f"and {len(references)}"
        )
