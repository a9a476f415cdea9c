"""The chapter "Training the modern block": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=modern_training``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

# Every value is stated with its range until the chapter's asserts are tied
# to the record (each "Claim" below says how the chapter uses it).
CLAIMS = {
    "BLEU MHA": Claim("range"),
    "BLEU GQA": Claim("range"),
    "BLEU MQA": Claim("range"),
    "BLEU MHA - GQA": Claim("range"),
    "BLEU MHA - MQA": Claim("range"),
    "loss post, no warm-up": Claim("range"),
    "loss post, warm-up": Claim("range"),
    "loss pre, no warm-up": Claim("range"),
    "loss pre, warm-up": Claim("range"),
    "post: no warm-up - warm-up": Claim("range"),
    "post warm-up - pre no warm-up": Claim("range"),
    "|pre: no warm-up - warm-up|": Claim("range"),
    "ablation BLEU, lowest row": Claim("range"),
    "ablation BLEU, highest row": Claim("range"),
    "BLEU pre - post": Claim("range"),
    "BLEU RMSNorm - layer norm": Claim("range"),
    "BLEU SwiGLU - ReLU": Claim("range"),
    "ablation loss, highest - lowest": Claim("range"),
    "grad norm post / pre, smallest": Claim("range"),
}
