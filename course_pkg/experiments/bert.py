"""The chapter "Pretraining an encoder: BERT": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=bert``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

_TASKS = ("tense", "frame")
_MODELS = ("scratch", "MLM", "MLM + pair")

CLAIMS = {
    **{f"{t}: {m}": Claim("range") for t in _TASKS for m in _MODELS},
    **{
        f"{t}: {d}": Claim("range")
        for t in _TASKS
        for d in ("MLM - scratch", "pair - scratch", "pair - MLM")
    },
    "pair task": Claim("range"),
    **{
        f"probe {t}: {m}": Claim("range")
        for t in _TASKS
        for m in ("untrained", "MLM", "MLM - untrained")
    },
}
CLAIMS["frame: MLM"] = Claim(">", chance=1 / 5)
CLAIMS["frame: MLM + pair"] = Claim(">", chance=1 / 5)
CLAIMS["probe frame: MLM"] = Claim(">", chance=1 / 5)
