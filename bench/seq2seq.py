"""Benchmark: the two GRU translators of the course, trained and scored in one run.

Trains the plain encoder–decoder (chapter "The encoder–decoder architecture") and the Bahdanau
attention model (chapter "Bahdanau attention") with the chapters' settings
(``course_pkg.models.seq2seq.SETTINGS``) on the course's synthetic English–French corpus, then prints for
each: training time, training throughput (target tokens per second, padding excluded) and
corpus BLEU-4 on the test split with greedy decoding. The peer of the attention model is the
plain model measured in the same run: its throughput ratio says what attention costs per token,
its BLEU difference what it buys.

Usage:
    python bench/seq2seq.py                     # device from course_pkg.device.get_device()
    python bench/seq2seq.py --device cpu --threads 1
    python bench/seq2seq.py --epochs 2          # quicker, lower BLEU
    python bench/seq2seq.py --epochs 1 --limit 256   # a seconds-long check that it runs
"""

from __future__ import annotations

import dataclasses

from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import translation_dataloaders
from course_pkg.device import describe_device, seed_everything
from course_pkg.evaluation.bleu import corpus_bleu
from course_pkg.inference.decode import translate
from course_pkg.models.seq2seq import SETTINGS, seq2seq_model
from course_pkg.training.loop import train_seq2seq

from _common import device_of, parser


def main() -> None:
    options = parser(__doc__)
    options.add_argument(
        "--epochs",
        type=int,
        default=SETTINGS.num_epochs,
        help="epochs per model (default: the chapters')",
    )
    options.add_argument(
        "--bf16", action="store_true", help="bfloat16 autocast (CUDA only)"
    )
    options.add_argument(
        "--limit",
        type=int,
        help="keep the first N pairs of each split (default: all)",
    )
    args = options.parse_args()
    device = device_of(args)
    settings = dataclasses.replace(SETTINGS, num_epochs=args.epochs)
    print(describe_device(device))
    print(f"settings {settings.as_dict()}")

    splits = english_french_corpus(seed=settings.seed)
    if args.limit is not None:
        if args.limit < 1:
            options.error(f"--limit must be >= 1, got {args.limit}")
        splits = tuple(split[: args.limit] for split in splits)

    def loaders():
        return translation_dataloaders(
            splits,
            settings.batch_size,
            settings.num_steps,
            device=device,
            seed=settings.seed,
        )

    data = loaders()
    test_src = [src for src, _ in splits[2]]
    test_ref = [tgt.split() for _, tgt in splits[2]]
    print(
        f"pairs train/val/test {len(splits[0])}/{len(splits[1])}/{len(splits[2])}, "
        f"vocab en {len(data.src_vocab)} fr {len(data.tgt_vocab)}"
    )

    results = {}
    for name, attention in (("GRU seq2seq", False), ("Bahdanau", True)):
        data = loaders()  # as in the chapter: same batches, same order
        seed_everything(settings.seed)
        model = seq2seq_model(
            attention, len(data.src_vocab), len(data.tgt_vocab), settings
        ).to(device)
        history = train_seq2seq(
            model,
            data.train,
            settings.lr,
            settings.num_epochs,
            data.tgt_vocab,
            device=device,
            grad_clip=settings.grad_clip,
            bf16=args.bf16,
        )
        hypotheses = translate(
            model,
            test_src,
            data.src_vocab,
            data.tgt_vocab,
            settings.num_steps,
            device=device,
        )
        results[name] = (history, corpus_bleu(hypotheses, test_ref))

    print(
        f"{'model':<12} {'train s':>8} {'tokens/s':>9} {'final loss':>10} {'test BLEU':>9}"
    )
    for name, (history, bleu) in results.items():
        print(
            f"{name:<12} {history['train_seconds']:8.1f} {history['tokens_per_s']:9.0f} "
            f"{history['epoch_loss'][-1]:10.3f} {100 * bleu:9.1f}"
        )
    (plain, plain_bleu), (attention, attention_bleu) = results.values()
    print(
        f"Bahdanau / GRU seq2seq: throughput x{attention['tokens_per_s'] / plain['tokens_per_s']:.2f}, "
        f"BLEU {100 * (attention_bleu - plain_bleu):+.1f} points"
    )


if __name__ == "__main__":
    main()
