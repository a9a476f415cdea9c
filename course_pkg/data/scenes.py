"""Generated scenes with captions, where the truth of every word is known.

Chapter: "Attention on images". A scene is a G x G grid of cells (default
4 x 4 cells of 8 x 8 pixels: a 32 x 32 RGB image) holding 2 or 3 coloured
shapes, each in its own cell. The caption names two of them and how they
lie, from a small grammar:

    caption  = object relation object
    object   = colour shape           ("red circle", "blue square")
    relation = "left of" | "right of" | "above" | "below"

A third shape, when there is one, is a distractor the caption does not
mention. The relation is read from the two cells: along the axis on which
they are further apart (columns on a tie), so every caption is true of its
scene. No two shapes of a scene share both colour and shape, so each object
phrase names exactly one shape.

Because the generator places every shape, it knows, for each word of a
caption that names an object (a colour or a shape), the cell where that
object lies (:attr:`Scene.word_cells`): what an attention map over the grid
should point at when the model writes that word.

Everything is drawn from one ``torch.Generator``: one seed, one data set, on
every machine.

Shape letters: ``N`` scenes, ``G`` cells per side, ``S`` pixels per cell,
``H = W = G S``.
"""

from __future__ import annotations

import dataclasses

import torch

from course_pkg.checks import (
    check_choice,
    check_generator,
    check_positive_int,
)

COLOURS = {
    "red": (0.9, 0.1, 0.1),
    "green": (0.1, 0.8, 0.2),
    "blue": (0.15, 0.3, 0.95),
    "yellow": (0.95, 0.85, 0.1),
}
SHAPES = ("circle", "square", "triangle")
RELATIONS = ("left of", "right of", "above", "below")


@dataclasses.dataclass(frozen=True)
class SceneObject:
    """One shape of a scene: its colour, its kind and its cell (row, column)."""

    colour: str
    shape: str
    row: int
    column: int


@dataclasses.dataclass(frozen=True)
class Scene:
    """A scene's objects, its caption and where each named word lies.

    Attributes:
        objects: every shape drawn; the first two are the captioned ones.
        caption: the caption's words, e.g. ``["red", "circle", "left",
            "of", "blue", "square"]``.
        word_cells: for each word of the caption, the (row, column) of the
            object it names, or None (relation words).
    """

    objects: tuple[SceneObject, ...]
    caption: tuple[str, ...]
    word_cells: tuple[tuple[int, int] | None, ...]


def relation(first: SceneObject, second: SceneObject) -> str:
    """How ``first`` lies with respect to ``second``: along the axis where
    their cells are further apart, columns on a tie.

    Raises:
        TypeError: first or second not a :class:`SceneObject`.
        ValueError: if the two share a cell.
    """
    d_row, d_col = _check_relation(first, second)
    if abs(d_col) >= abs(d_row):
        return "left of" if d_col < 0 else "right of"
    return "above" if d_row < 0 else "below"


def _check_relation(first: object, second: object) -> tuple[int, int]:
    """first and second SceneObjects in different cells. Returns their
    offset (rows, columns), first minus second."""
    for name, obj in (("first", first), ("second", second)):
        if not isinstance(obj, SceneObject):
            raise TypeError(
                f"{name} must be a SceneObject, got {type(obj).__name__}"
            )
    d_row, d_col = first.row - second.row, first.column - second.column
    if d_row == 0 and d_col == 0:
        raise ValueError("first and second must lie in different cells")
    return d_row, d_col


def shape_mask(shape: str, size: int) -> torch.Tensor:
    """The pixels of one shape in an S x S cell, with a margin of S // 8
    (at least 1): a filled square, a disc or a triangle pointing up.

    Returns:
        (S, S) bool.
    Raises:
        TypeError/ValueError: an unknown shape, or size not an int >= 4.
    """
    _check_shape_mask(shape, size)
    margin = max(1, size // 8)
    low, high = margin, size - 1 - margin  # inclusive pixel range
    y = torch.arange(size)[:, None].float()
    x = torch.arange(size)[None, :].float()
    inside = (y >= low) & (y <= high) & (x >= low) & (x <= high)
    if shape == "square":
        return inside
    centre, radius = (low + high) / 2, (high - low) / 2
    if shape == "circle":
        return (y - centre) ** 2 + (x - centre) ** 2 <= radius**2 + 0.5
    # triangle: the apex at the top centre, the base the bottom row
    half_width = (y - low) / max(high - low, 1) * radius
    return inside & ((x - centre).abs() <= half_width + 0.5)


def _check_shape_mask(shape: object, size: object) -> None:
    """shape a str among SHAPES; size S an int >= 4."""
    check_choice("shape", shape, SHAPES)
    check_positive_int("size", size)
    if size < 4:
        raise ValueError(f"size must be >= 4, got {size}")


def generate_scenes(
    num_scenes: int,
    generator: torch.Generator,
    grid_size: int = 4,
    cell_size: int = 8,
    max_objects: int = 3,
) -> tuple[torch.Tensor, list[Scene]]:
    """Draw scenes and their captions.

    Each scene: 2 to ``max_objects`` shapes in distinct cells, with distinct
    (colour, shape) pairs, on a black background; the caption names the
    first two (:func:`relation`).

    Args:
        num_scenes: N. generator: a CPU torch.Generator, the only source of
            randomness. grid_size: G >= 2. cell_size: S >= 4.
        max_objects: 2 or 3.
    Returns:
        images (N, 3, G S, G S) float32 in [0, 1], and the N
        :class:`Scene`.
    Raises:
        TypeError/ValueError: a size not an int >= 1 (G < 2, S < 4 or
            max_objects not 2 or 3), generator not a torch.Generator.
    """
    _check_generate_scenes(
        num_scenes, generator, grid_size, cell_size, max_objects
    )
    masks = {shape: shape_mask(shape, cell_size) for shape in SHAPES}
    kinds = [(c, s) for c in COLOURS for s in SHAPES]
    side = grid_size * cell_size
    images = torch.zeros(num_scenes, 3, side, side)
    scenes = []
    for n in range(num_scenes):
        count = 2 + int(
            torch.randint(max_objects - 1, (1,), generator=generator)
        )
        cells = torch.randperm(grid_size**2, generator=generator)[:count]
        picks = torch.randperm(len(kinds), generator=generator)[:count]
        objects = []
        for cell, pick in zip(cells.tolist(), picks.tolist()):
            colour, shape = kinds[pick]
            row, column = divmod(cell, grid_size)
            objects.append(SceneObject(colour, shape, row, column))
            top, left = row * cell_size, column * cell_size
            patch = images[
                n, :, top : top + cell_size, left : left + cell_size
            ]
            rgb = torch.tensor(COLOURS[colour])[:, None, None]
            patch[:] = torch.where(masks[shape], rgb, patch)
        first, second = objects[0], objects[1]
        words = (
            [first.colour, first.shape]
            + relation(first, second).split()
            + [second.colour, second.shape]
        )
        where = [(first.row, first.column)] * 2
        where += [None] * len(relation(first, second).split())
        where += [(second.row, second.column)] * 2
        scenes.append(Scene(tuple(objects), tuple(words), tuple(where)))
    return images, scenes


def _check_generate_scenes(
    num_scenes: object,
    generator: object,
    grid_size: object,
    cell_size: object,
    max_objects: object,
) -> None:
    """num_scenes N an int >= 1; generator a CPU torch.Generator (not None);
    grid_size G >= 2 and cell_size S >= 4 ints; max_objects 2 or 3."""
    check_positive_int("num_scenes", num_scenes)
    check_generator(generator)
    if generator is None:
        raise TypeError("generator must be a torch.Generator, got None")
    check_positive_int("grid_size", grid_size)
    check_positive_int("cell_size", cell_size)
    check_positive_int("max_objects", max_objects)
    if grid_size < 2 or cell_size < 4 or max_objects not in (2, 3):
        raise ValueError(
            "need grid_size >= 2, cell_size >= 4 and max_objects 2 or 3, got "
            f"{grid_size}, {cell_size}, {max_objects}"
        )


def cell_of_patch(
    patch: int, grid_patches: int, grid_size: int
) -> tuple[int, int]:
    """The scene cell (row, column) that holds patch ``patch`` of a
    ``grid_patches`` x ``grid_patches`` grid of patches (row-major), when
    the patches tile the cells exactly (grid_patches a multiple of
    grid_size).

    Raises:
        TypeError/ValueError: sizes not ints >= 1, grid_patches not a
            multiple of grid_size, patch out of range.
    """
    _check_cell_of_patch(patch, grid_patches, grid_size)
    per_cell = grid_patches // grid_size
    row, column = divmod(patch, grid_patches)
    return row // per_cell, column // per_cell


def _check_cell_of_patch(
    patch: object, grid_patches: object, grid_size: object
) -> None:
    """grid_patches and grid_size ints >= 1, the first a multiple of the
    second; patch an int in [0, grid_patches ** 2)."""
    check_positive_int("grid_patches", grid_patches)
    check_positive_int("grid_size", grid_size)
    if grid_patches % grid_size:
        raise ValueError(
            f"grid_patches={grid_patches} must be a multiple of "
            f"grid_size={grid_size}"
        )
    if not isinstance(patch, int) or isinstance(patch, bool):
        raise TypeError(f"patch must be an int, got {type(patch).__name__}")
    if not 0 <= patch < grid_patches**2:
        raise ValueError(
            f"patch must be in [0, {grid_patches**2}), got {patch}"
        )
