"""Benchmark: our multi-head attention against torch.nn.MultiheadAttention, measured in one run.

Four ways to compute the same self-attention (B, T, D) -> (B, T, D), on the same inputs and
weights (ours are copied from the torch module, and the outputs are checked to agree first):

- ``torch MHA``   ``nn.MultiheadAttention(D, H, batch_first=True)``, ``need_weights=False``: the peer.
- ``ours fused``  ``MultiHeadAttention(D, H, bias=True)``, ``need_weights=False``
                  (``F.scaled_dot_product_attention`` inside). Target: <= 1.05x the peer.
- ``ours explicit`` the teaching path, ``need_weights=True``: builds and keeps the (B, H, T, T) weights.
- ``bare SDPA``   ``F.scaled_dot_product_attention`` alone on pre-projected (B, H, T, D/H) tensors:
                  the attention core without any projection, a floor for the two fused paths.

"forward" runs in eval mode under ``torch.no_grad()`` (inference); "fwd+bwd" runs in train mode
(dropout is 0) and back-propagates the sum of the output. Each time is the median of several runs
after warm-up. On CUDA the peak memory of one fwd+bwd is printed as T grows.

Usage:
    python bench/attention.py                 # B=8, D=768, H=12, T in 128 256 512 1024
    python bench/attention.py --quick         # small CPU run, one thread (seconds)
    python bench/attention.py --device cuda --repeats 20
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.device import describe_device, seed_everything
from course_pkg.nn.attention import MultiHeadAttention, copy_weights_from_torch

from _common import device_of, interleaved_medians, parser, verdict

PEER = "torch MHA"
TARGET = 1.05


def make_paths(
    theirs: nn.MultiheadAttention,
    ours: MultiHeadAttention,
    X: torch.Tensor,
    heads: int,
) -> dict[str, Callable[[], torch.Tensor]]:
    """The four ways to compute the attention of X with itself, as argument-free callables."""
    batch_size, steps, width = X.shape
    # Pre-projected (B, H, T, D/H) tensors for the bare kernel, made once outside the timing.
    with torch.no_grad():
        qkv = F.linear(X, theirs.in_proj_weight, theirs.in_proj_bias)
        q, k, v = (
            t.reshape(batch_size, steps, heads, width // heads)
            .transpose(1, 2)
            .contiguous()
            .requires_grad_(X.requires_grad)
            for t in qkv.chunk(3, dim=-1)
        )
    return {
        PEER: lambda: theirs(X, X, X, need_weights=False)[0],
        "ours fused": lambda: ours(X, X, X, need_weights=False),
        "ours explicit": lambda: ours(X, X, X, need_weights=True),
        "bare SDPA": lambda: F.scaled_dot_product_attention(q, k, v),
    }


def bench_one(
    steps: int, args: argparse.Namespace, device: torch.device
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Forward and fwd+bwd median times (s), and CUDA peak memory (MiB), of every path at length T."""
    seed_everything(0)
    theirs = nn.MultiheadAttention(args.dim, args.heads, batch_first=True).to(
        device
    )
    ours = MultiHeadAttention(args.dim, args.heads, bias=True).to(device)
    copy_weights_from_torch(ours, theirs)
    X = torch.randn(args.batch, steps, args.dim, device=device)

    memory = {}
    theirs.eval(), ours.eval()
    with torch.no_grad():
        paths = make_paths(theirs, ours, X, args.heads)
        reference = paths[PEER]()
        for name, fn in paths.items():
            if (
                name != "bare SDPA"
            ):  # the bare kernel has no output projection to compare
                error = (fn() - reference).abs().max().item()
                if error > 1e-4:
                    raise AssertionError(
                        f"{name} differs from {PEER} by {error:.2e} at T={steps}"
                    )
        forward = interleaved_medians(paths, device, args.warmup, args.repeats)

    theirs.train(), ours.train()
    X.requires_grad_(True)
    train_steps = {
        name: (lambda fn=fn: fn().sum().backward())
        for name, fn in make_paths(theirs, ours, X, args.heads).items()
    }
    backward = interleaved_medians(
        train_steps, device, args.warmup, args.repeats
    )
    if device.type == "cuda":
        for name, step in train_steps.items():
            ours.attention_weights = ours.attention.attention_weights = (
                None  # drop weights kept from timing
            )
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            step()
            torch.cuda.synchronize(device)
            memory[name] = (
                torch.cuda.max_memory_allocated(device) - base
            ) / 2**20
    return forward, backward, memory


def print_table(
    title: str,
    lengths: list[int],
    results: dict[int, dict[str, float]],
    unit: str,
    scale: float,
) -> None:
    names = list(next(iter(results.values())))
    print(f"\n{title}")
    print(f"{'T':>6}  " + "  ".join(f"{name:>22}" for name in names))
    for steps in lengths:
        row = results[steps]
        cells = [
            f"{row[name] * scale:9.2f}{unit} ({row[name] / row[PEER]:5.2f}x)"
            for name in names
        ]
        print(f"{steps:>6}  " + "  ".join(f"{cell:>22}" for cell in cells))


def main() -> None:
    options = parser(
        __doc__,
        warmup=2,
        repeats=5,
        sizes={"batch": 8, "dim": 768, "heads": 12},
        lengths=[128, 256, 512, 1024],
    )
    options.add_argument(
        "--quick",
        action="store_true",
        help="small CPU-sized run: B=2, D=256, H=4, T up to 256, one thread",
    )
    args = options.parse_args()
    if args.quick:
        args.batch, args.dim, args.heads, args.lengths, args.repeats = (
            2,
            256,
            4,
            [64, 128, 256],
            15,
        )
        # Small problems on a shared machine: one thread avoids waiting on busy cores.
        args.threads = args.threads or 1
    device = device_of(args)

    print(describe_device(device))
    print(
        f"B={args.batch}, D={args.dim}, H={args.heads}, T={args.lengths}; median of {args.repeats} after {args.warmup} warm-up"
    )
    print(
        f"Each cell: time (ratio to {PEER}, need_weights=False). Target: ours fused <= {TARGET:.2f}x."
    )

    forward, backward, memory = {}, {}, {}
    for steps in args.lengths:
        forward[steps], backward[steps], memory[steps] = bench_one(
            steps, args, device
        )
    print_table("forward (eval, no_grad)", args.lengths, forward, "ms", 1e3)
    print_table(
        "forward + backward (train)", args.lengths, backward, "ms", 1e3
    )
    if device.type == "cuda":
        print_table(
            "peak extra memory of one fwd+bwd",
            args.lengths,
            memory,
            "MiB",
            1.0,
        )

    print(f"\nours fused / {PEER} (target <= {TARGET:.2f}):")
    for label, results in (("forward", forward), ("fwd+bwd", backward)):
        ratios = {
            steps: results[steps]["ours fused"] / results[steps][PEER]
            for steps in args.lengths
        }
        print(
            f"  {label:8s} "
            + "  ".join(
                f"T={steps}: {ratio:.2f}" for steps, ratio in ratios.items()
            )
            + f"  -> {verdict(ratios, TARGET)}"
        )


if __name__ == "__main__":
    main()
