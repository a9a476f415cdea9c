"""Draw book/figures/concept_map.svg, the concept map on the front page.

The map follows the ideas, not the reading order: attention scores feed attention
pooling, pooling is run as several heads, heads are assembled into blocks, blocks
into the Transformer; Part II branches off the finished model. Each box names the
chapters that teach it.

Run from book/: `../.venv/bin/python -m figures.make_concept_map`.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
# stable ids: the file only changes with the drawing
matplotlib.rcParams["svg.hashsalt"] = "attention-tested"
import matplotlib.pyplot as plt  # noqa: E402
from figures.diagram import arrow, box  # noqa: E402

OUT = pathlib.Path(__file__).with_name("concept_map.svg")

BOX_W, BOX_H = 2.3, 1.3  # box width and height, in the axes' units (inches)

COLOURS = {  # face, edge
    "rnn": ("#fff3b0", "#8c6d00"),  # attention added to a recurrent model
    "core": ("#fde0dd", "#a50f15"),  # the chain from scores to the model
    "today": ("#deebf7", "#08519c"),  # Part II
}


@dataclass(frozen=True)
class Concept:
    """One box: a concept, the chapters that teach it, two short lines."""

    x: float
    y: float
    title: str
    chapters: str
    detail: str
    kind: str


# The boxes, drawn in this order, by kind (COLOURS): name, x, y, title, chapters, detail.
# fmt: off
CONCEPTS = {
    name: Concept(x, y, title, chapters, detail, kind)
    for kind, boxes in [
        ("rnn", [
            ("encdec", 1.25, 5.8, "Encoder–decoder", "ch. 1", "the translation task,\nGRU, BLEU"),
            ("rnn_attention", 5.0, 5.8, "Attention in an RNN", "ch. 4", "Bahdanau and Luong\ndecoders, alignments"),
        ]),
        ("core", [
            ("scores", 1.25, 3.6, "Attention scores", "ch. 3", "additive, dot product,\n$\\div\\sqrt{d}$, masked softmax"),
            ("pooling", 3.75, 3.6, "Attention pooling", "ch. 2", "$\\Sigma_j\\, \\alpha_{ij}\\,\\mathbf{v}_j$, a weighted\naverage of the values"),
            ("heads", 6.25, 3.6, "Multi-head attention", "ch. 5", "$H$ attentions in\nparallel subspaces"),
            ("blocks", 8.75, 3.6, "Transformer blocks", "ch. 6, 7", "self-attention, positions,\nFFN, add & norm"),
            ("model", 11.25, 3.6, "The Transformer", "ch. 7, 8", "trained, decoded\nand analysed"),
        ]),
        ("today", [
            ("real_text", 1.25, 1.2, "Real text", "ch. 9, 12", "byte-level BPE, GPT-2,\nShakespeare"),
            ("pretraining", 3.75, 1.2, "Pretraining", "ch. 10, 11", "BERT (encoder only),\nGPT (decoder only)"),
            ("scale", 6.25, 1.2, "Attention at scale", "ch. 13, 14, 16", "blockwise softmax, kernels,\nGQA, RoPE, modern block"),
            ("distributed", 8.75, 1.2, "Several processes", "ch. 17", "data parallelism,\none all-reduce a step"),
            ("inference", 11.25, 1.2, "Serving attention", "ch. 18", "key/value cache, paging,\nspeculative decoding"),
            ("open_models", 8.75, -1.0, "Today's open models", "ch. 19", "Llama, Gemma, DeepSeek…:\nexperts, latent attention"),
            ("images", 13.75, 1.2, "Attention on images", "ch. 20", "captions over a grid, ViT,\nexplanations tested"),
            ("beyond_softmax", 6.25, -1.0, "Beyond softmax", "ch. 15", "linear attention, random\nfeatures, decays, graphs"),
        ]),
    ]
    for name, x, y, title, chapters, detail in boxes
}
# fmt: on

# (from, to, label, dashed): an arrow reads "is used by"; a label sits above
# the arrow's middle.
LINKS = [
    ("scores", "pooling", "", False),
    ("pooling", "heads", "", False),
    ("heads", "blocks", "", False),
    ("blocks", "model", "", False),
    ("encdec", "rnn_attention", "add attention", False),
    ("pooling", "rnn_attention", "", False),
    (
        "rnn_attention",
        "model",
        "drop the recurrence",
        True,
    ),
    ("model", "pretraining", "", False),
    ("model", "scale", "", False),
    ("model", "distributed", "", False),
    ("model", "inference", "", False),
    ("pretraining", "real_text", "", False),
    ("scale", "open_models", "", False),
    ("scale", "beyond_softmax", "", False),
    ("inference", "open_models", "", False),
    ("model", "images", "", False),
]


def _anchor(c: Concept, towards: Concept) -> tuple[float, float]:
    """Where an arrow leaves (or enters) box c on its way to (from) box towards."""
    dx, dy = towards.x - c.x, towards.y - c.y
    if abs(dy) < 1e-9:  # same row: leave through the side
        return c.x + (BOX_W / 2 + 0.03) * (1 if dx > 0 else -1), c.y
    # otherwise through the top or the bottom, shifted towards the other box
    side = 1 if dy > 0 else -1
    shift = max(-BOX_W / 3, min(BOX_W / 3, dx * 0.25))
    return c.x + shift, c.y + side * (BOX_H / 2 + 0.03)


def _draw_box(ax, c: Concept) -> None:
    face, edge = COLOURS[c.kind]
    box(ax, (c.x, c.y), (BOX_W, BOX_H), "", face, 0.1, edge=edge, lw=1.2)
    # The three lines of text: title, chapters, detail.
    for dy, text, style in (
        (0.4, c.title, dict(fontsize=10.5, weight="bold")),
        (0.12, c.chapters, dict(fontsize=9, color=edge, style="italic")),
        (-0.3, c.detail, dict(fontsize=9, linespacing=1.45)),
    ):
        ax.text(c.x, c.y + dy, text, ha="center", va="center", **style)


def draw(ax) -> None:
    """Draw the concept map on ax (an axes of about 15 x 9.2 inches)."""
    ax.set_xlim(0.0, 15.0)
    ax.set_ylim(-2.05, 6.95)
    ax.set_aspect("equal")
    ax.axis("off")
    for c in CONCEPTS.values():
        _draw_box(ax, c)
    for start, end, label, dashed in LINKS:
        a, b = CONCEPTS[start], CONCEPTS[end]
        p0, p1 = _anchor(a, b), _anchor(b, a)
        style = (0, (4, 3)) if dashed else "-"
        arrow(ax, p0, p1, "#444", style, head=15, lw=1.2)
        if label:
            mid = ((p0[0] + p1[0]) / 2, (p0[1] + p1[1]) / 2)
            ax.text(
                mid[0],
                mid[1] + 0.22,
                label,
                ha="center",
                va="bottom",
                fontsize=9,
                style="italic",
                color="#333",
            )
    # The headings of the two parts, in the edge colour of their boxes.
    for y, text, kind, spacing in (
        (
            6.8,
            "Part I — attention and the Transformer (chapters 1–8)",
            "core",
            None,  # matplotlib's default
        ),
        (
            -1.9,
            "Part II — transformers today (chapters 9–20), built on the finished model",
            "today",
            None,
        ),
    ):
        colour = COLOURS[kind][1]
        ax.text(
            0.1,
            y,
            text,
            fontsize=10.5,
            weight="bold",
            color=colour,
            va="center",
            linespacing=spacing,
        )


def main() -> None:
    fig, ax = plt.subplots(figsize=(15, 9.2))
    draw(ax)
    fig.savefig(OUT, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
