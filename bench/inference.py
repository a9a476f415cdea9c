"""Serving attention: cache bytes, waste of contiguous vs paged caches, plain vs speculative decoding, full vs sliding-window cache.

In one run, each part printed as ratios against its peer measured in the
same run:

1. cache bytes per token and at 32k tokens for the published configurations
   (course_pkg.inference.kv_memory), relative to multi-head Llama-2-7B;
2. wasted cache bytes (allocated - used) for a batch of sequences of random
   lengths, contiguous caches reserved for the maximum length against paged
   caches of several block sizes (Llama-3-8B's bytes per token);
3. tokens per second of greedy decoding, plain (course_pkg.models.gpt.generate)
   against speculative (course_pkg.inference.speculative), with the chapter's GPT as
   target and a GPT of half its depth as draft, both trained on the course
   corpus here (checked identical in float64 before timing);
4. seconds per decoded token of one attention layer at long lengths: a cache
   that keeps every position against a rolling cache of a sliding window
   (checked equal to the band mask before timing).

    .venv/bin/python bench/inference.py
"""

from __future__ import annotations

import time

import torch

from course_pkg.data.corpus import english_french_corpus
from course_pkg.experiments.lm_translation import (
    prompt_ids,
    translation_lm_vocab,
)
from course_pkg.inference.kv_memory import (
    PUBLISHED_CONFIGS,
    kv_bytes_per_token,
    kv_cache_bytes,
)
from course_pkg.inference.paged_cache import contiguous_waste, paged_waste
from course_pkg.inference.speculative import speculative_generate
from course_pkg.models.gpt import generate
from course_pkg.nn.sliding_window import (
    RollingKVCache,
    sliding_window_attention,
)

import _common


def cache_bytes() -> None:
    print("== 1. cache bytes (16-bit numbers, one sequence)")
    reference = kv_bytes_per_token(PUBLISHED_CONFIGS[1])  # Llama-2-7B
    for config in PUBLISHED_CONFIGS:
        per_token = kv_bytes_per_token(config)
        at_32k = kv_cache_bytes(config, 32768) / 2**30
        print(
            f"{config.name:16s} {per_token:8d} B/token  {at_32k:7.3f} GiB at "
            f"32k  / Llama-2-7B per token: {per_token / reference:.4f}"
        )


def waste(batch: int, max_len: int) -> None:
    print(
        f"\n== 2. wasted cache: {batch} sequences of random length <= {max_len}"
    )
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, max_len + 1, (batch,), generator=generator)
    lengths = lengths.tolist()
    per_token = kv_bytes_per_token(PUBLISHED_CONFIGS[2])  # Llama-3-8B
    used = sum(lengths) * per_token
    contiguous = contiguous_waste(lengths, max_len) * per_token
    print(f"used {used / 2**20:.1f} MiB; contiguous wastes "
          f"{contiguous / 2**20:.1f} MiB ({contiguous / (contiguous + used):.1%})")  # fmt: skip
    for block_size in (1, 8, 16, 32, 128):
        paged = paged_waste(lengths, block_size) * per_token
        ratio = contiguous / paged if paged else float("inf")
        print(
            f"paged, blocks of {block_size:3d}: wastes {paged / 2**20:8.1f} MiB "
            f"({paged / (paged + used):.1%}); contiguous/paged = {ratio:.1f}"
        )


def speculative(args, device: torch.device) -> None:
    print("\n== 3. greedy decoding: plain vs speculative")
    train_pairs, _, test_pairs = english_french_corpus(seed=0)
    train_pairs = train_pairs[: args.num_pairs]
    vocab = translation_lm_vocab(train_pairs)
    target, draft = (
        model.to(device)
        for model in _common.target_and_draft(train_pairs, vocab, args.epochs)
    )
    prompts = [
        torch.tensor([prompt_ids(en, vocab)], device=device)
        for en, _ in test_pairs[: args.prompts]
    ]
    target64, draft64 = target.double(), draft.double()
    for prompt in prompts[:5]:
        expected = generate(target64, prompt, 20, top_k=1, eos=vocab.eos)
        ours, _ = speculative_generate(
            target64, draft64, prompt, 20, 3, eos=vocab.eos
        )
        if not torch.equal(ours, expected):
            raise SystemExit("speculative greedy differs from plain greedy")
    target, draft = target.float(), draft.float()

    def decode(k: int | None) -> tuple[float, int, int]:
        start, tokens, calls = time.perf_counter(), 0, 0
        for prompt in prompts:
            if k is None:
                out = generate(target, prompt, 20, top_k=1, eos=vocab.eos)
                calls += out.shape[1] - prompt.shape[1]
            else:
                out, stats = speculative_generate(
                    target, draft, prompt, 20, k, eos=vocab.eos
                )
                calls += stats.target_calls
            tokens += out.shape[1] - prompt.shape[1]
        return time.perf_counter() - start, tokens, calls

    plain_seconds, plain_tokens, _ = decode(None)
    plain_rate = plain_tokens / plain_seconds
    print(f"plain: {plain_rate:8.1f} tokens/s over {len(prompts)} prompts")
    for k in (1, 2, 4):
        seconds, tokens, calls = decode(k)
        rate = tokens / seconds
        print(
            f"speculative k={k}: {rate:8.1f} tokens/s, {calls / tokens:.3f} "
            f"target passes per token; speculative/plain = {rate / plain_rate:.2f}"
        )


def sliding(args, device: torch.device) -> None:
    print(
        f"\n== 4. one attention layer, decoding: full cache vs window {args.window}"
    )
    heads, groups, width = 8, 2, 64
    generator = torch.Generator().manual_seed(0)
    longest = max(args.lengths)
    q = torch.randn(1, heads, longest, width, generator=generator).to(device)
    k, v = torch.randn(2, 1, groups, longest, width, generator=generator).to(
        device
    )
    window = args.window

    def rolling_decode(steps: int) -> torch.Tensor:
        cache = RollingKVCache(1, groups, width, window, device=device)
        for t in range(steps):
            one = slice(t, t + 1)
            out = cache.step(q[:, :, one], k[:, :, one], v[:, :, one])
        return out

    def full_decode(steps: int) -> torch.Tensor:
        keys = values = None
        for t in range(steps):
            one = slice(t, t + 1)
            keys = (
                k[:, :, one]
                if keys is None
                else torch.cat([keys, k[:, :, one]], 2)
            )
            values = (
                v[:, :, one]
                if values is None
                else torch.cat([values, v[:, :, one]], 2)
            )
            out = sliding_window_attention(q[:, :, one], keys, values, None)
        return out

    check = min(args.lengths)
    band = sliding_window_attention(
        q[:, :, :check], k[:, :, :check], v[:, :, :check], window
    )
    if not torch.allclose(rolling_decode(check), band[:, :, -1:], atol=1e-5):
        raise SystemExit("rolling cache differs from the band mask")
    for steps in args.lengths:
        seconds = {}
        for name, fn in (("full", full_decode), ("rolling", rolling_decode)):
            start = time.perf_counter()
            fn(steps)
            seconds[name] = (time.perf_counter() - start) / steps
        print(
            f"T={steps:6d}: full {1e6 * seconds['full']:8.1f} us/token, rolling "
            f"{1e6 * seconds['rolling']:8.1f} us/token; full/rolling = "
            f"{seconds['full'] / seconds['rolling']:.2f}; cache bytes full/rolling = "
            f"{steps / min(steps, window):.1f}"
        )


def main() -> None:
    options = _common.parser(
        __doc__,
        threads=1,
        sizes={
            "batch": 256,
            "max-len": 2048,
            "epochs": 5,
            "num-pairs": 8000,
            "prompts": 40,
            "window": 256,
        },
        lengths=[1024, 4096, 8192],
    )
    args = options.parse_args()
    device = _common.device_of(args)
    print(f"device {device}, torch {torch.__version__}")
    cache_bytes()
    waste(args.batch, args.max_len)
    speculative(args, device)
    with torch.no_grad():
        sliding(args, device)


if __name__ == "__main__":
    main()
