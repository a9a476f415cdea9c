"""Writing files so that a crash never leaves half of one behind.

Used by :func:`course_pkg.checkpoint.save_checkpoint` and
:func:`course_pkg.tatoeba.download_fra_eng`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


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
        OSError: if the file system refuses; and whatever ``write`` raises.
    """
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
