"""The real English–French pairs: Tatoeba, as packaged by manythings.org and
d2l.

The chapters train on the generated corpus (:mod:`course_pkg.data.corpus`); this
loader is for readers who want the real data. It downloads on demand (once,
checked by SHA-1) and normalises the pairs like the generated ones, so the
rest of the pipeline (:mod:`course_pkg.data.translation`) serves both.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterable
from typing import BinaryIO

from course_pkg.checks import (
    check_nonnegative_int,
    check_path,
    check_positive_number,
)
from course_pkg.data.translation import normalise
from course_pkg.files import write_atomically

FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"


class TatoebaPairs(list):
    """The (english, french) pairs :func:`load_tatoeba` read: a list, plus
    ``dropped``, the number of lines left out because a side was empty."""

    dropped: int = 0


def load_tatoeba(
    path: str | os.PathLike, max_examples: int | None = None
) -> TatoebaPairs:
    """Read tab-separated sentence pairs (English, a tab, French, optionally a tab and an attribution).

    Args:
        path: a UTF-8 text file in the Tatoeba/manythings format, e.g. d2l's ``fra-eng/fra.txt``,
            as a ``str`` or ``os.PathLike`` (an int file descriptor is refused: the reader would
            close the caller's descriptor). A leading byte-order mark is dropped (``utf-8-sig``).
        max_examples: keep only the first that many pairs (all if None).
    Returns:
        A :class:`TatoebaPairs` list of (english, french) pairs in the normal form of
        :func:`course_pkg.data.translation.preprocess_nmt` (single spaces, no spaces at the ends). Blank
        lines are skipped. A line whose English or French side is empty after normalisation is
        dropped, not kept as a pair, and counted in the result's ``dropped``.
    Raises:
        TypeError: if path is not a str/PathLike, or max_examples not None or an int.
        ValueError: if max_examples is negative or a non-blank line has no tab.
    """
    _check_load_tatoeba(path, max_examples)
    pairs = TatoebaPairs()
    with open(path, encoding="utf-8-sig") as lines:
        for line_number, line in enumerate(lines, start=1):
            if max_examples is not None and len(pairs) >= max_examples:
                break
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise ValueError(
                    f"{path}, line {line_number}: expected 'english<TAB>french', got {line!r}"
                )
            english, french = normalise(fields[0]), normalise(fields[1])
            if not english or not french:
                pairs.dropped += 1
                continue
            pairs.append((english, french))
    return pairs


def _check_load_tatoeba(path: object, max_examples: object) -> None:
    """path a str or os.PathLike; max_examples None or an int >= 0."""
    check_path("path", path)
    if max_examples is not None:
        check_nonnegative_int("max_examples", max_examples)


def _sha1(path: pathlib.Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _copy_checked(
    chunks: Iterable[bytes], sha1: str | None, handle: BinaryIO
) -> None:
    """Write chunks to handle; refuse them (ValueError) if their sha1 is not sha1."""
    digest = hashlib.sha1()
    for chunk in chunks:
        digest.update(chunk)
        handle.write(chunk)
    if sha1 is not None and digest.hexdigest() != sha1:
        raise ValueError(
            f"sha1 of the download is {digest.hexdigest()}, expected sha1={sha1}"
        )


def _matches_member(text_path: pathlib.Path, zip_path: pathlib.Path) -> bool:
    """Whether the extracted text has the size and CRC-32 its zip records (an
    edited or emptied cached file does not, and is extracted again)."""
    if not text_path.is_file():
        return False
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo("fra-eng/fra.txt")
    if text_path.stat().st_size != info.file_size:
        return False
    crc = 0
    with open(text_path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            crc = zlib.crc32(block, crc)
    return crc == info.CRC


def _checked_chunks(response) -> Iterable[bytes]:
    """The body of an HTTP response in blocks, refusing one shorter than its Content-Length."""
    expected = response.headers.get("Content-Length")
    received = 0
    for chunk in iter(lambda: response.read(1 << 20), b""):
        received += len(chunk)
        yield chunk
    if expected is not None and received != int(expected):
        raise urllib.error.ContentTooShortError(
            f"download cut short: {received} of {expected} bytes", None
        )


def download_fra_eng(
    cache_dir: str | os.PathLike,
    url: str = FRA_ENG_URL,
    sha1: str = FRA_ENG_SHA1,
    timeout: float = 30,
) -> pathlib.Path:
    """Download (once) and extract d2l's English–French zip; return the path of ``fra-eng/fra.txt``.

    A zip already in cache_dir whose sha1 matches is used without touching the network; the
    extracted text is checked against the size and CRC-32 the zip records, and extracted again
    if it was edited or emptied. Files are
    written to a temporary file in cache_dir and renamed into place, so no partial file is left
    behind by a failed or interrupted download.

    Args:
        cache_dir: folder for the zip and the extracted text (created if missing).
        url: where to download the zip from (an ``http(s)://`` or ``file://`` URL).
        sha1: expected SHA-1 hex digest of the zip, in either case. Required: verification
            cannot be turned off.
        timeout: seconds to wait for the server.
    Returns:
        Path of the extracted ``<cache_dir>/fra-eng/fra.txt``.
    Raises:
        TypeError: if sha1 or url is not a str, timeout not a number, or cache_dir not a
            str/PathLike.
        ValueError: if sha1 is not 40 hex digits, timeout is not > 0, or the downloaded file's
            sha1 differs from sha1 (nothing is kept).
        urllib.error.URLError, OSError: if the download fails or is cut short (nothing is kept).
        KeyError: if the zip holds no ``fra-eng/fra.txt``.
    """
    sha1 = _check_download_fra_eng(cache_dir, url, sha1, timeout)
    cache_dir = pathlib.Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    zip_path = cache_dir / (
        pathlib.PurePosixPath(urllib.parse.urlparse(url).path).name
        or "fra-eng.zip"
    )
    text_path = cache_dir / "fra-eng" / "fra.txt"
    if zip_path.is_file() and _sha1(zip_path) == sha1:
        if _matches_member(text_path, zip_path):
            return text_path
    else:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            write_atomically(
                zip_path,
                functools.partial(
                    _copy_checked, _checked_chunks(response), sha1
                ),
            )
    text_path.parent.mkdir(exist_ok=True)
    with (
        zipfile.ZipFile(zip_path) as archive,
        archive.open("fra-eng/fra.txt") as member,
    ):
        write_atomically(
            text_path,
            functools.partial(
                _copy_checked, iter(lambda: member.read(1 << 20), b""), None
            ),
        )
    return text_path


def _check_download_fra_eng(
    cache_dir: object, url: object, sha1: object, timeout: object
) -> str:
    """sha1 a str of 40 hex digits (either case); url a str; timeout a
    number > 0; cache_dir a str or os.PathLike. Returns sha1 in lower case."""
    if not isinstance(sha1, str):
        raise TypeError(
            "sha1 must be the expected SHA-1 as a hex str (verification "
            f"cannot be turned off), got {type(sha1).__name__}"
        )
    sha1 = sha1.lower()
    if len(sha1) != 40 or any(c not in "0123456789abcdef" for c in sha1):
        raise ValueError(f"sha1 must be 40 hex digits, got {sha1!r}")
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {type(url).__name__}")
    check_positive_number("timeout", timeout)
    check_path("cache_dir", cache_dir)
    return sha1
