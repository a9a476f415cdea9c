"""The diagram of data parallelism in the chapter "Training on several processes".

The chapter imports :func:`draw_data_parallelism` (the notebook's folder, ``book/``, is on the
kernel's path); run this file to look at it on its own:
`.venv/bin/python book/figures/data_parallel.py` writes ``data_parallel.png`` here.
"""

from __future__ import annotations

import pathlib

import matplotlib.pyplot as plt
from figures.diagram import arrow, box
from matplotlib.patches import Rectangle

SHARD_COLOURS = ("#cfe3f7", "#fdd9b5", "#d8f0d0", "#e6d5f2")
BOX_COLOUR, REDUCE_COLOUR = "#f2f2f2", "#fff3b0"


def _box(
    ax, x: float, y: float, width: float, height: float, text: str, colour: str
) -> None:
    box(ax, (x, y), (width, height), text, colour, fontsize=8.5)


def draw_data_parallelism(world_size: int = 2):
    """Replicas, shards of the global batch, the all-reduce of gradients and the equal updates.

    Args:
        world_size: p, the number of ranks drawn (1 to 4).
    Returns:
        The matplotlib Figure.
    Raises:
        ValueError: if world_size is not in [1, 4].
    """
    if not 1 <= world_size <= len(SHARD_COLOURS):
        raise ValueError(
            f"world_size must be in [1, {len(SHARD_COLOURS)}], got {world_size}"
        )
    column = 3.4  # width of one rank's column
    width = column * world_size
    fig, ax = plt.subplots(figsize=(0.4 + 2.3 * world_size, 4.4))
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    # The global batch: G examples, one colour per shard
    cell = width / (4 * world_size)
    for i in range(4 * world_size):
        ax.add_patch(
            Rectangle(
                (i * cell, 6.2),
                cell,
                0.45,
                fc=SHARD_COLOURS[i // 4],
                ec="black",
                lw=0.6,
            )
        )
    ax.text(
        width / 2,
        6.95,
        f"global batch of G examples, split into p = {world_size} shards of G / p",
        ha="center",
        fontsize=9,
    )
    for r in range(world_size):
        x = (r + 0.5) * column
        arrow(ax, (x, 6.15), (x, 5.45))
        _box(
            ax,
            x,
            5.05,
            3.0,
            0.7,
            f"rank {r}: a replica\nof the model, parameters θ",
            SHARD_COLOURS[r],
        )
        arrow(ax, (x, 4.68), (x, 4.12))
        _box(
            ax,
            x,
            3.75,
            3.0,
            0.7,
            f"forward + backward\non shard {r}: gradient $g_{r}$",
            BOX_COLOUR,
        )
        arrow(ax, (x, 3.38), (x, 2.82))
        arrow(ax, (x, 2.0), (x, 1.42))
        _box(
            ax,
            x,
            1.05,
            3.0,
            0.7,
            "optimizer step with g\n(the same on every rank)",
            BOX_COLOUR,
        )
    terms = " + ".join(f"$g_{r}$" for r in range(world_size))
    _box(
        ax,
        width / 2,
        2.42,
        width - 0.3,
        0.75,
        f"all-reduce: every rank receives g = {terms}\n"
        "(each $g_r$ weighted by its shard's share of the tokens)",
        REDUCE_COLOUR,
    )
    ax.text(
        width / 2,
        0.25,
        "the replicas stay identical: next step, same θ everywhere",
        ha="center",
        fontsize=9,
        style="italic",
    )
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(0, 7.25)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


if __name__ == "__main__":
    draw_data_parallelism().savefig(
        pathlib.Path(__file__).with_name("data_parallel.png"), dpi=100
    )
