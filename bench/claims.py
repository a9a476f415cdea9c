"""Measure the chapters' asserted training claims over seeds and CPU paths.

The one driver for every chapter that asserts training results: the chapters
in ``CLAIMS`` run as notebooks (below); ``bert`` and ``gpt`` run the
``measure(seed)`` of ``bench/claims_bert.py`` and ``bench/claims_gpt.py``,
which train exactly what those chapters train, with the same functions.

A chapter that trains a model prints numbers that differ from machine to
machine (CPUs take different SIMD paths, so training diverges in the last
digits and then more). Its cells therefore assert claims with floors, and the
floors must come from measurements, not guesses. This script runs each
training chapter exactly as the book does (the notebook itself, executed with
nbclient) for seeds 0-9 by default, and prints, for every assert listed in
``BOUNDS``, the min, mean, std and max over the seeds, the limit the floor
rule of the README gives (:func:`rule`) and whether the notebook's bound
keeps to it. Seeds are the samples; CPU paths and thread counts only change
rounding, so ``--paths`` is a rounding check, not a way to get more samples.

How a run differs from the book's: one cell after the first sets the seed
(``SEED``, ``SETTINGS.seed`` where the chapter has it, and
``seed_everything``), the kernel runs with ``PYTHONOPTIMIZE=1`` so that a
claim below its floor is measured instead of stopping the notebook, and a
last cell prints the claims as JSON. ``distributed`` measures rounding drift
and draws nothing that depends on the seed: run it over CPU paths instead.

CPU paths: ``native`` (whatever PyTorch picks here), ``default``
(``ATEN_CPU_CAPABILITY=default``: no vector instructions beyond the baseline),
``avx2`` and ``avx512`` (PyTorch falls back to the best path the CPU has when
asked for more), ``mkl-compatible`` (native ATen kernels, MKL on its
slowest, most portable path, ``MKL_CBWR=COMPATIBLE``) and ``portable`` (both
of the last, as ``make notebooks-portable`` runs the notebooks).

Usage::

    python bench/claims.py                  # every seeded chapter x seeds 0-9, native
    python bench/claims.py --chapters distributed --seeds 0 --paths native portable
    python bench/claims.py --chapters bahdanau --seeds 0 --paths default
    python bench/claims.py --chapters bert gpt --jobs 2 --cache runs.jsonl
    python bench/claims.py --table bench/claims_table.md --raw
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import claims_bert
import claims_gpt
import claims_pretrain

SAMPLING_NAMES = list(claims_gpt.SAMPLING)

ROOT = pathlib.Path(__file__).resolve().parent.parent

# For each training chapter: claim name -> expression evaluated in the kernel
# after the notebook has run. The names say what the chapter asserts.
CLAIMS: dict[str, dict[str, str]] = {
    "attention_pooling": {
        "LOO loss last/first": "losses[-1] / losses[0]",
        "|learned - best width|": "abs(learned_width - best_width)",
        # exercise 4: mean learned widths over ten draws of the data
        "width K=400 / K=25": "learned_widths[2] / learned_widths[0]",
        "width K=100 - K=400": "learned_widths[1] - learned_widths[2]",
        "validation MSE learned / initial": "mse(y_learned) / mse(y_initial)",
        "validation MSE learned / sweep's best": "mse(y_learned) / min(val_mse)",
        "learned / best validation width": "learned_width / best_val_width",
    },
    "multihead_attention": {
        "H=1: worse side": "min(accuracies[1])",
        "H=1: better side": "max(accuracies[1])",
        "H=2,4: worst side": "min(min(accuracies[h]) for h in (2, 4))",
        "H=1: |left - right| weight": "abs(on_left - on_right)",
        "H=1: left + right weight": "on_left + on_right",
        "H=1: larger share = better side": "(on_left > on_right)"
        " == (accuracies[1][0] > accuracies[1][1])",
        "H=2 one head off: lost side, highest": "max(min(a) for a in ablated.values())",
        "H=2 one head off: kept side, lowest": "min(max(a) for a in ablated.values())",
        "H=2 one head off: the heads lose different sides": "len({min((0, 1), key=a.__getitem__)"
        " for a in ablated.values()}) == 2",
    },
    "self_attention": {
        "both: length 16 (worst)": "min(seen_short.values())",
        "learned: positions 16-31": 'unseen_long["learned"]',
        "sinusoidal: positions 16-31": 'unseen_long["sinusoidal"]',
        "sinusoidal: positions 2-15 at length 32": 'seen_long["sinusoidal"]',
        "sinusoidal: length 16 - length 32, positions 2-15": 'seen_short["sinusoidal"]'
        ' - seen_long["sinusoidal"]',
    },
    "encoder_decoder": {
        "loss last/first epoch": 'history["epoch_loss"][-1] / history["epoch_loss"][0]',
        "test BLEU": "test_bleu",
        "beam: more probable": "more",
        "beam: less probable": "less",
        "beam BLEU - greedy BLEU": 'beam_scores["beam 4"] - beam_scores["greedy"]',
        "beam changes (of 100)": "len(differ)",
    },
    "bahdanau": {
        "loss Bahdanau/GRU": 'histories["Bahdanau attention"]["epoch_loss"][-1]'
        ' / histories["GRU seq2seq"]["epoch_loss"][-1]',
        "argmax on adjective": "reading.on_adjective",
        "argmax on adjective / chance": "reading.on_adjective / reading.chance",
        "reorder followed": "reading.reorder_followed",
        "GRU BLEU shortest - longest": "plain[0] - plain[-1]",
        "attention BLEU, worst bucket": "min(attention)",
        "attention - GRU, longest": "attention[-1] - plain[-1]",
        "entropy / uniform": "float(entropy.mean() / uniform.mean())",
        "argmax on adjective or next": "(offsets[0] + offsets[1]) / total",
        "BLEU masked - unmasked": "masked_bleu - unmasked_bleu",
        "Bahdanau test BLEU": 'test_bleu["Bahdanau attention"]',
        "Luong test BLEU": "luong_bleu",
        "BLEU Bahdanau - Luong": 'test_bleu["Bahdanau attention"] - luong_bleu',
        "loss Luong": 'final_loss["Luong (general)"]',
        "loss Bahdanau": 'final_loss["Bahdanau attention"]',
        "loss Luong / Bahdanau": 'final_loss["Luong (general)"]'
        ' / final_loss["Bahdanau attention"]',
        "attention = attribution argmax": "agreement.argmax_agree",
        "attribution argmax, chance": "agreement.chance",
        "attention = attribution / chance": "agreement.argmax_agree / agreement.chance",
        "attention-attribution Spearman": "agreement.spearman",
    },
    "transformer_training": {
        "validation BLEU, last epoch": "val_bleu[-1]",
        "loss, last epoch": "loss",
        "greedy test BLEU": "greedy_bleu",
        "beam changes (of 100)": "changed",
        "|beam - greedy| BLEU": "abs(beam_bleu - greedy_subset_bleu)",
        "argmax on adjective": "reading.on_adjective",
        "argmax on adjective / chance": "reading.on_adjective / reading.chance",
        "Transformer - Bahdanau": 'bleus["Transformer"] - bleus["Bahdanau attention"]',
        "Bahdanau - Transformer (2 ep.)": 'bleus["Bahdanau attention"] - bleus[early_name]',
        "Transformer (2 ep.) - GRU": 'bleus[early_name] - bleus["GRU seq2seq"]',
        "GRU rel. loss / attention rel. loss": 'relative_loss["GRU seq2seq"]'
        " / largest_attention_loss",
        "contextual cosine, one pair": "contextual_cosine",
        "max output cosine": "max(cosine_out.values())",
        "min input - output cosine": "min(cosine_in[w] - cosine_out[w]"
        " for w in cosine_in)",
        "min output - other word": "min(cosine_out.values()) - other_word",
    },
    # Trains with its own seeds (0; floors from seeds 0-2 via train_encoding).
    "attention_at_scale": {
        "all: length 16 (worst)": "min(short.values())",
        "rotary: positions 16-31": 'unseen["rotary"]',
        "sinusoidal: positions 16-31": 'unseen["sinusoidal"]',
        "learned: positions 16-31": 'unseen["learned"]',
        "rotary - sinusoidal, 16-31": 'unseen["rotary"] - unseen["sinusoidal"]',
        "rotary: positions 2-15, length 32": 'long["rotary"][: TRAIN_LEN - SHIFT].mean()',
    },
    "modern_training": {
        "BLEU MHA": 'bleu_by_heads["MHA (G = 4)"]',
        "BLEU GQA": 'bleu_by_heads["GQA (G = 2)"]',
        "BLEU MQA": 'bleu_by_heads["MQA (G = 1)"]',
        "BLEU MHA - GQA": 'bleu_by_heads["MHA (G = 4)"] - bleu_by_heads["GQA (G = 2)"]',
        "BLEU MHA - MQA": 'bleu_by_heads["MHA (G = 4)"] - bleu_by_heads["MQA (G = 1)"]',
        "loss post, no warm-up": 'warmup_runs["post-norm, no warm-up"]["epoch_loss"][-1]',
        "loss post, warm-up": 'warmup_runs["post-norm, warm-up"]["epoch_loss"][-1]',
        "loss pre, no warm-up": 'warmup_runs["pre-norm, no warm-up"]["epoch_loss"][-1]',
        "loss pre, warm-up": 'warmup_runs["pre-norm, warm-up"]["epoch_loss"][-1]',
        "post: no warm-up - warm-up": 'warmup_runs["post-norm, no warm-up"]["epoch_loss"][-1]'
        ' - warmup_runs["post-norm, warm-up"]["epoch_loss"][-1]',
        "post warm-up - pre no warm-up": 'warmup_runs["post-norm, warm-up"]["epoch_loss"][-1]'
        ' - warmup_runs["pre-norm, no warm-up"]["epoch_loss"][-1]',
        "|pre: no warm-up - warm-up|": 'abs(warmup_runs["pre-norm, no warm-up"]["epoch_loss"][-1]'
        ' - warmup_runs["pre-norm, warm-up"]["epoch_loss"][-1])',
        "ablation BLEU, lowest row": "min(ablation_bleu.values())",
        "ablation BLEU, highest row": "max(ablation_bleu.values())",
        "BLEU pre - post": 'ablation_bleu["+ pre-norm"] - ablation_bleu["GPT block (post, layer, ReLU)"]',
        "BLEU RMSNorm - layer norm": 'ablation_bleu["+ RMSNorm"] - ablation_bleu["+ pre-norm"]',
        "BLEU SwiGLU - ReLU": 'ablation_bleu["+ SwiGLU (F\' = 43)"] - ablation_bleu["+ RMSNorm"]',
        "ablation loss, highest - lowest": "max(ablation_loss.values()) - min(ablation_loss.values())",
        "grad norm post / pre, smallest": "min(a / b for a, b in"
        ' zip(grad_norms["post"], grad_norms["pre"]))',
    },
    # Exercise 1 seeds itself (trained_state); varies with the CPU path.
    "distributed": {
        # scaled so that the table's three decimals show them
        "float64 drift, largest (x 1e14)": "1e14 * max(drift[n, 'float64']"
        " for n in ('SGD', 'Adam'))",
        "Adam float32 drift (x 1e6)": "1e6 * drift['Adam', 'float32']",
        "Adam / SGD float32 drift": "drift['Adam', 'float32'] / drift['SGD', 'float32']",
    },
}


@dataclasses.dataclass(frozen=True)
class Bound:
    """One assert of a chapter, as the rule sees it: ``value kind bound``.

    ``of`` is a recorded claim's name or a function of one run's recorded
    claims. ``kind``: ``">"`` (a floor: higher is the claim), ``"<"`` (a
    ceiling) or ``"true"`` (a yes/no claim that must hold on every seed).
    ``chance``: the value with no skill (a number or a function of the run's
    claims), where one is defined; ``null``: the value an ordering claim
    rules out (0 for "A beats B"), where no chance level is defined.
    ``bound`` is the bound the notebook asserts (to keep in step by hand).
    """

    label: str
    of: str | Callable[[dict[str, float]], float]
    kind: str
    bound: float | None = None
    chance: float | Callable[[dict[str, float]], float] | None = None
    null: float | None = None

    def value(self, claims: dict[str, float]) -> float:
        return claims[self.of] if isinstance(self.of, str) else self.of(claims)

    def chance_of(self, claims: dict[str, float]) -> float | None:
        if callable(self.chance):
            return self.chance(claims)
        return self.chance


def _adjective_chance(c: dict[str, float]) -> float:
    return c["argmax on adjective"] / c["argmax on adjective / chance"]


# What each chapter asserts, over the recorded claims above (the notebooks
# hold the same bounds; comments beside their asserts give the measured range).
BOUNDS: dict[str, list[Bound]] = {
    "attention_pooling": [
        Bound("LOO loss last/first", "LOO loss last/first", "<", 1, null=1),
        Bound("|learned - best width|", "|learned - best width|", "<", 0.06),
        Bound(
            "validation MSE learned / initial",
            "validation MSE learned / initial",
            "<",
            0.7,
            null=1,
        ),
        Bound(
            "validation MSE learned / sweep's best",
            "validation MSE learned / sweep's best",
            "<",
            1.6,
        ),
        Bound("width K=400 / K=25", "width K=400 / K=25", "<", 0.85, null=1),
    ],
    "multihead_attention": [
        Bound("H=1: worse side", "H=1: worse side", "<", 0.6, chance=1),
        Bound("H=1: better side", "H=1: better side", ">", 0.9, chance=1 / 8),
        Bound(
            "H=2,4: worst side", "H=2,4: worst side", ">", 0.95, chance=1 / 8
        ),
        Bound(
            "H=1: |left - right| weight",
            "H=1: |left - right| weight",
            "<",
            0.2,
        ),
        Bound(
            "H=1: left + right weight", "H=1: left + right weight", ">", 0.8
        ),
        Bound(
            "H=1: larger share = better side",
            "H=1: larger share = better side",
            "true",
        ),
        Bound(
            "H=2 one head off: lost side, highest",
            "H=2 one head off: lost side, highest",
            "<",
            0.2,
        ),
        Bound(
            "H=2 one head off: kept side, lowest",
            "H=2 one head off: kept side, lowest",
            ">",
            0.95,
            chance=1 / 8,
        ),
        Bound(
            "H=2 one head off: the heads lose different sides",
            "H=2 one head off: the heads lose different sides",
            "true",
        ),
    ],
    "self_attention": [
        Bound(
            "both: length 16 (worst)",
            "both: length 16 (worst)",
            ">",
            0.9,
            chance=0.1,
        ),
        Bound(
            "learned: positions 16-31", "learned: positions 16-31", "<", 0.2
        ),
        Bound(
            "sinusoidal: positions 16-31 (no margin over chance)",
            "sinusoidal: positions 16-31",
            "info",
        ),
        Bound(
            "sinusoidal: positions 16-31 (ceiling)",
            "sinusoidal: positions 16-31",
            "<",
            0.65,
            chance=1,
        ),
        Bound(
            "sinusoidal: length 16 - length 32, positions 2-15 (no margin)",
            "sinusoidal: length 16 - length 32, positions 2-15",
            "info",
        ),
    ],
    "encoder_decoder": [
        Bound(
            "loss last/first epoch", "loss last/first epoch", "<", 0.5, null=1
        ),
        Bound("test BLEU (floor)", "test BLEU", ">", 0.09, null=0),
        Bound("test BLEU (ceiling)", "test BLEU", "<", 0.5),
        Bound(
            "beam: more - 2 x less probable",
            lambda c: c["beam: more probable"] - 2 * c["beam: less probable"],
            ">",
            0,
            null=0,
        ),
        Bound(
            "beam BLEU - greedy BLEU", "beam BLEU - greedy BLEU", ">", -0.05
        ),
    ],
    "bahdanau": [
        Bound("loss Bahdanau/GRU", "loss Bahdanau/GRU", "<", 0.35, null=1),
        Bound(
            "argmax on adjective (no margin)",
            "argmax on adjective",
            "info",
            chance=_adjective_chance,
        ),
        Bound(
            "argmax on adjective / chance (no margin)",
            "argmax on adjective / chance",
            "info",
        ),
        Bound("reorder followed (no margin)", "reorder followed", "info"),
        Bound(
            "GRU BLEU shortest - longest (no margin)",
            "GRU BLEU shortest - longest",
            "info",
        ),
        Bound(
            "attention BLEU, worst bucket",
            "attention BLEU, worst bucket",
            ">",
            75,
            null=0,
        ),
        Bound(
            "attention - GRU, longest",
            "attention - GRU, longest",
            ">",
            50,
            null=0,
        ),
        Bound("entropy / uniform", "entropy / uniform", "<", 0.65, chance=1),
        Bound(
            "argmax on adjective or next",
            "argmax on adjective or next",
            ">",
            0.7,
            chance=lambda c: 2 * _adjective_chance(c),
        ),
        Bound(
            "BLEU masked - unmasked (no margin)",
            "BLEU masked - unmasked",
            "info",
        ),
        Bound(
            "BLEU Bahdanau - Luong", "BLEU Bahdanau - Luong", ">", 0, null=0
        ),
        Bound(
            "loss Luong / Bahdanau", "loss Luong / Bahdanau", ">", 2.5, null=1
        ),
        Bound(
            "attention = attribution / chance",
            "attention = attribution / chance",
            ">",
            2.5,
            chance=1,
        ),
        Bound(
            "attention = attribution argmax",
            "attention = attribution argmax",
            "<",
            0.5,
        ),
        Bound(
            "attention-attribution Spearman (floor)",
            "attention-attribution Spearman",
            ">",
            0.25,
            chance=0,
        ),
        Bound(
            "attention-attribution Spearman (ceiling)",
            "attention-attribution Spearman",
            "<",
            0.6,
        ),
    ],
    "transformer_training": [
        Bound(
            "validation BLEU, last epoch",
            "validation BLEU, last epoch",
            ">",
            0.9,
        ),
        Bound("loss, last epoch", "loss, last epoch", "<", 0.06),
        Bound("greedy test BLEU", "greedy test BLEU", ">", 0.9),
        Bound("beam changes (of 100)", "beam changes (of 100)", "<", 8),
        Bound("|beam - greedy| BLEU", "|beam - greedy| BLEU", "<", 0.03),
        Bound(
            "argmax on adjective (no margin)", "argmax on adjective", "info"
        ),
        # the weaker claim the cell keeps: the reading beats chance
        Bound(
            "argmax on adjective / chance",
            "argmax on adjective / chance",
            ">",
            1,
            null=1,
        ),
        Bound(
            "Transformer - Bahdanau",
            "Transformer - Bahdanau",
            ">",
            0.05,
            null=0,
        ),
        Bound(
            "Bahdanau - Transformer (2 ep.)",
            "Bahdanau - Transformer (2 ep.)",
            ">",
            0.25,
            null=0,
        ),
        Bound(
            "Transformer (2 ep.) - GRU (no margin)",
            "Transformer (2 ep.) - GRU",
            "info",
        ),
        Bound(
            "GRU rel. loss / attention rel. loss (no margin)",
            "GRU rel. loss / attention rel. loss",
            "info",
        ),
        Bound(
            "contextual cosine, one pair (no margin)",
            "contextual cosine, one pair",
            "info",
        ),
        Bound("max output cosine (no margin)", "max output cosine", "info"),
        Bound(
            "min input - output cosine (no margin)",
            "min input - output cosine",
            "info",
        ),
        Bound(
            "min output - other word",
            "min output - other word",
            ">",
            0.29,
            null=0,
        ),
    ],
    "attention_at_scale": [
        Bound(
            "all: length 16 (worst)",
            "all: length 16 (worst)",
            ">",
            0.95,
            chance=0.1,
        ),
        Bound(
            "rotary: positions 16-31",
            "rotary: positions 16-31",
            ">",
            0.5,
            chance=0.1,
        ),
        Bound(
            "sinusoidal: positions 16-31",
            "sinusoidal: positions 16-31",
            "<",
            0.65,
        ),
        Bound(
            "learned: positions 16-31", "learned: positions 16-31", "<", 0.2
        ),
        Bound(
            "rotary - sinusoidal, 16-31 (no margin)",
            "rotary - sinusoidal, 16-31",
            "info",
        ),
    ],
    "bert": [
        Bound("frame: MLM", "frame: MLM", ">", 0.89, chance=1 / 5),
        Bound(
            "frame: MLM + pair", "frame: MLM + pair", ">", 0.85, chance=1 / 5
        ),
        Bound("probe frame: MLM", "probe frame: MLM", ">", 0.59, chance=1 / 5),
        # In every seed, but min - 3 std on the wrong side of 0: not asserted.
        Bound(
            "frame: MLM - scratch (no margin)", "frame: MLM - scratch", "info"
        ),
        Bound(
            "frame: pair - scratch (no margin)",
            "frame: pair - scratch",
            "info",
        ),
        Bound(
            "probe frame: MLM - untrained (no margin)",
            "probe frame: MLM - untrained",
            "info",
        ),
        Bound(
            "probe tense: MLM - untrained (no margin)",
            "probe tense: MLM - untrained",
            "info",
        ),
    ],
    "gpt": [
        Bound("GPT BLEU", "GPT BLEU", ">", 0.55, chance=0),
        Bound("Transformer BLEU", "Transformer BLEU", ">", 0.80, chance=0),
        Bound(
            "greedy - T=1 BLEU",
            lambda c: c["greedy BLEU"] - c["T=1 BLEU"],
            ">",
            0.015,
            null=0,
        ),
        Bound(
            "T=1 - T=2 BLEU",
            lambda c: c["T=1 BLEU"] - c["T=2 BLEU"],
            ">",
            0.20,
            null=0,
        ),
        Bound("greedy: draws differ", "greedy differ", "<", 1e-9),
        Bound(
            "differ T=1 - T=0.5",
            lambda c: c["T=1 differ"] - c["T=0.5 differ"],
            ">",
            0.2,
            null=0,
        ),
        Bound("T=2: draws differ", "T=2 differ", ">", 0.98, chance=0),
        Bound(
            "top-k 3 - T=2 BLEU",
            lambda c: c["T=2, top-k 3 BLEU"] - c["T=2 BLEU"],
            ">",
            0.12,
            null=0,
        ),
        Bound(
            "top-p 0.8 - T=2 BLEU",
            lambda c: c["T=2, top-p 0.8 BLEU"] - c["T=2 BLEU"],
            ">",
            0.02,
            null=0,
        ),
        Bound(
            "top-k 3: draws differ", "T=2, top-k 3 differ", ">", 0.78, chance=0
        ),
        Bound(
            "top-p 0.8: draws differ",
            "T=2, top-p 0.8 differ",
            ">",
            0.87,
            chance=0,
        ),
        Bound("GPT no-PE BLEU", "GPT no-PE BLEU", ">", 0.50, chance=0),
        Bound("no-PE - GPT", "no-PE - GPT", ">", -0.23),
        # Greedy was best in every seed, but by 1.1-4.1 points over T=0.5.
        Bound(
            "greedy - best sampled BLEU (no margin)",
            lambda c: (
                c["greedy BLEU"]
                - max(c[f"{n} BLEU"] for n in SAMPLING_NAMES if n != "greedy")
            ),
            "info",
        ),
    ],
    # bits per byte of the brief run (bench/claims_pretrain.py)
    "pretraining": [
        Bound(
            "update 0 - log2 V, absolute", "at 0 - log2 V, absolute", "<", 0.05
        ),
        Bound("update 100 - unigram", "at 100 - unigram", "<", -0.9, null=0),
        Bound("update 200 - bigram", "at 200 - bigram", "<", -0.04, null=0),
        Bound("update 800 - trigram", "final - trigram", "<", -0.1, null=0),
        Bound(
            "context 8 - context 64",
            "context 8 - context 64",
            ">",
            0.15,
            null=0,
        ),
    ],
}

# Chapters measured by a function of one seed instead of their notebook.
MEASURES: dict[str, Callable[[int], dict[str, float]]] = {
    "bert": claims_bert.measure,
    "gpt": claims_gpt.measure,
    "pretraining": claims_pretrain.measure,
}
CHAPTERS = [*CLAIMS, *MEASURES]
# The chapters whose claims depend on the seed (the default); distributed's
# drift does not, it varies with the CPU path only.
SEEDED = [chapter for chapter in CHAPTERS if chapter != "distributed"]

PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
    # both at once, as `make notebooks-portable` runs the notebooks
    "portable": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}

SEED_CELL = """import dataclasses as _dataclasses
SEED = {seed}
if "SETTINGS" in globals():
    SETTINGS = _dataclasses.replace(SETTINGS, seed={seed})
seed_everything({seed})"""
SETTINGS_CELL = """import dataclasses as _dataclasses
SETTINGS = _dataclasses.replace(SETTINGS, seed={seed})"""
# "SETTINGS = ...", "from x import SETTINGS" or a line "    SETTINGS," of an
# import in parentheses.
REBINDS_SETTINGS = re.compile(
    r"^\s*SETTINGS\s*=[^=]|^from \S+ import .*\bSETTINGS\b|^\s+SETTINGS,?$",
    re.MULTILINE,
)


def rule(bound: Bound, values: list[float], chance: float | None) -> dict:
    """The floor rule of the README, for one assert measured over seeds.

    A floor (``>``) must lie at or below ``min - 3 std`` of the seeds'
    values (a ceiling, ``<``: at or above ``max + 3 std``). Where a chance
    level is defined, the rule's limit must not lie beyond the midpoint
    between the mean and chance (the claim keeps at least half of its
    distance from chance) and the bound lies between that midpoint and the
    limit; where an ordering claim has a null value (0 for "A beats B"), the
    limit must lie on the claim's side of it. Otherwise the spread is too
    wide for the claim: it has no real margin and must change.
    """
    n = len(values)
    mean = sum(values) / n
    std = (
        math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        if n > 1
        else 0.0
    )
    row = {
        "n": n,
        "min": min(values),
        "mean": mean,
        "std": std,
        "max": max(values),
        "limit": None,
        "midpoint": None,
    }
    if bound.kind == "info":
        row["verdict"] = "not asserted"
        return row
    if bound.kind == "true":
        row["verdict"] = "ok" if all(v == 1 for v in values) else "FAILS"
        return row
    sign = 1 if bound.kind == ">" else -1  # > : a floor, < : a ceiling
    limit = row["min"] - 3 * std if sign > 0 else row["max"] + 3 * std
    row["limit"] = limit
    margin = True
    if chance is not None:
        midpoint = (mean + chance) / 2
        row["midpoint"] = midpoint
        margin = sign * (limit - midpoint) >= 0
        inside = (
            sign * (limit - bound.bound) >= 0
            and sign * (bound.bound - midpoint) >= 0
        )
    else:
        if bound.null is not None:
            margin = sign * (limit - bound.null) > 0
        inside = sign * (limit - bound.bound) >= 0
    if not margin:
        row["verdict"] = "NO MARGIN: change the claim"
    elif inside:
        row["verdict"] = "ok"
    else:
        row["verdict"] = "move the bound"
    return row


def cpu_name() -> str:
    """The CPU's model name (Linux), or what platform knows of it."""
    import platform

    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def table_header(args: argparse.Namespace) -> str:
    import datetime

    import torch

    return (
        "# Floors of the chapters' training claims\n\n"
        f"Written by `bench/claims.py` on {datetime.date.today()}: CPU {cpu_name()} "
        f"({os.cpu_count()} cores; PyTorch {torch.__version__}, CPU path "
        f"{torch.backends.cpu.get_cpu_capability()}), seeds {args.seeds[0]}-"
        f"{args.seeds[-1]} ({len(args.seeds)} seeds), CPU paths "
        f'{", ".join(args.paths)}. The rule (README, "Floors"): a floor at or '
        "below min - 3 std (a ceiling at or above max + 3 std), never past the "
        "midpoint between the mean and chance where chance is defined, and a "
        "limit on the claim's side of 0 (or 1) for an ordering; otherwise the "
        "claim has no margin and changes.\n"
    )


def _has(bound: Bound, run: dict[str, float]) -> bool:
    try:
        bound.value(run)
    except KeyError:
        return False
    return True


def claims_table(
    values: dict[tuple[str, int, str], dict[str, float]],
    chapters: list[str],
    seeds: list[int],
    paths: list[str],
) -> str:
    """The markdown table of every asserted claim: one row per assert."""
    lines = []
    for notebook in chapters:
        runs = [values[(notebook, s, p)] for s in seeds for p in paths]
        lines += [
            f"\n## {notebook} ({len(seeds)} seeds x {len(paths)} CPU path(s))\n",
            "| assert | bound | n | min | mean | std | max | rule's limit"
            " | midpoint to chance | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        # A chapter without asserts listed here (distributed, modern_training):
        # the statistics of every recorded claim, no verdict.
        bounds = BOUNDS.get(notebook) or [
            Bound(claim, claim, "info") for claim in runs[0]
        ]
        for bound in bounds:
            # runs recorded before a claim was added lack it: n says so
            recorded = [run for run in runs if _has(bound, run)]
            if not recorded:
                lines.append(f"| {bound.label} | | 0 | not recorded: re-run |")
                continue
            measured = [float(bound.value(run)) for run in recorded]
            chances = [bound.chance_of(run) for run in recorded]
            chance = (
                None if chances[0] is None else sum(chances) / len(chances)
            )
            row = rule(bound, measured, chance)

            def fmt(x):
                return "" if x is None else f"{x:.3f}"

            if bound.kind in ("true", "info"):
                shown = "" if bound.kind == "info" else "true"
            else:
                shown = f"{bound.kind} {bound.bound:g}"
            lines.append(
                f"| {bound.label} | {shown} | {row['n']} | {fmt(row['min'])} | "
                f"{fmt(row['mean'])} | {fmt(row['std'])} | {fmt(row['max'])} | "
                f"{fmt(row['limit'])} | {fmt(row['midpoint'])} | {row['verdict']} |"
            )
    return "\n".join(lines) + "\n"


def run_one(notebook: str, seed: int) -> dict[str, float]:
    """Measure one chapter with one seed in this process's environment."""
    if notebook in MEASURES:
        return MEASURES[notebook](seed)
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "book" / f"{notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    first_code = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code"
    )
    # A cell that imports or assigns SETTINGS after the first one would undo
    # the seed: the seed goes into SETTINGS again after each such cell.
    for i in reversed(range(first_code + 1, len(nb.cells))):
        cell = nb.cells[i]
        if cell.cell_type == "code" and REBINDS_SETTINGS.search(cell.source):
            nb.cells.insert(
                i + 1,
                nbformat.v4.new_code_cell(SETTINGS_CELL.format(seed=seed)),
            )
    nb.cells.insert(
        first_code + 1, nbformat.v4.new_code_cell(SEED_CELL.format(seed=seed))
    )
    report = (
        "import json as _json\nprint('CLAIMS', _json.dumps({%s}))"
        % ", ".join(
            f"{name!r}: float({expr})"
            for name, expr in CLAIMS[notebook].items()
        )
    )
    nb.cells.append(nbformat.v4.new_code_cell(report))
    client = NotebookClient(
        nb,
        timeout=900,
        startup_timeout=300,  # a loaded machine can take over a minute
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    for output in nb.cells[-1].outputs:
        text = output.get("text", "")
        if text.startswith("CLAIMS "):
            return json.loads(text[len("CLAIMS ") :])
    raise RuntimeError(f"{notebook} seed {seed}: no claims printed")


def run_in_subprocess(notebook: str, seed: int, path: str) -> dict[str, float]:
    """Run one (chapter, seed) under one CPU path, in a fresh process."""
    chosen = {"ATEN_CPU_CAPABILITY", "MKL_CBWR"}  # set by the path alone
    env = {
        **{k: v for k, v in os.environ.items() if k not in chosen},
        **PATHS[path],
        "PYTHONOPTIMIZE": "1",
        "PYTHONHASHSEED": "0",
    }
    result = subprocess.run(
        [sys.executable, __file__, "--worker", notebook, str(seed)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--chapters", nargs="+", default=SEEDED, choices=CHAPTERS
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=list(range(10))
    )
    parser.add_argument(
        "--paths",
        nargs="+",
        default=["native"],
        choices=list(PATHS),
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument(
        "--cache",
        help="a JSON-lines file: finished runs are appended to it and not run again",
    )
    parser.add_argument(
        "--table",
        help="also write the table of asserted claims (markdown) to this file",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="also print every run's value of every recorded claim",
    )
    parser.add_argument(
        "--worker",
        nargs=2,
        metavar=("CHAPTER", "SEED"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_one(args.worker[0], int(args.worker[1]))))
        return

    import torch

    print(
        f"torch {torch.__version__}, native CPU path here: {torch.backends.cpu.get_cpu_capability()}"
    )
    runs = [
        (nb, seed, path)
        for nb in args.chapters
        for seed in args.seeds
        for path in args.paths
    ]
    values: dict[tuple[str, int, str], dict[str, float]] = {}
    cache = pathlib.Path(args.cache) if args.cache else None
    if cache and cache.exists():
        for line in cache.read_text().splitlines():
            record = json.loads(line)
            values[tuple(record["run"])] = record["claims"]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        todo = [run for run in runs if run not in values]
        futures = {pool.submit(run_in_subprocess, *run): run for run in todo}
        failed = []
        for future in concurrent.futures.as_completed(futures):
            run = futures[future]
            try:
                values[run] = future.result()
            except subprocess.CalledProcessError as error:
                # one failed run must not stop (or silently empty) the sweep
                failed.append(run)
                print(
                    f"FAILED: {run[0]} seed {run[1]} {run[2]}:\n"
                    + error.stderr[-2000:],
                    file=sys.stderr,
                    flush=True,
                )
                continue
            print(
                f"done: {run[0]} seed {run[1]} {run[2]}",
                file=sys.stderr,
                flush=True,
            )
            if cache:
                with cache.open("a") as f:
                    f.write(
                        json.dumps({"run": list(run), "claims": values[run]})
                        + "\n"
                    )
    if failed:
        sys.exit(f"{len(failed)} runs failed (above); the others are cached")
    if args.raw:
        columns = [(seed, path) for seed in args.seeds for path in args.paths]
        for notebook in args.chapters:
            print(
                f"\n## {notebook}, every recorded value (columns: seed/path)\n"
            )
            print(
                "| claim | "
                + " | ".join(f"{s}/{p}" for s, p in columns)
                + " | min | max |"
            )
            print("|" + "---|" * (len(columns) + 3))
            for claim in values[(notebook, *columns[0])]:
                row = [
                    values[(notebook, s, p)].get(claim, math.nan)
                    for s, p in columns
                ]
                cells = " | ".join(f"{v:.3f}" for v in row)
                print(
                    f"| {claim} | {cells} | {min(row):.3f} | {max(row):.3f} |"
                )
    table = claims_table(values, args.chapters, args.seeds, args.paths)
    print(table)
    if args.table:
        pathlib.Path(args.table).write_text(table_header(args) + table)


if __name__ == "__main__":
    main()
