"""The chapter "Beyond softmax attention": KernelLM and its tasks.

- each attention of KernelSelfAttention equals an implementation written
  elsewhere, with copied weights, in float64: softmax against
  ``nn.MultiheadAttention`` with a causal mask, linear against the package's
  LinearAttention (associative form), decayed against the recurrent form
  with RetNet's decays, performer against performer_attention on the
  projected heads;
- no position of KernelLM depends on a later token, for every attention;
- the tasks' batches hold what their docstrings say, exactly;
- token_accuracy and greedy_translate on models whose answers are known.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_pkg.data.translation import Vocab
from course_pkg.experiments.beyond_softmax import (
    COPY,
    RECALL,
    copy_batches,
    greedy_translate,
    recall_batches,
    token_accuracy,
)
from course_pkg.experiments.lm_translation import SEP
from course_pkg.models.kernel_lm import (
    ATTENTIONS,
    KernelLM,
    KernelSelfAttention,
    retnet_decays,
)
from course_pkg.nn.linear_attention import (
    LinearAttention,
    linear_attention_recurrent,
)
from course_pkg.nn.random_features import performer_attention

D, H, B, T = 8, 2, 3, 6


def _layer(attention: str) -> KernelSelfAttention:
    torch.manual_seed(0)
    return KernelSelfAttention(D, H, attention).double()


def _heads(layer: KernelSelfAttention, X: torch.Tensor):
    return [
        W(X).view(B, T, H, -1).transpose(1, 2)
        for W in (layer.W_q, layer.W_k, layer.W_v)
    ]


def test_retnet_decays_are_retnets():
    assert retnet_decays(3).tolist() == [1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128]


def test_softmax_equals_torch_multihead_attention_with_a_causal_mask():
    layer = _layer("softmax")
    peer = nn.MultiheadAttention(D, H, bias=False, batch_first=True).double()
    with torch.no_grad():
        peer.in_proj_weight.copy_(
            torch.cat([layer.W_q.weight, layer.W_k.weight, layer.W_v.weight])
        )
        peer.out_proj.weight.copy_(layer.W_o.weight)
    X = torch.randn(B, T, D, dtype=torch.float64)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)  # True: hidden
    expected, _ = peer(X, X, X, attn_mask=mask, need_weights=False)
    torch.testing.assert_close(layer(X), expected, rtol=0, atol=1e-12)


def test_linear_equals_the_associative_linear_attention_layer():
    layer = _layer("linear")
    peer = LinearAttention(D, H).double()
    peer.load_state_dict(layer.state_dict())
    X = torch.randn(B, T, D, dtype=torch.float64)
    torch.testing.assert_close(
        layer(X), peer(X, X, X, causal=True), rtol=0, atol=1e-12
    )


def test_decayed_equals_the_recurrence_with_retnets_decays():
    layer = _layer("decayed")
    X = torch.randn(B, T, D, dtype=torch.float64)
    q, k, v = _heads(layer, X)
    heads = linear_attention_recurrent(
        q, k, v, decay=retnet_decays(H).double()
    )
    expected = layer.W_o(heads.transpose(1, 2).reshape(B, T, D))
    torch.testing.assert_close(layer(X), expected, rtol=0, atol=1e-12)


def test_performer_equals_performer_attention_on_its_features():
    layer = _layer("performer")
    assert layer.features.shape == (2 * D // H, D // H)
    X = torch.randn(B, T, D, dtype=torch.float64)
    q, k, v = _heads(layer, X)
    heads = performer_attention(q, k, v, layer.features, causal=True)
    expected = layer.W_o(heads.transpose(1, 2).reshape(B, T, D))
    torch.testing.assert_close(layer(X), expected, rtol=0, atol=1e-12)


def test_decayed_differs_from_linear_with_the_same_weights():
    linear, decayed = _layer("linear"), _layer("decayed")
    decayed.load_state_dict(linear.state_dict() | {"gamma": decayed.gamma})
    X = torch.randn(B, T, D, dtype=torch.float64)
    assert (linear(X) - decayed(X)).abs().max() > 1e-6


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_no_position_reads_a_later_token(attention):
    torch.manual_seed(0)
    model = KernelLM(11, D, H, 2, T, attention).double()
    X = torch.randint(0, 11, (B, T))
    changed = X.clone()
    changed[:, 3:] = (changed[:, 3:] + 1) % 11
    a, b = model(X), model(changed)
    torch.testing.assert_close(a[:, :3], b[:, :3], rtol=0, atol=1e-12)
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-6


def test_a_sequence_longer_than_max_len_is_refused():
    model = KernelLM(11, D, H, 1, T)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, T + 1, dtype=torch.long))


def test_copy_batches():
    g = torch.Generator().manual_seed(0)
    batches, pad = copy_batches(2, 5, **COPY, generator=g)
    n, vocab = COPY["length"], COPY["vocab"]
    assert pad == vocab + 1
    for X, Y in batches:
        assert X.shape == Y.shape == (5, 2 * n)
        assert (X[:, n] == vocab).all()  # <sep>
        assert torch.equal(X[:, n + 1 :], X[:, : n - 1])  # the copy so far
        assert torch.equal(Y[:, n:], X[:, :n]) and (Y[:, :n] == pad).all()


def test_recall_batches():
    g = torch.Generator().manual_seed(0)
    batches, pad = recall_batches(3, 7, **RECALL, generator=g)
    n, r = RECALL["num_pairs"], RECALL["num_queries"]
    assert pad == RECALL["num_keys"] + RECALL["num_values"]
    for X, Y in batches:
        assert X.shape == Y.shape == (7, 2 * n + 2 * r - 1)
        sequence = torch.cat([X, Y[:, -1:]], dim=1)
        for row, labels in zip(sequence.tolist(), Y.tolist()):
            keys, values = row[0 : 2 * n : 2], row[1 : 2 * n : 2]
            assert len(set(keys)) == n and max(keys) < RECALL["num_keys"]
            assert min(values) >= RECALL["num_keys"] and max(values) < pad
            queries, answers = row[2 * n :: 2], row[2 * n + 1 :: 2]
            assert len(set(queries)) == r
            for q, a in zip(queries, answers):
                assert values[keys.index(q)] == a
            scored = [t for t, label in enumerate(labels) if label != pad]
            assert scored == list(range(2 * n, 2 * n + 2 * r, 2))
            assert [labels[t] for t in scored] == answers


class _Oracle(nn.Module):
    """Scores that put the most weight on a given answer at every position."""

    def __init__(self, answer: torch.Tensor, vocab_size: int):
        super().__init__()
        self.answer, self.vocab_size = answer, vocab_size
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        scores = torch.zeros(*X.shape, self.vocab_size)
        return scores.scatter(-1, self.answer[..., None], 1.0) + self.dummy


def test_token_accuracy_scores_the_labelled_positions_only():
    g = torch.Generator().manual_seed(0)
    (batch,), pad = copy_batches(1, 4, **COPY, generator=g)
    X, Y = batch
    answers = Y.clamp(max=pad - 1)  # right wherever a label is
    assert token_accuracy(_Oracle(answers, pad + 1), [batch], pad) == 1.0
    wrong = answers.clone()
    wrong[:2] = (wrong[:2] + 1) % pad  # two of four rows wrong everywhere
    assert token_accuracy(_Oracle(wrong, pad + 1), [batch], pad) == 0.5


class _Writes(nn.Module):
    """A language model that writes a fixed sequence of tokens, then eos."""

    def __init__(self, tokens: list[int], prompt_length: int, vocab_size: int):
        super().__init__()
        self.tokens, self.start = tokens, prompt_length
        self.vocab_size = vocab_size
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        step = X.shape[1] - self.start
        scores = torch.zeros(*X.shape, self.vocab_size)
        scores[:, -1, self.tokens[min(step, len(self.tokens) - 1)]] = 1.0
        return scores


def test_greedy_translate_stops_at_eos():
    vocab = Vocab(["a", "b", "le", "chat"], reserved_tokens=[SEP])
    written = [vocab["le"], vocab["chat"], vocab.eos]
    model = _Writes(written, prompt_length=3, vocab_size=len(vocab))
    assert greedy_translate(model, ["a b"], vocab, 10) == [["le", "chat"]]
    assert greedy_translate(model, ["a b"], vocab, 1) == [["le"]]
