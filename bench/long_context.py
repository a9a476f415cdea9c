"""Longer than trained: copy-back accuracy at 1, 2, 4 and 8 times the trained length, per position scheme, over seeds.

Each seed trains one :class:`course_pkg.experiments.toy_tasks.CopyBack` per scheme on
lengths up to L (learned table, sinusoidal table, RoPE, ALiBi); the RoPE
model is also tested with position interpolation and NTK-aware scaling by
the factor T' / L, without fine-tuning
(:func:`course_pkg.experiments.toy_tasks.copy_back_at_lengths`). It prints the mean,
standard deviation, minimum and maximum of the accuracy over seeds, and
the floor min - 3 std the chapter's assertions may use.

Two controls (:data:`CONTROLS`) train RoPE and ALiBi with a causal mask
(position t attends to 0..t only), by the same recipe: ALiBi's bias depends
on abs(i - j), so without the mask the tokens two back and two ahead look
the same to it, and the mask is what tells whether direction was what it
lacked. Their training is the package's (checked: without the mask it gives
the package's model's accuracy exactly). For each control the record also
holds the mean attention weight of every head on the keys 0 to 4 positions
back, at the trained length: where each head looks.

With ``--record`` it writes every (scheme, seed, length) accuracy to the
record ``long_context`` (:mod:`course_pkg.experiments.bench_records`,
stamped with the fingerprint of the code that ran), which the chapter
"Attention at inference time and at long context" reads for its table,
its figure and its floors. Only the chapter's settings (the defaults)
belong in that record; after a change to the code it uses, re-run::

    .venv/bin/python bench/long_context.py --threads 1 --record

(10 seeds x 6 schemes and 2 controls: a few minutes on one thread; the
record holds the minutes of its run.)
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from course_pkg.checks import check_token_ids
from course_pkg.experiments import bench_records, toy_tasks
from course_pkg.experiments.toy_tasks import (
    LENGTH_VARIANTS,
    CopyBack,
    accuracy_by_position,
    copy_back_at_lengths,
)

import _common

#: The controls: the scheme trained with a causal mask -> its row name.
CONTROLS = {"rope": "rope (causal)", "alibi": "alibi (causal)"}
OFFSETS = range(5)  # how far back the recorded attention weights look
SHIFT = 2  # the task: copy the token two positions back


class CausalCopyBack(CopyBack):
    """The chapter's CopyBack with a causal mask in its attention."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_token_ids("tokens", tokens, self.embedding)
        X = self.positional(self.embedding(tokens))
        return self.readout(self.attention(X, X, X, causal=True))


def train_control(
    scheme: str, seed: int, train_len: int, steps: int, causal: bool = True
) -> CopyBack:
    """A CopyBack with RoPE or ALiBi ("rope", "alibi"), trained as
    copy_back_at_lengths trains it (the same seeds, batches and optimiser:
    toy_tasks.train_copy_back's recipe), with a causal mask if asked."""

    def make_model() -> CopyBack:
        model_class = CausalCopyBack if causal else CopyBack
        return model_class(
            None, rotary=scheme == "rope", alibi=scheme == "alibi"
        )

    def loss_of_a_batch(model: CopyBack, generator) -> torch.Tensor:
        length = int(
            torch.randint(SHIFT + 1, train_len + 1, (1,), generator=generator)
        )
        tokens = torch.randint(
            0, model.vocab_size, (64, length), generator=generator
        )
        scores = model(tokens)[:, SHIFT:]  # (B, T - shift, V)
        return F.cross_entropy(
            scores.reshape(-1, model.vocab_size),
            tokens[:, :-SHIFT].reshape(-1),
        )

    return toy_tasks._train(
        make_model, loss_of_a_batch, steps, seed, data_seed=seed + 1000
    )


def weight_by_offset(model: CopyBack, length: int) -> list[list[float]]:
    """[head][o]: the mean attention weight a query at t >= max offset puts
    on the key at t - o, over 1,000 random sequences of one length."""
    tokens = torch.randint(
        0,
        model.vocab_size,
        (1000, length),
        generator=torch.Generator().manual_seed(100),
    )
    with torch.no_grad():
        model(tokens)
    weights = model.attention.attention_weights  # (B, H, T, T)
    queries = torch.arange(max(OFFSETS), length)
    return [
        [weights[:, head, queries, queries - o].mean().item() for o in OFFSETS]
        for head in range(weights.shape[1])
    ]


def main() -> None:
    options = _common.parser(
        __doc__, threads=1, sizes={"seeds": 10, "train-len": 16, "steps": 400}
    )
    _common.record_option(options, "long_context")
    args = options.parse_args()
    _common.device_of(args)
    train_len = args.train_len
    test_lens = tuple(train_len * factor for factor in (1, 2, 4, 8))
    rows = []
    start = time.perf_counter()
    for seed in range(args.seeds):
        rope_model = None
        for variant in LENGTH_VARIANTS:
            reuse = rope_model if variant.startswith("rope-") else None
            accuracy, model = copy_back_at_lengths(
                variant, seed, test_lens, train_len, reuse, args.steps
            )
            if variant == "rope":
                rope_model = model
            rows += [
                {"variant": variant, "seed": seed, "length": n, "accuracy": a}
                for n, a in accuracy.items()
            ]
        for scheme, name in CONTROLS.items():
            model = train_control(scheme, seed, train_len, args.steps)
            for n in test_lens:
                a = float(accuracy_by_position(model, n, seed=100).mean())
                rows.append(
                    {"variant": name, "seed": seed, "length": n, "accuracy": a}
                )
            for head, weights in enumerate(weight_by_offset(model, train_len)):
                rows += [
                    {"variant": name, "seed": seed, "head": head}
                    | {"offset": o, "weight": w}
                    for o, w in zip(OFFSETS, weights)
                ]
        if seed == 0:  # the controls' recipe is the package's, mask aside
            unmasked = train_control("alibi", 0, train_len, args.steps, False)
            again = float(
                accuracy_by_position(unmasked, train_len, seed=100).mean()
            )
            package = next(
                r["accuracy"]
                for r in rows
                if (r["variant"], r["length"]) == ("alibi", train_len)
            )
            if again != package:
                raise SystemExit(
                    f"the controls' training differs from the package's: "
                    f"ALiBi without the mask {again} != {package}"
                )
    print(
        f"copy-back (shift 2), trained on lengths <= L = {train_len}, "
        f"{args.seeds} seeds, {time.perf_counter() - start:.0f} s"
    )
    print(f"{'variant':20s} {'length':>6} {'mean':>6} {'std':>6} "
          f"{'min':>6} {'max':>6} {'min-3std':>8}")  # fmt: skip
    for variant in (*LENGTH_VARIANTS, *CONTROLS.values()):
        for length in test_lens:
            values = [
                r["accuracy"]
                for r in rows
                if r["variant"] == variant and r.get("length") == length
            ]
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            print(
                f"{variant:20s} {length:6d} {statistics.mean(values):6.3f} "
                f"{std:6.3f} {min(values):6.3f} {max(values):6.3f} "
                f"{min(values) - 3 * std:8.3f}"
            )
    print(f"chance: {1 / 10:.3f}; torch {torch.__version__}")
    print(f"mean attention weight on the key o back, length {train_len}:")
    for name in CONTROLS.values():
        for head in range(2):
            means = [
                statistics.mean(
                    r["weight"]
                    for r in rows
                    if (r["variant"], r.get("head"), r.get("offset"))
                    == (name, head, o)
                )
                for o in OFFSETS
            ]
            shown = " ".join(f"{w:.3f}" for w in means)
            print(f"{name:20s} head {head}: {shown}")
    if args.record:
        path = bench_records.write(
            "long_context",
            __file__,
            [
                {**row, "train_len": train_len, "steps": args.steps}
                for row in rows
            ],
            (time.perf_counter() - start) / 60,
        )
        print(f"record written: {path}")


if __name__ == "__main__":
    main()
