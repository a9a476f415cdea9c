"""The chapter "Pretraining on real text: a GPT-2 on Shakespeare": what it claims from training.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=pretraining``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts. All are the brief run's, in
bits per byte, the network's validation curve against the add-delta count
models scored on the same 200 windows of the held-out plays:

- ``at 0 - log2 V, absolute``: the untrained model against the uniform guess;
- ``at 100 - unigram``, ``at 200 - bigram``, ``final - trigram``: the curve
  at updates 100, 200 and 800 minus a count model (below it: negative);
- ``final bits/byte``: the curve at update 800 (stated with its range);
- exercise 4, the same targets (the last 32 of every window) scored with
  different contexts: ``context 2 - trigram`` the network given 2 characters
  minus the trigram counts (which see the same 2); ``context 2 - context 8``
  and ``context 8 - full context`` (the window's 33 to 64 characters; stated
  with its range).

The longer run (``make pretrain``) is one run, quoted from its bench record
(:mod:`course_pkg.experiments.bench_records`), not from this sweep.
"""

from __future__ import annotations

from course_pkg.experiments.claims import Claim

CLAIMS = {
    "at 0 - log2 V, absolute": Claim("<"),
    "at 100 - unigram": Claim("<", null=0),
    "at 200 - bigram": Claim("<", null=0),
    "final - trigram": Claim("<", null=0),
    "final bits/byte": Claim("range"),
    "context 2 - trigram": Claim(">", null=0),
    "context 2 - context 8": Claim(">", null=0),
    "context 8 - full context": Claim("range"),
}
