"""The claims of the chapter "Pretraining on real text", measured for one seed.

Trains exactly what ``book/pretraining.ipynb`` trains in its brief run: a
:class:`course_pkg.gpt2.GPT2` of ``BRIEF_MODEL``'s sizes with
``BRIEF_SETTINGS`` on the characters of the Shakespeare training text, the
validation loss on 200 evenly spaced windows of the held-out plays.
:func:`measure` returns the validation bits per byte at every evaluation and
the count baselines (the same for every seed). The seed sets the weights and
the training windows, as the notebook's ``SEED`` does.

Run alone it measures seeds 0-9 and prints, per claim the chapter asserts,
min / mean / std / max over the seeds and the limit of the README's floor
rule (a ceiling at or above max + 3 std); ``bench/claims.py --chapters pretraining`` runs
the same :func:`measure` through its cache and table.

    .venv/bin/python bench/claims_pretrain.py --seeds 0 1 2 3 4 5 6 7 8 9
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
import time

import torch

from course_pkg.device import seed_everything
from course_pkg.gpt2 import GPT2
from course_pkg.lm_pretrain import (
    BRIEF_MODEL,
    BRIEF_SETTINGS,
    CharTokenizer,
    NGramModel,
    bits_per_byte,
    evaluate_lm,
    pretrain_lm,
    validation_windows,
)
from course_pkg.shakespeare import load_works, train_valid_text

# The count models of the chapter: order -> k (chosen by bench/pretrain.py
# on the last tenth of the training text).
COUNT_MODELS = {1: 1.0, 2: 0.3, 3: 0.3}
CURVE_WINDOWS = 200


@functools.cache
def data() -> tuple[torch.Tensor, torch.Tensor, int, int, dict[int, float]]:
    """Training and validation ids, V, validation bytes, count baselines in
    bits per byte."""
    train_text, valid_text = train_valid_text(load_works())
    tokenizer = CharTokenizer(train_text)
    train = torch.tensor(tokenizer.encode(train_text))
    valid = torch.tensor(tokenizer.encode(valid_text))
    num_bytes = len(valid_text.encode("utf-8"))
    baselines = {
        order: bits_per_byte(
            -NGramModel(train, order, len(tokenizer), k)
            .log_probs(valid)
            .mean()
            .item(),
            len(valid),
            num_bytes,
        )
        for order, k in COUNT_MODELS.items()
    }
    return train, valid, len(tokenizer), num_bytes, baselines


def measure(seed: int) -> dict[str, float]:
    torch.set_num_threads(1)
    train, valid, V, num_bytes, baselines = data()
    valid_X, valid_Y = validation_windows(
        valid, BRIEF_SETTINGS.num_steps, CURVE_WINDOWS
    )
    settings = BRIEF_SETTINGS
    seed_everything(seed)
    model = GPT2(V, max_len=settings.num_steps, **BRIEF_MODEL)
    model.need_weights = False
    record = pretrain_lm(
        model,
        train,
        valid_X,
        valid_Y,
        dataclasses.replace(settings, seed=seed),
        progress=False,
    )
    row = {
        f"bits/byte at {u}": bits_per_byte(n, len(valid), num_bytes)
        for u, n in zip(record["eval_updates"], record["eval_loss"])
    }
    row |= {f"count order {n}": b for n, b in baselines.items()}
    # the chapter's exercise 4: the same windows cut to their first 8 tokens
    short = evaluate_lm(model, valid_X[:, :8], valid_Y[:, :8])
    full = evaluate_lm(model, valid_X, valid_Y)
    row["context 8 - context 64"] = bits_per_byte(
        short, len(valid), num_bytes
    ) - bits_per_byte(full, len(valid), num_bytes)
    row["at 0 - log2 V, absolute"] = abs(row["bits/byte at 0"] - math.log2(V))
    row["at 100 - unigram"] = row["bits/byte at 100"] - baselines[1]
    final = row[f"bits/byte at {settings.num_updates}"]
    row["at 200 - bigram"] = row["bits/byte at 200"] - baselines[2]
    row["final - trigram"] = final - baselines[3]
    row["tokens_per_s"] = record["tokens_per_s"]
    return row


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument(
        "--seeds", type=int, nargs="+", default=list(range(10))
    )
    options.add_argument("--out", help="JSON lines: one row per seed")
    args = options.parse_args()
    rows = []
    for seed in args.seeds:
        start = time.perf_counter()
        rows.append(measure(seed))
        print(
            f"seed {seed}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1].items())
            + f" ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        if args.out:
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"seed": seed, **rows[-1]}) + "\n")
    # The README's rule: a ceiling ("lower is the claim") at or above
    # max + 3 std, a floor at or below min - 3 std.
    print(
        f"\n{'claim':22s} {'min':>7} {'mean':>7} {'std':>7} {'max':>7} "
        f"{'min-3std':>8} {'max+3std':>8}"
    )
    for name in rows[0]:
        values = [r[name] for r in rows]
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        low, high = min(values), max(values)
        print(
            f"{name:22s} {low:7.3f} {statistics.mean(values):7.3f} "
            f"{std:7.3f} {high:7.3f} {low - 3 * std:8.3f} {high + 3 * std:8.3f}"
        )


if __name__ == "__main__":
    main()
