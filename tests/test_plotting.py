"""Tests of course_pkg.plotting: labels, panels and refusals."""

from __future__ import annotations

import inspect
import typing

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_pkg.plotting import ATTENTION_CMAP, plot_lines, show_heatmaps  # noqa: E402


def test_show_heatmaps_grid_labels_and_colour_map():
    weights = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)
    fig = show_heatmaps(
        weights,
        xlabel="Keys",
        ylabel="Queries",
        titles=["a", "b", "c"],
        xticklabels=list("vwxyz"),
    )
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 6
    assert (
        panels[-1].get_xlabel() == "Keys"
        and panels[0].get_ylabel() == "Queries"
    )
    assert [ax.get_title() for ax in panels[:3]] == ["a", "b", "c"]
    assert panels[0].images[0].get_cmap().name == ATTENTION_CMAP
    assert [t.get_text() for t in panels[-1].get_xticklabels()] == list(
        "vwxyz"
    )
    plt.close(fig)


def test_show_heatmaps_refuses_wrong_shapes():
    with pytest.raises(
        ValueError, match=r"matrices must have shape \(rows, cols, Q, K\)"
    ):
        show_heatmaps(torch.zeros(3, 4), "k", "q")
    with pytest.raises(ValueError, match="titles must have 2 entries"):
        show_heatmaps(torch.zeros(1, 2, 3, 3), "k", "q", titles=["only one"])


def test_plot_lines_dict_legend_and_scales():
    ax = plot_lines(
        [1, 2, 3],
        {"train": [3, 2, 1], "val": torch.tensor([3.0, 2.5, 2.0])},
        "epoch",
        "loss",
        yscale="log",
    )
    assert (
        ax.get_xlabel() == "epoch"
        and ax.get_ylabel() == "loss"
        and ax.get_yscale() == "log"
    )
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "train",
        "val",
    ]
    with pytest.raises(ValueError, match="curve 0 has shape"):
        plot_lines([1, 2], [[1, 2, 3]], "x", "y")
    plt.close("all")


@pytest.mark.parametrize("function", [show_heatmaps, plot_lines])
def test_public_helpers_annotate_every_argument_and_the_result(function):
    hints = typing.get_type_hints(function)  # also: every hint resolves
    names = set(inspect.signature(function).parameters)
    assert names | {"return"} == set(hints)
