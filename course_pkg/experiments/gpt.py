"""The chapter "A decoder-only model: GPT": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=gpt``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

SAMPLING = ("greedy", "T=0.5", "T=1", "T=2", "T=2, top-k 3", "T=2, top-p 0.8")

CLAIMS = {
    "GPT BLEU": Claim(">", chance=0),
    "Transformer BLEU": Claim(">", chance=0),
    "GPT no-PE BLEU": Claim(">", chance=0),
    "Transformer - GPT": Claim("range"),
    "no-PE - GPT": Claim(">"),
    **{f"{name} BLEU": Claim("range") for name in SAMPLING},
    **{f"{name} differ": Claim("range") for name in SAMPLING},
    "greedy - T=1 BLEU": Claim(">", null=0),
    "T=1 - T=2 BLEU": Claim(">", null=0),
    "T=1 - T=0.5 differ": Claim(">", null=0),
    "top-k 3 - T=2 BLEU": Claim(">", null=0),
    "top-p 0.8 - T=2 BLEU": Claim(">", null=0),
    "greedy - best sampled BLEU": Claim("range"),
}
CLAIMS["greedy differ"] = Claim("<")
CLAIMS["T=2 differ"] = Claim(">", chance=0)
CLAIMS["T=2, top-k 3 differ"] = Claim(">", chance=0)
CLAIMS["T=2, top-p 0.8 differ"] = Claim(">", chance=0)
