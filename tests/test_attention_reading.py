"""Test-set statistics of attention argmaxes, and gradient × input
attribution (Bahdanau, Transformer chapters)."""

from __future__ import annotations

import pytest
import torch

from course_pkg.data.corpus import english_french_corpus
from course_pkg.experiments.attention_reading import (
    POSTPOSED_ADJECTIVES,
    adjective_attention,
    compare_rankings,
    gradient_x_input,
    seq2seq_attribution,
)
from course_pkg.models.seq2seq import Seq2SeqSettings, seq2seq_model


def one_hot_rows(argmaxes: list[list[int]], S: int, T: int) -> torch.Tensor:
    weights = torch.full((len(argmaxes), S, T), 0.01)
    for n, row in enumerate(argmaxes):
        for s, t in enumerate(row):
            weights[n, s, t] = 1.0
    return weights


SOURCE = "the black cat sleeps . <eos>".split()
REFERENCE = "le chat noir dort .".split()


def test_counts_hits_chance_and_reordering():
    outputs = [REFERENCE, REFERENCE, REFERENCE]
    # rows: le chat noir dort .
    argmaxes = [
        [0, 2, 1, 3, 4],  # noun row -> cat, adjective row -> black: both
        [0, 0, 1, 3, 4],  # adjective right, noun row elsewhere
        [0, 2, 2, 3, 4],  # adjective row on the noun: a miss
    ]
    reading = adjective_attention(
        [SOURCE] * 3, outputs, [REFERENCE] * 3, one_hot_rows(argmaxes, 5, 6)
    )
    assert reading.rows == 3 and reading.reorders == 3
    assert reading.on_adjective == pytest.approx(2 / 3)
    assert reading.reorder_followed == pytest.approx(1 / 3)
    assert reading.chance == pytest.approx(1 / 6)
    assert reading.reorder_chance == pytest.approx(1 / 36)


def test_wrong_or_untranslated_adjectives_are_not_counted():
    good = "le chat noir dort .".split()
    wrong = "le chat blanc dort .".split()  # not in the reference
    reading = adjective_attention(
        [SOURCE, SOURCE],
        [good, wrong],
        [REFERENCE, REFERENCE],
        one_hot_rows([[0, 2, 1, 3, 4], [0, 2, 1, 3, 4]], 5, 6),
    )
    assert reading.rows == 1 and reading.on_adjective == 1.0


def test_every_postposed_adjective_of_the_corpus_has_its_stem():
    # In every pair, a post-posed English adjective has a French form that
    # starts with its stem: the table matches the corpus.
    for pairs in english_french_corpus(seed=0):
        for english, french in pairs:
            for adjective, stem in POSTPOSED_ADJECTIVES.items():
                if adjective in english.split():
                    assert any(w.startswith(stem) for w in french.split())


def test_bad_input_is_refused_with_its_name():
    w = one_hot_rows([[0, 2, 1, 3, 4]], 5, 6)
    with pytest.raises(TypeError, match="weights"):
        adjective_attention([SOURCE], [REFERENCE], [REFERENCE], [[0.0]])
    with pytest.raises(TypeError, match="outputs"):
        adjective_attention([SOURCE], ["le chat"], [REFERENCE], w)
    with pytest.raises(ValueError, match="same length"):
        adjective_attention([SOURCE], [], [REFERENCE], w)
    with pytest.raises(ValueError, match="smaller"):
        adjective_attention([SOURCE], [REFERENCE], [REFERENCE], w[:, :3])
    with pytest.raises(ValueError, match="no correctly written"):
        adjective_attention([SOURCE], [["le", "chat"]], [REFERENCE], w)


# ----------------------------------------------------------- attribution


def test_gradient_x_input_of_a_linear_model_is_its_contributions():
    # o_{b,s} = sum_t w_{s,t} . x_{b,t} + c_s: the attribution of x_{b,t} to
    # o_{b,s} is exactly w_{s,t} . x_{b,t}, and they add up to o - c.
    gen = torch.Generator().manual_seed(0)
    B, S, T, E = 3, 4, 5, 6
    x = torch.randn(B, T, E, generator=gen, dtype=torch.float64)
    x.requires_grad_()
    w = torch.randn(S, T, E, generator=gen, dtype=torch.float64)
    c = torch.randn(S, generator=gen, dtype=torch.float64)
    objectives = torch.einsum("bte,ste->bs", x, w) + c
    attributions = gradient_x_input(x, objectives)
    contributions = torch.einsum("bte,ste->bst", x.detach(), w)
    torch.testing.assert_close(attributions, contributions)
    torch.testing.assert_close(attributions.sum(-1), objectives.detach() - c)


def test_gradient_x_input_refuses_bad_input():
    x = torch.randn(2, 3, 4, requires_grad=True)
    o = x.sum(-1)[:, :2]
    with pytest.raises(TypeError, match="objectives"):
        gradient_x_input(x, [1.0])
    with pytest.raises(ValueError, match="differ in B"):
        gradient_x_input(x, o[:1])
    with pytest.raises(ValueError, match=r"\(B, T, E\)"):
        gradient_x_input(x[0], o)
    with pytest.raises(ValueError, match="require grad"):
        gradient_x_input(x.detach(), o.detach())


def _tiny_attention_model():
    torch.manual_seed(0)
    settings = Seq2SeqSettings(embed_size=4, num_hiddens=6, dropout=0.0)
    return seq2seq_model(True, 9, 11, settings).double()


def test_seq2seq_attribution_matches_a_manual_pass_and_rows_are_independent():
    model = _tiny_attention_model()
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(0, 9, (3, 5), generator=gen)
    lens = torch.tensor([5, 2, 4])
    tgt_in = torch.randint(0, 11, (3, 4), generator=gen)
    tgt_out = torch.randint(0, 11, (3, 4), generator=gen)
    attributions, weights = seq2seq_attribution(
        model, src, lens, tgt_in, tgt_out
    )
    assert attributions.shape == (3, 4, 5) and weights.shape == (3, 4, 5)
    # by hand: the embeddings made a leaf, the encoder's GRU run on them
    for b in range(3):
        emb = model.encoder.embedding(src[b : b + 1].t()).detach()
        emb.requires_grad_()
        enc = model.encoder.rnn(emb)
        state = model.decoder.init_state(enc, lens[b : b + 1])
        Y, _ = model.decoder(tgt_in[b : b + 1], state)
        log_p = torch.log_softmax(Y[0], -1)  # (S, V)
        for s in range(4):
            (grad,) = torch.autograd.grad(
                log_p[s, tgt_out[b, s]], emb, retain_graph=True
            )
            expected = (grad * emb).sum(-1)[:, 0]  # (T,)
            torch.testing.assert_close(attributions[b, s], expected.detach())
    assert model.training  # the mode is restored


def test_compare_rankings_counts_agreement_and_rank_correlation():
    a = torch.tensor([[[0.1, 0.7, 0.2, 9.0], [0.5, 0.3, 0.2, 9.0]]])
    same = a * 2
    reverse = -a
    reading = compare_rankings(a, same, [3], [2])
    assert reading.rows == 2 and reading.argmax_agree == 1.0
    assert reading.spearman == pytest.approx(1.0)
    assert reading.chance == pytest.approx(1 / 3)
    reading = compare_rankings(a, reverse, [3], [2])
    assert reading.argmax_agree == 0.0
    assert reading.spearman == pytest.approx(-1.0)
    # only the rows and columns inside the lengths are read
    assert compare_rankings(a, same, [3], [1]).rows == 1


def test_compare_rankings_refuses_bad_input():
    a = torch.rand(2, 3, 4)
    with pytest.raises(TypeError, match="second"):
        compare_rankings(a, a.tolist(), [4, 4], [3, 3])
    with pytest.raises(ValueError, match=r"\(N, S, T\)"):
        compare_rankings(a, a[:1], [4, 4], [3, 3])
    with pytest.raises(ValueError, match="N=2"):
        compare_rankings(a, a, [4], [3, 3])
    with pytest.raises(ValueError, match="src_lens"):
        compare_rankings(a, a, [5, 4], [3, 3])
    with pytest.raises(ValueError, match="no row"):
        compare_rankings(a, a, [4, 4], [0, 0])
