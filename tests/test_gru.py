"""Tests for course_pkg.nn.gru: the initialisation against d2l's, and the size checks every GRU model
runs before it builds anything."""

from __future__ import annotations

import d2l.torch as d2l
import pytest
import torch
from torch import nn

from course_pkg.models.luong import LuongAttentionDecoder
from course_pkg.models.seq2seq import (
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)
from course_pkg.nn.gru import init_seq2seq
from tests.seq2seq_cases import EMBED, HIDDEN, SRC_V

GRU_MODELS = [
    Seq2SeqEncoder,
    Seq2SeqDecoder,
    Seq2SeqAttentionDecoder,
    LuongAttentionDecoder,
]


def _layers() -> nn.Module:
    """A Linear, a two-layer GRU (weights and biases), and modules neither init touches."""
    return nn.Sequential(
        nn.Embedding(SRC_V, EMBED),
        nn.GRU(EMBED, HIDDEN, 2),
        nn.Linear(HIDDEN, SRC_V),
        nn.LayerNorm(HIDDEN),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_init_seq2seq_matches_d2l(seed):
    torch.manual_seed(seed)
    ours = _layers()
    reference = _layers()
    reference.load_state_dict(ours.state_dict())
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    torch.manual_seed(100 + seed)
    ours.apply(init_seq2seq)
    torch.manual_seed(100 + seed)
    reference.apply(d2l.init_seq2seq)
    after, expected = ours.state_dict(), reference.state_dict()
    assert after.keys() == expected.keys()
    for name in after:
        torch.testing.assert_close(after[name], expected[name], rtol=0, atol=0)
    # the init did something: d2l's changes the Linear and GRU weight matrices, not the biases
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed == {
        "1.weight_ih_l0",
        "1.weight_hh_l0",
        "1.weight_ih_l1",
        "1.weight_hh_l1",
        "2.weight",
    }


@pytest.mark.parametrize("num_layers", [1, 2])
def test_encoder_is_built_and_initialised_like_d2l(num_layers):
    torch.manual_seed(3)
    reference = d2l.Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers)
    torch.manual_seed(3)
    ours = Seq2SeqEncoder(SRC_V, EMBED, HIDDEN, num_layers)
    expected = {
        key.replace("rnn.rnn.", "rnn."): value
        for key, value in reference.state_dict().items()
    }
    got = ours.state_dict()
    assert got.keys() == expected.keys()
    for name in got:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


GOOD = {
    "vocab_size": SRC_V,
    "embed_size": EMBED,
    "num_hiddens": HIDDEN,
    "num_layers": 2,
    "dropout": 0.1,
}

BAD = [
    (name, value, error)
    for name in ("vocab_size", "embed_size", "num_hiddens", "num_layers")
    for value, error in (
        (2.0, TypeError),
        ("8", TypeError),
        (True, TypeError),
        (0, ValueError),
        (-1, ValueError),
    )
] + [
    ("dropout", "0.1", TypeError),
    ("dropout", None, TypeError),
    ("dropout", -0.1, ValueError),
    ("dropout", 1.0, ValueError),
    ("dropout", 1.5, ValueError),
]


@pytest.mark.parametrize("model", GRU_MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize(("name", "value", "error"), BAD)
def test_bad_size_or_dropout_is_refused_before_anything_is_built(
    model, name, value, error
):
    rng_before = torch.get_rng_state()
    with pytest.raises(error, match=name):
        model(**{**GOOD, name: value})
    # refused before any layer drew its random weights
    assert torch.equal(torch.get_rng_state(), rng_before)


@pytest.mark.parametrize("model", GRU_MODELS, ids=lambda m: m.__name__)
def test_good_sizes_build(model):
    built = model(**GOOD)
    assert built.rnn.num_layers == GOOD["num_layers"]
    assert built.rnn.hidden_size == GOOD["num_hiddens"]
    assert built.embedding.weight.shape == (SRC_V, EMBED)
