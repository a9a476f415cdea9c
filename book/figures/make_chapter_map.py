"""Draw book/figures/chapter_map.svg, the map of chapters on the front page.

Run from the repository root: `.venv/bin/python book/figures/make_chapter_map.py`.
"""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = (
    "attention-tested"  # stable ids: the file only changes with the drawing
)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

CHAPTERS = [
    ("1. Encoder–decoder", "GRU seq2seq, teacher forcing,\nmasked loss, BLEU"),
    ("2. Queries, keys, values", "Nadaraya–Watson\nattention pooling"),
    ("3. Scoring functions", "masked softmax, additive,\nscaled dot-product"),
    ("4. Bahdanau attention", "alignment while\ntranslating"),
    ("5. Multi-head attention", "heads in parallel,\nnn.MultiheadAttention"),
    ("6. Self-attention", "positional encoding,\nCNN vs RNN vs attention"),
    ("7. The Transformer", "encoder, decoder, masks,\ntraining, decoding"),
]


def main() -> None:
    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.set_xlim(0, 4)
    ax.set_ylim(0, 2)
    ax.axis("off")
    positions = [
        (0.5, 1.45),
        (1.5, 1.45),
        (2.5, 1.45),
        (3.5, 1.45),
        (3.5, 0.5),
        (2.5, 0.5),
        (1.5, 0.5),
    ]
    for (title, detail), (x, y) in zip(CHAPTERS, positions):
        ax.add_patch(
            FancyBboxPatch(
                (x - 0.44, y - 0.32),
                0.88,
                0.64,
                boxstyle="round,pad=0.02",
                facecolor="#fde0dd",
                edgecolor="#a50f15",
            )
        )
        ax.text(
            x,
            y + 0.14,
            title,
            ha="center",
            va="center",
            fontsize=9.5,
            weight="bold",
        )
        ax.text(x, y - 0.12, detail, ha="center", va="center", fontsize=8.5)
    for (x0, y0), (x1, y1) in zip(positions, positions[1:]):
        if y0 == y1:
            start, end = (
                (x0 + 0.46 * (1 if x1 > x0 else -1), y0),
                (x1 - 0.46 * (1 if x1 > x0 else -1), y1),
            )
        else:
            start, end = (x0, y0 - 0.34), (x1, y1 + 0.34)
        ax.add_patch(
            FancyArrowPatch(
                start, end, arrowstyle="-|>", mutation_scale=14, color="#444"
            )
        )
    out = pathlib.Path(__file__).with_name("chapter_map.svg")
    fig.savefig(out, bbox_inches="tight", metadata={"Date": None})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
