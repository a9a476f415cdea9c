"""The path-length picture in the chapter "Self-attention and positional encoding".

Convolution, recurrence and self-attention side by side: how many layers or steps a signal
crosses from the first input to the last output. The chapter imports
:func:`draw_path_lengths` (the notebook's folder, ``book/``, is on the kernel's path); run this
file to look at it on its own: `.venv/bin/python book/figures/path_length.py` writes
``path_length.png`` here.
"""

from __future__ import annotations

import pathlib

import matplotlib.pyplot as plt
from figures.diagram import check_count

NODE, PATH, EDGE = "#4a4a4a", "#d62728", "#c8c8c8"


def _nodes(ax, num_steps: int, y: float, colour: str = NODE) -> None:
    ax.scatter(range(num_steps), [y] * num_steps, s=22, c=colour, zorder=3)


def _edge(ax, start, end, on_path: bool = False) -> None:
    ax.plot(
        [start[0], end[0]],
        [start[1], end[1]],
        color=PATH if on_path else EDGE,
        lw=1.8 if on_path else 0.7,
        zorder=2 if on_path else 1,
    )


def _caption(ax, lines: list[str]) -> None:
    ax.text(
        0.5,
        -0.04,
        "\n".join(lines),
        transform=ax.transAxes,
        ha="center",
        va="top",
        fontsize=8.5,
    )


def draw_path_lengths(num_steps: int = 8):
    """Three panels: a kernel-3 convolution stack, a recurrent layer, one self-attention layer.

    Each draws T positions, grey edges for what every layer connects, and in red the shortest
    path from the first input to the last output.

    Args:
        num_steps: T, the number of positions drawn (3 to 12).
    Returns:
        The matplotlib Figure.
    Raises:
        ValueError: if num_steps is not in [3, 12].
    """
    check_count("num_steps", num_steps, 3, 12)
    last = num_steps - 1
    fig, axes = plt.subplots(1, 3, figsize=(9.5, 4.6))
    fig.subplots_adjust(left=0.02, right=0.98, top=0.9, bottom=0.25)

    # Convolution, kernel 3, centred: each layer widens the view by one
    # position on each side, so T - 1 layers until y_T sees x_1.
    ax = axes[0]
    for layer in range(1, num_steps):
        for i in range(num_steps):
            for j in (i - 1, i, i + 1):
                if 0 <= j < num_steps:
                    _edge(
                        ax,
                        (j, layer - 1),
                        (i, layer),
                        on_path=(j == layer - 1 and i == layer),
                    )
    for layer in range(num_steps):
        _nodes(ax, num_steps, layer)
    ax.set_title("convolution (kernel $k = 3$)", fontsize=10)
    _caption(
        ax,
        [
            f"path $x_1 \\to y_T$: {last} layers ($T - 1$)",
            "maximum path length $\\mathcal{O}(T/k)$",
            "sequential operations $\\mathcal{O}(1)$",
            "cost per layer $\\mathcal{O}(k T D^2)$",
        ],
    )

    # Recurrence: inputs, hidden states chained left to right, outputs.
    ax = axes[1]
    for i in range(num_steps):
        _edge(ax, (i, 0), (i, 1), on_path=(i == 0))
        _edge(ax, (i, 1), (i, 2), on_path=(i == last))
        if i > 0:
            _edge(ax, (i - 1, 1), (i, 1), on_path=True)
    for y in (0, 1, 2):
        _nodes(ax, num_steps, y)
    ax.text(last / 2, 1.3, "hidden states", ha="center", fontsize=8)
    ax.set_title("recurrent layer (RNN, GRU)", fontsize=10)
    _caption(
        ax,
        [
            f"path $x_1 \\to y_T$: {last} recurrent steps ($T - 1$)",
            "maximum path length $\\mathcal{O}(T)$",
            "sequential operations $\\mathcal{O}(T)$",
            "cost per layer $\\mathcal{O}(T D^2)$",
        ],
    )

    # Self-attention: every output reads every input in one layer.
    ax = axes[2]
    for i in range(num_steps):
        for j in range(num_steps):
            _edge(ax, (j, 0), (i, 2), on_path=(j == 0 and i == last))
    _nodes(ax, num_steps, 0)
    _nodes(ax, num_steps, 2)
    ax.set_title("self-attention", fontsize=10)
    _caption(
        ax,
        [
            "path $x_1 \\to y_T$: 1 layer",
            "maximum path length $\\mathcal{O}(1)$",
            "sequential operations $\\mathcal{O}(1)$",
            "cost per layer $\\mathcal{O}(T^2 D)$",
        ],
    )

    for ax in axes:
        ax.set_xlim(-0.6, last + 0.6)
        ax.set_ylim(-0.9, last + 0.5)
        ax.text(0, -0.55, "$x_1$", ha="center", fontsize=8.5)
        ax.text(last, -0.55, "$x_T$", ha="center", fontsize=8.5)
        ax.axis("off")
    axes[0].text(last, last + 0.25, "$y_T$", ha="center", fontsize=8.5)
    for ax in axes[1:]:
        ax.text(last, 2.25, "$y_T$", ha="center", fontsize=8.5)
        ax.text(-0.5, 0, "inputs", ha="right", va="center", fontsize=8)
        ax.text(-0.5, 2, "outputs", ha="right", va="center", fontsize=8)
    return fig


if __name__ == "__main__":
    draw_path_lengths().savefig(
        pathlib.Path(__file__).with_name("path_length.png"), dpi=100
    )
