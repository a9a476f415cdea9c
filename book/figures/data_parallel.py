"""The diagram of data parallelism in the chapter "Training on several processes".

The chapter imports :func:`draw_data_parallelism` (the notebook's folder, ``book/``, is on the
kernel's path); run this file to look at it on its own:
`.venv/bin/python book/figures/data_parallel.py` writes ``data_parallel.png`` here.
"""

from __future__ import annotations

import pathlib

from figures.diagram import arrow, bare_axes, box, canvas, check_count
from matplotlib.patches import Rectangle

SHARD_COLOURS = ("#cfe3f7", "#fdd9b5", "#d8f0d0", "#e6d5f2")
BOX_COLOUR, REDUCE_COLOUR = "#f2f2f2", "#fff3b0"


def draw_data_parallelism(world_size: int = 2):
    """Replicas, shards of the global batch, the all-reduce of gradients and the equal updates.

    Args:
        world_size: p, the number of ranks drawn (1 to 4).
    Returns:
        The matplotlib Figure.
    Raises:
        ValueError: if world_size is not in [1, 4].
    """
    check_count("world_size", world_size, 1, len(SHARD_COLOURS))
    column = 3.4  # width of one rank's column
    width = column * world_size
    fig, ax = canvas((0.4 + 2.3 * world_size, 4.4))
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
        # Each rank's column: the arrow into a box (from its top), the box.
        for top, bottom, y, text, colour in (
            (
                6.15,
                5.45,
                5.05,
                f"rank {r}: a replica\nof the model, parameters θ",
                SHARD_COLOURS[r],
            ),
            (
                4.68,
                4.12,
                3.75,
                f"forward + backward\non shard {r}: gradient $g_{r}$",
                BOX_COLOUR,
            ),
            (
                2.0,
                1.42,
                1.05,
                "optimizer step with g\n(the same on every rank)",
                BOX_COLOUR,
            ),
        ):
            arrow(ax, (x, top), (x, bottom))
            box(ax, (x, y), (3.0, 0.7), text, colour, fontsize=8.5)
        arrow(ax, (x, 3.38), (x, 2.82))  # into the all-reduce
    terms = " + ".join(f"$g_{r}$" for r in range(world_size))
    box(
        ax,
        (width / 2, 2.42),
        (width - 0.3, 0.75),
        f"all-reduce: every rank receives g = {terms}\n"
        "(each $g_r$ weighted by its shard's share of the tokens)",
        REDUCE_COLOUR,
        fontsize=8.5,
    )
    ax.text(
        width / 2,
        0.25,
        "the replicas stay identical: next step, same θ everywhere",
        ha="center",
        fontsize=9,
        style="italic",
    )
    bare_axes(ax, (-0.2, width + 0.2), (0, 7.25))
    return fig


if __name__ == "__main__":
    draw_data_parallelism().savefig(
        pathlib.Path(__file__).with_name("data_parallel.png"), dpi=100
    )
