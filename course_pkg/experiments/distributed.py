"""The chapter "Training on several processes": what it claims from its runs.

Exercise 1 trains the same model for 5 steps on each global batch whole and
as two micro-batches, and measures how far apart the two runs end: rounding
drift, which depends on the initial weights (the seed of exercise 1's runs)
and on the CPU's arithmetic (the path). The values are measured by the
chapter's last cell in every run of the sweep (``make claims
CHAPTERS=distributed``: seeds 0-2 on four CPU paths);
:class:`course_pkg.experiments.claims.Sweep` reads them back for the prose.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

# Scaled so that the table's three significant digits show them.
CLAIMS = {
    "float64 drift, largest (x 1e14)": Claim("range"),
    "SGD float32 drift (x 1e7)": Claim("range"),
    "Adam float32 drift (x 1e6)": Claim("range"),
    "Adam / SGD float32 drift": Claim("range"),
    # asserted: Adam magnifies float32 rounding an order of magnitude more
    "Adam float32 drift > 10 x SGD's": Claim("true"),
}
SWEEP_SEEDS = [0, 1, 2]
SWEEP_PATHS = ["native", "default", "mkl-compatible", "portable"]
