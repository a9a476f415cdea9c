"""The chapter "Multi-head attention": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=multihead_attention``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "H=1: worse side": Claim("<", chance=1),
    "H=1: better side": Claim(">", chance=1 / 8),
    "H=2,4: worst side": Claim(">", chance=1 / 8),
    "H=1: |left - right| weight": Claim("<"),
    "H=1: left + right weight": Claim(">"),
    "H=1: larger share = better side": Claim("true"),
    "H=2 one head off: lost side, highest": Claim("<"),
    "H=2 one head off: kept side, lowest": Claim(">", chance=1 / 8),
    "H=2 one head off: the heads lose different sides": Claim("true"),
}
