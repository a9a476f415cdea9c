"""The diagram of multi-head attention in the chapter "Multi-head attention".

The chapter imports :func:`draw_multihead_attention` (the notebook's folder, ``book/``, is on the
kernel's path); run this file to look at it on its own:
`cd book && ../.venv/bin/python -m figures.multihead` writes ``figures/multihead.png``.
"""

from __future__ import annotations

import pathlib

from figures.diagram import arrow, bare_axes, box, canvas, check_count
from matplotlib.patches import Rectangle

HEAD_COLOURS = ("#cfe3f7", "#fdd9b5", "#d8f0d0", "#e6d5f2")
# darker shades of the same four, for the arrows of each head
ARROW_COLOURS = ("#3b7bbf", "#d9822b", "#4a9a3c", "#8e5bb5")
BOX_COLOUR, INPUT_COLOUR = "#f2f2f2", "#e0e0e0"
BAR_WIDTH, BAR_HEIGHT = 3.0, 0.45  # a D-wide bar


def _arrow(
    ax,
    start: tuple[float, float],
    end: tuple[float, float],
    colour: str = "black",
    lw: float = 1.0,
) -> None:
    arrow(ax, start, end, colour, head=9, lw=lw)


def _split_bar(ax, x: float, y: float, num_heads: int) -> list[float]:
    """A D-wide bar centred at (x, y), one coloured segment per head.

    Returns the x centres of the H segments.
    """
    segment = BAR_WIDTH / num_heads
    left = x - BAR_WIDTH / 2
    for i in range(num_heads):
        ax.add_patch(
            Rectangle(
                (left + i * segment, y - BAR_HEIGHT / 2),
                segment,
                BAR_HEIGHT,
                fc=HEAD_COLOURS[i],
                ec="black",
                lw=0.8,
            )
        )
        ax.text(
            left + (i + 0.5) * segment,
            y,
            f"{i + 1}",
            ha="center",
            va="center",
            fontsize=7.5,
        )
    return [left + (i + 0.5) * segment for i in range(num_heads)]


def draw_multihead_attention(num_heads: int = 4):
    """Project, split into H heads of width d = D/H, attend per head, concatenate, W_o.

    Args:
        num_heads: H, the number of heads drawn (1 to 4).
    Returns:
        The matplotlib Figure.
    Raises:
        ValueError: if num_heads is not in [1, 4].
    """
    check_count("num_heads", num_heads, 1, len(HEAD_COLOURS))
    fig, ax = canvas((7.6, 6.2))
    columns = {"q": 2.0, "k": 6.0, "v": 10.0}
    inputs = {
        "q": "queries ($Q \\times D$)",
        "k": "keys ($K \\times D$)",
        "v": "values ($K \\times D$)",
    }
    letters = {"q": "Q", "k": "K", "v": "V"}
    centres = {}
    for name, x in columns.items():
        ax.add_patch(
            Rectangle(
                (x - BAR_WIDTH / 2, 9.4 - BAR_HEIGHT / 2),
                BAR_WIDTH,
                BAR_HEIGHT,
                fc=INPUT_COLOUR,
                ec="black",
                lw=0.8,
            )
        )
        ax.text(x, 9.4, inputs[name], ha="center", va="center", fontsize=8.5)
        _arrow(ax, (x, 9.15), (x, 8.75))
        box(
            ax,
            (x, 8.4),
            (2.2, 0.6),
            f"$\\mathbf{{W}}_{name}$ ($D \\times D$)",
            BOX_COLOUR,
            fontsize=8.5,
        )
        _arrow(ax, (x, 8.08), (x, 7.55))
        centres[name] = _split_bar(ax, x, 7.3, num_heads)
        ax.text(
            x - BAR_WIDTH / 2 - 0.1,
            7.3,
            f"$\\mathbf{{{letters[name]}}}$",
            ha="right",
            va="center",
            fontsize=9,
        )
    ax.text(
        6.0,
        6.55,
        f"each head gets one slice of width $d = D/H$ ($H = {num_heads}$)",
        ha="center",
        va="center",
        fontsize=8.5,
        style="italic",
        bbox={"fc": "white", "ec": "none", "alpha": 0.9},
    )
    # One attention per head, on its slices of Q, K and V
    head_xs = [12.0 * (i + 0.5) / num_heads for i in range(num_heads)]
    head_y = 4.75
    for i, hx in enumerate(head_xs):
        for name in columns:
            _arrow(
                ax,
                (centres[name][i], 7.05),
                (hx + 0.35 * (list(columns).index(name) - 1), head_y + 0.5),
                colour=ARROW_COLOURS[i],
                lw=0.7,
            )
        box(
            ax,
            (hx, head_y),
            (2.55, 0.9),
            f"head {i + 1}\n"
            f"softmax$(\\mathbf{{Q}}_{i + 1} \\mathbf{{K}}_{i + 1}^\\top / "
            f"\\sqrt{{d}})\\, \\mathbf{{V}}_{i + 1}$",
            HEAD_COLOURS[i],
            fontsize=8.5,
        )
    # Concatenate the H outputs (Q x d each) back into one D-wide bar
    concat_y = 2.75
    slots = _split_bar(ax, 6.0, concat_y, num_heads)
    for i, (hx, slot) in enumerate(zip(head_xs, slots)):
        _arrow(
            ax,
            (hx, head_y - 0.47),
            (slot, concat_y + 0.25),
            colour=ARROW_COLOURS[i],
            lw=0.7,
        )
    ax.text(
        7.7,
        concat_y,
        "concatenate the heads' outputs\n"
        f"({num_heads} × ($Q \\times d$) → $Q \\times D$)",
        ha="left",
        va="center",
        fontsize=8,
    )
    _arrow(ax, (6.0, concat_y - 0.25), (6.0, 1.95))
    box(
        ax,
        (6.0, 1.65),
        (2.2, 0.6),
        "$\\mathbf{W}_o$ ($D \\times D$)",
        BOX_COLOUR,
        fontsize=8.5,
    )
    _arrow(ax, (6.0, 1.33), (6.0, 0.95))
    ax.add_patch(
        Rectangle(
            (6.0 - BAR_WIDTH / 2, 0.7 - BAR_HEIGHT / 2),
            BAR_WIDTH,
            BAR_HEIGHT,
            fc=INPUT_COLOUR,
            ec="black",
            lw=0.8,
        )
    )
    ax.text(6.0, 0.7, "output ($Q \\times D$)", ha="center", va="center")
    ax.text(
        7.7,
        1.65,
        "mixes the heads: every output\ncoordinate reads all of them",
        ha="left",
        va="center",
        fontsize=8,
    )
    bare_axes(ax, (-0.1, 12.1), (0.3, 9.8))
    return fig


if __name__ == "__main__":
    draw_multihead_attention().savefig(
        pathlib.Path(__file__).with_name("multihead.png"), dpi=100
    )
