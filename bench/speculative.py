"""Speculative decoding on this CPU: the cost of each pass, the speed-up the cost model predicts, and the speed measured end to end.

Leviathan et al.'s model: a round proposes gamma tokens, each accepted with
probability alpha, and emits (1 - alpha^(gamma + 1)) / (1 - alpha) tokens
on average for gamma draft proposals and one target pass over gamma + 1
positions. In units of the target's pass over one position, c (a draft
proposal) and v (the target's pass over gamma + 1 positions) decide the
speed-up (:func:`course_pkg.inference.speculative.predicted_speedup`). This script
measures each term and then the speed itself:

1. pass times (CPU seconds of this thread, the median of many calls after
   a cache of the prompt): the chapter's target GPT (4 blocks of width 32)
   over 1 to 9 new positions, its draft GPT (2 blocks) over one, the n-gram
   draft and prompt lookup per proposed token; and, with random weights,
   a GPT-2-small-sized target (12 blocks of width 768, 50,257 tokens) over
   1 to 9 positions with two drafts of its vocabulary, the chapter's draft
   shape and half the target's depth;
2. alpha, the acceptance rate at gamma = 1, and the tokens per target
   pass at every gamma, for the three drafts of the chapter's target on
   the 60 test prompts the chapter uses (greedy, up to 20 tokens);
3. end to end, plain greedy decoding (course_pkg.models.gpt.generate) against
   speculative decoding with each draft and gamma on the same prompts:
   CPU seconds of the whole decoding, the paths taking turns, the median of
   the repeats; the output is checked identical to plain greedy decoding in
   float64 before any timing, and in float32 as timed.

The chapter's target and draft are trained here as the chapter trains them
(seed 0, the corpus's training pairs). CPU time, not wall time: on a machine
shared with other jobs it counts this thread's work only. With ``--record``
the rows go to the record ``speculative``
(:mod:`course_pkg.experiments.bench_records`), which the chapter "Attention
at inference time and at long context" reads::

    .venv/bin/python bench/speculative.py --threads 1 --record

(a few minutes of CPU on one thread; the record holds the wall minutes.)
"""

from __future__ import annotations

import statistics
import time

import torch

from course_pkg import seed_everything
from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import tokenize
from course_pkg.experiments import bench_records
from course_pkg.experiments.lm_translation import (
    DRAFT_SETTINGS,
    prompt_ids,
    translation_lm_vocab,
)
from course_pkg.inference.speculative import (
    NGramDraft,
    PromptLookupDraft,
    measure_speculation,
    speculative_generate,
)
from course_pkg.models.gpt import GPT, generate

import _common

GAMMAS = {"draft GPT": (1, 2, 4), "n-gram": (1, 2, 4, 8), "lookup": (1, 4)}
# GPT-2 small's sizes (12 blocks of them), and its vocabulary
WIDE = dict(num_hiddens=768, ffn_num_hiddens=3072, num_heads=12, dropout=0.0)
WIDE_VOCAB = 50257


def cpu_seconds(calls: dict, repeats: int, warmup: int = 2) -> dict:
    """Median CPU seconds of this thread of each call in calls (name ->
    function), the calls taking turns (one of each per round, so that a
    change in the machine's load hits all of them alike)."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.thread_time()
            fn()
            times[name].append(time.thread_time() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def pass_seconds(
    model: GPT, sizes: tuple[int, ...], context: int, repeats: int
) -> dict[int, float]:
    """CPU seconds of one pass over n new positions after a cache of
    context positions, for each n of sizes."""
    generator = torch.Generator().manual_seed(0)
    vocab = model.vocab_size
    prefix = torch.randint(0, vocab, (1, context), generator=generator)
    X = torch.randint(0, vocab, (1, max(sizes)), generator=generator)
    with torch.no_grad():
        _, cache = model.forward_with_cache(prefix)
        return cpu_seconds(
            {
                n: lambda n=n: model.forward_with_cache(X[:, :n], cache)
                for n in sizes
            },
            repeats,
        )


def proposal_seconds(draft, prompts: list[list[int]], repeats: int) -> float:
    """CPU seconds per proposed token of a network-free draft: 4 tokens
    after each prompt, averaged."""

    def propose_all() -> None:
        for ids in prompts:
            draft.propose(ids, 4)

    return cpu_seconds({"": propose_all}, repeats)[""] / (4 * len(prompts))


def main() -> None:
    options = _common.parser(
        __doc__,
        threads=1,
        sizes={"prompts": 60, "new-tokens": 20, "repeats": 5},
    )
    _common.record_option(options, "speculative")
    args = options.parse_args()
    _common.device_of(args)
    start = time.perf_counter()
    rows: list[dict] = []

    train_pairs, _, test_pairs = english_french_corpus(seed=0)
    vocab = translation_lm_vocab(train_pairs)
    target, draft = _common.target_and_draft(train_pairs, vocab)
    prompts = [prompt_ids(en, vocab) for en, _ in test_pairs[: args.prompts]]
    sequences = [
        ids + vocab[tokenize(fr)] + [vocab.eos]
        for ids, (_, fr) in zip(
            (prompt_ids(en, vocab) for en, _ in train_pairs), train_pairs
        )
    ]
    drafts = {
        "draft GPT": draft,
        "n-gram": NGramDraft(sequences, order=3),
        "lookup": PromptLookupDraft(max_ngram=3),
    }
    print(
        f"trained the target and the draft: {time.perf_counter() - start:.0f} s"
    )

    # 1. pass times
    context = len(prompts[0])
    passes = {"target": target, "draft GPT": draft}
    for name, model in passes.items():
        sizes = tuple(range(1, 10)) if name == "target" else (1,)
        seconds = pass_seconds(model, sizes, context, 50 * args.repeats)
        rows += [
            {"kind": "pass", "model": name, "new": n, "seconds": seconds[n]}
            for n in sizes
        ]
    for name in ("n-gram", "lookup"):
        seconds = proposal_seconds(drafts[name], prompts, args.repeats)
        rows.append(
            {"kind": "pass", "model": name, "new": 1, "seconds": seconds}
        )
    seed_everything(0)
    wide = {
        "wide target": GPT(WIDE_VOCAB, **WIDE, num_blks=12, max_len=1024),
        "wide, draft shape": GPT(WIDE_VOCAB, **DRAFT_SETTINGS.model_sizes()),
        "wide, half depth": GPT(WIDE_VOCAB, **WIDE, num_blks=6, max_len=1024),
    }
    for name, model in wide.items():
        model.eval().need_weights = False
        sizes = tuple(range(1, 10)) if name == "wide target" else (1,)
        seconds = pass_seconds(model, sizes, 32, 4 * args.repeats)
        rows += [
            {"kind": "pass", "model": name, "new": n, "seconds": seconds[n]}
            for n in sizes
        ]
    del wide
    for row in rows:
        print(
            f"pass {row['model']:18s} {row['new']} new: "
            f"{1e3 * row['seconds']:8.3f} ms"
        )

    # 2. acceptance
    for name, gammas in GAMMAS.items():
        for gamma in sorted({1, *gammas}):
            stats = measure_speculation(
                target,
                drafts[name],
                prompts,
                args.new_tokens,
                gamma,
                eos=vocab.eos,
            )
            rows.append(
                {"kind": "acceptance", "draft": name, "gamma": gamma}
                | {
                    "acceptance_rate": stats.acceptance_rate,
                    "passes_per_token": stats.target_calls_per_token,
                }
            )
            print(
                f"{name:10s} gamma {gamma}: acceptance "
                f"{stats.acceptance_rate:.3f}, "
                f"{stats.target_calls_per_token:.3f} target passes per token"
            )

    # 3. end to end, checked identical first (float64, then float32)
    def decode(ids: list[int], model: GPT, drafting, gamma: int) -> list[int]:
        prompt = torch.tensor([ids])
        with torch.no_grad():
            if drafting is None:
                out = generate(
                    model, prompt, args.new_tokens, top_k=1, eos=vocab.eos
                )
            else:
                out, _ = speculative_generate(
                    model,
                    drafting,
                    prompt,
                    args.new_tokens,
                    gamma,
                    eos=vocab.eos,
                )
        return out[0].tolist()

    configs = [(name, g) for name, gammas in GAMMAS.items() for g in gammas]
    target64, draft64 = target.double(), draft.double()  # (in place)
    plain64 = [decode(ids, target64, None, 0) for ids in prompts]
    identical64 = {
        (name, g): [
            decode(
                ids,
                target64,
                draft64 if name == "draft GPT" else drafts[name],
                g,
            )
            for ids in prompts
        ]
        == plain64
        for name, g in configs
    }
    target, draft = target.float(), draft.float()
    plain = [decode(ids, target, None, 0) for ids in prompts]
    tokens = sum(len(out) - len(ids) for out, ids in zip(plain, prompts))
    identical32 = {
        (name, g): [decode(ids, target, drafts[name], g) for ids in prompts]
        == plain
        for name, g in configs
    }
    paths = [("plain", 0), *configs]
    times = {key: [] for key in paths}
    for _ in range(args.repeats):
        spent = dict.fromkeys(paths, 0.0)
        for ids in prompts:  # the paths take turns, prompt by prompt
            for name, g in paths:
                drafting = None if name == "plain" else drafts[name]
                begin = time.thread_time()
                decode(ids, target, drafting, g)
                spent[name, g] += time.thread_time() - begin
        for key in paths:
            times[key].append(spent[key])
    plain_seconds = statistics.median(times["plain", 0])
    print(f"plain greedy: {tokens} tokens, {plain_seconds:.2f} CPU s")
    for key in configs:
        seconds = statistics.median(times[key])
        rows.append(
            {"kind": "end to end", "draft": key[0], "gamma": key[1]}
            | {
                "plain_seconds": plain_seconds,
                "seconds": seconds,
                "tokens": tokens,
                "identical_float64": identical64[key],
                "identical_float32": identical32[key],
            }
        )
        print(
            f"{key[0]:10s} gamma {key[1]}: {seconds:.2f} CPU s, speed-up "
            f"{plain_seconds / seconds:.2f}; identical to greedy: "
            f"float64 {identical64[key]}, float32 {identical32[key]}"
        )
    minutes = (time.perf_counter() - start) / 60
    print(f"{minutes:.1f} min; torch {torch.__version__}")
    if args.record:
        path = bench_records.write("speculative", __file__, rows, minutes)
        print(f"record written: {path}")


if __name__ == "__main__":
    main()
