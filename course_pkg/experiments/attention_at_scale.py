"""The chapter "Attention at scale": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=attention_at_scale``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "all: length 16 (worst)": Claim(">", chance=0.1),
    "rotary: positions 16-31": Claim(">", chance=0.1),
    "sinusoidal: positions 16-31": Claim("<"),
    "learned: positions 16-31": Claim("<"),
    "rotary - sinusoidal, 16-31": Claim("range"),
    "rotary: positions 2-15, length 32": Claim("range"),
}
