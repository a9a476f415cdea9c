"""The image captioner (course_pkg.models.captioner): shapes, the weights of
every step over the cells, greedy captions that stop at <eos>, and Xu et
al.'s penalty on cases computed by hand."""

from __future__ import annotations

import pytest
import torch

from course_pkg.models.captioner import (
    GridEncoder,
    ImageCaptioner,
    doubly_stochastic_penalty,
    greedy_captions,
)

F64 = torch.float64


def _images(batch=3, seed=0):
    return torch.rand(
        batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed)
    )


def test_grid_encoder_shapes():
    torch.manual_seed(0)
    encoder = GridEncoder(16, num_layers=2)
    outputs, state = encoder(_images())
    assert outputs.shape == (16, 3, 16)  # a 4 x 4 grid, time-major
    assert state.shape == (2, 3, 16) and state.abs().max() <= 1  # tanh


def test_captioner_weights_are_distributions_over_the_cells():
    torch.manual_seed(0)
    model = ImageCaptioner(10, 8, 16)
    X = torch.randint(0, 10, (3, 5))
    scores = model(_images(), X)
    assert scores.shape == (3, 5, 10)
    weights = model.attention_weights
    assert weights.shape == (3, 5, 16)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    scores.sum().backward()  # trains end to end
    assert model.encoder.cnn[0].weight.grad.abs().sum() > 0


def test_greedy_captions_stop_at_eos():
    torch.manual_seed(0)
    model = ImageCaptioner(6, 8, 16)
    with torch.no_grad():  # a decoder that always writes token 2
        model.decoder.dense.weight.zero_()
        model.decoder.dense.bias.copy_(torch.tensor([0, 0, 5.0, 0, 0, 0]))
    words, weights = greedy_captions(
        model, _images(2), bos=1, eos=2, max_len=7
    )
    assert words.tolist() == [[2], [2]] and weights.shape == (2, 1, 16)
    with torch.no_grad():
        model.decoder.dense.bias.copy_(torch.tensor([0, 0, 0, 5.0, 0, 0]))
    words, _ = greedy_captions(model, _images(2), bos=1, eos=2, max_len=4)
    assert words.tolist() == [[3] * 4] * 2  # never eos: max_len words


def test_doubly_stochastic_penalty_by_hand():
    # 2 steps over 3 cells: totals per cell [1, 0.5, 0.5] -> 0 + .25 + .25
    weights = torch.tensor([[[0.5, 0.5, 0.0], [0.5, 0.0, 0.5]]], dtype=F64)
    assert doubly_stochastic_penalty(weights).item() == pytest.approx(0.5)
    # the second step is padding: totals [.5, .5, 0] -> .25 + .25 + 1
    valid = torch.tensor([[True, False]])
    assert doubly_stochastic_penalty(weights, valid).item() == pytest.approx(
        1.5
    )
    even = torch.eye(3, dtype=F64)[None]  # each cell once: no penalty
    assert doubly_stochastic_penalty(even).item() == 0.0
