"""Which elements share a mean and a variance: BatchNorm, LayerNorm, InstanceNorm, GroupNorm.

Chapter "The Transformer: blocks and masks" imports :func:`normalisation_groups` (to check the
picture against PyTorch's layers) and :func:`draw_normalisation_axes` (the notebook's folder,
``book/``, is on the kernel's path). Run this file to look at the figure on its own:
`.venv/bin/python book/figures/normalisation_axes.py` writes ``normalisation_axes.png`` here.

A batch of sequences has three axes: B sentences, T positions, D features. Each normalisation
splits the B * T * D numbers into groups and gives every group mean 0 and variance 1:

- BatchNorm: one group per feature, over the batch and the positions;
- LayerNorm (the Transformer's): one group per (sentence, position), over the features;
- InstanceNorm: one group per (sentence, feature), over the positions;
- GroupNorm: one group per (sentence, block of features), over the positions and the block.
"""

from __future__ import annotations

import pathlib

import matplotlib.pyplot as plt
import numpy as np

KINDS = ("BatchNorm", "LayerNorm", "InstanceNorm", "GroupNorm")
# RGBA: the coloured group opaque, the rest nearly transparent so that it shows through
GROUP_COLOUR = (0.23, 0.46, 0.69, 0.95)
OTHER_COLOUR = (0.75, 0.75, 0.75, 0.12)


def normalisation_groups(
    kind: str, B: int, T: int, D: int, num_groups: int = 2
) -> np.ndarray:
    """Label every element of a (B, T, D) batch with the group it is normalised in.

    Args:
        kind: one of ``KINDS``.
        B, T, D: batch size, sequence length, number of features.
        num_groups: GroupNorm's number of feature blocks (must divide D).

    Returns:
        (B, T, D) integer array; elements with equal labels share one mean and one
        variance. Group 0 is the one the figure colours.

    Raises:
        ValueError: for an unknown kind, or num_groups not dividing D.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if D % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide D={D}")
    b, t, d = np.meshgrid(
        np.arange(B), np.arange(T), np.arange(D), indexing="ij"
    )
    if kind == "BatchNorm":
        return d
    if kind == "LayerNorm":
        return b * T + t
    if kind == "InstanceNorm":
        return b * D + d
    return b * num_groups + d // (D // num_groups)


def draw_normalisation_axes(B: int = 3, T: int = 5, D: int = 4):
    """Four cubes of a (B, T, D) batch, each with one normalisation group coloured.

    Returns:
        The matplotlib figure (one 3-D panel per kind of normalisation).
    """
    fig = plt.figure(figsize=(9.6, 3.2))
    for i, kind in enumerate(KINDS):
        ax = fig.add_subplot(1, len(KINDS), i + 1, projection="3d")
        # voxels index (x, y, z) = (position t, sentence b, feature d)
        in_group = normalisation_groups(kind, B, T, D) == 0  # (B, T, D)
        in_group = in_group.transpose(1, 0, 2)  # (T, B, D)
        colours = np.where(
            in_group[..., None], GROUP_COLOUR, OTHER_COLOUR
        )  # (T, B, D, 4)
        ax.voxels(
            np.ones((T, B, D), dtype=bool),
            facecolors=colours,
            edgecolor=(0.3, 0.3, 0.3, 0.5),
            linewidth=0.4,
        )
        ax.set_xlabel("position t", fontsize=8, labelpad=-10)
        ax.set_ylabel("sentence b", fontsize=8, labelpad=-10)
        ax.set_zlabel("feature d", fontsize=8, labelpad=-12)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_zticks([])
        ax.set_box_aspect((T, B, D))
        ax.view_init(elev=22, azim=-58)
        ax.set_title(kind, fontsize=10, pad=0)
    fig.subplots_adjust(
        left=0.0, right=0.97, bottom=0.06, top=0.92, wspace=0.05
    )
    return fig


if __name__ == "__main__":
    out = pathlib.Path(__file__).with_name("normalisation_axes.png")
    draw_normalisation_axes().savefig(out, dpi=120)
    print(f"wrote {out}")
