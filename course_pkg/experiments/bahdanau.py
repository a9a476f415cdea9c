"""The chapter "Bahdanau attention": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=bahdanau``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    # training: attention ends with a fraction of the plain model's loss
    "loss Bahdanau/GRU": Claim("<", null=1),
    # where the decoder looks: post-posed adjectives of the test split
    "argmax on adjective": Claim(
        "range", chance="argmax on adjective, chance"
    ),
    "argmax on adjective, chance": Claim("range"),
    "argmax on adjective / chance": Claim("range"),
    "reorder followed": Claim("range"),
    # BLEU by source length
    "GRU BLEU shortest - longest": Claim("range"),
    "attention BLEU, worst bucket": Claim(">", null=0),
    "attention - GRU, longest": Claim(">", null=0),
    # Luong's decoder against Bahdanau's, same budget
    "Bahdanau test BLEU": Claim("range"),
    "Luong test BLEU": Claim("range"),
    "BLEU Bahdanau - Luong": Claim(">", null=0),
    "loss Bahdanau": Claim("range"),
    "loss Luong": Claim("range"),
    "loss Luong / Bahdanau": Claim(">", null=1),
    # attention against a gradient x input attribution
    "attention = attribution argmax": Claim("<"),
    "attribution argmax, chance": Claim("range"),
    "attention = attribution / chance": Claim(">", chance=1),
    "attention-attribution Spearman": Claim("<>", chance=0),
    # exercises: entropy of the rows, where the argmax goes, no padding mask
    "entropy / uniform": Claim("<", chance=1),
    "argmax on adjective or next": Claim(
        ">", chance="argmax on adjective or next, chance"
    ),
    "argmax on adjective or next, chance": Claim("range"),
    "BLEU masked - unmasked": Claim("range"),
}
