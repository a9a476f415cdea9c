"""Pretraining a GPT-2-exact model on Shakespeare: validation curve, bits per byte, count baselines.

The longer run of the chapter "Pretraining on real text" (``make pretrain``).
For each tokenizer asked for (``char``; ``bpe`` when ``course_pkg.bpe`` is
there) it encodes the training text (39 works) and the validation text
(Hamlet, Twelfth Night, King Richard II), fits the add-k count models of
orders 1 to --max-order (k chosen on the last tenth of the training text,
then refitted on all of it), and trains :class:`course_pkg.gpt2.GPT2` with
:func:`course_pkg.lm_pretrain.pretrain_lm`: AdamW, linear warm-up then
cosine decay, gradient clipping, a budget in updates. It prints the
validation curve (on --eval-windows evenly spaced windows), then the loss on
every validation window: nats per token, bits per byte, perplexity per
token; the tokens/s of the updates and the wall time. It writes a checkpoint
and a JSON record per tokenizer under --out, and with --table a markdown
table of the results.

    .venv/bin/python bench/pretrain.py --tokenizers char --updates 300 --lr 3e-3
    make pretrain   # the documented run, with --table bench/pretrain_results.md
"""

from __future__ import annotations

import json
import math
import pathlib
import platform
import time

import torch

from course_pkg.checkpoint import save_checkpoint
from course_pkg.device import describe_device, seed_everything
from course_pkg.gpt import generate
from course_pkg.gpt2 import GPT2
from course_pkg.lm_pretrain import (
    CharTokenizer,
    LMSettings,
    NGramModel,
    bits_per_byte,
    evaluate_lm,
    pretrain_lm,
    validation_windows,
)
from course_pkg.shakespeare import load_works, train_valid_text

import _common

K_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)


def make_tokenizer(name: str, train_text: str, vocab_size: int):
    if name == "char":
        return CharTokenizer(train_text)
    from course_pkg.bpe import train_bpe  # the bpe branch's module

    return train_bpe(train_text, vocab_size)


def count_baselines(
    train: torch.Tensor, valid: torch.Tensor, V: int, max_order: int
) -> list[dict]:
    """Per order: k chosen on the training text's last tenth, then the
    validation loss of the model refitted on all of the training text."""
    cut = int(0.9 * len(train))
    rows = []
    for order in range(1, max_order + 1):
        losses = {
            k: -NGramModel(train[:cut], order, V, k)
            .log_probs(train[cut:])
            .mean()
            .item()
            for k in K_GRID
        }
        k = min(losses, key=losses.get)
        nats = -NGramModel(train, order, V, k).log_probs(valid).mean().item()
        rows.append({"order": order, "k": k, "nats_per_token": nats})
    return rows


def main() -> None:
    options = _common.parser(
        __doc__,
        threads=1,
        sizes={
            "updates": 6000,
            "batch": 32,
            "context": 128,
            "width": 128,
            "blocks": 4,
            "heads": 4,
            "warmup": 200,
            "eval-every": 250,
            "eval-windows": 200,
            "max-order": 5,
            "bpe-vocab": 1024,
            "seed": 0,
        },
    )
    options.add_argument("--lr", type=float, default=6e-3)
    options.add_argument("--min-lr-factor", type=float, default=0.1)
    options.add_argument("--weight-decay", type=float, default=0.1)
    options.add_argument("--dropout", type=float, default=0.0)
    options.add_argument(
        "--tokenizers",
        nargs="+",
        default=["char", "bpe"],
        choices=["char", "bpe"],
    )
    options.add_argument("--out", default="_build/pretrain")
    options.add_argument("--table", help="markdown file for the results")
    options.add_argument("--progress", action="store_true", default=None)
    args = options.parse_args()
    device = _common.device_of(args)
    wall_start = time.perf_counter()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        describe_device(device),
        "|",
        platform.processor() or platform.machine(),
    )
    train_text, valid_text = train_valid_text(load_works())
    valid_bytes = len(valid_text.encode("utf-8"))
    results = []
    for name in args.tokenizers:
        start = time.perf_counter()
        print(f"\n{name}: tokenizing ...", flush=True)
        tokenizer = make_tokenizer(name, train_text, args.bpe_vocab)
        train = torch.tensor(tokenizer.encode(train_text))
        valid = torch.tensor(tokenizer.encode(valid_text))
        V = len(tokenizer)
        print(
            f"\n== {name}: V = {V}, training {len(train):,} tokens, validation "
            f"{len(valid):,} tokens = {valid_bytes:,} bytes "
            f"({valid_bytes / len(valid):.3f} bytes/token; "
            f"{time.perf_counter() - start:.0f} s to tokenize)"
        )

        def bpb(nats: float) -> float:
            return bits_per_byte(nats, len(valid), valid_bytes)

        baselines = count_baselines(train, valid, V, args.max_order)
        print(
            "count models (add-k, k chosen on the training text's last tenth):"
        )
        for row in baselines:
            row["bits_per_byte"] = bpb(row["nats_per_token"])
            print(
                f"  order {row['order']}: k = {row['k']:<5} "
                f"{row['nats_per_token']:.4f} nats/token  "
                f"{row['bits_per_byte']:.3f} bits/byte"
            )
        settings = LMSettings(
            batch_size=args.batch,
            num_steps=args.context,
            num_updates=args.updates,
            lr=args.lr,
            warmup_steps=args.warmup,
            min_lr_factor=args.min_lr_factor,
            weight_decay=args.weight_decay,
            eval_every=args.eval_every,
            seed=args.seed,
        )
        seed_everything(args.seed)
        model = GPT2(
            V, args.width, args.heads, args.blocks, args.context, args.dropout
        ).to(device)
        model.need_weights = False
        num_params = sum(p.numel() for p in model.parameters())
        print(
            f"GPT2: {args.blocks} blocks, {args.heads} heads, width "
            f"{args.width}, context {args.context}, {num_params:,} parameters; "
            f"{args.updates} updates of {args.batch} x {args.context} tokens, "
            f"peak lr {args.lr:g}, warm-up {args.warmup}, cosine to "
            f"{args.min_lr_factor:g} x, weight decay {args.weight_decay:g}, clip 1"
        )
        curve_X, curve_Y = validation_windows(
            valid, args.context, args.eval_windows
        )
        run_start = time.perf_counter()

        def report(update: int, model, loss: float) -> None:
            print(
                f"  update {update:6d}: {loss:.4f} nats/token, "
                f"{bpb(loss):.3f} bits/byte ({time.perf_counter() - run_start:.0f} s)",
                flush=True,
            )

        record = pretrain_lm(
            model,
            train,
            curve_X,
            curve_Y,
            settings,
            progress=args.progress,
            on_eval=report,
        )
        print(
            f"{'update':>7} {'tokens':>11} {'valid nats':>10} {'bits/byte':>9}"
        )
        for update, loss in zip(record["eval_updates"], record["eval_loss"]):
            print(
                f"{update:7d} {update * args.batch * args.context:11,d} "
                f"{loss:10.4f} {bpb(loss):9.3f}"
            )
        all_X, all_Y = validation_windows(valid, args.context)
        nats = evaluate_lm(model, all_X, all_Y)
        best_count = min(r["bits_per_byte"] for r in baselines)
        result = {
            "tokenizer": name,
            "vocab_size": V,
            "valid_tokens": len(valid),
            "valid_bytes": valid_bytes,
            "num_params": num_params,
            "model": dict(
                width=args.width,
                blocks=args.blocks,
                heads=args.heads,
                context=args.context,
                dropout=args.dropout,
            ),
            "nats_per_token": nats,
            "bits_per_byte": bpb(nats),
            "perplexity": math.exp(nats),
            "valid_windows": len(all_X),
            "baselines": baselines,
            "curve": {
                "updates": record["eval_updates"],
                "nats_per_token": record["eval_loss"],
            },
            "step_loss": record["step_loss"],
            "num_tokens": record["num_tokens"],
            "train_seconds": record["train_seconds"],
            "tokens_per_s": record["tokens_per_s"],
            "seconds": time.perf_counter() - start,
            "settings": record["settings"],
            "device": describe_device(device),
        }
        results.append(result)
        print(
            f"validation, all {len(all_X)} windows of {args.context}: "
            f"{nats:.4f} nats/token, {result['bits_per_byte']:.3f} bits/byte, "
            f"perplexity {result['perplexity']:.2f} per token; best count model "
            f"{best_count:.3f} bits/byte"
        )
        print(
            f"training: {record['num_tokens']:,} tokens in "
            f"{record['train_seconds']:.0f} s = {record['tokens_per_s']:,.0f} "
            f"tokens/s; this tokenizer's run {result['seconds']:.0f} s"
        )
        prompt = torch.tensor([tokenizer.encode("HAMLET.\n")], device=device)
        room = args.context - prompt.shape[1]
        sample = generate(
            model,
            prompt,
            room,
            temperature=0.8,
            generator=torch.Generator(device).manual_seed(0),
        )
        print(
            "sample (temperature 0.8):\n"
            + tokenizer.decode(sample[0].tolist())
        )
        # what rebuilds the tokenizer: the characters, or the BPE merges
        tokens = (
            {"chars": tokenizer.chars}
            if name == "char"
            else {"merges": [list(pair) for pair in tokenizer.merges]}
        )
        save_checkpoint(
            out / f"{name}.pt",
            model,
            settings=settings,
            vocab_size=V,
            **tokens,
        )
        with open(out / f"{name}.json", "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
        if args.table:  # after each tokenizer: a long run keeps its part
            write_table(
                pathlib.Path(args.table),
                results,
                time.perf_counter() - wall_start,
                args,
            )
    wall = time.perf_counter() - wall_start
    print(f"\nwall time {wall:.0f} s; checkpoints and JSON in {out}/")
    if args.table:
        write_table(pathlib.Path(args.table), results, wall, args)
        print(f"table written to {args.table}")


def write_table(
    path: pathlib.Path, results: list[dict], wall: float, args
) -> None:
    lines = [
        "# Pretraining results (`make pretrain`, bench/pretrain.py)",
        "",
        f"Written by `bench/pretrain.py` ({results[0]['device']}); wall time "
        f"{wall / 60:.1f} min. Validation: Hamlet, Twelfth Night, King Richard II, "
        f"{results[0]['valid_bytes']:,} bytes, every window of the context.",
        "",
        "| tokenizer | V | model | updates x tokens | peak lr | "
        "bits/byte | nats/token | perplexity/token | tokens/s | train time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s, m = r["settings"], r["model"]
        lines.append(
            f"| {r['tokenizer']} | {r['vocab_size']} | GPT2 {m['blocks']}x"
            f"{m['width']}, {m['heads']} heads, context {m['context']}, "
            f"{r['num_params']:,} params | {s['num_updates']} x "
            f"{s['batch_size'] * s['num_steps']} | {s['lr']:g} | "
            f"{r['bits_per_byte']:.3f} | {r['nats_per_token']:.4f} | "
            f"{r['perplexity']:.2f} | {r['tokens_per_s']:,.0f} | "
            f"{r['train_seconds'] / 60:.1f} min |"
        )
    lines += ["", "Count models on the same tokens (add-k), bits/byte:", ""]
    orders = [b["order"] for b in results[0]["baselines"]]
    lines.append(
        "| tokenizer | " + " | ".join(f"order {n}" for n in orders) + " |"
    )
    lines.append("|---|" + "---|" * len(orders))
    for r in results:
        cells = " | ".join(f"{b['bits_per_byte']:.3f}" for b in r["baselines"])
        lines.append(f"| {r['tokenizer']} | {cells} |")
    lines += ["", "Validation curve (evenly spaced windows), bits/byte:", ""]
    for r in results:
        points = ", ".join(
            f"{u}: {bits_per_byte(n, r['valid_tokens'], r['valid_bytes']):.3f}"
            for u, n in zip(
                r["curve"]["updates"], r["curve"]["nats_per_token"]
            )
        )
        lines.append(f"- {r['tokenizer']}: {points}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
