"""The beam-search figure of the chapter "The encoder–decoder architecture".

:func:`trace_beam_search` runs the package's :func:`course_pkg.inference.decode.beam_search` on one source
sentence and records, through a forward hook on the decoder, the prefixes the search feeds the
decoder at every step: the beam. It then scores each prefix with
:func:`course_pkg.inference.decode.sequence_log_prob`. Nothing of the search is re-implemented here, so the
figure shows what the package did. :func:`draw_beam` draws the trace.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import matplotlib.pyplot as plt
import torch
from torch import nn

from course_pkg.inference.decode import (
    beam_search,
    cut_at_eos,
    sequence_log_prob,
)


class BeamTrace(NamedTuple):
    """What one beam search did.

    ``steps[j]`` holds the beam after ``j`` generated tokens, best first, as
    ``(ids, log P(ids | x))`` pairs (``steps[0]`` is the empty prefix);
    ``output`` is the returned hypothesis' ids (ending with <eos> if it
    finished) and ``output_log_prob`` its log-probability.
    """

    steps: list[list[tuple[tuple[int, ...], float]]]
    output: tuple[int, ...]
    output_log_prob: float


def trace_beam_search(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_len: torch.Tensor,
    bos: int,
    eos: int,
    num_steps: int,
    beam_size: int,
    alpha: float = 0.75,
) -> BeamTrace:
    """Run beam_search on one source sentence and record its beam.

    Args:
        model: an EncoderDecoder. src: (1, T) source ids. src_valid_len: (1,).
        bos, eos, num_steps, beam_size, alpha: as for beam_search.
    Returns:
        A :class:`BeamTrace`.
    Raises:
        ValueError: if src holds more than one sentence.
    """
    if src.shape[0] != 1:
        raise ValueError(f"src must have shape (1, T), got {tuple(src.shape)}")
    fed: list[torch.Tensor] = []

    def record(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        fed.append(args[0].detach().cpu())  # (beam_size, 1 + j) prefixes

    handle = model.decoder.register_forward_hook(record)
    try:
        tokens = beam_search(
            model,
            src,
            src_valid_len,
            bos,
            eos,
            num_steps,
            beam_size,
            alpha,
        )
    finally:
        handle.remove()
    steps = []
    for prefixes in fed:
        # rows that dropped out of the beam are copies of an alive row
        unique = list(
            dict.fromkeys(tuple(row[1:]) for row in prefixes.tolist())
        )
        steps.append(_scored(model, src, src_valid_len, unique, bos, eos))
    row = tokens[0].tolist()
    output = tuple(cut_at_eos(row, eos) + ([eos] if eos in row else []))
    ((_, output_log_prob),) = _scored(
        model, src, src_valid_len, [output], bos, eos
    )
    return BeamTrace(steps, output, output_log_prob)


def _scored(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_len: torch.Tensor,
    prefixes: list[tuple[int, ...]],
    bos: int,
    eos: int,
) -> list[tuple[tuple[int, ...], float]]:
    """The prefixes (all of one length) with their log-probabilities, best first."""
    if not prefixes[0]:
        return [((), 0.0)]
    ids = torch.tensor(prefixes, dtype=torch.long, device=src.device)
    n = len(prefixes)
    log_probs = sequence_log_prob(
        model, src.expand(n, -1), src_valid_len.expand(n), ids, bos, eos
    )
    return sorted(zip(prefixes, log_probs.tolist()), key=lambda item: -item[1])


def draw_beam(
    trace: BeamTrace,
    to_token,
    title: str = "",
    greedy: tuple[int, ...] = (),
):
    """The beam at every step; the returned hypothesis' path in colour.

    Args:
        trace: from :func:`trace_beam_search`.
        to_token: maps one target id to its token (e.g. ``tgt_vocab.to_tokens``).
        title: drawn above the plot.
        greedy: the greedy translation's ids (with its <eos>), if any: its
            prefixes that are in the beam are joined by a dashed blue line.
    Returns:
        The matplotlib Figure.
    """
    output = trace.output
    on_path = {output[:j] for j in range(len(output) + 1)}
    width = max(len(trace.steps), len(output) + 1)
    fig, ax = plt.subplots(figsize=(10, 3.9))
    position: dict[tuple[int, ...], tuple[float, float]] = {}
    for j, beam in enumerate(trace.steps):
        for rank, (ids, _) in enumerate(beam, start=1):
            position[ids] = (j, rank)
    # the returned hypothesis' last node (its <eos>) sits below that column
    last = len(output)
    last_rank = len(trace.steps[last]) + 1 if last < len(trace.steps) else 1
    position.setdefault(output, (last, last_rank))
    nodes = [pair for beam in trace.steps for pair in beam]
    if output not in {ids for ids, _ in nodes}:
        nodes.append((output, trace.output_log_prob))
    for ids, log_prob in nodes:
        x, y = position[ids]
        if ids and ids[:-1] in position:
            px, py = position[ids[:-1]]
            ax.plot(
                [px + 0.32, x - 0.32],
                [py, y],
                color="tab:orange" if ids in on_path else "lightgrey",
                lw=2 if ids in on_path else 1,
                zorder=1,
            )
        token = to_token(ids[-1]) if ids else "<bos>"
        label = token if len(token) <= 10 else token[:9] + "…"
        ax.text(
            x,
            y,
            f"{label}\n{log_prob:.2f}",
            ha="center",
            va="center",
            fontsize=7.5,
            bbox={
                "boxstyle": "round,pad=0.25",
                "fc": "#fdd9b5" if ids in on_path else "white",
                "ec": "tab:orange" if ids in on_path else "grey",
            },
            zorder=2,
        )
    greedy_path = [greedy[:j] for j in range(len(greedy) + 1)]
    for parent, child in zip(greedy_path, greedy_path[1:]):
        if parent in position and child in position:
            (px, py), (x, y) = position[parent], position[child]
            ax.plot(
                [px + 0.32, x - 0.32],
                [py + 0.12, y + 0.12],
                color="tab:blue",
                ls="--",
                lw=1.2,
                zorder=1,
            )
    max_rank = max(y for _, y in position.values())
    ax.set_xlim(-0.6, width - 0.4)
    ax.set_ylim(max_rank + 0.6, 0.4)
    ax.set_xticks(range(width))
    ax.set_yticks(range(1, max_rank + 1))
    ax.set_xlabel("tokens generated (the beam before each decoder step)")
    ax.set_ylabel("rank in the beam")
    if title:
        ax.set_title(title, fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig
