"""GPU kernels written in Triton, and whether Triton is here to run them.

Chapter: "Writing the attention kernel". :mod:`course_pkg.kernels.flash_triton`
holds the FlashAttention forward and backward kernels. Triton comes with
PyTorch's Linux wheels only; on macOS or Windows it is missing, and
:func:`triton_status` says so instead of failing: the PyTorch version of the
same algorithm (:mod:`course_pkg.kernels.flash`) runs everywhere.

Without a CUDA GPU the kernels run in Triton's interpreter, which Triton
reads from the environment variable ``TRITON_INTERPRET=1`` when a kernel is
*defined*: set it before importing :mod:`course_pkg.kernels.flash_triton`.
"""

from __future__ import annotations

import os


def triton_status() -> tuple[bool, str]:
    """Whether the Triton kernels can run here, and a line that says how.

    Returns:
        (True, "compiled for CUDA" or "interpreted on the CPU ...") when
        ``triton`` imports; (False, the reason) when it does not.
    """
    try:
        import triton  # noqa: F401
    except ImportError as error:
        return False, (
            f"triton does not import here ({error}); it ships with "
            "PyTorch's Linux wheels only. The Triton kernels cannot run, "
            "course_pkg.kernels.flash (the same algorithm in PyTorch) can"
        )
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True, (
            "triton imports; TRITON_INTERPRET=1: the kernels run in "
            "Triton's interpreter on the CPU (for correctness, not speed)"
        )
    return True, "triton imports; the kernels compile for a CUDA GPU"
