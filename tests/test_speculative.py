"""Speculative decoding: greedy output identical to the target's greedy
decoding, with a draft GPT or a draft without a network (n-gram counts,
prompt lookup); the accept/resample rule emits exactly the target's
distribution (closed form, exact in rationals and in float64); the cost
model's formulas by hand and against counted rounds; bad input."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.device import seed_everything
from course_pkg.inference.speculative import (
    NGramDraft,
    PromptLookupDraft,
    acceptance_probability,
    expected_tokens_per_pass,
    first_token_distribution,
    measure_speculation,
    predicted_speedup,
    residual_distribution,
    speculative_generate,
)
from course_pkg.models.gpt import GPT, generate

VOCAB = 12


def _models():
    seed_everything(0)
    target = GPT(VOCAB, 16, 32, 2, 2, 0.0, max_len=40).double()
    draft = GPT(VOCAB, 8, 16, 2, 1, 0.0, max_len=40).double()
    return target, draft


TARGET, DRAFT = _models()


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_is_the_targets_greedy_decoding(k):
    gen = torch.Generator().manual_seed(k)
    rates = []
    for trial in range(12):
        prompt = torch.randint(0, VOCAB, (1, 1 + trial % 6), generator=gen)
        n = int(torch.randint(0, 20, (), generator=gen))
        eos = 3 if trial % 3 == 0 else None
        expected = generate(TARGET, prompt, n, top_k=1, eos=eos)
        ours, stats = speculative_generate(
            TARGET, DRAFT, prompt, n, k, eos=eos
        )
        assert torch.equal(ours, expected), (trial, ours, expected)
        assert stats.emitted == ours.shape[1] - prompt.shape[1]
        rates.append(stats.acceptance_rate)
    assert 0 <= min(rates) <= max(rates) <= 1


def test_a_draft_equal_to_the_target_is_always_accepted():
    prompt = torch.tensor([[1, 2, 3]])
    for k in (1, 3, 5):
        ours, stats = speculative_generate(
            TARGET, copy.deepcopy(TARGET), prompt, 24, k
        )
        assert torch.equal(ours, generate(TARGET, prompt, 24, top_k=1))
        assert stats.accepted == stats.proposed
        # Each round emits k + 1 tokens (the last round fewer).
        assert stats.target_calls == -(-24 // (k + 1))


def test_sampling_runs_and_a_perfect_draft_is_always_accepted():
    gen = torch.Generator().manual_seed(0)
    prompt = torch.tensor([[4, 5]])
    same = copy.deepcopy(TARGET)
    ours, stats = speculative_generate(
        TARGET, same, prompt, 20, 4, greedy=False, generator=gen
    )
    assert ours.shape == (1, 22) and stats.acceptance_rate == 1.0
    ours, stats = speculative_generate(
        TARGET,
        DRAFT,
        prompt,
        20,
        4,
        greedy=False,
        generator=gen,
        temperature=0.7,
    )
    assert ours.shape == (1, 22) and 0 <= stats.acceptance_rate <= 1


def _exact(p, q):
    """The closed form in rationals: sum over the draft's token x of q(x)
    times [accept: x; reject: residual]."""
    a = [
        Fraction(1) if qi == 0 else min(Fraction(1), pi / qi)
        for pi, qi in zip(p, q)
    ]
    residual = [max(Fraction(0), pi - qi) for pi, qi in zip(p, q)]
    total = sum(residual)
    r = [x / total for x in residual] if total else list(p)
    rejected = 1 - sum(qi * ai for qi, ai in zip(q, a))
    return [qi * ai + rejected * ri for qi, ai, ri in zip(q, a, r)]


@settings(max_examples=100)
@given(
    st.lists(st.integers(0, 6), min_size=2, max_size=5),
    st.lists(st.integers(0, 6), min_size=2, max_size=5),
)
def test_first_token_is_distributed_as_the_target(p_weights, q_weights):
    size = min(len(p_weights), len(q_weights))
    p_weights, q_weights = p_weights[:size], q_weights[:size]
    if sum(p_weights) == 0 or sum(q_weights) == 0:
        return
    p = [Fraction(w, sum(p_weights)) for w in p_weights]
    q = [Fraction(w, sum(q_weights)) for w in q_weights]
    assert _exact(p, q) == p  # exactly, in rationals
    # The package's closed form, in float64, from the same functions the
    # sampler calls.
    p64 = torch.tensor([float(x) for x in p], dtype=torch.float64)
    q64 = torch.tensor([float(x) for x in q], dtype=torch.float64)
    torch.testing.assert_close(
        first_token_distribution(p64, q64), p64, rtol=0, atol=1e-13
    )


def test_the_rule_by_hand():
    p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    assert acceptance_probability(p, q).tolist() == [1.0, 1.0, 0.0]
    assert residual_distribution(p, q).tolist() == [0.5, 0.5, 0.0]
    # A wrong rule (always accept) would emit q, not p.
    assert not torch.allclose(q, p)


def test_meta_device():
    p = torch.softmax(torch.randn(3, 5, device="meta"), -1)
    out = first_token_distribution(p, p)
    assert out.shape == (3, 5) and out.device.type == "meta"


def test_bad_input():
    prompt = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="k must be >= 1"):
        speculative_generate(TARGET, DRAFT, prompt, 4, 0)
    with pytest.raises(TypeError, match="k must be an int"):
        speculative_generate(TARGET, DRAFT, prompt, 4, 1.5)
    other = GPT(VOCAB + 1, 8, 16, 2, 1, 0.0)
    with pytest.raises(ValueError, match="vocabularies differ"):
        speculative_generate(TARGET, other, prompt, 4, 2)
    with pytest.raises(TypeError, match="draft must be a GPT"):
        speculative_generate(TARGET, "draft", prompt, 4, 2)
    with pytest.raises(ValueError, match=r"\(1, T0\)"):
        speculative_generate(TARGET, DRAFT, torch.tensor([[1], [2]]), 4, 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(TARGET, DRAFT, prompt, 39, 2)


# ------------------------------------- the emitted sequences, end to end

SMALL_VOCAB, NEW_TOKENS, SAMPLES = 3, 3, 1000


def _sequence_distribution(model, prompt) -> dict[tuple[int, ...], float]:
    """P(x_1 .. x_n | prompt) under model's sampling at temperature 1, for
    every sequence of NEW_TOKENS ids: the product of its softmax rows."""
    import itertools

    sequences = list(itertools.product(range(SMALL_VOCAB), repeat=NEW_TOKENS))
    X = torch.cat(
        (prompt.expand(len(sequences), -1), torch.tensor(sequences)), dim=1
    )
    with torch.no_grad():
        log_probs = torch.log_softmax(model(X), dim=-1)
    start = prompt.shape[1] - 1  # row start + t predicts new token t
    steps = torch.arange(NEW_TOKENS)
    chosen = log_probs[:, start + steps].gather(
        -1, torch.tensor(sequences)[..., None]
    )[..., 0]  # (S, NEW_TOKENS)
    return dict(zip(sequences, chosen.sum(-1).exp().tolist()))


def _chi_square(counts, expected) -> float:
    return sum(
        (counts.get(s, 0) - SAMPLES * p) ** 2 / (SAMPLES * p)
        for s, p in expected.items()
    )


def test_speculative_sampling_emits_the_targets_sequences():
    # Whole sequences, not just the first token: 1,000 seeded draws of 3
    # tokens (k = 2, so rounds are accepted, cut and resampled), counted
    # against the target's exact distribution over the 27 sequences.
    import collections

    seed_everything(0)
    target = GPT(SMALL_VOCAB, 16, 32, 2, 2, 0.0, max_len=16).double()
    draft = GPT(SMALL_VOCAB, 8, 16, 2, 1, 0.0, max_len=16).double()
    prompt = torch.tensor([[1, 2]])
    generator = torch.Generator().manual_seed(0)
    counts = collections.Counter()
    for _ in range(SAMPLES):
        out, _ = speculative_generate(
            target, draft, prompt, NEW_TOKENS, 2, greedy=False,
            generator=generator,
        )  # fmt: skip
        counts[tuple(out[0, 2:].tolist())] += 1
    exact = _sequence_distribution(target, prompt)
    assert abs(sum(exact.values()) - 1) < 1e-12
    # 26 degrees of freedom: P(chi2 > 54.05) = 0.001 for exact draws (these
    # give 15.3; the fewest expected in a cell, 6.8). The draws are seeded,
    # so the verdict is the same on every run.
    assert _chi_square(counts, exact) < 54.05
    # The test has power: the same draws are far from the draft's own
    # sequences, what a sampler that always accepted would emit (7,078).
    assert _chi_square(counts, _sequence_distribution(draft, prompt)) > 500


# ------------------------------------------- drafts without a network


def test_ngram_draft_by_hand():
    draft = NGramDraft([[1, 2, 3, 4], [1, 2, 3, 5], [2, 3, 4]], order=3)
    # (1, 2) -> 3 twice; (2, 3) -> 4 twice, 5 once; (3, 4) never continues,
    # nor (4,): back off to the most frequent token, 2 and 3 tied at 3
    # (the smaller wins); then (4, 2) unseen, (2,) -> 3.
    assert draft.propose([1, 2], 4) == [3, 4, 2, 3]
    assert draft.propose([], 2) == [2, 3]
    assert draft.propose([9, 9], 0) == []
    assert NGramDraft([[7, 7, 8]], order=1).propose([8], 3) == [7, 7, 7]


def test_prompt_lookup_by_hand():
    draft = PromptLookupDraft(max_ngram=2)
    # the last two tokens (1, 2) occurred at the start: propose what followed
    assert draft.propose([1, 2, 3, 9, 1, 2], 3) == [3, 9, 1]
    # (8, 7) never occurred before; (7,) did, at 0, followed by 8, 7
    assert draft.propose([7, 8, 7], 3) == [8, 7]
    assert draft.propose([7, 8, 7], 1) == [8]
    assert draft.propose([5, 6], 2) == []  # nothing to look up
    # the latest earlier occurrence wins
    assert draft.propose([4, 1, 4, 2, 4], 1) == [2]


@pytest.mark.parametrize("k", [1, 3, 6])
def test_drafts_without_a_network_give_the_targets_greedy_decoding(k):
    gen = torch.Generator().manual_seed(k)
    texts = torch.randint(0, VOCAB, (20, 12), generator=gen).tolist()
    for draft in (NGramDraft(texts, order=3), PromptLookupDraft(2)):
        for trial in range(5):
            prompt = torch.randint(0, VOCAB, (1, 2 + trial), generator=gen)
            n = int(torch.randint(0, 24, (), generator=gen))
            eos = 3 if trial % 3 == 0 else None
            expected = generate(TARGET, prompt, n, top_k=1, eos=eos)
            ours, stats = speculative_generate(
                TARGET, draft, prompt, n, k, eos=eos
            )
            assert torch.equal(ours, expected), (draft, trial)
            assert stats.emitted == ours.shape[1] - prompt.shape[1]
            assert stats.target_calls <= max(stats.emitted, 1)


class _Oracle:
    """Proposes the target's greedy continuation, each token replaced by a
    wrong one with probability 1 - alpha (seeded): acceptance alpha, iid."""

    def __init__(self, greedy: list[int], alpha: float, seed: int):
        self.greedy, self.alpha = greedy, alpha
        self.generator = torch.Generator().manual_seed(seed)

    def propose(self, context: list[int], k: int) -> list[int]:
        truth = self.greedy[len(context) : len(context) + k]
        coins = torch.rand(len(truth), generator=self.generator).tolist()
        return [
            t if u < self.alpha else (t + 1) % VOCAB
            for t, u in zip(truth, coins)
        ]


def test_tokens_per_pass_follow_the_formula_for_iid_acceptance():
    # Rounds of gamma proposals, each right with probability alpha: the
    # tokens per target pass come close to (1 - alpha^(gamma+1)) / (1 - alpha)
    # (seeded: 0.976 and 0.989 of it here, a little under because the last
    # round of each call is cut at 36 tokens).
    prompt = torch.tensor([[1, 2]])
    greedy = generate(TARGET, prompt, 37, top_k=1)[0].tolist()
    for alpha, gamma, calls in ((0.5, 2, 12), (0.8, 4, 6)):
        emitted = passes = 0
        for seed in range(calls):
            _, stats = speculative_generate(
                TARGET, _Oracle(greedy, alpha, seed), prompt, 36, gamma
            )
            emitted += stats.emitted
            passes += stats.target_calls
        expected = expected_tokens_per_pass(alpha, gamma)
        assert 0.9 * expected < emitted / passes <= 1.05 * expected


def test_the_cost_model_by_hand():
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1.75)
    assert expected_tokens_per_pass(0.0, 3) == 1.0
    assert expected_tokens_per_pass(1.0, 3) == 4.0
    # Leviathan et al.'s improvement factor, (1 - a^(g+1)) / ((1 - a)(g c + 1))
    alpha, gamma, c = 0.8, 4, 0.05
    leviathan = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))
    assert predicted_speedup(alpha, gamma, c) == pytest.approx(leviathan)
    assert predicted_speedup(0.5, 2, 0.0, 1.75) == pytest.approx(1.0)


def test_measure_speculation_takes_a_draft_without_a_network():
    texts = [[1, 2, 3, 4, 5, 6]] * 3
    stats = measure_speculation(TARGET, NGramDraft(texts), [[1, 2]], 6, 2)
    assert stats.emitted == 6 and stats.target_calls >= 2


def test_bad_drafts_are_refused():
    prompt = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="greedy"):
        speculative_generate(
            TARGET, PromptLookupDraft(), prompt, 4, 2, greedy=False
        )

    class TooLong:
        def propose(self, context, k):
            return [1] * (k + 1)

    class OutOfRange:
        def propose(self, context, k):
            return [VOCAB] * k

    class NotInts:
        def propose(self, context, k):
            return [1.0] * k

    for draft, error in ((TooLong(), ValueError), (OutOfRange(), ValueError),
                         (NotInts(), TypeError)):  # fmt: skip
        with pytest.raises(error, match="draft.propose"):
            speculative_generate(TARGET, draft, prompt, 4, 2)
    for call, error, name in (
        (lambda: NGramDraft([[1, 2]], order=0), ValueError, "order"),
        (lambda: NGramDraft([[]]), ValueError, "sequences"),
        (lambda: NGramDraft([[1, -2]]), ValueError, "sequences"),
        (lambda: NGramDraft([[1, 2.0]]), TypeError, "sequences"),
        (lambda: NGramDraft("12"), TypeError, "sequences"),
        (lambda: NGramDraft([[1]]).propose((1,), 2), TypeError, "context"),
        (lambda: NGramDraft([[1]]).propose([1], -1), ValueError, "k"),
        (lambda: PromptLookupDraft(0), ValueError, "max_ngram"),
        (lambda: PromptLookupDraft().propose([True], 1), TypeError, "context"),
        (lambda: expected_tokens_per_pass(1.5, 2), ValueError, "alpha"),
        (lambda: expected_tokens_per_pass(0.5, 0), ValueError, "gamma"),
        (lambda: predicted_speedup(0.5, 2, -1.0), ValueError, "draft_cost"),
        (
            lambda: predicted_speedup(0.5, 2, 0.1, 0.0),
            ValueError,
            "verify_cost",
        ),
    ):
        with pytest.raises(error, match=name):
            call()
