"""Shared drawing helpers for the code-drawn diagrams of the chapters: a labelled box and an arrow.

Used by the figure scripts of this folder (GRU, seq2seq, multi-head, data parallelism).
"""

from __future__ import annotations

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch


def box(
    ax,
    centre: tuple[float, float],
    size: tuple[float, float],
    text: str,
    colour: str,
    rounding: float = 0.08,
    fontsize: float = 9,
) -> None:
    """A rounded box of (width, height) ``size`` centred on ``centre``, with centred text."""
    (x, y), (width, height) = centre, size
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            fc=colour,
            ec="black",
            lw=1,
            boxstyle=f"round,pad=0,rounding_size={rounding}",
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def arrow(
    ax,
    start: tuple[float, float],
    end: tuple[float, float],
    colour: str = "black",
    style: str = "-",
    rad: float = 0.0,
    head: float = 10,
    lw: float = 1.0,
) -> None:
    """An arrow from start to end, straight (rad 0) or bent by ``rad``."""
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
