"""Speculative decoding: a small draft model proposes, the target verifies.

Chapter: "Attention at inference time". Decoding one token at a time costs
one forward pass of the large (target) model per token, each reading all of
its weights for one position. A draft model, much cheaper, proposes k tokens
one by one; the target then scores all k in one forward pass (its cache
makes that a pass over k + 1 new positions) and keeps the longest prefix it
agrees with, plus one token of its own. Every round emits between 1 and
k + 1 tokens for one target pass.

- Greedy: a proposed token is kept while it is the target's argmax, so the
  output is the target's own greedy decoding, token for token.
- Sampling (Leviathan et al. 2023; Chen et al. 2023): a token x drawn from
  the draft's q is kept with probability min(1, p(x) / q(x)); at the first
  rejection the token is drawn from the residual max(0, p - q), normalised.
  Each emitted token is then distributed exactly as p, the target's.

The draft need not be a network. For greedy decoding any proposer will do
(:class:`NGramDraft`: the most frequent continuation in a training text;
:class:`PromptLookupDraft`: the tokens that followed the last few tokens
where they occurred earlier in the context), and the output is still the
target's greedy decoding. Whether speculation is faster depends on costs
(:func:`predicted_speedup`, Leviathan et al.'s expected improvement): the
draft's pass against the target's, and the target's pass over k + 1
positions against its pass over one.

Shape letters (see the package docstring): ``T0`` prompt length, ``V``
vocabulary size, ``k`` tokens proposed per round.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from course_pkg.checks import (
    check_ids,
    check_nonnegative_int,
    check_nonnegative_number,
    check_positive_int,
    check_positive_number,
    check_same_float_dtype,
    check_tensor_type,
    check_token_ids,
)
from course_pkg.models.gpt import GPT, GPTCache, next_token_probs
from course_pkg.nn.attention import KVCache


@dataclass
class SpeculativeStats:
    """What a speculative decoding call did.

    ``proposed``/``accepted``: draft tokens proposed and kept;
    ``target_calls``: target forward passes (the prompt's included);
    ``emitted``: new tokens returned.
    """

    proposed: int = 0
    accepted: int = 0
    target_calls: int = 0
    emitted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / max(self.proposed, 1)

    @property
    def target_calls_per_token(self) -> float:
        return self.target_calls / max(self.emitted, 1)


# --------------------------------------------------- the accept/resample rule


def acceptance_probability(
    target_probs: torch.Tensor, draft_probs: torch.Tensor
) -> torch.Tensor:
    """min(1, p(x) / q(x)) for every token x (1 where q(x) = 0).

    Args:
        target_probs: p, (..., V). draft_probs: q, (..., V).
    Returns:
        (..., V).
    Raises:
        TypeError, ValueError: if p and q are not float tensors of one shape,
            dtype and device over V >= 1 tokens.
    """
    _check_distributions(target_probs, draft_probs)
    ratio = target_probs / torch.where(draft_probs > 0, draft_probs, 1.0)
    return torch.where(draft_probs > 0, ratio.clamp(max=1.0), 1.0)


def residual_distribution(
    target_probs: torch.Tensor, draft_probs: torch.Tensor
) -> torch.Tensor:
    """max(0, p - q), normalised: what is drawn after a rejection.

    Where p = q nothing is ever rejected; p itself is returned there.

    Returns:
        (..., V) rows summing to 1.
    Raises:
        TypeError, ValueError: as :func:`acceptance_probability`.
    """
    _check_distributions(target_probs, draft_probs)
    residual = (target_probs - draft_probs).clamp(min=0.0)
    total = residual.sum(-1, keepdim=True)
    return torch.where(
        total > 0, residual / torch.where(total > 0, total, 1.0), target_probs
    )


def first_token_distribution(
    target_probs: torch.Tensor, draft_probs: torch.Tensor
) -> torch.Tensor:
    """In closed form, the distribution of the token the rule emits first:
    P(x) = q(x) a(x) + (1 - sum_y q(y) a(y)) r(x), with a the acceptance
    probability and r the residual distribution. It equals p.

    Raises:
        TypeError, ValueError: as :func:`acceptance_probability`.
    """
    _check_distributions(target_probs, draft_probs)
    kept = draft_probs * acceptance_probability(target_probs, draft_probs)
    rejected = 1.0 - kept.sum(-1, keepdim=True)
    return kept + rejected * residual_distribution(target_probs, draft_probs)


# ------------------------------------------------------------ the cost model


def expected_tokens_per_pass(alpha: float, gamma: int) -> float:
    """Tokens one round emits on average, (1 - alpha^(gamma + 1)) / (1 - alpha)
    (gamma + 1 at alpha = 1): Leviathan et al.'s expectation when each of
    the gamma proposed tokens is accepted with probability alpha,
    independently, and the round ends at the first rejection.

    Raises:
        TypeError, ValueError: if alpha is not a number in [0, 1] or gamma
            not an int >= 1.
    """
    _check_expected_tokens_per_pass(alpha, gamma)
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def _check_expected_tokens_per_pass(alpha: object, gamma: object) -> None:
    """alpha a number in [0, 1]; gamma an int >= 1."""
    _check_alpha(alpha)
    check_positive_int("gamma", gamma)


def predicted_speedup(
    alpha: float, gamma: int, draft_cost: float, verify_cost: float = 1.0
) -> float:
    """Speculative decoding's expected speed against plain decoding:
    expected_tokens_per_pass(alpha, gamma) / (gamma * c + v).

    Costs are in target passes over one position: c = draft_cost, the time
    of one draft proposal; v = verify_cost, the target's pass over gamma + 1
    positions. With v = 1 (a pass over gamma + 1 positions costs one over
    a single position, as when memory bound) this is Leviathan et al.'s
    (2023) expected improvement factor.

    Raises:
        TypeError, ValueError: if alpha is not in [0, 1], gamma not an int
            >= 1, draft_cost not a number >= 0 or verify_cost not > 0.
    """
    _check_predicted_speedup(alpha, gamma, draft_cost, verify_cost)
    tokens = expected_tokens_per_pass(alpha, gamma)
    return tokens / (gamma * draft_cost + verify_cost)


def _check_predicted_speedup(
    alpha: object, gamma: object, draft_cost: object, verify_cost: object
) -> None:
    """alpha in [0, 1], gamma an int >= 1 (as
    :func:`expected_tokens_per_pass`); draft_cost >= 0; verify_cost > 0."""
    _check_expected_tokens_per_pass(alpha, gamma)
    check_nonnegative_number("draft_cost", draft_cost)
    check_positive_number("verify_cost", verify_cost)


def _check_alpha(alpha: Any) -> None:
    check_nonnegative_number("alpha", alpha)
    if alpha > 1:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha}")


# ------------------------------------------------------ drafts without a network


@runtime_checkable
class Proposer(Protocol):
    """A greedy draft: ``propose(context, k)`` gives at most k token ids to
    follow the ids of context (fewer, or none, when it has nothing)."""

    def propose(self, context: list[int], k: int) -> list[int]: ...


class NGramDraft:
    """Propose the most frequent continuation in a training text: the token
    that most often followed the last ``order - 1`` tokens (backing off to
    fewer when that context never occurred; ties to the smallest id), one
    token after the other. A dictionary look-up per token, no network.

    Args:
        sequences: the training text, as lists of token ids (at least one
            id in all).
        order: n of the n-gram, >= 1 (1: always the most frequent token).
    Raises:
        TypeError, ValueError: if sequences is not a list of lists of ids
            >= 0 with at least one id, or order not an int >= 1.
    """

    def __init__(self, sequences: Sequence[Sequence[int]], order: int = 3):
        _check_ngram_draft_args(sequences, order)
        counts: dict[tuple[int, ...], collections.Counter] = (
            collections.defaultdict(collections.Counter)
        )
        for ids in sequences:
            for i, token in enumerate(ids):
                for n in range(min(order, i + 1)):  # contexts of 0..order-1
                    counts[tuple(ids[i - n : i])][token] += 1
        if not counts:
            raise ValueError("sequences must hold at least one token id")
        self.order = order
        self.next_token = {
            context: min(c, key=lambda t: (-c[t], t))
            for context, c in counts.items()
        }

    def propose(self, context: list[int], k: int) -> list[int]:
        """k tokens after context, each the most frequent continuation of
        the n-gram before it (its own proposals included).

        Raises:
            TypeError, ValueError: if context is not a list of ids >= 0 or
                k not an int >= 0.
        """
        _check_proposal_request(context, k)
        recent = list(context[len(context) - self.order + 1 :])
        proposal = []
        for _ in range(k):
            for n in range(min(self.order - 1, len(recent)), -1, -1):
                token = self.next_token.get(tuple(recent[len(recent) - n :]))
                if token is not None:
                    break
            proposal.append(token)
            recent = (recent + [token])[len(recent) + 2 - self.order :]
        return proposal


def _check_ngram_draft_args(sequences: object, order: object) -> None:
    """order an int >= 1; sequences a list of lists of int ids >= 0."""
    check_positive_int("order", order)
    _check_sequences("sequences", sequences)


class PromptLookupDraft:
    """Propose what followed the last ``n`` tokens where they occurred
    before in the context (the prompt and what was generated), the latest
    such place, for n = max_ngram down to 1; nothing if they never did.
    No network and no training text (Saxena's prompt-lookup decoding, 2023).

    Args:
        max_ngram: the longest suffix of the context looked up, >= 1.
    Raises:
        TypeError, ValueError: if max_ngram is not an int >= 1.
    """

    def __init__(self, max_ngram: int = 3):
        check_positive_int("max_ngram", max_ngram)
        self.max_ngram = max_ngram

    def propose(self, context: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the context's last n tokens earlier
        in it ([] if no suffix of it occurred before).

        Raises:
            TypeError, ValueError: as :meth:`NGramDraft.propose`.
        """
        _check_proposal_request(context, k)
        for n in range(min(self.max_ngram, len(context) - 1), 0, -1):
            suffix = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):
                if context[start : start + n] == suffix:
                    return list(context[start + n : start + n + k])
        return []


def _check_sequences(name: str, sequences: Any) -> None:
    if not isinstance(sequences, (list, tuple)) or not all(
        isinstance(ids, (list, tuple)) for ids in sequences
    ):
        raise TypeError(
            f"{name} must be a list of lists of token ids, got "
            f"{type(sequences).__name__}"
        )
    for ids in sequences:
        for token in ids:
            if isinstance(token, bool) or not isinstance(token, int):
                raise TypeError(
                    f"{name} must hold int ids, got {type(token).__name__}"
                )
            if token < 0:
                raise ValueError(f"{name} must hold ids >= 0, got {token}")


def _check_proposal_request(context: Any, k: Any) -> None:
    _check_sequences("context", [context] if isinstance(context, list) else 0)
    check_nonnegative_int("k", k)


# ------------------------------------------------------------------ decoding


def speculative_generate(
    target: GPT,
    draft: GPT | Proposer,
    prompt: torch.Tensor,
    max_new_tokens: int,
    k: int,
    *,
    greedy: bool = True,
    temperature: float = 1.0,
    eos: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, SpeculativeStats]:
    """Continue one prompt, k draft tokens verified per target pass.

    Args:
        target: a :class:`~course_pkg.models.gpt.GPT` (or subclass), put in eval
            mode for the call.
        draft: a GPT with the target's vocabulary (put in eval mode for
            the call), or, for greedy decoding, a :class:`Proposer` such as
            :class:`NGramDraft` or :class:`PromptLookupDraft`.
        prompt: (1, T0) token ids. max_new_tokens: >= 0, T0 + it within both
            models' max_len. k: tokens proposed per round, >= 1.
        greedy: argmax decoding (the target's greedy output, exactly), or
            sampling at temperature with the accept/resample rule.
        eos: None, or an id after which decoding stops.
        generator: random source of the draws (sampling only).
    Returns:
        (1, T0 + n) ids, n <= max_new_tokens, and the call's statistics.
    Raises:
        TypeError, ValueError: if k < 1, the vocabularies differ, the prompt
            is not (1, T0) ids, the length does not fit, a proposer is asked
            to sample, or it proposes more than asked or ids not in [0, V).
    """
    _check_speculative_generate(
        target, draft, prompt, max_new_tokens, k, greedy, temperature, eos
    )
    networks = [m for m in (target, draft) if isinstance(m, GPT)]
    stats, modes = SpeculativeStats(), [m.training for m in networks]
    for model in networks:
        model.eval()
    context = prompt[0].tolist()
    target_cache: GPTCache | None = None
    draft_cache: GPTCache | None = None
    try:
        with torch.no_grad():
            while stats.emitted < max_new_tokens:
                proposal_size = min(k, max_new_tokens - stats.emitted - 1)
                if isinstance(draft, GPT):
                    proposal, draft_probs, draft_cache = _propose(
                        draft, context, draft_cache, proposal_size, greedy,
                        temperature, generator,
                    )  # fmt: skip
                else:
                    proposal = draft.propose(list(context), proposal_size)
                    _check_proposal(proposal, proposal_size, target)
                    draft_probs = []
                fed = _cached_length(target_cache)
                scores, target_cache = target.forward_with_cache(
                    torch.tensor([context[fed:] + proposal]), target_cache
                )
                stats.target_calls += 1
                # Row i: the target's next-token scores after proposal[:i].
                verify = scores[0, len(context) - fed - 1 :]  # (k + 1, V)
                accepted, last = _verify(
                    verify, proposal, draft_probs, greedy, temperature,
                    generator,
                )  # fmt: skip
                stats.proposed += len(proposal)
                stats.accepted += accepted
                new = proposal[:accepted] + [last]
                new = new[: max_new_tokens - stats.emitted]
                if eos is not None and eos in new:
                    new = new[: new.index(eos) + 1]
                stats.emitted += len(new)
                keep = len(context) + accepted
                target_cache = _truncate(target_cache, keep)
                draft_cache = _truncate(draft_cache, keep)
                context += new
                if eos is not None and context[-1] == eos:
                    break
    finally:
        for model, mode in zip(networks, modes):
            model.train(mode)
    return torch.tensor([context], device=prompt.device), stats


def _check_speculative_generate(
    target: object,
    draft: object,
    prompt: object,
    max_new_tokens: object,
    k: object,
    greedy: bool,
    temperature: object,
    eos: object,
) -> None:
    """max_new_tokens, k, eos, temperature as :func:`_check_options`; target a
    GPT, draft a GPT of its vocabulary or a proposer, prompt (1, T0) ids with
    T0 + max_new_tokens within max_len; a GPT draft to sample (not greedy)."""
    _check_options(max_new_tokens, k, eos, temperature)
    _check_models(target, draft, prompt, max_new_tokens)
    if not greedy and not isinstance(draft, GPT):
        raise ValueError(
            "draft must be a GPT to sample (greedy=False): the rule needs "
            "its probabilities; a proposer drafts for greedy decoding only"
        )


def _propose(
    draft: GPT,
    context: list[int],
    cache: GPTCache | None,
    size: int,
    greedy: bool,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[list[int], list[torch.Tensor], GPTCache | None]:
    """size draft tokens after context, their draft distributions (V,) and
    the draft's cache (it holds context and the proposal but its last)."""
    proposal: list[int] = []
    probs: list[torch.Tensor] = []
    fed = _cached_length(cache)
    pending = context[fed:]  # at least the last token of context
    for _ in range(size):
        scores, cache = draft.forward_with_cache(
            torch.tensor([pending]), cache
        )
        q = next_token_probs(scores[:, -1], temperature)[0]  # (V,)
        token = int(q.argmax()) if greedy else _sample(q, generator)
        proposal.append(token)
        probs.append(q)
        pending = [token]
    return proposal, probs, cache


def _verify(
    scores: torch.Tensor,
    proposal: list[int],
    draft_probs: list[torch.Tensor],
    greedy: bool,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """How many proposed tokens the target keeps, and the token it adds
    (its correction at the first rejection, or a bonus token after all k)."""
    if greedy:
        choices = scores.argmax(-1).tolist()  # (k + 1,)
        accepted = 0
        while (
            accepted < len(proposal)
            and proposal[accepted] == choices[accepted]
        ):
            accepted += 1
        return accepted, choices[accepted]
    target_probs = next_token_probs(scores, temperature)  # (k + 1, V)
    for i, (token, q) in enumerate(zip(proposal, draft_probs)):
        p = target_probs[i]
        uniform = torch.rand((), generator=generator, dtype=p.dtype)
        if uniform >= acceptance_probability(p, q)[token]:
            return i, _sample(residual_distribution(p, q), generator)
    return len(proposal), _sample(target_probs[len(proposal)], generator)


def _sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def _cached_length(cache: GPTCache | None) -> int:
    if cache is None:
        return 0
    keys = cache[0].keys
    return keys.shape[keys.dim() - 2]  # (B, t, D) or (B, G, t, d)


def _truncate(cache: GPTCache | None, length: int) -> GPTCache | None:
    """The cache of the first ``length`` positions (views, nothing copied)."""
    if cache is None or _cached_length(cache) <= length:
        return cache
    dim = cache[0].keys.dim() - 2
    return [
        KVCache(c.keys.narrow(dim, 0, length), c.values.narrow(dim, 0, length))
        for c in cache
    ]


def _check_distributions(target_probs: Any, draft_probs: Any) -> None:
    check_tensor_type("target_probs", target_probs)
    check_tensor_type("draft_probs", draft_probs)
    check_same_float_dtype(target_probs=target_probs, draft_probs=draft_probs)
    if target_probs.shape != draft_probs.shape or target_probs.dim() < 1:
        raise ValueError(
            "target_probs and draft_probs must have one shape (..., V), got "
            f"{tuple(target_probs.shape)} and {tuple(draft_probs.shape)}"
        )
    if target_probs.shape[-1] < 1:
        raise ValueError(
            "target_probs and draft_probs must cover V >= 1 tokens, got "
            f"shape {tuple(target_probs.shape)}"
        )


def _check_options(
    max_new_tokens: Any, k: Any, eos: Any, temperature: Any = 1.0
) -> None:
    check_nonnegative_int("max_new_tokens", max_new_tokens)
    check_positive_int("k", k)
    if eos is not None:
        check_ids(eos=eos)
    check_positive_number("temperature", temperature)


def _check_proposal(proposal: Any, size: int, target: GPT) -> None:
    """A proposer's answer: a list of at most size ids in [0, V)."""
    if not isinstance(proposal, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in proposal
    ):
        raise TypeError(
            f"draft.propose must return a list of int ids, got {proposal!r}"
        )
    if len(proposal) > size or not all(
        0 <= t < target.vocab_size for t in proposal
    ):
        raise ValueError(
            f"draft.propose must return at most {size} ids in "
            f"[0, {target.vocab_size}), got {proposal}"
        )


def _check_draft(draft: Any) -> None:
    if not isinstance(draft, (GPT, Proposer)):
        raise TypeError(
            "draft must be a GPT or a proposer (an object with a "
            f"propose(context, k) method), got {type(draft).__name__}"
        )


def _check_models(
    target: GPT,
    draft: GPT | Proposer,
    prompt: torch.Tensor,
    max_new_tokens: int,
) -> None:
    if not isinstance(target, GPT):
        raise TypeError(f"target must be a GPT, got {type(target).__name__}")
    _check_draft(draft)
    if isinstance(draft, GPT) and target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"draft and target vocabularies differ: draft has "
            f"{draft.vocab_size} tokens, target {target.vocab_size}"
        )
    check_token_ids("prompt", prompt, target.embedding, min_steps=1)
    if prompt.shape[0] != 1:
        raise ValueError(
            f"prompt must have shape (1, T0), got {tuple(prompt.shape)}"
        )
    room = _room(target, draft) - prompt.shape[1]
    if not 0 <= max_new_tokens <= room:
        raise ValueError(
            f"max_new_tokens must be in [0, max_len - T0] = [0, {room}], "
            f"got {max_new_tokens}"
        )


def _room(target: GPT, draft: GPT | Proposer) -> int:
    """The longest sequence both models can read."""
    if isinstance(draft, GPT):
        return min(target.max_len, draft.max_len)
    return target.max_len


def measure_speculation(
    target: GPT,
    draft: GPT | Proposer,
    prompts: list[list[int]],
    max_new_tokens: int,
    k: int,
    eos: int | None = None,
) -> SpeculativeStats:
    """Greedy speculative decoding of every prompt; the summed statistics.

    Args:
        prompts: token ids of each prompt. Others: as in
            :func:`speculative_generate` (max_new_tokens is cut to what fits
            each prompt).
    Returns:
        The counts of all calls added up.
    Raises:
        TypeError, ValueError: as :func:`speculative_generate`, checked
            before the first prompt.
    """
    _check_measure_speculation(target, draft, prompts, max_new_tokens, k, eos)
    total = SpeculativeStats()
    room = _room(target, draft)
    device = next(target.parameters()).device
    for ids in prompts:
        prompt = torch.tensor([ids], device=device)
        budget = min(max_new_tokens, room - len(ids))
        _, stats = speculative_generate(
            target, draft, prompt, budget, k, eos=eos
        )
        for field in ("proposed", "accepted", "target_calls", "emitted"):
            setattr(
                total, field, getattr(total, field) + getattr(stats, field)
            )
    return total


def _check_measure_speculation(
    target: object,
    draft: object,
    prompts: object,
    max_new_tokens: object,
    k: object,
    eos: object,
) -> None:
    """max_new_tokens, k, eos as :func:`_check_options`; target a GPT; draft a
    GPT or a proposer; prompts a list of lists of token ids."""
    _check_options(max_new_tokens, k, eos)
    if not isinstance(target, GPT):
        raise TypeError(f"target must be a GPT, got {type(target).__name__}")
    _check_draft(draft)
    if not isinstance(prompts, (list, tuple)) or not all(
        isinstance(ids, (list, tuple)) for ids in prompts
    ):
        raise TypeError(
            "prompts must be a list of lists of token ids, got "
            f"{type(prompts).__name__}"
        )
