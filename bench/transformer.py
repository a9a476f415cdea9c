"""Benchmark: our Transformer against torch.nn.Transformer, and decoding with and without the cache.

1. Training throughput. Our ``Transformer`` and ``torch.nn.Transformer`` of the same configuration
   (post-norm, ReLU, biases everywhere, no final LayerNorm on either stack, dropout 0.1), wrapped in
   the same kind of embedding, positional encoding and output layer, and given the same masks:
   padded sources (our valid lens, torch's src_key_padding_mask and memory_key_padding_mask), padded
   targets (tgt_valid_lens, tgt_key_padding_mask) and the causal mask. Weights are copied from torch's
   model into ours, and the outputs are checked to agree (dropout off) before anything is timed. One
   step is forward + cross-entropy + backward; the score is target tokens per second. Ours runs the
   fused attention path (``need_weights=False``, as in training) and, for reference, the explicit
   teaching path that keeps every attention matrix. On CUDA both run under bf16 autocast.
   Target: ours fused >= 0.9x the peer's tokens/s.

2. Greedy decoding, as output length grows. "cached": one new token per step, threading the
   decoder state (its key/value cache). "uncached": the whole prefix from a fresh ``init_state``
   every step. The loop is greedy decoding without the stop at <eos>, so every run has exactly
   the requested length.

Each time is the median of several runs after warm-up.

Usage:
    python bench/transformer.py                  # CPU-sized defaults (about a minute on 2 cores)
    python bench/transformer.py --threads 1      # on a CPU shared with other jobs (avoids thread contention)
    python bench/transformer.py --device cuda --batch 64 --dim 512 --ffn 2048 --heads 8 --blocks 6

``--steps`` is the padded source and target length in training.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.device import describe_device, seed_everything
from course_pkg.evaluation.cost import median_seconds
from course_pkg.models.transformer import Transformer
from course_pkg.nn.attention import copy_weights_from_torch
from course_pkg.nn.positional import PositionalEncoding

from _common import at_least, device_of, interleaved_medians, number_in, parser

TARGET = 0.9


# ----------------------------------------------------------------------------- the peer


class TorchTransformer(nn.Module):
    """``nn.Transformer`` between the same embedding, positional encoding and output layer as ours."""

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        dim: int,
        ffn: int,
        heads: int,
        blocks: int,
        dropout: float,
    ):
        super().__init__()
        self.dim = dim
        self.src_embedding, self.tgt_embedding = (
            nn.Embedding(src_vocab, dim),
            nn.Embedding(tgt_vocab, dim),
        )
        self.src_pos, self.tgt_pos = (
            PositionalEncoding(dim, dropout),
            PositionalEncoding(dim, dropout),
        )
        self.transformer = nn.Transformer(
            dim, heads, blocks, blocks, ffn, dropout, batch_first=True
        )
        # Post-norm blocks already end with a LayerNorm; ours has no extra one per stack.
        self.transformer.encoder.norm = None
        self.transformer.decoder.norm = None
        self.dense = nn.Linear(dim, tgt_vocab)

    def forward(self, src, tgt, src_valid_lens, tgt_valid_lens):
        src_padding = (
            torch.arange(src.shape[1], device=src.device)[None]
            >= src_valid_lens[:, None]
        )
        tgt_padding = (
            torch.arange(tgt.shape[1], device=tgt.device)[None]
            >= tgt_valid_lens[:, None]
        )
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt.shape[1], device=tgt.device, dtype=torch.bool
        )
        out = self.transformer(
            self.src_pos(self.src_embedding(src) * math.sqrt(self.dim)),
            self.tgt_pos(self.tgt_embedding(tgt) * math.sqrt(self.dim)),
            tgt_mask=causal,
            src_key_padding_mask=src_padding,
            tgt_key_padding_mask=tgt_padding,
            memory_key_padding_mask=src_padding,
            tgt_is_causal=True,
        )
        return self.dense(out)


@torch.no_grad()
def copy_from_torch(ours: Transformer, theirs: TorchTransformer) -> None:
    """Give our model the weights of the peer, layer by layer."""
    ours.encoder.embedding.load_state_dict(theirs.src_embedding.state_dict())
    ours.decoder.embedding.load_state_dict(theirs.tgt_embedding.state_dict())
    ours.decoder.dense.load_state_dict(theirs.dense.state_dict())
    pairs = [
        (blk, layer, ("attention",))
        for blk, layer in zip(
            ours.encoder.blks, theirs.transformer.encoder.layers
        )
    ]
    pairs += [
        (blk, layer, ("attention1", "attention2"))
        for blk, layer in zip(
            ours.decoder.blks, theirs.transformer.decoder.layers
        )
    ]
    for blk, layer, attention_names in pairs:
        for name, torch_name in zip(
            attention_names, ("self_attn", "multihead_attn")
        ):
            copy_weights_from_torch(
                getattr(blk, name), getattr(layer, torch_name)
            )
        blk.ffn.dense1.load_state_dict(layer.linear1.state_dict())
        blk.ffn.dense2.load_state_dict(layer.linear2.state_dict())
        for k in range(len(attention_names) + 1):
            getattr(blk, f"addnorm{k + 1}").ln.load_state_dict(
                getattr(layer, f"norm{k + 1}").state_dict()
            )


# ----------------------------------------------------------------------------- timing


def make_batch(args: argparse.Namespace, device: torch.device):
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(0, args.vocab, (args.batch, args.steps), generator=gen)
    tgt = torch.randint(
        0, args.vocab, (args.batch, args.steps + 1), generator=gen
    )
    # Lengths between half and all of the padded length, as in a bucketed corpus.
    src_lens = torch.randint(
        args.steps // 2, args.steps + 1, (args.batch,), generator=gen
    )
    tgt_lens = torch.randint(
        args.steps // 2, args.steps + 1, (args.batch,), generator=gen
    )
    return [
        t.to(device)
        for t in (src, tgt[:, :-1], tgt[:, 1:], src_lens, tgt_lens)
    ]


def bench_training(
    args: argparse.Namespace, device: torch.device
) -> dict[str, float]:
    """Target tokens per second of forward + loss + backward, for the peer and our two paths."""
    seed_everything(0)
    sizes = (args.dim, args.ffn, args.heads, args.blocks, args.dropout)
    theirs = TorchTransformer(args.vocab, args.vocab, *sizes).to(device)
    ours = Transformer(args.vocab, args.vocab, *sizes, use_bias=True).to(
        device
    )
    copy_from_torch(ours, theirs)
    src, dec_in, labels, src_lens, tgt_lens = make_batch(args, device)

    # Dropout off for the agreement check; autograd stays on, which keeps torch off its inference
    # fast path (nested tensors), i.e. on the code path that is timed below.
    theirs.eval(), ours.eval()
    reference = theirs(src, dec_in, src_lens, tgt_lens)
    for need_weights in (False, True):
        got = ours(
            src,
            dec_in,
            src_lens,
            tgt_valid_lens=tgt_lens,
            need_weights=need_weights,
        )
        error = (got - reference).abs().max().item()
        if error > 1e-3:
            raise AssertionError(
                f"ours (need_weights={need_weights}) differs from torch by {error:.2e}"
            )

    theirs.train(), ours.train()
    autocast = torch.autocast(
        device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"
    )

    def step(model_call: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            with autocast:
                Y_hat = model_call()
                loss = F.cross_entropy(
                    Y_hat.reshape(-1, Y_hat.shape[-1]).float(),
                    labels.reshape(-1),
                )
            loss.backward()

        return run

    paths = {
        "torch nn.Transformer": step(
            lambda: theirs(src, dec_in, src_lens, tgt_lens)
        ),
        "ours fused": step(
            lambda: ours(
                src,
                dec_in,
                src_lens,
                tgt_valid_lens=tgt_lens,
                need_weights=False,
            )
        ),
        "ours explicit": step(
            lambda: ours(src, dec_in, src_lens, tgt_valid_lens=tgt_lens)
        ),
    }
    tokens = dec_in.numel()
    seconds = interleaved_medians(paths, device, args.warmup, args.repeats)
    return {name: tokens / time for name, time in seconds.items()}


@torch.no_grad()
def greedy(
    model: Transformer,
    src: torch.Tensor,
    src_lens: torch.Tensor,
    num_steps: int,
    use_cache: bool,
) -> torch.Tensor:
    """Greedy decoding for exactly num_steps tokens (no stop at <eos>); id 0 stands for <bos>."""
    enc_outputs = model.encoder(src, src_lens)
    state = model.decoder.init_state(enc_outputs, src_lens)
    prefix = torch.zeros(
        src.shape[0], 1, dtype=torch.long, device=src.device
    )  # (B, 1 + s)
    for _ in range(num_steps):
        if use_cache:
            Y, state = model.decoder(prefix[:, -1:], state)
        else:
            Y, _ = model.decoder(
                prefix, model.decoder.init_state(enc_outputs, src_lens)
            )
        prefix = torch.cat(
            [prefix, Y[:, -1].argmax(dim=-1, keepdim=True)], dim=1
        )
    return prefix[:, 1:]


def bench_decoding(
    args: argparse.Namespace, device: torch.device
) -> dict[int, dict[str, float]]:
    """Seconds per greedy decode of each length, cached and uncached (fused attention in both)."""
    seed_everything(0)
    model = Transformer(
        args.vocab,
        args.vocab,
        args.dim,
        args.ffn,
        args.heads,
        args.blocks,
        0.0,
        use_bias=True,
    )
    model = model.to(device).eval()
    src, _, _, src_lens, _ = make_batch(args, device)
    src, src_lens = src[: args.decode_batch], src_lens[: args.decode_batch]
    results = {}
    for num_steps in args.decode_lengths:
        # This check is also the warm-up.
        cached = greedy(model, src, src_lens, num_steps, use_cache=True)
        if not torch.equal(
            cached, greedy(model, src, src_lens, num_steps, use_cache=False)
        ):
            raise AssertionError(
                f"cached and uncached greedy decoding disagree at {num_steps} steps"
            )
        results[num_steps] = {
            name: median_seconds(
                lambda c=use_cache, n=num_steps: greedy(
                    model, src, src_lens, n, c
                ),
                args.decode_repeats,
                device,
                warmup=0,
            )
            for name, use_cache in (("cached", True), ("uncached", False))
        }
    return results


def main() -> None:
    sizes = {"vocab": 1000, "dim": 256, "ffn": 1024, "heads": 4, "blocks": 2}
    decoding = {"decode-batch": 8, "decode-repeats": 3}
    options = parser(
        __doc__,
        warmup=2,
        repeats=7,
        sizes={"batch": 32, "steps": 32, **sizes, **decoding},
    )
    options.add_argument("--dropout", type=number_in(0, 0.99), default=0.1)
    options.add_argument(
        "--decode-lengths",
        type=at_least(1),
        nargs="+",
        default=[16, 32, 64, 128],
    )
    args = options.parse_args()
    device = device_of(args)

    cuda_note = ", bf16 autocast" if device.type == "cuda" else ""
    print(describe_device(device) + cuda_note)
    print(
        f"B={args.batch}, T={args.steps}, V={args.vocab}, D={args.dim}, FFN={args.ffn}, H={args.heads}, "
        f"blocks={args.blocks}, dropout={args.dropout}; median of {args.repeats} after {args.warmup} warm-up"
    )

    throughput = bench_training(args, device)
    peer = throughput["torch nn.Transformer"]
    print("\ntraining step (forward + loss + backward), target tokens/s")
    for name, rate in throughput.items():
        print(f"  {name:22s} {rate:10.0f} tok/s  ({rate / peer:.3f}x)")
    ratio = throughput["ours fused"] / peer
    print(
        f"  ours fused / torch = {ratio:.3f}  ({'meets' if ratio >= TARGET else 'MISSES'} the {TARGET}x target)"
    )

    print(
        f"\ngreedy decoding, B={args.decode_batch}, source T={args.steps}; seconds per decode"
    )
    print(
        f"  {'steps':>5}  {'cached':>9}  {'uncached':>9}  {'uncached/cached':>15}"
    )
    for num_steps, row in bench_decoding(args, device).items():
        print(
            f"  {num_steps:>5}  {row['cached']:9.3f}  {row['uncached']:9.3f}  {row['uncached'] / row['cached']:15.2f}x"
        )


if __name__ == "__main__":
    main()
