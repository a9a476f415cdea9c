"""The chapter "Queries, keys, values and attention pooling": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=attention_pooling``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "LOO loss last/first": Claim("<", null=1),
    "|learned - best width|": Claim("<"),
    "validation MSE learned / initial": Claim("<", null=1),
    "validation MSE learned / sweep's best": Claim("<"),
    "learned / best validation width": Claim("range"),
    # exercise 4: mean learned widths over ten draws of the data
    "width K=400 / K=25": Claim("<", null=1),
    "width K=100 - K=400": Claim("range"),
}
