"""Floors for the claims of the chapter "A decoder-only model: GPT".

Trains exactly what ``book/gpt.ipynb`` trains, with the same settings
(``course_pkg.lm_translation.GPT_SETTINGS`` and the chapter-7 Transformer's
sizes), for seeds 0, 1, 2 on three CPU paths:

- ``native``: what torch picks on this CPU (AVX2 here);
- ``default``: ``ATEN_CPU_CAPABILITY=default`` (no vector extensions);
- ``mkl-compatible``: native, with ``MKL_CBWR=COMPATIBLE``.

Each run, in a fresh process with one thread, measures on the 800 test
pairs: the test BLEU (greedy) of the GPT, of the encoder–decoder
Transformer and of the GPT without positional encoding; and, for the GPT,
the BLEU and the share of sentences whose two sampled translations differ
under each sampling setting. It prints one row per run and the min and max
of every column: the notebook's asserts use floors below those minima.

Usage:
    python bench/claims_gpt.py                 # 9 runs, about 15 min on 2 free cores
    python bench/claims_gpt.py --jobs 4 --out runs/  # keep each run's row
    python bench/claims_gpt.py --one 0         # one run (seed 0) here
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from course_pkg import seed_everything
from course_pkg.corpus import english_french_corpus
from course_pkg.data import translation_dataloaders
from course_pkg.decode import translate
from course_pkg.gpt import GPT
from course_pkg.lm_translation import (
    GPT_SETTINGS,
    train_lm,
    translate_lm,
    translation_lm_loader,
    translation_lm_vocab,
)
from course_pkg.metrics import corpus_bleu
from course_pkg.seq2seq import SETTINGS
from course_pkg.train import train_seq2seq
from course_pkg.transformer import Transformer

ROOT = Path(__file__).resolve().parents[1]

PATHS = {
    "native": {},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
}
SEEDS = (0, 1, 2)
# As in the notebook: the chapter-7 Transformer's sizes.
TRANSFORMER_SIZES = dict(
    num_hiddens=32, ffn_num_hiddens=128, num_heads=4, num_blks=2, dropout=0.0
)
# As in the notebook: name -> (temperature, top_k, top_p).
SAMPLING = {
    "greedy": (1.0, 1, None),
    "T=0.5": (0.5, None, None),
    "T=1": (1.0, None, None),
    "T=2": (2.0, None, None),
    "T=2, top-k 3": (2.0, 3, None),
    "T=2, top-p 0.8": (2.0, None, 0.8),
}


def train_gpt(splits, vocab, seed: int, positional: str) -> GPT:
    s = GPT_SETTINGS
    loader = translation_lm_loader(
        splits[0], vocab, s.batch_size, s.num_steps, seed=seed
    )
    seed_everything(seed)
    model = GPT(len(vocab), **s.model_sizes(), positional=positional)
    model.need_weights = False
    train_lm(model, loader, s.lr_per_epoch, vocab.pad, s.grad_clip)
    return model


def train_transformer(splits, seed: int):
    data = translation_dataloaders(
        splits, SETTINGS.batch_size, SETTINGS.num_steps, seed=seed
    )
    seed_everything(seed)
    model = Transformer(
        len(data.src_vocab), len(data.tgt_vocab), **TRANSFORMER_SIZES
    )
    optimizer = torch.optim.Adam(model.parameters())
    for lr in GPT_SETTINGS.lr_per_epoch:
        for group in optimizer.param_groups:
            group["lr"] = lr
        train_seq2seq(
            model,
            data.train,
            lr,
            1,
            data.tgt_vocab,
            grad_clip=SETTINGS.grad_clip,
            optimizer=optimizer,
        )
    return model, data


def sampled(model, vocab, sources, references, seed, setting):
    """(BLEU over two draws per sentence, share of sentences whose draws differ)."""
    temperature, top_k, top_p = setting
    hypotheses = translate_lm(
        model,
        sources + sources,
        vocab,
        GPT_SETTINGS.max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=torch.Generator().manual_seed(seed),
    )
    first, second = hypotheses[: len(sources)], hypotheses[len(sources) :]
    differ = sum(a != b for a, b in zip(first, second)) / len(sources)
    return corpus_bleu(hypotheses, references + references), differ


def measure(seed: int) -> dict[str, float]:
    torch.set_num_threads(1)
    splits = english_french_corpus(seed=0)
    sources = [en for en, _ in splits[2]]
    references = [fr.split() for _, fr in splits[2]]
    vocab = translation_lm_vocab(splits[0])
    row: dict[str, float] = {}
    gpt = train_gpt(splits, vocab, seed, "sinusoidal")
    hypotheses = translate_lm(gpt, sources, vocab, GPT_SETTINGS.max_new_tokens)
    row["GPT BLEU"] = corpus_bleu(hypotheses, references)
    transformer, data = train_transformer(splits, seed)
    hypotheses = translate(
        transformer,
        sources,
        data.src_vocab,
        data.tgt_vocab,
        SETTINGS.num_steps,
    )
    row["Transformer BLEU"] = corpus_bleu(hypotheses, references)
    no_positions = train_gpt(splits, vocab, seed, "none")
    hypotheses = translate_lm(
        no_positions, sources, vocab, GPT_SETTINGS.max_new_tokens
    )
    row["GPT no-PE BLEU"] = corpus_bleu(hypotheses, references)
    for name, setting in SAMPLING.items():
        bleu, differ = sampled(gpt, vocab, sources, references, seed, setting)
        row[f"{name} BLEU"], row[f"{name} differ"] = bleu, differ
    return row


def run_one(run: tuple[str, int], out: Path) -> dict[str, float]:
    """One seed on one CPU path, in a fresh process (the path is fixed at
    start-up); the row is kept in out/PATH-SEED.json and reused if there."""
    path, seed = run
    saved = out / f"{path}-{seed}.json"
    if not saved.exists():
        result = subprocess.run(
            [sys.executable, __file__, "--one", str(seed)],
            env={**os.environ, **PATHS[path], "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            check=True,
        )
        saved.write_text(result.stdout.strip().splitlines()[-1])
        print(f"done: {path} seed {seed}", file=sys.stderr, flush=True)
    return json.loads(saved.read_text())


def report(rows: dict[tuple[str, int], dict[str, float]]) -> None:
    """One line per run, then the min and max of every column."""
    columns = list(next(iter(rows.values())))
    print("columns:", " | ".join(columns))
    for (path, seed), row in rows.items():
        cells = " ".join(f"{v:.3f}" for v in row.values())
        print(f"{path:<15} seed {seed}: {cells}")
    print(f"\n{'':<22} {'min':>7} {'max':>7}")
    derived = {
        "Transformer - GPT": lambda r: r["Transformer BLEU"] - r["GPT BLEU"],
        "no-PE - GPT": lambda r: r["GPT no-PE BLEU"] - r["GPT BLEU"],
    }
    for column in columns + list(derived):
        if column in derived:
            values = [derived[column](row) for row in rows.values()]
        else:
            values = [row[column] for row in rows.values()]
        print(f"{column:<22} {min(values):7.3f} {max(values):7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", type=int, help="one run with this seed")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument(
        "--out", type=Path, help="keep (and reuse) each run's row here"
    )
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        runs = [(path, seed) for path in PATHS for seed in SEEDS]
        # Each run uses one thread; the default suits a 2-core machine.
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            rows = dict(
                zip(runs, pool.map(lambda run: run_one(run, out), runs))
            )
    report(rows)


if __name__ == "__main__":
    main()
