"""The chapter "Training on several processes": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=distributed``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

# Rounding drift: the same on every seed, different on every CPU path; the
# sweep runs seed 0 on four paths.
CLAIMS = {
    "float64 drift, largest (x 1e14)": Claim("range"),
    "Adam float32 drift (x 1e6)": Claim("range"),
    "Adam / SGD float32 drift": Claim("range"),
}
SWEEP_SEEDS = [0]
SWEEP_PATHS = ["native", "default", "mkl-compatible", "portable"]
