"""The GRU cell diagram of the chapter "The encoder–decoder architecture".

One step of a gated recurrent unit: the reset gate, the update gate, the candidate state and the
mix of old state and candidate, each box holding its equation. The chapter imports
:func:`draw_gru` (the notebook's folder, ``book/``, is on the kernel's path); run this file to
look at it on its own: `cd book && ../.venv/bin/python -m figures.gru` writes ``gru.png`` beside
this file.
"""

from __future__ import annotations

import pathlib

import matplotlib.pyplot as plt
from figures.diagram import arrow, box

GATE_COLOUR, CANDIDATE_COLOUR, MIX_COLOUR = "#fdd9b5", "#cfe3f7", "#d8f0d0"


def _box(ax, x: float, y: float, width: float, text: str, colour: str) -> None:
    box(ax, (x, y), (width, 0.84), text, colour, rounding=0.1)


def _arrow(ax, start, end, colour="black", rad=0.0) -> None:
    arrow(ax, start, end, colour, rad=rad)


def draw_gru():
    """One GRU step: gates, candidate and mix, with the arrows between them.

    Returns:
        The matplotlib Figure.
    """
    fig, ax = plt.subplots(figsize=(9, 3.6))
    x_in, h_in = (0.0, 0.4), (0.0, 3.6)
    reset, update = (2.9, 2.6), (2.9, 1.0)
    candidate, mix = (6.0, 1.8), (9.4, 2.6)
    _box(
        ax,
        *reset,
        2.6,
        "reset gate\n" + r"$\mathbf{r}_t = \mathrm{sigmoid}(\ldots)$",
        GATE_COLOUR,
    )
    _box(
        ax,
        *update,
        2.6,
        "update gate\n" + r"$\mathbf{z}_t = \mathrm{sigmoid}(\ldots)$",
        GATE_COLOUR,
    )
    _box(
        ax,
        *candidate,
        3.0,
        "candidate\n"
        + r"$\tilde{\mathbf{h}}_t = \tanh(\ldots \mathbf{x}_t"
        + r" + \mathbf{r}_t \odot (\ldots \mathbf{h}_{t-1}))$",
        CANDIDATE_COLOUR,
    )
    _box(
        ax,
        *mix,
        2.9,
        "mix\n"
        + r"$\mathbf{h}_t = (1 - \mathbf{z}_t) \odot \tilde{\mathbf{h}}_t"
        + r" + \mathbf{z}_t \odot \mathbf{h}_{t-1}$",
        MIX_COLOUR,
    )
    ax.text(
        *x_in, r"input $\mathbf{x}_t$", ha="left", va="center", fontsize=10
    )
    ax.text(
        *h_in, r"state $\mathbf{h}_{t-1}$", ha="left", va="center", fontsize=10
    )
    # x_t feeds both gates and the candidate
    for target in (reset, update):
        _arrow(ax, (0.9, 0.55), (target[0] - 1.3, target[1] - 0.1), "tab:grey")
    _arrow(
        ax,
        (0.9, 0.3),
        (candidate[0] - 0.6, candidate[1] - 0.42),
        "tab:grey",
        rad=0.3,
    )
    # h_{t-1} feeds both gates, the candidate (through r_t) and the mix
    for target in (reset, update):
        _arrow(
            ax, (1.2, 3.45), (target[0] - 1.3, target[1] + 0.15), "tab:blue"
        )
    _arrow(
        ax, (1.2, 3.6), (candidate[0] - 0.3, candidate[1] + 0.42), "tab:blue"
    )
    _arrow(
        ax, (1.2, 3.7), (mix[0] - 0.5, mix[1] + 0.42), "tab:blue", rad=-0.12
    )
    # gates and candidate into their consumers
    _arrow(
        ax,
        (reset[0] + 1.3, reset[1] - 0.2),
        (candidate[0] - 0.9, candidate[1] + 0.42),
    )
    _arrow(
        ax,
        (update[0] + 1.3, update[1]),
        (mix[0] - 0.9, mix[1] - 0.42),
        rad=0.25,
    )
    _arrow(
        ax,
        (candidate[0] + 1.5, candidate[1] + 0.2),
        (mix[0] - 1.45, mix[1] - 0.2),
    )
    _arrow(ax, (mix[0] + 1.45, mix[1]), (mix[0] + 2.0, mix[1]))
    ax.text(mix[0] + 2.05, mix[1], r"$\mathbf{h}_t$", va="center", fontsize=10)
    ax.text(
        mix[0],
        0.5,
        r"$\mathbf{z}_t \approx 1$: keep the old state" + "\n"
        r"$\mathbf{r}_t \approx 0$: candidate ignores it",
        ha="center",
        va="center",
        fontsize=8.5,
        color="dimgrey",
    )
    ax.set_xlim(-0.1, 11.9)
    ax.set_ylim(0.0, 4.0)
    ax.axis("off")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    draw_gru().savefig(pathlib.Path(__file__).with_name("gru.png"), dpi=120)
