"""Shared drawing helpers for the code-drawn diagrams of the chapters.

A labelled box, an arrow (optionally labelled beside its middle), a check of how many items a
figure is asked to draw, the margin-less canvas a diagram is drawn on and the bare axes every
diagram ends with. Used by the figure scripts of this folder (GRU, seq2seq, attention decoders,
multi-head, data parallelism, path lengths, the concept map).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch


def box(
    ax,
    centre: tuple[float, float],
    size: tuple[float, float],
    text: str,
    colour: str,
    rounding: float = 0.08,
    fontsize: float = 9,
    *,
    edge: str = "black",
    lw: float = 1,
) -> None:
    """A rounded box of (width, height) ``size`` centred on ``centre``, with centred text (none
    when ``text`` is empty), face ``colour`` and an ``edge``-coloured outline of width ``lw``."""
    (x, y), (width, height) = centre, size
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            fc=colour,
            ec=edge,
            lw=lw,
            boxstyle=f"round,pad=0,rounding_size={rounding}",
        )
    )
    if text:
        ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def arrow(
    ax,
    start: tuple[float, float],
    end: tuple[float, float],
    colour: str = "black",
    style: str | tuple = "-",
    rad: float = 0.0,
    head: float = 10,
    lw: float = 1.0,
    *,
    label: str = "",
    label_side: str = "right",
) -> None:
    """An arrow from start to end, straight (rad 0) or bent by ``rad``; ``label`` (fontsize 8)
    stands beside its middle, on ``label_side`` "right" or "left"."""
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=head,
            lw=lw,
            color=colour,
            linestyle=style,
            connectionstyle=f"arc3,rad={rad}",
        )
    )
    if label:
        x, y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        left = label_side == "left"
        x += -0.08 if left else 0.08
        ha = "right" if left else "left"
        ax.text(x, y, label, ha=ha, va="center", fontsize=8)


def check_count(name: str, value: int, low: int, high: int) -> None:
    """Refuse a number of drawn items outside [low, high].

    Raises:
        ValueError: naming ``name`` and the range.
    """
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def canvas(figsize: tuple[float, float]):
    """A figure of ``figsize`` inches whose one axes fills it edge to edge (no margins), for a
    diagram drawn in data coordinates; returns (figure, axes)."""
    fig, ax = plt.subplots(figsize=figsize)
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    return fig, ax


def bare_axes(ax, xlim: tuple[float, float], ylim: tuple[float, float]):
    """Limit a diagram's axes to xlim, ylim, one unit the same length on both, no frame or ticks."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
