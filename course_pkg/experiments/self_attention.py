"""The chapter "Self-attention and positional encoding": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=self_attention``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "both: length 16 (worst)": Claim(">", chance=0.1),
    "learned: positions 16-31": Claim("<"),
    "sinusoidal: positions 16-31": Claim("<", chance=1),
    "sinusoidal: positions 2-15 at length 32": Claim("range"),
    "sinusoidal: length 16 - length 32, positions 2-15": Claim("range"),
    # why the sinusoidal model loses at seen positions: unseen keys
    "sinusoidal: positions 2-15, keys 0-15 only": Claim(">", chance=0.1),
    "sinusoidal: queries 2-15, weight on keys 16-31": Claim("range"),
}
