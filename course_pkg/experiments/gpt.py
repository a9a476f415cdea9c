"""The chapter "A decoder-only model: GPT": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=gpt``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts. BLEU and shares are fractions;
the sampling settings (``τ`` the temperature) are scored on the first
``GPT_SETTINGS.num_sampled`` test sentences, two draws each.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

SAMPLING = ("greedy", "τ=0.5", "τ=1", "τ=2", "τ=2, top-k 3", "τ=2, top-p 0.8")

CLAIMS = {
    # the GPT against the encoder-decoder, and without positional encoding
    "GPT BLEU": Claim(">", chance=0),
    "Transformer BLEU": Claim(">", chance=0),
    "GPT no-PE BLEU": Claim(">", chance=0),
    "Transformer - GPT": Claim("range"),
    # dropping the positions costs at most the floor (a bound below 0)
    "no-PE - GPT": Claim(">"),
    # sampling: BLEU over both draws, share of sentences whose draws differ
    **{f"{name} BLEU": Claim("range") for name in SAMPLING},
    **{f"{name} differ": Claim("range") for name in SAMPLING},
    "greedy - τ=0.5 BLEU": Claim("range"),
    "greedy - τ=1 BLEU": Claim(">", null=0),
    "τ=1 - τ=2 BLEU": Claim(">", null=0),
    "τ=1 - τ=0.5 differ": Claim(">", null=0),
    "top-k 3 - τ=2 BLEU": Claim(">", null=0),
    "top-p 0.8 - τ=2 BLEU": Claim(">", null=0),
    "greedy - best sampled BLEU": Claim("range"),
}
CLAIMS["greedy differ"] = Claim("<")
CLAIMS["τ=2 differ"] = Claim(">", chance=0)
CLAIMS["τ=2, top-k 3 differ"] = Claim(">", chance=0)
CLAIMS["τ=2, top-p 0.8 differ"] = Claim(">", chance=0)
