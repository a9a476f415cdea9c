"""The chapter "Training the Transformer": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=transformer_training``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "validation BLEU, last epoch": Claim(">"),
    "loss, last epoch": Claim("<"),
    "greedy test BLEU": Claim(">"),
    "beam changes (of 100)": Claim("<"),
    "|beam - greedy| BLEU": Claim("<"),
    "argmax on adjective": Claim("range"),
    "argmax on adjective / chance": Claim(">", null=1),
    "Transformer - Bahdanau": Claim(">", null=0),
    "Bahdanau - Transformer (2 ep.)": Claim(">", null=0),
    "Transformer (2 ep.) - GRU": Claim("range"),
    "GRU rel. loss / attention rel. loss": Claim("range"),
    "contextual cosine, one pair": Claim("range"),
    "max output cosine": Claim("range"),
    "min input - output cosine": Claim("range"),
    "min output - other word": Claim(">", null=0),
}
