"""The rest of the public API under attack (issue 15): strings where lists
are expected, non-finite or non-int numbers, ids that are not ids, empty
batches, literal special tokens, and the rule that a refused call changes
nothing (weights, random generators)."""

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import Vocab, source_array, tokenize
from course_pkg.device import seed_everything
from course_pkg.evaluation.bleu import bleu, corpus_bleu
from course_pkg.inference.decode import beam_search, greedy_decode, translate
from course_pkg.models.encoder_decoder import EncoderDecoder
from course_pkg.models.transformer import Transformer, TransformerEncoder
from course_pkg.nn.masks import causal_mask, sequence_mask
from course_pkg.training.loop import masked_cross_entropy, train_seq2seq

WORDS = st.lists(st.sampled_from(["a", "b", "c", "<pad>", "<eos>", "<unk>"]))
SENTENCE = WORDS.map(" ".join)


def tiny_transformer(vocab_size=8, seed=0):
    torch.manual_seed(seed)
    return Transformer(vocab_size, vocab_size, 8, 16, 2, 1, 0.0).eval()


# 40 calls: a str is never read as a list of one-letter items.
@settings(max_examples=40, deadline=None)
@given(text=st.text(min_size=1, max_size=8), which=st.integers(0, 3))
def test_a_str_where_a_list_is_expected_is_a_type_error(text, which):
    vocab = Vocab([["a", "b"]])
    calls = [
        (lambda: corpus_bleu(text, [text]), "hypotheses"),
        (lambda: corpus_bleu([text], text), "references"),
        (lambda: Vocab([["a"]], reserved_tokens=text), "reserved_tokens"),
        (lambda: source_array(text, vocab, 4), "sentences"),
    ]
    call, name = calls[which]
    with pytest.raises(TypeError, match=name):
        call()


def test_translate_refuses_a_str():
    vocab = Vocab([["a", "b"]])
    with pytest.raises(TypeError, match="sentences"):
        translate(tiny_transformer(), "a b", vocab, vocab, 4)


def test_bleu_still_accepts_one_sentence_as_a_str():
    sentence = "the cat sat on the mat"
    assert bleu(sentence, sentence) == 1.0
    assert corpus_bleu([sentence], [sentence]) == pytest.approx(1.0)


# 50 calls.
@settings(max_examples=50, deadline=None)
@given(sentences=st.lists(SENTENCE, max_size=4), num_steps=st.integers(1, 6))
def test_a_literal_pad_does_not_shorten_a_source(sentences, num_steps):
    vocab = Vocab([["a", "b", "c"]])
    src, valid_len = source_array(sentences, vocab, num_steps)
    assert src.shape == (len(sentences), num_steps)
    for row, length, sentence in zip(src, valid_len, sentences):
        tokens = tokenize(sentence)
        assert length == min(len(tokens) + 1, num_steps)
        if len(tokens) < num_steps:
            assert row[length - 1] == vocab.eos  # its <eos> stays visible


# 60 calls.
@settings(max_examples=60, deadline=None)
@given(
    B=st.integers(0, 3),
    T=st.integers(1, 4),
    V=st.integers(1, 5),
    pad=st.sampled_from([-100, 0, 2]),
    seed=st.integers(0, 10_000),
    data=st.data(),
)
def test_masked_cross_entropy_equals_ignore_index(B, T, V, pad, seed, data):
    choices = [pad, *range(V)]
    Y = torch.tensor(
        data.draw(
            st.lists(st.sampled_from(choices), min_size=B * T, max_size=B * T)
        ),
        dtype=torch.long,
    ).reshape(B, T)
    Y_hat = torch.randn(B, T, V, generator=torch.Generator().manual_seed(seed))
    ours = masked_cross_entropy(Y_hat, Y, pad)
    if not (Y != pad).any():
        assert ours == 0
        return
    theirs = F.cross_entropy(Y_hat.transpose(1, 2), Y, ignore_index=pad)
    torch.testing.assert_close(ours, theirs)


BAD_NUMBERS = st.one_of(
    st.sampled_from([0, 0.0, -1.0, float("inf"), float("nan"), -1e-9]),
    st.sampled_from(["0.1", None, [0.1], True]),
)


# 30 calls: nothing is trained before the refusal.
@settings(max_examples=30, deadline=None)
@given(which=st.sampled_from(["lr", "grad_clip"]), value=BAD_NUMBERS)
def test_bad_learning_settings_are_refused_before_training(which, value):
    if which == "grad_clip" and value is None:
        return  # None means "no clipping"
    model = tiny_transformer()
    before = [p.clone() for p in model.parameters()]
    batch = (torch.ones(2, 3, dtype=torch.long),) * 4
    kwargs = {"lr": 0.1, "grad_clip": 1.0, which: value}
    with pytest.raises((TypeError, ValueError), match=which):
        train_seq2seq(
            model, [batch], num_epochs=1, tgt_vocab_or_pad=0, **kwargs
        )
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# 30 calls: no generator is reseeded when the seed is refused.
@settings(max_examples=30, deadline=None)
@given(
    seed=st.one_of(
        st.integers(max_value=-1),
        st.integers(min_value=2**32),
        st.floats(),
        st.text(max_size=2),
        st.booleans(),
    )
)
def test_a_bad_seed_changes_no_generator(seed):
    states = (random.getstate(), np.random.get_state()[1].copy())
    torch_state = torch.get_rng_state()
    with pytest.raises((TypeError, ValueError), match="seed"):
        seed_everything(seed)
    assert random.getstate() == states[0]
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), torch_state)


# 40 calls.
@settings(max_examples=40, deadline=None)
@given(
    X=st.sampled_from(
        [
            torch.ones(2, 3),  # float ids
            torch.ones(2, 3, dtype=torch.bool),
            torch.full((2, 3), 8),  # id == V
            torch.full((2, 3), -1),
            torch.ones(3, dtype=torch.long),  # no batch axis
            "a b c",
        ]
    ),
    lens=st.sampled_from(
        [None, torch.tensor([1.0, 2.0]), torch.tensor([4, 1]), [1, 2]]
    ),
)
def test_bad_token_ids_and_lengths_are_named(X, lens):
    encoder = TransformerEncoder(8, 8, 16, 2, 1, 0.0)
    with pytest.raises((TypeError, ValueError), match="X|valid_lens"):
        encoder(X, lens)


# 30 calls.
@settings(max_examples=30, deadline=None)
@given(
    vocab_size=st.one_of(
        st.integers(-2, 0), st.floats(1, 9), st.text(max_size=2)
    ),
)
def test_a_vocabulary_of_no_size_is_refused(vocab_size):
    with pytest.raises((TypeError, ValueError), match="vocab_size"):
        TransformerEncoder(vocab_size, 8, 16, 2, 1, 0.0)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: sequence_mask(torch.tensor([1, 2]), 2.5), TypeError),
        (lambda: sequence_mask(torch.tensor([1.0]), 2), TypeError),
        (lambda: sequence_mask([1, 2], 2), TypeError),
        (lambda: causal_mask(2.0, 3), TypeError),
        (lambda: causal_mask(-1, 3), ValueError),
        (lambda: causal_mask(3, 2), ValueError),
    ],
)
def test_mask_helpers_name_their_arguments(call, error):
    with pytest.raises(error, match="valid_lens|max_len|num_queries|K >= Q"):
        call()


@pytest.mark.parametrize("lens", [[-1, 2], [1, 9], [[0, 4], [1, 2]]])
def test_sequence_mask_refuses_lengths_outside_0_to_max_len(lens):
    with pytest.raises(ValueError, match="valid_lens"):
        sequence_mask(torch.tensor(lens), 3)
    assert sequence_mask(torch.tensor([0, 3]), 3).tolist() == [
        [[False] * 3],
        [[True] * 3],
    ]
    meta = torch.tensor(lens, device="meta")  # no values: shape only
    expected = (2, 1, 3) if meta.dim() == 1 else (2, 2, 3)
    mask = sequence_mask(meta, 3)
    assert mask.shape == expected and mask.device.type == "meta"


def test_beam_search_on_an_empty_batch_and_without_lengths():
    model: EncoderDecoder = tiny_transformer()
    src = torch.randint(3, 8, (2, 4))
    full = torch.full((2,), 4)
    assert beam_search(model, src[:0], full[:0], 1, 2, 5, 3).shape == (0, 0)
    assert torch.equal(
        beam_search(model, src, None, 1, 2, 5, 3),
        beam_search(model, src, full, 1, 2, 5, 3),
    )
    tokens, _ = greedy_decode(model, src, None, 1, 2, 5)
    assert tokens.shape[0] == 2


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"bos": 1.0}, "bos"),
        ({"eos": -1}, "eos"),
        ({"alpha": float("nan")}, "alpha"),
    ],
)
def test_beam_search_names_bad_ids_and_alpha(kwargs, name):
    arguments = {"bos": 1, "eos": 2, "num_steps": 3, "beam_size": 2, **kwargs}
    with pytest.raises((TypeError, ValueError), match=name):
        beam_search(
            tiny_transformer(),
            torch.ones(1, 2, dtype=torch.long),
            None,
            **arguments,
        )


# One rule for ints: a size, a count, an offset or a seed is a Python int (a
# size is kept in modules and configs and used in shapes, a seed goes to
# random.Random: a NumPy integer would fail there, later and far from the
# call); an id or an index comes out of arrays, is only read, and may be a
# NumPy integer. Each door below reaches the shared checks.
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda n: causal_mask(2, n), "num_keys"),
        (lambda n: sequence_mask(torch.tensor([1]), n), "max_len"),
        (lambda n: TransformerEncoder(8, n, 16, 2, 1, 0.0), "num_hiddens"),
        (lambda n: source_array(["a b"], Vocab([["a", "b"]]), n), "num_steps"),
        (lambda n: Vocab([["a"]], min_freq=n - 4), "min_freq"),
        (lambda n: english_french_corpus(0, n + 6), "num_pairs"),
        (lambda n: english_french_corpus(n, 10), "seed"),
    ],
)
def test_a_numpy_integer_is_refused_as_a_size_or_a_seed(call, name):
    call(4)  # the same call with a Python int works
    with pytest.raises(TypeError, match=rf"{name} must be an int, got int64"):
        call(np.int64(4))


def test_a_numpy_integer_is_accepted_as_an_id():
    vocab = Vocab([["a", "b"]])
    assert vocab.to_tokens(np.int64(4)) == vocab.to_tokens(4)
    assert vocab.to_tokens(list(np.arange(5))) == vocab.to_tokens(
        list(range(5))
    )
