"""Speed of byte-level BPE: course_pkg.data.bpe against Hugging Face tokenizers.

Trains both on the first --train-chars characters of the Shakespeare
training text (same vocabulary size, same pre-tokenization), then encodes the
first --encode-chars characters of the training text with each (ours with an
empty word cache, then again with the cache filled). Prints seconds and
characters per second; the fastest of --repeats runs. Both encodings are
checked to decode back to the text first. The tokenization chapter quotes
these numbers; no test asserts them.

    .venv/bin/python bench/bpe.py
"""

from __future__ import annotations

import argparse
import json
import time

from course_pkg.data import bpe, shakespeare

from _common import at_least


def seconds(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--train-chars", type=at_least(1), default=300_000)
    options.add_argument("--encode-chars", type=at_least(1), default=10**7)
    options.add_argument("--vocab-size", type=at_least(257), default=1024)
    options.add_argument("--repeats", type=at_least(1), default=3)
    args = options.parse_args()
    train, _ = shakespeare.train_valid_text(shakespeare.load_works())
    text, corpus = train[: args.train_chars], train[: args.encode_chars]
    print(
        f"train on {len(text):,} characters to V = {args.vocab_size}; "
        f"encode {len(corpus):,} characters; fastest of {args.repeats}"
    )

    ours_train, ours = seconds(
        lambda: bpe.train_bpe(text, args.vocab_size), args.repeats
    )
    hf_train, hf = seconds(
        lambda: bpe.train_hf_bpe(text, args.vocab_size), args.repeats
    )
    merges = json.loads(hf.to_str())["model"]["merges"]
    print(
        f"training: ours {ours_train:.2f} s, tokenizers {hf_train:.2f} s "
        f"({len(ours.merges)} and {len(merges)} merges)"
    )

    def cold():
        fresh = bpe.BPETokenizer(ours.merges)
        return fresh.encode(corpus)

    ours_cold, ids = seconds(cold, args.repeats)
    ours_warm, _ = seconds(lambda: ours.encode(corpus), args.repeats)
    hf_encode, encoding = seconds(lambda: hf.encode(corpus), args.repeats)
    assert ours.decode(ids) == corpus
    assert hf.decode(encoding.ids) == corpus
    for name, s, n in (
        ("ours, empty cache", ours_cold, len(ids)),
        ("ours, cache filled", ours_warm, len(ids)),
        ("tokenizers", hf_encode, len(encoding.ids)),
    ):
        print(
            f"encoding, {name}: {s:.2f} s, {len(corpus) / s / 1e6:.2f} M "
            f"characters/s, {n:,} tokens"
        )


if __name__ == "__main__":
    main()
