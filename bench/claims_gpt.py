"""The claims of the chapter "A decoder-only model: GPT", measured for one seed.

Trains exactly what ``book/gpt.ipynb`` trains, with the same settings
(``course_pkg.lm_translation.GPT_SETTINGS`` and the chapter-7 Transformer's
sizes). :func:`measure` gives, on the 800 test pairs: the test BLEU (greedy)
of the GPT, of the encoder–decoder Transformer and of the GPT without
positional encoding; and, for the GPT, on the first
``GPT_SETTINGS.num_sampled`` test pairs, the BLEU and the share of sentences
whose two sampled translations differ under each sampling setting.
``bench/claims.py --chapters gpt`` runs it for seeds 0, 1, 2 on each CPU path
(one thread, a fresh process each) and prints the min and max of every
value: the notebook's asserts use floors below those minima.

Usage:
    python bench/claims.py --chapters gpt --paths native default mkl-compatible
"""

from __future__ import annotations

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
from course_pkg.transformer import Transformer

from _common import train_rate_per_epoch

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
    # As in the notebook: the chapter-7 Transformer (default settings).
    model = Transformer.from_settings(len(data.src_vocab), len(data.tgt_vocab))
    train_rate_per_epoch(
        model, data, GPT_SETTINGS.lr_per_epoch, grad_clip=SETTINGS.grad_clip
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
    row["Transformer - GPT"] = row["Transformer BLEU"] - row["GPT BLEU"]
    row["no-PE - GPT"] = row["GPT no-PE BLEU"] - row["GPT BLEU"]
    n = GPT_SETTINGS.num_sampled
    for name, setting in SAMPLING.items():
        bleu, differ = sampled(
            gpt, vocab, sources[:n], references[:n], seed, setting
        )
        row[f"{name} BLEU"], row[f"{name} differ"] = bleu, differ
    return row
