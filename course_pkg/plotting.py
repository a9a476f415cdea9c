"""The two plotting helpers every chapter uses: attention heatmaps and line
plots.

One colour map for attention everywhere (``ATTENTION_CMAP``), labelled axes
always.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from course_pkg.checks import check_str

ATTENTION_CMAP = "Reds"

#: What the helpers accept as numbers: a tensor (any device, detached
#: here), a NumPy array, or nested sequences of numbers.
ArrayLike = torch.Tensor | np.ndarray | Sequence


def show_heatmaps(
    matrices: ArrayLike,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None = None,
    figsize: tuple[float, float] = (2.5, 2.5),
    cmap: str = ATTENTION_CMAP,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
) -> Figure:
    """Draw a grid of heatmaps (attention weights) sharing one colour bar.

    Args:
        matrices: (rows, cols, Q, K) tensor or array; rows × cols panels of Q ×
            K weights.
        xlabel, ylabel: axis labels (on the bottom row and left column).
        titles: one title per column, or None.
        figsize: size of one panel in inches.
        cmap: colour map (default the course's attention colour map).
        xticklabels, yticklabels: K and Q token labels, or None for indices.
    Returns:
        The matplotlib Figure.
    Raises:
        ValueError: if matrices is not 4-D or titles does not have one entry
            per column.
    """
    data = _check_show_heatmaps(matrices, xlabel, ylabel, titles)
    rows, cols = data.shape[:2]
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(figsize[0] * cols, figsize[1] * rows),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    vmax = max(float(data.max()), 1e-12)
    for i in range(rows):
        for j in range(cols):
            ax = axes[i, j]
            image = ax.imshow(
                data[i, j], cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto"
            )
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None and i == 0:
                ax.set_title(titles[j])
            if xticklabels is not None:
                ax.set_xticks(
                    range(len(xticklabels)), xticklabels, rotation=90
                )
            if yticklabels is not None:
                ax.set_yticks(range(len(yticklabels)), yticklabels)
    fig.colorbar(image, ax=axes, shrink=0.6)
    return fig


def _check_show_heatmaps(
    matrices: object, xlabel: object, ylabel: object, titles: object
) -> np.ndarray:
    """xlabel, ylabel str; matrices (rows, cols, Q, K) numbers; titles None
    or one per column. Returns matrices as a NumPy array."""
    for label, text in (("xlabel", xlabel), ("ylabel", ylabel)):
        check_str(label, text)
    data = _to_numpy(matrices)
    if data.ndim != 4:
        raise ValueError(
            f"matrices must have shape (rows, cols, Q, K), got {data.shape}"
        )
    cols = data.shape[1]
    if titles is not None and len(titles) != cols:
        raise ValueError(
            f"titles must have {cols} entries (one per column), got {len(titles)}"
        )
    return data


def plot_lines(
    x: ArrayLike,
    ys: Sequence[ArrayLike] | dict[str, ArrayLike],
    xlabel: str,
    ylabel: str,
    legend: Sequence[str] | None = None,
    xscale: str = "linear",
    yscale: str = "linear",
    figsize: tuple[float, float] = (4.5, 3.0),
    title: str | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Plot one or several curves against x with labelled axes.

    Args:
        x: (N,) values, shared by every curve.
        ys: a list of (N,) curves, or a dict {label: (N,) curve} (the labels
            become the legend).
        xlabel, ylabel: axis labels. legend: one label per curve (ignored when
        ys is a dict). xscale, yscale: "linear" or "log". figsize: used when a
        new figure is made. title: optional.
        ax: draw into this Axes instead of a new figure.
    Returns:
        The Axes drawn into.
    Raises:
        ValueError: if a curve's length differs from x's.
    """
    for label, text in (
        ("xlabel", xlabel),
        ("ylabel", ylabel),
        ("xscale", xscale),
        ("yscale", yscale),
    ):
        check_str(label, text)
    if isinstance(ys, dict):
        legend, ys = list(ys.keys()), list(ys.values())
    xs = _to_numpy(x)
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    for k, y in enumerate(ys):
        values = _to_numpy(y)
        if values.shape != xs.shape:
            raise ValueError(
                f"curve {k} has shape {values.shape}, x has shape {xs.shape}"
            )
        ax.plot(xs, values, label=None if legend is None else legend[k])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xscale(xscale)
    ax.set_yscale(yscale)
    if title:
        ax.set_title(title)
    if legend is not None:
        ax.legend()
    ax.grid(alpha=0.3)
    return ax


def _to_numpy(values: ArrayLike) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=float)
