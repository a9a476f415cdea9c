"""The chapter "Training the Transformer": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=transformer_training``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    # training: eight epochs, the falling rate
    "validation BLEU, last epoch": Claim(">"),
    "validation BLEU gain, last epoch": Claim("range"),
    "loss, last epoch": Claim("<"),
    # greedy decoding and beam search on the test split
    "greedy test BLEU": Claim(">"),
    "beam changes (of 100)": Claim("<"),
    "|beam - greedy| BLEU": Claim("<"),
    # where the last block's cross-attention looks: post-posed adjectives
    "argmax on adjective": Claim("range"),
    "argmax on adjective / chance": Claim(">", null=1),
    # the comparison with the GRU models (test BLEU gaps)
    "Transformer - Bahdanau": Claim(">", null=0),
    "Bahdanau - Transformer (2 ep.)": Claim(">", null=0),
    "Transformer (2 ep.) - GRU": Claim(">", null=0),
    # static and contextual vectors
    "contextual cosine, one pair": Claim("range"),
    "max output cosine": Claim("range"),
    "min input - output cosine": Claim(">", null=0),
    "min output - other word": Claim(">", null=0),
    # exercise 1: BLEU lost on long sentences, relative to short ones
    "GRU rel. loss, long vs short": Claim(">", null=0),
    "GRU rel. loss / attention rel. loss": Claim("range"),
}
