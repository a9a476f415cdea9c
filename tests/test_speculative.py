"""Speculative decoding: greedy output identical to the target's greedy
decoding; the accept/resample rule emits exactly the target's distribution
(closed form, exact in rationals and in float64); bad input."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.device import seed_everything
from course_pkg.gpt import GPT, generate
from course_pkg.speculative import (
    acceptance_probability,
    first_token_distribution,
    residual_distribution,
    speculative_generate,
)

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
