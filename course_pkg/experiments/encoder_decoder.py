"""The chapter "The encoder–decoder architecture": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=encoder_decoder``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "loss last/first epoch": Claim("<", null=1),
    "test BLEU": Claim("<>", null=0),
    "beam: more probable": Claim("range"),
    "beam: less probable": Claim("range"),
    "beam: more - 2 x less probable": Claim(">", null=0),
    "beam BLEU - greedy BLEU": Claim(">"),
    "beam changes (of 100)": Claim("range"),
}
