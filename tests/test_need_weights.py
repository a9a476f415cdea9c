"""The models' one rule for ``need_weights`` (course_pkg.nn.attention.resolve_need_weights).

Every model's ``forward`` takes ``need_weights: bool | None = None``; None reads
the model's ``need_weights`` attribute; the attribute left at None keeps the
attention weights in eval mode and takes the fused path (no weights) in
training mode. BERT's attribute starts at False (its chapters read no weights).
"""

from __future__ import annotations

import pytest
import torch

from course_pkg.models.bert import BERTEncoder
from course_pkg.models.gpt import GPT
from course_pkg.models.gpt2 import GPT2
from course_pkg.models.llama import Llama
from course_pkg.models.transformer import Transformer
from course_pkg.models.variant_gpt import VariantGPT
from course_pkg.nn.attention import resolve_need_weights


def _tokens(batch: int = 2, steps: int = 5, vocab: int = 11) -> torch.Tensor:
    return torch.randint(
        0, vocab, (batch, steps), generator=torch.Generator().manual_seed(0)
    )


def _decoder_only() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [
        GPT(11, 8, 16, 2, 2, 0.0, max_len=16),
        GPT2(11, 8, 2, 2, 16),
        VariantGPT(11, 8, 16, 2, 2, 0.0, max_len=16, num_kv_heads=1),
        Llama(11, 8, 16, 2, 2, num_kv_heads=1, max_len=16),
    ]


def _kept(model: torch.nn.Module) -> list[bool]:
    return [w is not None for w in model.attention_weights]


@pytest.mark.parametrize("index", range(4))
def test_decoder_only_models_keep_the_weights_in_eval_mode_only(index):
    model = _decoder_only()[index]
    X = _tokens()
    model.train()
    model(X)
    assert _kept(model) == [False, False]
    model.eval()
    model(X)
    assert _kept(model) == [True, True]
    weights = model.attention_weights[0]
    assert weights.shape[-2:] == (5, 5)
    # causal: nothing above the diagonal, rows sum to one
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


@pytest.mark.parametrize("index", range(4))
def test_the_argument_beats_the_attribute_and_the_attribute_beats_the_mode(
    index,
):
    model = _decoder_only()[index].eval()
    X = _tokens()
    model(X, need_weights=False)
    assert _kept(model) == [False, False]
    model.need_weights = False
    model(X)
    assert _kept(model) == [False, False]
    model(X, need_weights=True)
    assert _kept(model) == [True, True]
    model.train().need_weights = True
    model(X)
    assert _kept(model) == [True, True]


@pytest.mark.parametrize("index", range(4))
def test_both_paths_give_the_same_scores(index):
    model = _decoder_only()[index].double().eval()
    X = _tokens()
    torch.testing.assert_close(
        model(X, need_weights=True),
        model(X, need_weights=False),
        rtol=0,
        atol=1e-12,
    )


def test_the_transformer_follows_the_rule_and_sets_both_stacks():
    torch.manual_seed(0)
    model = Transformer(11, 11, 8, 16, 2, 1, 0.0)
    src, tgt = _tokens(), _tokens(steps=4)
    model.train()(src, tgt)
    assert model.encoder.attention_weights == [None]
    assert model.decoder.attention_weights == [[None], [None]]
    model.eval()(src, tgt)
    assert model.encoder.attention_weights[0].shape == (2, 2, 5, 5)
    assert model.decoder.attention_weights[1][0].shape == (2, 2, 4, 5)
    assert model.need_weights is None
    model.need_weights = False
    assert model.encoder.need_weights is False
    assert model.decoder.need_weights is False
    model(src, tgt)
    assert model.encoder.attention_weights == [None]
    assert model.decoder.attention_weights == [[None], [None]]


def test_bert_starts_fused_and_follows_the_same_rule():
    torch.manual_seed(0)
    model = BERTEncoder(11, 8, 16, 2, 1, 0.0, max_len=16).eval()
    tokens, segments = _tokens(), torch.zeros(2, 5, dtype=torch.long)
    assert model.need_weights is False
    model(tokens, segments)
    assert model.blks[0].attention.attention_weights is None
    model.need_weights = None
    model(tokens, segments)
    assert model.blks[0].attention.attention_weights.shape == (2, 2, 5, 5)
    model(tokens, segments, need_weights=False)
    assert model.blks[0].attention.attention_weights is None


def test_resolve_need_weights_refuses_what_is_not_a_bool():
    model = GPT(11, 8, 16, 2, 1, 0.0, max_len=16)
    with pytest.raises(TypeError, match="need_weights must be a bool or None"):
        resolve_need_weights(model, 1)
    model.need_weights = "yes"
    with pytest.raises(TypeError, match="need_weights must be a bool or None"):
        model(_tokens())
    with pytest.raises(TypeError, match="model must be a module"):
        resolve_need_weights(torch.nn.Linear(2, 2), None)
