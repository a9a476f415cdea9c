"""A small convolutional classifier: the Vision Transformer's peer.

Chapter: "Attention on images". Two 3 x 3 convolutions, each followed by
ReLU and a 2 x 2 max-pool, then a linear layer over the flattened H/4 x W/4
grid of features (the shape of LeNet, LeCun et al. 1998). The convolutions
build in what the ViT must learn from data: that nearby pixels belong
together (locality) and that a stroke means the same wherever it lies
(translation equivariance). :func:`convnet_channels` picks the width that
gives the same number of parameters as a model it is compared with.

Shape letters: ``B`` batch, ``C`` input channels, ``H = W`` image side,
``V`` classes.
"""

from __future__ import annotations

import torch
from torch import nn

from course_pkg.checks import check_images, check_sizes


class ConvNet(nn.Module):
    """conv(C -> c) - ReLU - pool - conv(c -> 2c) - ReLU - pool - flatten -
    linear.

    Args:
        num_classes: V. channels: c, the first convolution's width.
        img_size: H = W, a multiple of 4. in_channels: C.
    Raises:
        TypeError/ValueError: a size not an int >= 1, img_size not a
            multiple of 4.
    """

    def __init__(
        self,
        num_classes: int,
        channels: int,
        img_size: int = 28,
        in_channels: int = 1,
    ):
        _check_convnet_args(num_classes, channels, img_size, in_channels)
        super().__init__()
        self.in_channels, self.img_size = in_channels, img_size
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # (B, c, H/2, W/2)
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # (B, 2c, H/4, W/4)
        )
        self.head = nn.Linear(2 * channels * (img_size // 4) ** 2, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) images -> (B, V) scores.

        Raises:
            TypeError/ValueError: X not a float (B, C, H, W) tensor of the
                model's sizes, dtype and device.
        """
        check_images("X", X, self.in_channels, self.img_size, self)
        return self.head(self.features(X).flatten(1))


def convnet_parameters(
    num_classes: int, channels: int, img_size: int = 28, in_channels: int = 1
) -> int:
    """The number of parameters of ``ConvNet(num_classes, channels,
    img_size, in_channels)``, counted from the formula (no model is built)."""
    _check_convnet_args(num_classes, channels, img_size, in_channels)
    c, cells = channels, (img_size // 4) ** 2
    first = in_channels * c * 9 + c  # weights and biases
    second = c * 2 * c * 9 + 2 * c
    return first + second + 2 * c * cells * num_classes + num_classes


def convnet_channels(
    num_parameters: int,
    num_classes: int,
    img_size: int = 28,
    in_channels: int = 1,
) -> int:
    """The width c whose :class:`ConvNet` has the number of parameters
    closest to ``num_parameters`` (the smaller c on a tie)."""
    check_sizes(num_parameters=num_parameters)
    _check_convnet_args(num_classes, 1, img_size, in_channels)

    def gap(width: int) -> int:
        count = convnet_parameters(num_classes, width, img_size, in_channels)
        return abs(count - num_parameters)

    c = 1
    while (
        convnet_parameters(num_classes, c, img_size, in_channels)
        < num_parameters
    ):
        c += 1  # the first width at or above the target
    return c - 1 if c > 1 and gap(c - 1) <= gap(c) else c


def _check_convnet_args(
    num_classes: object,
    channels: object,
    img_size: object,
    in_channels: object,
) -> None:
    """Sizes ints >= 1, img_size a multiple of 4."""
    check_sizes(
        num_classes=num_classes,
        channels=channels,
        img_size=img_size,
        in_channels=in_channels,
    )
    if img_size % 4:
        raise ValueError(f"img_size must be a multiple of 4, got {img_size}")
