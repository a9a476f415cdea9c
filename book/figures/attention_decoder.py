"""The diagrams of one decoder step in the chapter "Bahdanau attention".

:func:`draw_attention_decoder` draws Bahdanau's step (attention *before* the
GRU, queried by s_{t-1}) or Luong's (attention *after* the GRU, queried by
s_t). The chapter imports it (the notebook's folder, ``book/``, is on the
kernel's path); run this file to look at both on their own:
`.venv/bin/python book/figures/attention_decoder.py` writes
``attention_decoder_bahdanau.png`` and ``attention_decoder_luong.png`` here.
"""

from __future__ import annotations

import pathlib

from figures.diagram import arrow, box, canvas

ENCODER, DECODER, ATTENTION, OUTPUT = (
    "#cfe3f7",
    "#d8f0d0",
    "#fff3b0",
    "#f2f2f2",
)
HEIGHT = 0.5  # of every box
S_PREV, S_T, EMB = (
    "$\\mathbf{s}_{t-1}$",
    "$\\mathbf{s}_t$",
    "$\\mathbf{e}(y_{t-1})$",
)
CONCAT = "$[\\mathbf{c}_t;\\, \\mathbf{e}(y_{t-1})]$"
SCORES = "$\\mathrm{softmax}(\\mathbf{W} \\mathbf{s}_t + \\mathbf{b})$"
ATTENTIONAL = "$\\tilde{\\mathbf{s}}_t = \\tanh(\\mathbf{W}_c [\\mathbf{c}_t; \\mathbf{s}_t])$"
ATTENTIONAL_SCORES = (
    "$\\mathrm{softmax}(\\mathbf{W} \\tilde{\\mathbf{s}}_t + \\mathbf{b})$"
)
CONTEXT = "$\\mathbf{c}_t = \\Sigma_i\\, \\alpha_{t,i} \\mathbf{h}_i$"

# Each design: the attention box's text, then what is drawn above it, in order: boxes
# (x, y, width, text, colour), arrows (start, end, label, label side) and texts (x, y, text).
DESIGNS = {
    "bahdanau": (
        "additive attention: $\\alpha_{t,i} = \\mathrm{softmax}_i\\,"
        "a(\\mathbf{s}_{t-1}, \\mathbf{h}_i)$",
        [
            (0.9, 4.6, 0.9, S_PREV, DECODER),
            ((0.9, 4.35), (0.9, 2.35), "query", "left"),
            (1.9, 3.5, 1.1, EMB, OUTPUT),
            (5.8, 3.5, 1.8, CONTEXT, ATTENTION),
            ((5.8, 2.35), (5.8, 3.25)),
            (3.6, 3.5, 1.5, CONCAT, OUTPUT),
            ((2.45, 3.5), (2.85, 3.5)),
            ((4.9, 3.5), (4.35, 3.5)),
            (3.6, 4.6, 1.1, "GRU", DECODER),
            ((3.6, 3.75), (3.6, 4.35)),
            ((1.35, 4.6), (3.05, 4.6)),
            (5.5, 4.6, 0.8, S_T, DECODER),
            ((4.15, 4.6), (5.1, 4.6)),
            (7.7, 4.6, 2.4, SCORES, OUTPUT),
            ((5.9, 4.6), (6.5, 4.6)),
            (7.7, 5.2, "$P(y_t \\mid y_{<t}, x)$"),
            ((7.7, 4.85), (7.7, 5.1)),
        ],
    ),
    "luong": (
        "attention (general): $\\alpha_{t,i} = \\mathrm{softmax}_i\\,"
        "\\mathbf{s}_t^\\top \\mathbf{W}_a \\mathbf{h}_i$",
        [
            (0.9, 4.6, 0.9, S_PREV, DECODER),
            (2.8, 3.5, 1.1, EMB, OUTPUT),
            (2.8, 4.6, 1.1, "GRU", DECODER),
            ((2.8, 3.75), (2.8, 4.35)),
            ((1.35, 4.6), (2.25, 4.6)),
            (4.5, 4.6, 0.8, S_T, DECODER),
            ((3.35, 4.6), (4.1, 4.6)),
            ((4.5, 4.35), (4.5, 2.35), "query", "right"),
            (7.5, 3.5, 1.8, CONTEXT, ATTENTION),
            ((7.5, 2.35), (7.5, 3.25)),
            (7.5, 4.6, 2.3, ATTENTIONAL, OUTPUT),
            ((7.5, 3.75), (7.5, 4.35)),
            ((4.9, 4.6), (6.35, 4.6)),
            (7.5, 5.2, ATTENTIONAL_SCORES),
            ((7.5, 4.85), (7.5, 5.1)),
        ],
    ),
}


def _encoder_and_attention(ax, attention: str) -> None:
    """The encoder states h_1..h_T and the attention box above them."""
    for x, name in zip((4.2, 5.3, 7.5), ("h_1", "h_2", "h_T")):
        label = f"$\\mathbf{{{name[0]}}}_{name[2]}$"
        box(ax, (x, 0.6), (0.8, HEIGHT), label, ENCODER)
        arrow(ax, (x, 0.85), (x, 1.85))
    ax.text(6.4, 0.6, "$\\cdots$", ha="center", va="center", fontsize=11)
    ax.text(
        5.85,
        0.05,
        "encoder states: keys = values",
        ha="center",
        va="center",
        fontsize=8,
    )
    box(ax, (4.6, 2.1), (7.6, HEIGHT), attention, ATTENTION)


def draw_attention_decoder(design: str = "bahdanau"):
    """One decoder step with attention over the encoder states.

    Args:
        design: "bahdanau" (query s_{t-1}, context into the GRU) or "luong"
            (query s_t, context combined with s_t after the GRU).
    Returns:
        The matplotlib Figure.
    Raises:
        ValueError: on another design.
    """
    if design not in DESIGNS:
        raise ValueError(
            f"design must be 'bahdanau' or 'luong', got {design!r}"
        )
    fig, ax = canvas((6.4, 4.0))
    attention, items = DESIGNS[design]
    _encoder_and_attention(ax, attention)
    for item in items:
        if len(item) == 5:  # a box
            x, y, width, text, colour = item
            box(ax, (x, y), (width, HEIGHT), text, colour)
        elif len(item) == 3:  # a text
            x, y, text = item
            ax.text(x, y, text, ha="center", fontsize=9)
        else:  # an arrow: start, end, and a label and its side or none
            start, end, label, side = (*item, "", "right")[:4]
            arrow(ax, start, end, label=label, label_side=side)
    ax.set_xlim(-0.1, 9.1)
    ax.set_ylim(-0.2, 5.6)
    ax.set_axis_off()
    return fig


if __name__ == "__main__":
    here = pathlib.Path(__file__).parent
    for name in ("bahdanau", "luong"):
        draw_attention_decoder(name).savefig(
            here / f"attention_decoder_{name}.png", dpi=120
        )
