"""The chapter "Pretraining on real text: a GPT-2 on Shakespeare": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=pretraining``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "at 0 - log2 V, absolute": Claim("<"),
    "at 100 - unigram": Claim("<", null=0),
    "at 200 - bigram": Claim("<", null=0),
    "final - trigram": Claim("<", null=0),
    "context 8 - context 64": Claim(">", null=0),
}
