"""Tests for course_pkg.inference.decode: greedy (cached = uncached), beam search (exact when exhaustive,
beam 1 = greedy, finds what greedy misses), sequence scoring, translate, bad input.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from course_pkg.inference.decode import (
    beam_search,
    cut_at_eos,
    greedy_decode,
    sequence_log_prob,
)
from course_pkg.models.encoder_decoder import Decoder, Encoder, EncoderDecoder
from course_pkg.models.seq2seq import (
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)

PAD, BOS, EOS = 0, 1, 2


def gru_model(
    attention: bool, tgt_vocab: int = 7, seed: int = 0, scale: float = 3.0
) -> EncoderDecoder:
    """A random GRU model; output weights scaled up so its distributions are far from uniform."""
    torch.manual_seed(seed)
    decoder = (Seq2SeqAttentionDecoder if attention else Seq2SeqDecoder)(
        tgt_vocab, 6, 12, 2
    )
    model = EncoderDecoder(Seq2SeqEncoder(9, 6, 12, 2), decoder).double()
    with torch.no_grad():
        model.decoder.dense.weight.mul_(scale)
    return model


def source(batch_size=3, src_len=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(
        3, 9, (batch_size, src_len), generator=gen
    ), torch.tensor([5, 2, 4, 1, 3][:batch_size])


class MarkovDecoder(Decoder):
    """Next-token scores depend only on the previous token: Y[b, i] = log_probs[X[b, i]]."""

    def __init__(self, log_probs: torch.Tensor):
        super().__init__()
        self.log_probs = torch.nn.Parameter(log_probs, requires_grad=False)

    def init_state(self, enc_all_outputs, *args):
        return enc_all_outputs

    def forward(self, X, state):
        return self.log_probs[X], state


class PassEncoder(Encoder):
    def forward(self, X, *args):
        return X


def markov_model() -> EncoderDecoder:
    """Greedy takes 'a' (0.55) then ends (0.34): p = 0.187; the better 'b <eos>' has p = 0.4275."""
    vocab = 6  # pad, bos, eos, a, b, c
    probs = torch.full((vocab, vocab), 1e-9, dtype=torch.float64)
    probs[BOS, 3], probs[BOS, 4] = 0.55, 0.45
    probs[3, EOS], probs[3, 5], probs[3, 4] = 0.34, 0.33, 0.33
    probs[4, EOS], probs[4, 5] = 0.95, 0.05
    probs[5, EOS] = 1.0
    probs[EOS, EOS] = probs[PAD, EOS] = 1.0
    return EncoderDecoder(
        PassEncoder(),
        MarkovDecoder(torch.log(probs / probs.sum(-1, keepdim=True))),
    )


# ----------------------------------------------------------------------------- greedy


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_cached_equals_uncached(attention, seed):
    model = gru_model(attention, seed=seed)
    src, valid_lens = source(seed=seed)
    cached, cached_weights = greedy_decode(
        model, src, valid_lens, BOS, EOS, num_steps=8, use_cache=True
    )
    uncached, uncached_weights = greedy_decode(
        model, src, valid_lens, BOS, EOS, num_steps=8, use_cache=False
    )
    assert torch.equal(cached, uncached)
    if attention:
        assert cached_weights.shape == (
            src.shape[0],
            cached.shape[1],
            src.shape[1],
        )
        torch.testing.assert_close(
            cached_weights, uncached_weights, rtol=1e-10, atol=1e-12
        )
    else:
        assert cached_weights is None and uncached_weights is None


@pytest.mark.parametrize("attention", [False, True])
def test_greedy_picks_the_argmax_of_the_teacher_forced_scores(attention):
    model = gru_model(attention, seed=3)
    src, valid_lens = source()
    tokens, _ = greedy_decode(model, src, valid_lens, BOS, EOS, num_steps=8)
    dec_in = torch.cat(
        (torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]), dim=1
    )
    argmax = model(src, dec_in, valid_lens).argmax(-1)
    for row, best in zip(tokens.tolist(), argmax.tolist()):
        kept = len(cut_at_eos(row, EOS)) + (
            EOS in row
        )  # up to and including the first <eos>
        assert row[:kept] == best[:kept]


def test_greedy_stops_at_eos_and_fills_with_eos():
    model = markov_model()
    src = torch.zeros(2, 3, dtype=torch.long)
    tokens, weights = greedy_decode(
        model, src, torch.tensor([3, 3]), BOS, EOS, num_steps=10
    )
    assert tokens.tolist() == [[3, EOS], [3, EOS]] and weights is None
    # a row that starts from another state: force it by a model whose <bos> row leads to 'b', 'c'
    model.decoder.log_probs.data[BOS] = torch.log(
        torch.tensor([1e-9, 1e-9, 1e-9, 1e-9, 1.0, 1e-9], dtype=torch.float64)
    )
    model.decoder.log_probs.data[4] = torch.log(
        torch.tensor([1e-9, 1e-9, 0.1, 1e-9, 1e-9, 0.9], dtype=torch.float64)
    )
    tokens, _ = greedy_decode(
        model, src, torch.tensor([3, 3]), BOS, EOS, num_steps=2
    )
    assert tokens.tolist() == [[4, 5], [4, 5]]  # out of steps before <eos>


def test_greedy_eos_fill_in_a_mixed_batch():
    """Row 0 ends after two tokens, row 1 after three; row 0 is then filled with <eos>."""

    def table(*path):
        log_probs = torch.full((6, 6), -30.0, dtype=torch.float64)
        for previous, following in zip((BOS,) + path, path):
            log_probs[previous, following] = 0.0
        log_probs[EOS, EOS] = 0.0
        return log_probs

    class TwoTables(Decoder):
        def __init__(self):
            super().__init__()
            self.short, self.long = table(5, EOS), table(3, 4, EOS)

        def init_state(self, enc_all_outputs, *args):
            return enc_all_outputs[
                :, :1
            ].bool()  # (B, 1): which table each row follows

        def forward(self, X, state):
            return (
                torch.where(state[..., None], self.long[X], self.short[X]),
                state,
            )

    model = EncoderDecoder(PassEncoder(), TwoTables())
    src = torch.tensor([[0, 0], [1, 0]])
    for use_cache in (True, False):
        tokens, _ = greedy_decode(
            model,
            src,
            torch.tensor([2, 2]),
            BOS,
            EOS,
            num_steps=6,
            use_cache=use_cache,
        )
        assert tokens.tolist() == [[5, EOS, EOS], [3, 4, EOS]]


def test_decoding_restores_training_mode():
    model = gru_model(True)
    model.train()
    src, valid_lens = source()
    greedy_decode(model, src, valid_lens, BOS, EOS, 4)
    beam_search(model, src, valid_lens, BOS, EOS, 4, beam_size=2)
    assert model.training


# ----------------------------------------------------------------------------- scoring


def test_sequence_log_prob_matches_step_by_step_scores():
    model = gru_model(True, seed=4)
    src, valid_lens = source()
    tokens = torch.tensor(
        [[3, 4, EOS, EOS], [5, 6, 3, 4], [EOS, EOS, EOS, EOS]]
    )
    expected = []
    with torch.no_grad():
        for b in range(3):
            state = model.decoder.init_state(
                model.encoder(src[b : b + 1], valid_lens[b : b + 1]),
                valid_lens[b : b + 1],
            )
            previous, total = BOS, 0.0
            for token in cut_at_eos(tokens[b].tolist(), EOS) + (
                [EOS] if EOS in tokens[b].tolist() else []
            ):
                Y, state = model.decoder(torch.tensor([[previous]]), state)
                total += F.log_softmax(Y[0, -1], -1)[token].item()
                previous = token
            expected.append(total)
    ours = sequence_log_prob(model, src, valid_lens, tokens, BOS, EOS)
    torch.testing.assert_close(
        ours, torch.tensor(expected, dtype=ours.dtype), rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize(
    "tokens, bos, eos, error, match",
    [
        (torch.tensor([[3.0, 4.0]] * 3), BOS, EOS, TypeError, "tokens"),
        (torch.tensor([[3, 7]] * 3), BOS, EOS, ValueError, "tokens"),  # V = 7
        (torch.tensor([[7, 3]] * 3), BOS, EOS, ValueError, "tokens"),
        (torch.tensor([[-1, 3]] * 3), BOS, EOS, ValueError, "tokens"),
        (torch.tensor([3, 4, 5]), BOS, EOS, ValueError, "tokens"),
        (torch.tensor([[3, 4]] * 3), 1.0, EOS, TypeError, "bos"),
        (torch.tensor([[3, 4]] * 3), BOS, -2, ValueError, "eos"),
        (torch.tensor([[3, 4]] * 3), BOS, "2", TypeError, "eos"),
    ],
)
def test_sequence_log_prob_refuses_bad_tokens_and_ids(
    tokens, bos, eos, error, match
):
    src, valid_lens = source()
    with pytest.raises(error, match=match):
        sequence_log_prob(gru_model(True), src, valid_lens, tokens, bos, eos)


def test_sequence_log_prob_checks_ids_against_the_scores_without_an_embedding():
    # The Markov decoder has no embedding: V = 6 is known from its scores,
    # and the last id is read only by the gather (an IndexError before).
    src, valid_lens = source()
    with pytest.raises(ValueError, match="tokens"):
        sequence_log_prob(
            markov_model(),
            src,
            valid_lens,
            torch.tensor([[3, 6]] * 3),
            BOS,
            EOS,
        )


# ----------------------------------------------------------------------------- beam search


def exhaustive_beam(model, src, valid_lens, vocab, num_steps, alpha):
    """Beam search with a beam wide enough to keep every hypothesis."""
    beam_size = vocab**num_steps
    return beam_search(
        model, src, valid_lens, BOS, EOS, num_steps, beam_size, alpha
    )


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 0.75])
def test_beam_of_one_is_greedy(attention, alpha):
    model = gru_model(attention, seed=5)
    src, valid_lens = source()
    greedy, _ = greedy_decode(model, src, valid_lens, BOS, EOS, num_steps=7)
    beam = beam_search(
        model, src, valid_lens, BOS, EOS, num_steps=7, beam_size=1, alpha=alpha
    )
    assert torch.equal(beam, greedy)


def _all_hypotheses(vocab: int, num_steps: int) -> list[list[int]]:
    hypotheses = []
    for length in range(1, num_steps + 1):
        for body in itertools.product(
            [t for t in range(vocab) if t != EOS], repeat=length - 1
        ):
            hypotheses.append(list(body) + [EOS])
    hypotheses += [
        list(body)
        for body in itertools.product(
            [t for t in range(vocab) if t != EOS], repeat=num_steps
        )
    ]
    return hypotheses


@pytest.mark.parametrize("alpha", [0.0, 0.75])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exhaustive_beam_finds_the_best_sequence(alpha, seed):
    """With a beam wider than the number of hypotheses, beam search is exact: compare with brute force."""
    vocab, num_steps = 4, 3
    model = gru_model(True, tgt_vocab=vocab, seed=seed)
    src, valid_lens = source(batch_size=1, seed=seed)
    hypotheses = _all_hypotheses(vocab, num_steps)
    padded = torch.tensor(
        [h + [EOS] * (num_steps - len(h)) for h in hypotheses]
    )
    log_probs = sequence_log_prob(
        model,
        src.expand(len(hypotheses), -1),
        valid_lens.expand(len(hypotheses)),
        padded,
        BOS,
        EOS,
    )
    normalised = [
        lp / len(h) ** alpha for lp, h in zip(log_probs.tolist(), hypotheses)
    ]
    best = max(range(len(hypotheses)), key=normalised.__getitem__)
    beam = exhaustive_beam(model, src, valid_lens, vocab, num_steps, alpha)
    assert cut_at_eos(beam[0].tolist(), EOS) == cut_at_eos(
        hypotheses[best], EOS
    )
    assert (EOS in beam[0].tolist()) == (EOS in hypotheses[best])


def test_beam_finds_what_greedy_misses():
    model = markov_model()
    src, valid_lens = torch.zeros(1, 2, dtype=torch.long), torch.tensor([2])
    greedy, _ = greedy_decode(model, src, valid_lens, BOS, EOS, num_steps=5)
    beam = beam_search(
        model, src, valid_lens, BOS, EOS, num_steps=5, beam_size=2, alpha=0.0
    )
    assert greedy.tolist() == [[3, EOS]] and beam.tolist() == [[4, EOS]]
    greedy_lp, beam_lp = (
        sequence_log_prob(model, src, valid_lens, t, BOS, EOS).item()
        for t in (greedy, beam)
    )
    assert greedy_lp == pytest.approx(math.log(0.55 * 0.34), rel=1e-6)
    assert beam_lp == pytest.approx(math.log(0.45 * 0.95), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_exhaustive_beam_scores_at_least_greedy(seed):
    """beam log p >= greedy log p (alpha = 0). Certain for an exhaustive beam (exact search); for a
    narrow beam it is usual but not guaranteed (greedy's prefix can fall out of the beam).
    """
    vocab, num_steps = 5, 3
    model = gru_model(False, tgt_vocab=vocab, seed=seed)
    src, valid_lens = source(batch_size=2, seed=seed)
    greedy, _ = greedy_decode(model, src, valid_lens, BOS, EOS, num_steps)
    beam = exhaustive_beam(model, src, valid_lens, vocab, num_steps, 0.0)
    greedy_lp = sequence_log_prob(model, src, valid_lens, greedy, BOS, EOS)
    beam_lp = sequence_log_prob(model, src, valid_lens, beam, BOS, EOS)
    assert torch.all(beam_lp >= greedy_lp - 1e-12)


def test_beam_rows_are_searched_independently():
    model = gru_model(True, seed=6)
    src, valid_lens = source()
    together = beam_search(model, src, valid_lens, BOS, EOS, 6, beam_size=3)
    for b in range(src.shape[0]):
        alone = beam_search(
            model,
            src[b : b + 1],
            valid_lens[b : b + 1],
            BOS,
            EOS,
            6,
            beam_size=3,
        )
        assert cut_at_eos(alone[0].tolist(), EOS) == cut_at_eos(
            together[b].tolist(), EOS
        )


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "src, valid_lens, error",
    [
        (torch.zeros(5, dtype=torch.long), torch.tensor([5]), ValueError),
        (torch.zeros(2, 5), torch.tensor([5, 5]), TypeError),
        (torch.zeros(2, 5, dtype=torch.long), torch.tensor([5]), ValueError),
        (torch.zeros(2, 5, dtype=torch.long), [5, 5], TypeError),
    ],
)
def test_decoders_refuse_bad_sources(src, valid_lens, error):
    model = gru_model(False)
    with pytest.raises(error, match="src"):
        greedy_decode(model, src, valid_lens, BOS, EOS, 3)
    with pytest.raises(error, match="src"):
        beam_search(model, src, valid_lens, BOS, EOS, 3, beam_size=2)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"num_steps": 0}, "num_steps"),
        ({"beam_size": 0}, "beam_size"),
        ({"alpha": -1.0}, "alpha"),
    ],
)
def test_beam_refuses_bad_settings(kwargs, words):
    src, valid_lens = source()
    arguments = {"num_steps": 3, "beam_size": 2, "alpha": 0.75} | kwargs
    with pytest.raises(ValueError, match=words):
        beam_search(gru_model(False), src, valid_lens, BOS, EOS, **arguments)
    if "num_steps" in kwargs:
        with pytest.raises(ValueError, match=words):
            greedy_decode(
                gru_model(False),
                src,
                valid_lens,
                BOS,
                EOS,
                kwargs["num_steps"],
            )


# ----------------------------------------------------------------------------- translate


def test_translate_returns_the_references_a_model_has_memorised():
    """From strings to strings: a model trained until it knows three pairs by heart must give
    back their references, greedy and with a beam, whatever else is in the batch."""
    from course_pkg.data.translation import Vocab, build_arrays, tokenize_pairs
    from course_pkg.inference.decode import translate
    from course_pkg.training.loop import train_seq2seq

    pairs = [
        ("i see the cat .", "je vois le chat ."),
        ("the dog sleeps .", "le chien dort ."),
        ("we read .", "nous lisons ."),
    ]
    src_tokens, tgt_tokens = tokenize_pairs(pairs)
    src_vocab, tgt_vocab = Vocab(src_tokens), Vocab(tgt_tokens)
    torch.manual_seed(0)
    model = EncoderDecoder(
        Seq2SeqEncoder(len(src_vocab), 16, 32, 1),
        Seq2SeqAttentionDecoder(len(tgt_vocab), 16, 32, 1),
    )
    batch = build_arrays(pairs, src_vocab, tgt_vocab, num_steps=6)
    train_seq2seq(model, [batch] * 40, 0.02, 3, tgt_vocab, progress=False)
    sentences = [en for en, _ in pairs]
    references = [fr.split() for _, fr in pairs]
    for beam_size in (1, 2):
        assert (
            translate(
                model, sentences, src_vocab, tgt_vocab, 6, beam_size=beam_size
            )
            == references
        )
        # one sentence alone gives what it gives in the batch
        assert (
            translate(
                model,
                sentences[1:2],
                src_vocab,
                tgt_vocab,
                6,
                beam_size=beam_size,
            )
            == references[1:2]
        )
