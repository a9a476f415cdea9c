"""Pretraining a GPT-2-exact model on Shakespeare: characters against byte-pair tokens at equal tokens, every choice made on development plays.

The longer run of the chapter "Pretraining on real text" (``make pretrain``).
The 39 training works of :func:`course_pkg.data.shakespeare.train_valid_text` lose
two whole plays, :data:`DEV_PLAYS`, which become the development text: every
choice of the run is made on them (each count model's k, the peak learning
rate), and the held-out plays (Hamlet, Twelfth Night, King Richard II) are
scored once, at the end, by what was chosen. For each tokenizer asked for
(``char``, ``bpe``: :func:`course_pkg.data.bpe.train_bpe` on the training text) it

1. encodes the training, development and held-out texts;
2. fits add-k count models of orders 1 to --max-order on the training text,
   k chosen on the development text, and scores the held-out text;
3. trains :class:`course_pkg.models.gpt2.GPT2` for --search-updates updates at each
   peak rate of --lrs (warm-up --search-warmup, the same cosine) and keeps
   the rate with the lowest loss on the development windows;
4. trains the same model from the same seed for --updates updates at that
   rate (:func:`course_pkg.training.lm_pretraining.pretrain_lm`: AdamW, linear warm-up
   then cosine decay, clipping); every --eval-every updates it measures the
   loss on --eval-windows fixed windows of the training text and of the
   development text, with the tokens seen and the training FLOPs so far;
5. scores every window of the held-out text once.

Both tokenizers get the same budget in tokens (updates x batch x context);
the budget is never a time. FLOPs of training, per token: three times the
forward pass (the backward pass costs two), whose matrix products cost
2 (12 L D^2 + V D) for the L blocks' weights and the output layer (tied to the
V-row embedding: 2 V D per token, which makes a larger vocabulary cost more),
plus 2 L T D for the causal attention's scores and weighted sums (on average
over the T positions of a window). :func:`flops_per_token` computes it; the
run checks its matrix-product part against
:func:`course_pkg.evaluation.cost.count_flops` on one update.

It prints every step, writes a checkpoint and a JSON file per tokenizer under
--out, with --record the rows of the run as the bench record ``pretrain``
(:func:`course_pkg.experiments.bench_records.write`: the chapter reads every
number of the longer run from it), and with --table a Markdown summary of the
same rows.

    .venv/bin/python bench/pretrain.py --tokenizers char --updates 300 --search-updates 100
    make pretrain   # the documented run: --record --table bench/pretrain_results.md
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pathlib
import platform
import time

import torch

from course_pkg.data.shakespeare import load_works, train_valid_text
from course_pkg.device import describe_device, seed_everything
from course_pkg.evaluation.cost import count_flops
from course_pkg.experiments import bench_records
from course_pkg.models.gpt import generate
from course_pkg.models.gpt2 import GPT2
from course_pkg.training.checkpoint import save_checkpoint
from course_pkg.training.lm_pretraining import (
    CharTokenizer,
    LMSettings,
    NGramModel,
    bits_per_byte,
    evaluate_lm,
    lm_loss,
    pretrain_lm,
    validation_windows,
)

import _common

K_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)
#: Two training plays kept out of training: the development text, on which
#: the run makes its choices (a tragedy and a comedy, as the held-out plays
#: hold one of each besides a history).
DEV_PLAYS = ("Macbeth", "As You Like It")


def make_tokenizer(name: str, train_text: str, vocab_size: int):
    if name == "char":
        return CharTokenizer(train_text)
    from course_pkg.data.bpe import train_bpe

    return train_bpe(train_text, vocab_size)


def flops_per_token(V: int, D: int, L: int, T: int) -> int:
    """Training FLOPs per token of a GPT-2 (blocks L, width D, context T,
    vocabulary V): 3 x (2 (12 L D^2 + V D) + 2 L T D), see the docstring."""
    return 3 * (2 * (12 * L * D * D + V * D) + 2 * L * T * D)


def count_baselines(
    train: torch.Tensor,
    dev: torch.Tensor,
    test: torch.Tensor,
    V: int,
    max_order: int,
) -> list[dict]:
    """Per order: k chosen on the development text, then the held-out loss
    (nats per token) of the model fitted on the training text."""
    rows = []
    for order in range(1, max_order + 1):
        counts = NGramModel(train, order, V, K_GRID[0])
        dev_nats = {}
        for k in K_GRID:  # the counts do not depend on k: only the scores
            counts.k = k
            dev_nats[k] = -counts.log_probs(dev).mean().item()
        counts.k = min(dev_nats, key=dev_nats.get)
        rows.append(
            {
                "order": order,
                "k": counts.k,
                "dev_nats": dev_nats[counts.k],
                "test_nats": -counts.log_probs(test).mean().item(),
            }
        )
    return rows


def train_run(V, train, windows, settings, args, device, on_eval=None):
    """A fresh GPT2 (seed args.seed) trained with ``settings``; the model
    and pretrain_lm's record."""
    seed_everything(args.seed)
    model = GPT2(
        V, args.width, args.heads, args.blocks, args.context, args.dropout
    ).to(device)
    model.need_weights = False  # no weights read: fused path, evaluation too
    record = pretrain_lm(
        model,
        train,
        *windows,
        settings,
        progress=args.progress,
        on_eval=on_eval,
    )
    return model, record


def main() -> None:
    options = _common.parser(
        __doc__,
        threads=1,
        sizes={
            "updates": 2500,
            "batch": 16,
            "context": 128,
            "width": 128,
            "blocks": 4,
            "heads": 4,
            "warmup": 100,
            "eval-every": 250,
            "eval-windows": 200,
            "search-updates": 300,
            "search-warmup": 15,
            "max-order": 5,
            "bpe-vocab": 1024,
            "seed": 0,
        },
    )
    options.add_argument(
        "--lrs",
        type=_common.number_in(0, above=True),
        nargs="+",
        default=[3e-3, 6e-3, 1.2e-2],
        help="peak learning rates tried on the development plays",
    )
    options.add_argument(
        "--min-lr-factor", type=_common.number_in(0, 1), default=0.1
    )
    options.add_argument(
        "--weight-decay", type=_common.number_in(0), default=0.1
    )
    options.add_argument(
        "--dropout", type=_common.number_in(0, 0.99), default=0.0
    )
    options.add_argument(
        "--tokenizers",
        nargs="+",
        default=["char", "bpe"],
        choices=["char", "bpe"],
    )
    options.add_argument("--out", default="_build/pretrain")
    options.add_argument(
        "--record",
        action="store_true",
        help="write the rows as the bench record 'pretrain' (the chapter's)",
    )
    options.add_argument("--table", help="markdown file for the results")
    options.add_argument("--progress", action="store_true", default=None)
    args = options.parse_args()
    device = _common.device_of(args)
    wall_start, cpu_start = time.perf_counter(), time.process_time()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        describe_device(device),
        "|",
        platform.processor() or platform.machine(),
    )
    works = load_works()
    train_text, test_text = train_valid_text(works)
    dev_text = "\n\n".join(works[title] for title in DEV_PLAYS)
    train_text = train_valid_text(
        {t: w for t, w in works.items() if t not in DEV_PLAYS}
    )[0]
    texts = {"train": train_text, "dev": dev_text, "test": test_text}
    num_bytes = {part: len(t.encode("utf-8")) for part, t in texts.items()}
    rows: list[dict] = [
        {
            "kind": "settings",
            "dev_plays": list(DEV_PLAYS),
            **{
                name: value
                for name, value in vars(args).items()
                if name not in ("out", "record", "table", "progress")
            },
        }
    ]
    results = []
    for name in args.tokenizers:
        start = time.perf_counter()
        print(f"\n{name}: tokenizing ...", flush=True)
        tokenizer = make_tokenizer(name, train_text, args.bpe_vocab)
        ids = {
            part: torch.tensor(tokenizer.encode(text))
            for part, text in texts.items()
        }
        V = len(tokenizer)
        tokens = {part: len(i) for part, i in ids.items()}

        def bpb(nats: float, part: str) -> float:
            return bits_per_byte(nats, tokens[part], num_bytes[part])

        print(
            f"== {name}: V = {V}; tokens (bytes/token): "
            + ", ".join(
                f"{part} {tokens[part]:,} ({num_bytes[part] / tokens[part]:.3f})"
                for part in texts
            )
            + f"; {time.perf_counter() - start:.0f} s to tokenize"
        )

        counts = count_baselines(
            ids["train"], ids["dev"], ids["test"], V, args.max_order
        )
        print(
            "count models (add-k, k chosen on the development plays), "
            "held-out bits/byte:"
        )
        for row in counts:
            row |= {
                "dev_bpb": bpb(row["dev_nats"], "dev"),
                "test_bpb": bpb(row["test_nats"], "test"),
            }
            rows.append({"kind": "count", "tokenizer": name, **row})
            print(
                f"  order {row['order']}: k = {row['k']:<5} development "
                f"{row['dev_bpb']:.3f}, held-out {row['test_bpb']:.3f} bits/byte"
            )

        flops = flops_per_token(V, args.width, args.blocks, args.context)
        settings = LMSettings(
            batch_size=args.batch,
            num_steps=args.context,
            num_updates=args.updates,
            lr=args.lrs[0],
            warmup_steps=args.warmup,
            min_lr_factor=args.min_lr_factor,
            weight_decay=args.weight_decay,
            eval_every=args.eval_every,
            seed=args.seed,
        )
        train_windows = validation_windows(
            ids["train"], args.context, args.eval_windows
        )
        dev_windows = validation_windows(
            ids["dev"], args.context, args.eval_windows
        )

        # 3. the peak rate, chosen on the development windows
        search = dataclasses.replace(
            settings,
            num_updates=args.search_updates,
            warmup_steps=args.search_warmup,
            eval_every=args.search_updates,
        )
        searched = {}
        for lr in args.lrs:
            _, record = train_run(
                V,
                ids["train"],
                dev_windows,
                dataclasses.replace(search, lr=lr),
                args,
                device,
            )
            searched[lr] = record["eval_loss"][-1]
            print(
                f"  peak lr {lr:g}, {args.search_updates} updates: "
                f"development {bpb(searched[lr], 'dev'):.3f} bits/byte",
                flush=True,
            )
        chosen = min(searched, key=searched.get)
        for lr, nats in searched.items():
            rows.append(
                {
                    "kind": "search",
                    "tokenizer": name,
                    "lr": lr,
                    "updates": args.search_updates,
                    "dev_bpb": bpb(nats, "dev"),
                    "chosen": lr == chosen,
                }
            )
        settings = dataclasses.replace(settings, lr=chosen)

        # 4. the run, with the training and development curves
        run_start = time.perf_counter()
        curve = []

        def evaluate(update: int, model, dev_nats: float) -> None:
            train_nats = evaluate_lm(model, *train_windows)
            seen = update * args.batch * args.context
            row = {
                "kind": "eval",
                "tokenizer": name,
                "update": update,
                "tokens": seen,
                "flops": seen * flops,
                "train_nats": train_nats,
                "train_bpb": bpb(train_nats, "train"),
                "dev_nats": dev_nats,
                "dev_bpb": bpb(dev_nats, "dev"),
            }
            curve.append(row)
            print(
                f"  update {update:5d}: training {row['train_bpb']:.3f}, "
                f"development {row['dev_bpb']:.3f} bits/byte "
                f"({time.perf_counter() - run_start:.0f} s)",
                flush=True,
            )

        model, record = train_run(
            V, ids["train"], dev_windows, settings, args, device, evaluate
        )
        rows += curve
        num_params = sum(p.numel() for p in model.parameters())
        # the formula's matrix products against the counted ones
        X, Y = train_windows[0][:2].to(device), train_windows[1][:2].to(device)
        counted = count_flops(
            lambda: lm_loss(copy.deepcopy(model).train(), X, Y).backward()
        )
        matmul = flops - 3 * 2 * args.blocks * args.context * args.width
        print(
            f"GPT2 {args.blocks} x {args.width}, {num_params:,} parameters, "
            f"peak lr {chosen:g}; training FLOPs per token {flops:,}, of "
            f"which weights {matmul:,} (counted by count_flops on one "
            f"update: {counted / X.numel():,.0f})"
        )

        # 5. the held-out plays, once
        test_X, test_Y = validation_windows(ids["test"], args.context)
        test_nats = evaluate_lm(model, test_X, test_Y)
        result = {
            "kind": "test",
            "tokenizer": name,
            "vocab_size": V,
            "num_params": num_params,
            "flops_per_token": flops,
            **{f"{part}_tokens": n for part, n in tokens.items()},
            **{f"{part}_bytes": n for part, n in num_bytes.items()},
            "lr": chosen,
            "updates": args.updates,
            "tokens": record["num_tokens"],
            "flops": record["num_tokens"] * flops,
            "test_windows": len(test_X),
            "test_nats": test_nats,
            "test_bpb": bpb(test_nats, "test"),
            "test_perplexity": math.exp(test_nats),
            "train_seconds": record["train_seconds"],
            "tokens_per_s": record["tokens_per_s"],
            "seconds": time.perf_counter() - start,
            "device": describe_device(device),
        }
        rows.append(result)
        results.append(result)
        best_count = min(counts, key=lambda r: r["dev_bpb"])
        print(
            f"held-out plays, all {len(test_X)} windows of {args.context}: "
            f"{test_nats:.4f} nats/token, {result['test_bpb']:.3f} bits/byte, "
            f"perplexity {result['test_perplexity']:.2f} per token; count "
            f"model of order {best_count['order']} (best on the development "
            f"plays) {best_count['test_bpb']:.3f} bits/byte"
        )
        print(
            f"training: {record['num_tokens']:,} tokens in "
            f"{record['train_seconds']:.0f} s = {record['tokens_per_s']:,.0f} "
            f"tokens/s; this tokenizer's part {result['seconds']:.0f} s"
        )
        prompt = torch.tensor([tokenizer.encode("HAMLET.\n")], device=device)
        sample = generate(
            model,
            prompt,
            args.context - prompt.shape[1],
            temperature=0.8,
            generator=torch.Generator(device).manual_seed(0),
        )
        print(
            "sample (temperature 0.8):\n"
            + tokenizer.decode(sample[0].tolist())
        )
        # what rebuilds the tokenizer: the characters, or the BPE merges
        rebuild = (
            {"chars": tokenizer.chars}
            if name == "char"
            else {"merges": [list(pair) for pair in tokenizer.merges]}
        )
        save_checkpoint(
            out / f"{name}.pt",
            model,
            settings=settings,
            vocab_size=V,
            **rebuild,
        )
        (out / f"{name}.json").write_text(
            json.dumps(
                [r for r in rows if r.get("tokenizer") == name], indent=1
            ),
            encoding="utf-8",
        )
    wall = time.perf_counter() - wall_start
    print(
        f"\nwall time {wall:.0f} s, CPU time "
        f"{time.process_time() - cpu_start:.0f} s; checkpoints and JSON in "
        f"{out}/"
    )
    if args.record:
        path = bench_records.write("pretrain", __file__, rows, wall / 60)
        print(f"record written to {path}")
    if args.table:
        write_table(pathlib.Path(args.table), rows, wall)
        print(f"table written to {args.table}")


def write_table(path: pathlib.Path, rows: list[dict], wall: float) -> None:
    """A Markdown summary of the run's rows (what the record holds)."""
    settings = rows[0]
    tests = [r for r in rows if r["kind"] == "test"]
    lines = [
        "# Pretraining results (`make pretrain`, bench/pretrain.py)",
        "",
        "Written by `bench/pretrain.py` from the rows it also records as the "
        "bench record `pretrain` (`course_pkg/experiments/records/bench/"
        f"pretrain.jsonl`, which the chapter reads); {tests[0]['device']}, "
        f"wall time {wall / 60:.1f} min. Development plays (every choice): "
        f"{', '.join(settings['dev_plays'])}; held-out plays (scored once): "
        "Hamlet, Twelfth Night, King Richard II, every window of the context.",
        "",
        "| tokenizer | V | parameters | updates x tokens | training FLOPs "
        "| peak lr | held-out bits/byte | nats/token | perplexity/token "
        "| tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in tests:
        lines.append(
            f"| {r['tokenizer']} | {r['vocab_size']} | {r['num_params']:,} | "
            f"{r['updates']} x {settings['batch'] * settings['context']} | "
            f"{r['flops']:.3g} | {r['lr']:g} | {r['test_bpb']:.3f} | "
            f"{r['test_nats']:.4f} | {r['test_perplexity']:.2f} | "
            f"{r['tokens_per_s']:,.0f} |"
        )
    # Then one list a kind of row: a line a tokenizer, its rows of that kind.
    for heading, kind, label, item in (
        (
            "Peak rates tried, development bits/byte:",
            "search",
            "",
            lambda s: (
                f"{s['lr']:g}: {s['dev_bpb']:.3f}"
                + (" (chosen)" if s["chosen"] else "")
            ),
        ),
        (
            "Count models (add-k, k chosen on the development plays):",
            "count",
            ", held-out bits/byte",
            lambda c: f"order {c['order']} (k {c['k']:g}) {c['test_bpb']:.3f}",
        ),
        (
            "Curves: update, training / development bits/byte:",
            "eval",
            "",
            lambda e: (
                f"{e['update']}: {e['train_bpb']:.3f} / {e['dev_bpb']:.3f}"
            ),
        ),
    ):
        lines += ["", heading, ""]
        for r in tests:
            lines.append(
                f"- {r['tokenizer']}{label}: "
                + ", ".join(
                    item(row)
                    for row in rows
                    if row["kind"] == kind
                    and row["tokenizer"] == r["tokenizer"]
                )
            )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
