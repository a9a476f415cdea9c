"""The chapter "Training the modern block": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=modern_training``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts. BLEU is in points (chance 0);
an ordering "A - B" has null 0, a ratio null 1.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    # fewer key/value heads, same budget: no BLEU, not even the lowest of
    # the three, nor any ordering keeps the rule's margin over the seeds
    "BLEU MHA": Claim("range"),
    "BLEU GQA": Claim("range"),
    "BLEU MQA": Claim("range"),
    "BLEU lowest of MHA, GQA, MQA": Claim("range", chance=0),
    "BLEU MHA - GQA": Claim("range"),
    "BLEU MHA - MQA": Claim("range"),
    # peak rate 0.05 with and without warm-up: last-epoch training losses;
    # the warm-up's cost to pre-norm holds in every seed, without the margin
    "loss post, no warm-up": Claim("range"),
    "loss post, warm-up": Claim("range"),
    "loss pre, no warm-up": Claim("range"),
    "loss pre, warm-up": Claim("range"),
    "post: no warm-up - warm-up": Claim(">", null=0),
    "post warm-up - pre no warm-up": Claim(">", null=0),
    "pre: warm-up - no warm-up": Claim("range", null=0),
    # the ablation (post-norm GPT block, + pre-norm, + RMSNorm, + SwiGLU)
    "ablation BLEU, lowest row": Claim(">", chance=0),
    "ablation BLEU, highest row": Claim("range"),
    "BLEU pre - post": Claim("range"),
    "BLEU RMSNorm - layer norm": Claim("range"),
    "|BLEU RMSNorm - layer norm|": Claim("<"),
    "BLEU SwiGLU - ReLU": Claim("range"),
    "ablation loss, highest - lowest": Claim("<"),
    # exercise 2: gradient norms per block at initialisation, 6 blocks
    "grad norm post / pre, smallest": Claim(">", null=1),
    "post: first block's gradient the largest": Claim("range"),
}
