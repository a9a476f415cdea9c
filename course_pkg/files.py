"""Writing files so that a crash never leaves half of one behind, and keeping
what takes seconds to compute.

:func:`write_atomically` is used by :func:`course_pkg.training.checkpoint.save_checkpoint`,
:func:`course_pkg.data.tatoeba.download_fra_eng` and :func:`cached_json`, which
keeps the generated corpus (:mod:`course_pkg.data.corpus`) on disk so that every
notebook after the first reads it instead of generating it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from course_pkg.checks import check_callable, check_path


def _umask() -> int:
    """The process' umask (reading it means setting it: set it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(
    path: str | os.PathLike, write: Callable[[BinaryIO], None]
) -> None:
    """Write a file through ``write(handle)``, then move it into place.

    The bytes go to a temporary file next to ``path``, are flushed to disk
    (fsync), and the file is renamed over ``path``. The rename is atomic on
    one file system, so ``path`` is either absent, the old file or the
    complete new one, with the mode ``open`` would give it (0666 less the
    umask, e.g. 0644). If ``write`` raises (for instance because a checksum
    it computes is wrong), the temporary file is removed and ``path`` is
    untouched.

    Args:
        path: the destination file; its folder must exist.
        write: called once with the open binary handle.
    Raises:
        TypeError: if path is not a str/PathLike or write not callable.
        OSError: if the file system refuses; and whatever ``write`` raises.
    """
    _check_write_atomically(path, write)
    path = Path(path)
    fd, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            # mkstemp makes the file 0600; give it the mode open() would
            # (0666 less the umask), as torch.save does.
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _check_write_atomically(path: object, write: object) -> None:
    """path a str or os.PathLike; write callable."""
    check_path("path", path)
    check_callable("write", write)


def cache_dir() -> Path | None:
    """The folder where :func:`cached_json` keeps its files, or None for none.

    ``COURSE_CACHE_DIR`` when set (the empty string turns the cache off),
    else ``$XDG_CACHE_HOME/course_pkg``, else ``~/.cache/course_pkg``.
    """
    chosen = os.environ.get("COURSE_CACHE_DIR")
    if chosen is not None:
        return Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "course_pkg"


def cached_json(name: str, key: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, or the value an earlier call with the same key stored.

    The value is kept as JSON in ``cache_dir() / f"{name}.json"`` with the
    key and the SHA-256 of its text. A file that is missing, unreadable,
    of another key or whose digest does not match is ignored: the value is
    computed again and the file rewritten (atomically, so processes that
    share the folder never read half a file). Without a cache folder, or if
    it cannot be written, the value is computed and returned all the same.

    Args:
        name: the file's name in the folder (one file per name).
        key: everything the value depends on (e.g. a digest of the code
            and the arguments that produce it).
        compute: gives the value, made of what JSON keeps (lists, dicts,
            strings, numbers): tuples come back as lists.
    Returns:
        The value, as JSON gives it back (also when just computed).
    Raises:
        TypeError: if name or key is not a str, or compute not callable.
        ValueError: if name is empty or holds a path separator.
    """
    _check_cached_json(name, key, compute)
    folder = cache_dir()
    path = None if folder is None else folder / f"{name}.json"
    if path is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            stored = json.loads(path.read_text(encoding="utf-8"))
            text = stored["value"]
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if stored["key"] == key and stored["sha256"] == digest:
                return json.loads(text)
    text = json.dumps(compute(), ensure_ascii=False)
    if path is not None:
        record = {
            "key": key,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "value": text,
        }
        data = json.dumps(record, ensure_ascii=False).encode("utf-8")
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, lambda handle: handle.write(data))
    return json.loads(text)


def _check_cached_json(name: object, key: object, compute: object) -> None:
    """name and key str, name a file name (not empty, no path separator);
    compute callable."""
    for label, text in (("name", name), ("key", key)):
        if not isinstance(text, str):
            raise TypeError(
                f"{label} must be a str, got {type(text).__name__}"
            )
    if not name or "/" in name or os.sep in name:
        raise ValueError(f"name must be a file name (no '/'), got {name!r}")
    check_callable("compute", compute)
