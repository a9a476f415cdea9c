"""The chapter "Attention at scale": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=attention_at_scale``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts. The only training is the copy
task (``CopyBack``, one model per position scheme), seeded by ``SEED``.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    # accuracy on the copy task, chance 1/10: every scheme on training
    # lengths, then positions 16-31 of length-32 sequences
    "all: length 16 (worst)": Claim(">", chance=0.1),
    "rotary: positions 16-31": Claim(">", chance=0.1),
    "sinusoidal: positions 16-31": Claim("<"),
    "learned: positions 16-31": Claim("<"),
    "rotary - sinusoidal, 16-31": Claim("range"),
    "rotary: positions 2-15, length 32": Claim("range"),
    # where RoPE's queries at positions 2-15 of length 32 look: keys at
    # offsets t' - t >= 16, never met in training (share of their weight;
    # share of the queries whose largest weight is there), and the accuracy
    # at 2-15 with those keys hidden
    "rotary: weight at unmet offsets, queries 2-15": Claim("range"),
    "rotary: largest weight at an unmet offset": Claim(">", null=0),
    "rotary: positions 2-15, unmet offsets hidden": Claim(">", chance=0.1),
}
