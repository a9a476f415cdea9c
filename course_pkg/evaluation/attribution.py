"""Which parts of an image a prediction rests on: attention rollout,
gradient x input and occlusion.

Chapter: "Attention on images". Three ways to turn a trained model and one
of its outputs into a map over the image:

- **attention rollout** (Abnar & Zuidema 2020): a block's attention A (heads
  averaged) moves information between tokens, and the residual stream keeps
  each token's own; so a block passes on A' = (A + I) / 2, and L blocks
  A'_L ... A'_1. Row 0 (the class token) of that product says how much of
  each patch reached the class token: :func:`attention_rollout`. The last
  block's raw attention alone is row 0 of A_L (:func:`last_layer_attention`);
- **gradient x input**: the first-order change of the score if a pixel went
  to 0, summed over colour channels (:func:`gradient_x_input`);
- **occlusion**: the score's actual drop when one cell of the image is
  replaced by a baseline (black), cell by cell (:func:`occlusion_map`): a
  perturbation test, the simplest relative of LIME.

All three return maps that the chapter pools to the cells of its scenes
(:func:`pool_to_cells`) and scores against the ground truth.

Shape letters: ``B`` batch, ``H`` heads, ``T`` tokens (N patches + 1 class
token), ``C`` channels, ``G`` cells per side, ``S`` pixels per cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from course_pkg.checks import (
    check_finite_number,
    check_float_dtype,
    check_float_tensor,
    check_positive_int,
)


def last_layer_attention(maps: Sequence[torch.Tensor]) -> torch.Tensor:
    """The class token's attention over the patches in the last block,
    heads averaged.

    Args:
        maps: the blocks' attention weights, each (B, H, T, T).
    Returns:
        (B, T - 1): row 0 of the last block's mean attention, the class
        token's own column dropped.
    Raises:
        TypeError/ValueError: maps empty, not float (B, H, T, T) tensors of
            one shape.
    """
    _check_maps(maps)
    return maps[-1].mean(1)[:, 0, 1:]


def attention_rollout(maps: Sequence[torch.Tensor]) -> torch.Tensor:
    """Abnar and Zuidema's rollout: the product over blocks of
    (A + I) / 2, A the heads' mean attention, read at the class token.

    Args:
        maps: the blocks' attention weights, first block first, each
            (B, H, T, T), rows summing to 1.
    Returns:
        (B, T - 1): how much of each patch reaches the class token; with
        the class token's own share, each row sums to 1.
    Raises:
        TypeError/ValueError: as :func:`last_layer_attention`.
    """
    _check_maps(maps)
    batch, _, tokens, _ = maps[0].shape
    eye = torch.eye(tokens, dtype=maps[0].dtype, device=maps[0].device)
    rollout = eye.expand(batch, tokens, tokens)
    for weights in maps:
        step = (weights.mean(1) + eye) / 2  # (B, T, T), rows sum to 1
        rollout = step @ rollout
    return rollout[:, 0, 1:]


def gradient_x_input(
    score: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor
) -> torch.Tensor:
    """Gradient times input of a score, summed over channels.

    Args:
        score: (B, C, H, W) images -> (B,) one score per image (e.g. the
            logit of the predicted class); rows must not mix.
        images: (B, C, H, W) floats.
    Returns:
        (B, H, W): sum_c x_c dscore/dx_c at each pixel.
    Raises:
        TypeError/ValueError: images not a float (B, C, H, W) tensor,
            score not callable.
    """
    _check_gradient_x_input(score, images)
    images = images.detach().requires_grad_(True)
    (gradient,) = torch.autograd.grad(score(images).sum(), images)
    return (gradient * images).sum(1).detach()


def _check_gradient_x_input(score: object, images: object) -> None:
    """images a float (B, C, H, W) tensor; score callable."""
    check_float_tensor("images", images, 4, "(B, C, H, W)")
    if not callable(score):
        raise TypeError(f"score must be callable, got {type(score).__name__}")


def occlusion_map(
    score: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    cell_size: int,
    baseline: float = 0.0,
) -> torch.Tensor:
    """The drop of a score when each S x S cell is set to the baseline.

    Args:
        score: (B, C, H, W) -> (B,), as :func:`gradient_x_input`.
        images: (B, C, H, W), H and W multiples of cell_size.
        cell_size: S. baseline: the value an occluded pixel takes.
    Returns:
        (B, H / S, W / S): score(images) - score(images with the cell
        occluded); positive where hiding the cell lowers the score.
    Raises:
        TypeError/ValueError: images not a float (B, C, H, W) tensor,
            sizes not multiples of cell_size, score not callable.
    """
    height, width = _check_occlusion_map(score, images, cell_size, baseline)
    rows, columns = height // cell_size, width // cell_size
    drops = images.new_zeros(images.shape[0], rows, columns)
    with torch.no_grad():
        full = score(images)  # (B,)
        for r in range(rows):
            for c in range(columns):
                hidden = images.clone()
                hidden[..., r * cell_size : (r + 1) * cell_size,
                       c * cell_size : (c + 1) * cell_size] = baseline  # fmt: skip
                drops[:, r, c] = full - score(hidden)
    return drops


def _check_occlusion_map(
    score: object, images: object, cell_size: object, baseline: object
) -> tuple[int, int]:
    """images a float (B, C, H, W) tensor, H and W multiples of cell_size
    (an int >= 1); baseline a finite number; score callable. Returns (H, W)."""
    check_float_tensor("images", images, 4, "(B, C, H, W)")
    check_positive_int("cell_size", cell_size)
    check_finite_number("baseline", baseline)
    if not callable(score):
        raise TypeError(f"score must be callable, got {type(score).__name__}")
    height, width = images.shape[-2:]
    if height % cell_size or width % cell_size:
        raise ValueError(
            f"images' height and width must be multiples of cell_size="
            f"{cell_size}, got {tuple(images.shape)}"
        )
    return height, width


def pool_to_cells(pixel_map: torch.Tensor, grid_size: int) -> torch.Tensor:
    """Sum a (B, P, P) map (pixels, or patches in row-major order as
    (B, P * P)) into G x G cells.

    Args:
        pixel_map: (B, P, P), or (B, P * P) for patches; P a multiple of G.
        grid_size: G.
    Returns:
        (B, G, G).
    Raises:
        TypeError/ValueError: pixel_map not a float tensor of such a shape.
    """
    pixel_map, side = _check_pool_to_cells(pixel_map, grid_size)
    per = side // grid_size
    return pixel_map.reshape(-1, grid_size, per, grid_size, per).sum((2, 4))


def _check_pool_to_cells(
    pixel_map: object, grid_size: object
) -> tuple[torch.Tensor, int]:
    """grid_size (G) an int >= 1; pixel_map a float (B, P, P), or (B, P * P)
    for patches, with P a multiple of G. Returns it as (B, P, P), and P."""
    check_positive_int("grid_size", grid_size)
    shape = "(B, P, P) or (B, P * P)"
    if not isinstance(pixel_map, torch.Tensor) or pixel_map.dim() not in (
        2,
        3,
    ):
        raise TypeError(f"pixel_map must be a {shape} tensor")
    check_float_dtype("pixel_map", pixel_map)
    if pixel_map.dim() == 2:
        side = round(pixel_map.shape[1] ** 0.5)
        if side * side != pixel_map.shape[1]:
            raise ValueError(
                f"pixel_map of patches must have a square number of columns, "
                f"got {tuple(pixel_map.shape)}"
            )
        pixel_map = pixel_map.reshape(-1, side, side)
    side = pixel_map.shape[-1]
    if pixel_map.shape[-2] != side or side % grid_size:
        raise ValueError(
            f"pixel_map must be (B, P, P) with P a multiple of grid_size="
            f"{grid_size}, got {tuple(pixel_map.shape)}"
        )
    return pixel_map, side


def _check_maps(maps: object) -> None:
    """A non-empty list of float (B, H, T, T) tensors of one shape."""
    if not isinstance(maps, (list, tuple)) or not maps:
        raise TypeError(
            "maps must be a non-empty list of (B, H, T, T) tensors"
        )
    for weights in maps:
        check_float_tensor("maps", weights, 4, "(B, H, T, T)")
        if (
            weights.shape != maps[0].shape
            or weights.shape[-1] != weights.shape[-2]
        ):
            raise ValueError(
                "maps must all have one (B, H, T, T) shape, got "
                f"{[tuple(w.shape) for w in maps]}"
            )
