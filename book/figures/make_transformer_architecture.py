"""Draw book/figures/transformer_architecture.svg, the architecture figure of
the chapter "The Transformer".

Run from the repository root:
`.venv/bin/python book/figures/make_transformer_architecture.py`.
"""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
# stable ids: the file only changes with the drawing
matplotlib.rcParams["svg.hashsalt"] = "attention-tested"
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402

OUT = pathlib.Path(__file__).with_name("transformer_architecture.svg")

COLOURS = {
    "embed": "#e8e8e8",
    "attention": "#fdd9b5",
    "norm": "#fff3b0",
    "ffn": "#cfe3f7",
    "out": "#d8f0d0",
}
BOX_W, BOX_H = 3.0, 0.62  # box width and height


def box(ax, x, y, text, kind):
    ax.add_patch(
        FancyBboxPatch(
            (x - BOX_W / 2, y - BOX_H / 2),
            BOX_W,
            BOX_H,
            boxstyle="round,pad=0,rounding_size=0.12",
            fc=COLOURS[kind],
            ec="black",
            lw=1,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def arrow(ax, start, end, style="-|>", connection="arc3"):
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops=dict(
            arrowstyle=style,
            color="black",
            lw=1,
            connectionstyle=connection,
            shrinkA=0,
            shrinkB=0,
        ),
    )


def residual(ax, x, y_from, y_to):
    """Skip connection on the right: sublayer input to its add & norm."""
    edge = x + BOX_W / 2
    ax.plot(
        [x, edge + 0.35, edge + 0.35],
        [y_from, y_from, y_to],
        color="grey",
        lw=1,
    )
    arrow(ax, (edge + 0.35, y_to), (edge, y_to))


def stack(ax, x, layers, y0, label, label_side):
    """Boxes bottom-up from y0, each sublayer then add & norm; top y."""
    y = y0
    top = y0 + (2 * len(layers) - 1) * 0.95
    left, right = x - BOX_W / 2 - 0.3, x + BOX_W / 2 + 0.75
    ax.add_patch(
        Rectangle(
            (left, y0 - 0.6),
            right - left,
            top - y0 + 1.15,
            fc="none",
            ec="grey",
            ls="--",
        )
    )
    if label_side == "left":
        ax.text(
            left - 0.15,
            (y0 + top) / 2,
            label,
            ha="right",
            va="center",
            fontsize=10,
        )
    else:
        ax.text(
            right + 0.15,
            (y0 + top) / 2,
            label,
            ha="left",
            va="center",
            fontsize=10,
        )
    for name, kind in layers:
        arrow(
            ax,
            (x, y - 0.95 + BOX_H / 2 if y > y0 else y - 1.1 + BOX_H / 2),
            (x, y - BOX_H / 2),
        )
        box(ax, x, y, name, kind)
        box(ax, x, y + 0.95, "add & norm", "norm")
        arrow(ax, (x, y + BOX_H / 2), (x, y + 0.95 - BOX_H / 2))
        residual(ax, x, y - 0.95 + BOX_H / 2 + 0.12, y + 0.95)
        y += 1.9
    return y - 0.95


def main() -> None:
    fig, ax = plt.subplots(figsize=(8, 8.5))
    enc_x, dec_x = 2.0, 7.3
    for x, source in (
        (enc_x, "source ids $(B, T)$"),
        (dec_x, "target ids, shifted right $(B, t)$"),
    ):
        ax.text(x, 0.0, source, ha="center", va="center", fontsize=10)
        arrow(ax, (x, 0.2), (x, 0.9 - BOX_H / 2))
        box(ax, x, 0.9, r"embedding $\times\sqrt{D}$", "embed")
        arrow(ax, (x, 0.9 + BOX_H / 2), (x, 1.85 - BOX_H / 2))
        box(ax, x, 1.85, "+ positional encoding", "embed")
    enc_top = stack(
        ax,
        enc_x,
        [
            ("multi-head\nself-attention", "attention"),
            ("position-wise FFN", "ffn"),
        ],
        2.95,
        "encoder\nblock\n× N",
        "left",
    )
    dec_top = stack(
        ax,
        dec_x,
        [
            ("masked multi-head\nself-attention", "attention"),
            ("multi-head\ncross-attention", "attention"),
            ("position-wise FFN", "ffn"),
        ],
        2.95,
        "decoder\nblock\n× N",
        "right",
    )
    # Encoder outputs: keys and values of every decoder block's
    # cross-attention.
    ax.text(
        enc_x,
        enc_top + 1.2,
        "encoder outputs $(B, T, D)$",
        ha="center",
        va="center",
        fontsize=10,
    )
    arrow(ax, (enc_x, enc_top + BOX_H / 2), (enc_x, enc_top + 1.0))
    cross_y = 2.95 + 1.9
    ax.plot(
        [enc_x + 2.1, 5.0, 5.0],
        [enc_top + 1.2, enc_top + 1.2, cross_y],
        color="black",
        lw=1,
    )
    arrow(ax, (5.0, cross_y), (dec_x - BOX_W / 2, cross_y))
    ax.text(
        4.9,
        (enc_top + 1.2 + cross_y) / 2,
        "keys,\nvalues",
        fontsize=8,
        ha="right",
        va="center",
    )
    arrow(ax, (dec_x, dec_top + BOX_H / 2), (dec_x, dec_top + 1.3 - BOX_H / 2))
    box(ax, dec_x, dec_top + 1.3, "linear: $D \\to V$ scores", "out")
    arrow(
        ax,
        (dec_x, dec_top + 1.3 + BOX_H / 2),
        (dec_x, dec_top + 2.25 - BOX_H / 2),
    )
    box(ax, dec_x, dec_top + 2.25, "softmax: next-token\nprobabilities", "out")
    ax.set_xlim(-0.6, 11)
    ax.set_ylim(-0.4, dec_top + 2.8)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.savefig(OUT, bbox_inches="tight")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
