"""Attention rollout, gradient x input and occlusion
(course_pkg.evaluation.attribution) on cases whose answer is known by hand."""

from __future__ import annotations

import pytest
import torch

from course_pkg.evaluation.attribution import (
    attention_rollout,
    gradient_x_input,
    last_layer_attention,
    occlusion_map,
    pool_to_cells,
)

F64 = torch.float64


def _two_heads(mean: list[list[float]]) -> torch.Tensor:
    """(1, 2, T, T) weights of two heads whose mean is ``mean``."""
    A = torch.tensor(mean, dtype=F64)
    uniform = torch.full_like(A, 1 / A.shape[0])
    return torch.stack([2 * A - uniform, uniform])[None]  # mean: A


def test_rollout_of_two_blocks_by_hand():
    # A1' = (A1 + I) / 2 = [[.6, .4], [.3, .7]], A2' = [[.75, .25], [.05, .95]];
    # row 0 of A2' A1' = [.75 * .6 + .25 * .3, .75 * .4 + .25 * .7]
    maps = [_two_heads([[0.2, 0.8], [0.6, 0.4]]),
            _two_heads([[0.5, 0.5], [0.1, 0.9]])]  # fmt: skip
    rollout = attention_rollout(maps)
    assert rollout.shape == (1, 1)
    assert rollout.item() == pytest.approx(0.475, abs=1e-12)
    assert last_layer_attention(maps).item() == pytest.approx(0.5, abs=1e-12)


def test_rollout_rows_with_the_class_tokens_share_sum_to_one():
    gen = torch.Generator().manual_seed(0)
    maps = [torch.rand(3, 2, 5, 5, generator=gen, dtype=F64).softmax(-1)
            for _ in range(4)]  # fmt: skip
    patches = attention_rollout(maps)  # (3, 4)
    # the class token's own share: the product's (0, 0) entry
    eye = torch.eye(5, dtype=F64)
    product = eye
    for weights in maps:
        product = (weights.mean(1) + eye) / 2 @ product
    torch.testing.assert_close(
        patches.sum(1) + product[:, 0, 0], torch.ones(3, dtype=F64),
        rtol=0, atol=1e-12,
    )  # fmt: skip


def _cell_score(row: int, column: int, size: int = 4):
    """A model whose score is the sum of the pixels of one cell."""

    def score(images: torch.Tensor) -> torch.Tensor:
        cell = images[..., row * size : (row + 1) * size,
                      column * size : (column + 1) * size]  # fmt: skip
        return cell.sum((1, 2, 3))

    return score


def test_occlusion_finds_the_only_cell_the_score_reads():
    gen = torch.Generator().manual_seed(1)
    images = torch.rand(2, 3, 12, 12, generator=gen, dtype=F64)
    drops = occlusion_map(_cell_score(1, 2), images, 4)
    assert drops.shape == (2, 3, 3)
    expected = torch.zeros(2, 3, 3, dtype=F64)
    expected[:, 1, 2] = images[..., 4:8, 8:12].sum((1, 2, 3))
    torch.testing.assert_close(drops, expected, rtol=0, atol=1e-12)


def test_gradient_x_input_of_a_linear_score_is_weight_times_input():
    gen = torch.Generator().manual_seed(2)
    images = torch.rand(2, 3, 4, 4, generator=gen, dtype=F64)
    weights = torch.randn(3, 4, 4, generator=gen, dtype=F64)
    result = gradient_x_input(lambda x: (x * weights).sum((1, 2, 3)), images)
    torch.testing.assert_close(
        result, (images * weights).sum(1), rtol=0, atol=1e-12
    )
    assert not images.requires_grad  # the input is left as it was


def test_pool_to_cells_of_pixels_and_of_patches():
    pixels = torch.arange(16, dtype=F64).reshape(1, 4, 4)
    cells = pool_to_cells(pixels, 2)
    assert cells.tolist() == [[[0 + 1 + 4 + 5, 2 + 3 + 6 + 7],
                               [8 + 9 + 12 + 13, 10 + 11 + 14 + 15]]]  # fmt: skip
    assert torch.equal(pool_to_cells(pixels.reshape(1, 16), 2), cells)
    with pytest.raises(ValueError, match="multiple"):
        pool_to_cells(pixels, 3)
