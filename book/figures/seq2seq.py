"""The encoder–decoder diagram of the chapter "The encoder–decoder architecture".

Two panels, one sentence pair of the course's corpus: during training the decoder reads the
reference shifted right (teacher forcing); at inference it reads its own previous choices. The
chapter imports :func:`draw_seq2seq` (the notebook's folder, ``book/``, is on the kernel's path);
run it on its own to look at it: `cd book && ../.venv/bin/python -m figures.seq2seq` writes
``seq2seq.png`` beside this file.
"""

from __future__ import annotations

import pathlib

import matplotlib.pyplot as plt
from figures.diagram import arrow, box

ENCODER_COLOUR, DECODER_COLOUR = "#cfe3f7", "#fdd9b5"
REFERENCE_COLOUR, WRONG_COLOUR = "#1a7f37", "#c62828"

SOURCE = ("he", "watched", "us", ".", "<eos>")
TARGET = ("il", "nous", "a", "regardés", ".", "<eos>")
# What an imperfect model might write: one wrong word, which it then reads.
PREDICTED = ("il", "nous", "a", "trouvés", ".", "<eos>")


def _box(ax, x: float, y: float, text: str, colour: str) -> None:
    box(ax, (x, y), (0.72, 0.54), text, colour)


def _arrow(ax, start, end, colour="black", style="-", rad=0.0) -> None:
    arrow(ax, start, end, colour, style, rad, head=9)


def _panel(ax, training: bool) -> None:
    """One panel: encoder on the left, decoder on the right."""
    enc_x = [float(i) for i in range(len(SOURCE))]
    dec_x = [len(SOURCE) + 0.6 + i for i in range(len(TARGET))]
    box_y, in_y, out_y, ctx_y = 1.0, 0.0, 2.1, 0.5
    # encoder: source tokens in, states h_t passed right
    for t, (x, token) in enumerate(zip(enc_x, SOURCE), start=1):
        ax.text(x, in_y, token, ha="center", va="center", fontsize=9)
        _arrow(ax, (x, in_y + 0.15), (x, box_y - 0.27))
        _box(ax, x, box_y, rf"$\mathbf{{h}}_{t}$", ENCODER_COLOUR)
        if t > 1:
            _arrow(ax, (x - 0.64, box_y), (x - 0.36, box_y))
    # the hand-over: s_0 = h_T, and the context c fed at every decoder step
    _arrow(ax, (enc_x[-1] + 0.36, box_y), (dec_x[0] - 0.36, box_y))
    ax.text(
        (enc_x[-1] + dec_x[0]) / 2,
        box_y + 0.42,
        r"$\mathbf{s}_0 = \mathbf{h}_T$",
        ha="center",
        fontsize=8.5,
    )
    ax.plot(
        [enc_x[-1], enc_x[-1], dec_x[-1]],
        [box_y - 0.27, ctx_y, ctx_y],
        color="grey",
        ls="--",
        lw=1,
    )
    for x in dec_x:
        _arrow(ax, (x + 0.12, ctx_y), (x + 0.12, box_y - 0.27), "grey", "--")
    ax.text(
        dec_x[0] - 0.5,
        in_y - 0.3,
        r"- - -  context $\mathbf{c} = \mathbf{h}_T$, read at every decoder step",
        fontsize=8,
        color="dimgrey",
        va="top",
    )
    # decoder: inputs below, states s_t passed right, outputs above
    inputs = ("<bos>",) + (TARGET if training else PREDICTED)[:-1]
    outputs = TARGET if training else PREDICTED
    for t, (x, token_in, token_out) in enumerate(
        zip(dec_x, inputs, outputs), start=1
    ):
        wrong = not training and token_in not in TARGET and token_in != "<bos>"
        colour = REFERENCE_COLOUR if training and t > 1 else "black"
        ax.text(
            x - 0.12,
            in_y,
            token_in,
            ha="center",
            va="center",
            fontsize=9,
            color=WRONG_COLOUR if wrong else colour,
        )
        _arrow(ax, (x - 0.12, in_y + 0.15), (x - 0.12, box_y - 0.27))
        _box(ax, x, box_y, rf"$\mathbf{{s}}_{t}$", DECODER_COLOUR)
        if t > 1:
            _arrow(ax, (x - 0.64, box_y), (x - 0.36, box_y))
        _arrow(ax, (x, box_y + 0.27), (x, out_y - 0.15))
        wrong_out = not training and token_out not in TARGET
        ax.text(
            x,
            out_y,
            token_out,
            ha="center",
            va="center",
            fontsize=9,
            color=WRONG_COLOUR
            if wrong_out
            else (REFERENCE_COLOUR if training else "black"),
        )
        if not training and t < len(dec_x):
            # the choice is fed back as the next input
            _arrow(
                ax,
                (x + 0.28, out_y - 0.12),
                (dec_x[t] - 0.16, in_y + 0.14),
                "tab:blue",
            )
    if training:
        title = (
            "training (teacher forcing): the decoder reads the reference shifted right "
            "(tgt_in);\nits scores at every step are compared with the next reference "
            "token (tgt_out) in one pass"
        )
        ax.text(
            dec_x[-1] + 0.55, out_y, "targets:\nloss", fontsize=8, va="center"
        )
        ax.text(
            dec_x[-1] + 0.55,
            in_y,
            "reference\ninputs",
            fontsize=8,
            va="center",
        )
    else:
        title = (
            "inference (greedy decoding): the decoder reads its own previous choice, "
            "one step at a time;\na wrong choice (red) becomes the next input"
        )
        ax.text(
            dec_x[-1] + 0.55,
            out_y,
            "choices\n" + r"$\hat y_t$",
            fontsize=8,
            va="center",
        )
        ax.text(
            dec_x[-1] + 0.55, in_y, "own\nchoices", fontsize=8, va="center"
        )
    ax.text(enc_x[0] - 0.5, 2.95, title, fontsize=9, va="bottom")
    ax.text(_mean(enc_x), 1.55, "encoder", ha="center", fontsize=9)
    ax.text(_mean(dec_x), 2.55, "decoder", ha="center", fontsize=9)
    ax.set_xlim(enc_x[0] - 0.6, dec_x[-1] + 1.4)
    ax.set_ylim(-0.65, 3.75)
    ax.axis("off")


def _mean(values: list[float]) -> float:
    """The mean of a few numbers (no numpy needed)."""
    return sum(values) / len(values)


def draw_seq2seq():
    """The encoder–decoder in training (teacher forcing) and at inference.

    Returns:
        The matplotlib Figure.
    """
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.6))
    _panel(top, training=True)
    _panel(bottom, training=False)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    draw_seq2seq().savefig(
        pathlib.Path(__file__).with_name("seq2seq.png"), dpi=120
    )
