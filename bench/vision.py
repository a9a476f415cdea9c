"""Benchmark: the Vision Transformer against a CNN of the same size, and what the patch size costs.

The models of the chapter "Attention on images", on random (B, 1, 28, 28) float32 images (the
digits' size; speed does not depend on the pixels, so no data set is read) with random labels:

- ``ViT p=4``, ``ViT p=7``, ``ViT p=14``  ``course_pkg.experiments.vision.digits_vit(p)`` (2
  blocks, width 32, 4 heads; fused attention, as in training), which cuts an image into
  (28 / p)^2 patches: N = (28 / p)^2 + 1 tokens with the class token;
- ``CNN``  ``course_pkg.experiments.vision.digits_convnet(n)`` with n the parameters of
  ``ViT p=7``: the width whose ConvNet has the number of parameters closest to the ViT's.

Two measures, in images per second (B / the median time of one call):

1. training: one step = forward + cross-entropy + backward + AdamW step (with the chapter's
   settings: ``VIT_TRAINING`` for the ViTs, ``CNN_TRAINING`` for the CNN; the learning rate does
   not change the time), the models in train mode;
2. inference: forward under ``torch.no_grad()``, the models in eval mode.

The paths take turns (``_common.interleaved_medians``: one call of each per round, after
``--warmup`` rounds), so the ratios compare models measured in the same run under the same load.
It prints ViT p=7 / CNN for both measures, and for the three patch sizes the tokens N, the
parameters, the attention FLOPs per image (2 x blocks x ``course_pkg.models.vit.attention_cost``,
which counts one block's multiply-adds of the scores and the weighted sum, 2 N^2 D) and the
training images/s, each with its ratio to patch 7. Before timing, each model's output is checked
to be (B, 10) and finite. No target and no record: this script measures, and no chapter quotes
it.

Usage:
    python bench/vision.py                        # B = 64, 1 thread (under a minute)
    python bench/vision.py --threads 2 --batch 256
    python bench/vision.py --device cuda --batch 256
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.device import seed_everything
from course_pkg.experiments.vision import (
    CNN_TRAINING,
    DIGITS_VIT,
    PATCH_SIZES,
    VIT_TRAINING,
    ClassifierSettings,
    count_parameters,
    digits_convnet,
    digits_vit,
)
from course_pkg.models.vit import attention_cost, num_patches

from _common import begin, interleaved_medians, parser

# the chapter's ViT, and the patch size the others are compared with
PEER_PATCH = 7
IMG_SIZE = DIGITS_VIT["img_size"]
CLASSES = DIGITS_VIT["num_classes"]


def make_models(device: torch.device) -> dict[str, nn.Module]:
    """name -> model on device: the ViT of each patch size, then the CNN
    sized like ``ViT p=7``."""
    seed_everything(0)
    models: dict[str, nn.Module] = {
        f"ViT p={p}": digits_vit(p) for p in PATCH_SIZES
    }
    models["CNN"] = digits_convnet(
        count_parameters(models[f"ViT p={PEER_PATCH}"])
    )
    return {name: model.to(device) for name, model in models.items()}


def check_outputs(models: dict[str, nn.Module], images: torch.Tensor) -> None:
    """Raise unless every model gives finite (B, classes) scores."""
    with torch.no_grad():
        for name, model in models.items():
            scores = model(images)
            if scores.shape != (len(images), CLASSES) or not bool(
                scores.isfinite().all()
            ):
                raise AssertionError(
                    f"{name}: scores of shape {tuple(scores.shape)}, "
                    f"finite: {bool(scores.isfinite().all())}"
                )


def training_step(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: ClassifierSettings,
) -> Callable[[], None]:
    """One AdamW update of model on the batch (settings' learning rate and
    weight decay, as ``train_classifier``), as a callable."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay
    )

    def step() -> None:
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def inference(model: nn.Module, images: torch.Tensor) -> Callable[[], None]:
    """One forward pass under no_grad, as a callable."""

    def forward() -> None:
        with torch.no_grad():
            model(images)

    return forward


def rates(
    models: dict[str, nn.Module],
    images: torch.Tensor,
    labels: torch.Tensor,
    args: argparse.Namespace,
    device: torch.device,
) -> tuple[dict[str, float], dict[str, float]]:
    """(training, inference) images per second of each model; inference of
    the ViT p=7 and the CNN only."""
    for model in models.values():
        model.train()
    training = interleaved_medians(
        {
            name: training_step(
                model,
                images,
                labels,
                CNN_TRAINING if name == "CNN" else VIT_TRAINING,
            )
            for name, model in models.items()
        },
        device,
        args.warmup,
        args.repeats,
    )
    compared = (f"ViT p={PEER_PATCH}", "CNN")
    for name in compared:
        models[name].eval()
    inferring = interleaved_medians(
        {name: inference(models[name], images) for name in compared},
        device,
        args.warmup,
        args.repeats,
    )
    batch = len(images)
    return (
        {name: batch / seconds for name, seconds in training.items()},
        {name: batch / seconds for name, seconds in inferring.items()},
    )


def main() -> None:
    options = parser(
        __doc__, warmup=3, repeats=21, threads=1, sizes={"batch": 64}
    )
    args, start, device = begin(options)
    print(
        f"B={args.batch} random {IMG_SIZE}x{IMG_SIZE}x1 images, float32; "
        f"AdamW lr={VIT_TRAINING.lr} (ViT), {CNN_TRAINING.lr} (CNN), "
        f"weight decay={VIT_TRAINING.weight_decay}, {CNN_TRAINING.weight_decay}; "
        f"time = median of {args.repeats} after {args.warmup} warm-up, "
        "the models taking turns"
    )
    models = make_models(device)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(
        args.batch, 1, IMG_SIZE, IMG_SIZE, generator=generator
    ).to(device)
    labels = torch.randint(0, CLASSES, (args.batch,), generator=generator).to(
        device
    )
    check_outputs(models, images)
    parameters = {name: count_parameters(m) for name, m in models.items()}
    training, inferring = rates(models, images, labels, args, device)

    vit, cnn = f"ViT p={PEER_PATCH}", "CNN"
    # c, the first convolution's width
    first = next(m for m in models[cnn].modules() if isinstance(m, nn.Conv2d))
    channels = first.out_channels
    print(
        f"\n{vit} against a CNN (c={channels}) of nearly the same size, "
        "images/s"
    )
    header = ("model", "parameters", "training", "inference")
    print("| {:<9} | {:>10} | {:>10} | {:>10} |".format(*header))
    print(f"|{'-' * 11}|{'-' * 12}|{'-' * 12}|{'-' * 12}|")
    for name in (vit, cnn):
        print(
            f"| {name:<9} | {parameters[name]:>10,} | "
            f"{training[name]:>10.0f} | {inferring[name]:>10.0f} |"
        )
    print(
        f"ViT / CNN: parameters {parameters[vit] / parameters[cnn]:.3f}, "
        f"training {training[vit] / training[cnn]:.3f}, "
        f"inference {inferring[vit] / inferring[cnn]:.3f}"
    )

    blocks = DIGITS_VIT["num_blks"]
    width = DIGITS_VIT["num_hiddens"]
    flops = {
        p: 2 * blocks * attention_cost(IMG_SIZE, p, width) for p in PATCH_SIZES
    }
    print(
        f"\nViT patch sizes on {IMG_SIZE}x{IMG_SIZE} images "
        f"(ratio to patch {PEER_PATCH}); attention FLOPs per image = "
        f"2 x {blocks} blocks x attention_cost"
    )
    header = ("patch", "tokens N", "parameters", "attention FLOPs")
    print("| {} | {} | {} | {:>21} | training images/s |".format(*header))
    print(f"|{'-' * 7}|{'-' * 10}|{'-' * 12}|{'-' * 23}|{'-' * 19}|")
    for p in PATCH_SIZES:
        name = f"ViT p={p}"
        tokens = num_patches(IMG_SIZE, p) + 1  # and the class token
        flop_cell = f"{flops[p]:,} ({flops[p] / flops[PEER_PATCH]:.2f}x)"
        rate_cell = (
            f"{training[name]:.0f} ({training[name] / training[vit]:.2f}x)"
        )
        print(
            f"| {p:>5} | {tokens:>8} | {parameters[name]:>10,} | "
            f"{flop_cell:>21} | {rate_cell:>17} |"
        )
    print(f"({(time.perf_counter() - start) / 60:.1f} min)")


if __name__ == "__main__":
    main()
