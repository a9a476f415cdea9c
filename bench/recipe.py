"""Benchmark: label smoothing and the warm-up schedule on the course's Transformer, over seeds.

Trains the chapter's Transformer ("Training the Transformer": D = 32, 2 blocks, 4 heads, no
dropout, 8 epochs, Adam, the same batches) on the course's English–French corpus in three
recipes, for each seed:

- ``chapter``: the chapter's schedule, lr 0.01 for six epochs, then 0.005 and 0.0025 (with
  ``--epochs E`` < 8: 0.01 for E - 2 epochs, then the same two halvings);
- ``smoothing``: the same, with label smoothing eps = 0.1 (Vaswani et al., 2017, sec. 5.4);
- ``warmup``: the rate of Vaswani et al. eq. 3, D^-1/2 min(s^-1/2, s w^-3/2), with w = 100 steps
  (one epoch) instead of the paper's 4,000 (it peaks at 0.018 and ends near 0.006).

and prints, per recipe, min / mean / max over the seeds of: test BLEU (greedy decoding), the
teacher-forced test accuracy of the argmax token, the mean probability the model gives its
argmax (its confidence), and their difference (confidence - accuracy: 0 for a calibrated model,
> 0 for an overconfident one). All on non-padding target tokens of the 800 test pairs.

With ``--record`` it also writes every run (seed, recipe, its settings, the four values, the
recipe's peak and last learning rate) to the record ``recipe``
(``course_pkg/experiments/records/bench/recipe.jsonl``, through
:func:`course_pkg.experiments.bench_records.write`, stamped with the fingerprint of the code),
from which the chapter builds its table. Without ``--record`` nothing is written, so a quick
check at a toy size leaves the chapter's record alone.

Usage:
    python bench/recipe.py --device cpu --threads 1            # 10 seeds, 30 trainings
    python bench/recipe.py --threads 1 --epochs 3 --record     # the chapter's table: writes the
                                                               # record (about 8 CPU-minutes;
                                                               # 19 min wall on a loaded 2-core
                                                               # machine)
    python bench/recipe.py --seeds 2 --epochs 1 --limit 128    # a quick check that it runs
"""

from __future__ import annotations

import statistics
import time

import torch

from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import translation_dataloaders
from course_pkg.device import seed_everything
from course_pkg.evaluation.bleu import corpus_bleu
from course_pkg.experiments import bench_records
from course_pkg.inference.decode import translate
from course_pkg.models.seq2seq import SETTINGS
from course_pkg.models.transformer import Transformer, TransformerSettings
from course_pkg.training.loop import (
    train_seq2seq,
    train_seq2seq_by_epoch,
    warmup_inverse_sqrt,
)

from _common import (
    clock_and_device,
    parser,
    record_option,
)

CHAPTER_LR = [0.01] * 6 + [0.005, 0.0025]
RECIPES = ("chapter", "smoothing", "warmup")
WARMUP_STEPS = 100


def chapter_rates(epochs: int) -> list[float]:
    """The chapter's rate per epoch: constant, then halved twice in the last two epochs (with
    fewer than 8 epochs the constant part is shorter)."""
    return (
        CHAPTER_LR[len(CHAPTER_LR) - epochs :]
        if epochs > 2
        else CHAPTER_LR[:epochs]
    )


def schedule(recipe: str, epochs: int, steps_per_epoch: int) -> list[float]:
    """The learning rate of every optimizer step of a recipe."""
    if recipe == "warmup":
        optimizer = torch.optim.Adam(
            [torch.zeros(1, requires_grad=True)], lr=1.0
        )
        rate = warmup_inverse_sqrt(
            optimizer, TransformerSettings().num_hiddens, WARMUP_STEPS
        ).lr_lambdas[0]
        return [rate(step) for step in range(epochs * steps_per_epoch)]
    return [lr for lr in chapter_rates(epochs) for _ in range(steps_per_epoch)]


def train(recipe: str, seed: int, data, epochs: int, device) -> Transformer:
    """One model of the chapter's size, trained with one recipe."""
    seed_everything(seed)
    settings = TransformerSettings()  # the chapter's sizes, dropout 0
    model = Transformer.from_settings(
        len(data.src_vocab), len(data.tgt_vocab), settings
    ).to(device)
    if recipe == "warmup":
        optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
        scheduler = warmup_inverse_sqrt(
            optimizer, settings.num_hiddens, WARMUP_STEPS
        )
        train_seq2seq(
            model,
            data.train,
            1.0,
            epochs,
            data.tgt_vocab,
            device=device,
            grad_clip=SETTINGS.grad_clip,
            optimizer=optimizer,
            scheduler=scheduler,
        )
        return model
    train_seq2seq_by_epoch(
        model,
        data.train,
        chapter_rates(epochs),
        data.tgt_vocab,
        device,
        SETTINGS.grad_clip,
        label_smoothing=0.1 if recipe == "smoothing" else 0.0,
    )
    return model


@torch.no_grad()
def calibration(model: Transformer, loader, pad: int) -> tuple[float, float]:
    """(accuracy of the argmax, mean probability of the argmax) over the non-pad target tokens
    of loader, teacher-forced."""
    model.eval()
    correct = confidence = count = 0.0
    device = next(model.parameters()).device
    for batch in loader:
        src, src_len, tgt_in, tgt_out = (t.to(device) for t in batch)
        probs = model(src, tgt_in, src_len).softmax(-1)
        top, argmax = probs.max(-1)
        mask = tgt_out != pad
        correct += float((argmax == tgt_out)[mask].sum())
        confidence += float(top[mask].sum())
        count += float(mask.sum())
    return correct / count, confidence / count


def main() -> None:
    options = parser(__doc__, threads=1)
    options.add_argument(
        "--seeds", type=int, default=10, help="how many seeds"
    )
    options.add_argument(
        "--first-seed", type=int, default=0, help="seeds first..first+N-1"
    )
    options.add_argument("--epochs", type=int, default=len(CHAPTER_LR))
    options.add_argument(
        "--limit", type=int, help="first N pairs of each split"
    )
    record_option(options, "recipe", "runs")
    args = options.parse_args()
    if not 1 <= args.epochs <= len(CHAPTER_LR):
        options.error(f"--epochs must be in [1, {len(CHAPTER_LR)}]")
    start, device = clock_and_device(args)
    splits = english_french_corpus(seed=0)
    if args.limit is not None:
        splits = tuple(split[: args.limit] for split in splits)
    test_src = [src for src, _ in splits[2]]
    test_ref = [tgt.split() for _, tgt in splits[2]]
    print(
        f"pairs train/val/test {'/'.join(str(len(s)) for s in splits)}, "
        f"{args.epochs} epochs, seeds {args.first_seed}-{args.first_seed + args.seeds - 1}"
    )
    rows: dict[str, list[tuple[float, float, float, float]]] = {
        r: [] for r in RECIPES
    }
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for recipe in RECIPES:
            data = translation_dataloaders(
                splits,
                SETTINGS.batch_size,
                SETTINGS.num_steps,
                device=device,
                seed=SETTINGS.seed,
            )  # the same batches in the same order for every run
            model = train(recipe, seed, data, args.epochs, device)
            hypotheses = translate(
                model,
                test_src,
                data.src_vocab,
                data.tgt_vocab,
                SETTINGS.num_steps,
                device=device,
            )
            accuracy, confidence = calibration(
                model, data.test, data.tgt_vocab.pad
            )
            bleu = corpus_bleu(hypotheses, test_ref)
            rows[recipe].append(
                (100 * bleu, accuracy, confidence, confidence - accuracy)
            )
            rates = schedule(recipe, args.epochs, len(data.train))
            runs.append(
                {
                    "seed": seed,
                    "recipe": recipe,
                    "epochs": args.epochs,
                    "pairs": [len(s) for s in splits],
                    "test BLEU": 100 * bleu,
                    "accuracy": accuracy,
                    "confidence": confidence,
                    "peak lr": max(rates),
                    "last lr": rates[-1],
                }
            )
            print(
                f"seed {seed} {recipe:<9} BLEU {100 * bleu:5.1f} accuracy "
                f"{accuracy:.4f} confidence {confidence:.4f}",
                flush=True,
            )
    names = ("test BLEU", "accuracy", "confidence", "conf. - acc.")
    print(f"\nover {args.seeds} seeds: min / mean / max")
    print("| recipe | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for recipe, values in rows.items():
        cells = []
        for column, digits in zip(zip(*values), (1, 4, 4, 4)):
            low, mean, high = min(column), statistics.mean(column), max(column)
            cells.append(
                f"{low:.{digits}f} / {mean:.{digits}f} / {high:.{digits}f}"
            )
        print(f"| {recipe} | " + " | ".join(cells) + " |")
    if args.record:
        minutes = (time.perf_counter() - start) / 60
        path = bench_records.write("recipe", __file__, runs, minutes)
        print(f"record: {path} ({minutes:.1f} min)")


if __name__ == "__main__":
    main()
