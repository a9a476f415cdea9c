"""Benchmark: data-parallel training of the chapter-7 Transformer on 1 and 2 processes.

For each world size p in (1, 2) the script launches ``torchrun --nproc_per_node=p`` on itself
(gloo on the CPU, one thread per process, loopback only). Every rank trains on its shard of the
same global batches of the course's translation data and reports:

- tokens per second (non-pad target tokens of all ranks) with ``DistributedDataParallel``, the
  peer being the same code on 1 process;
- one step taken apart, with the hand-written all-reduce: milliseconds of forward + backward,
  of the all-reduce one tensor at a time (``all_reduce_gradients``), and of one all-reduce of all
  gradients in a single flat buffer (what DDP's buckets do), each as a share of the step.

With 2 or more GPUs, the same with NCCL (``--device cuda``, or automatically). The printed
ratios are 2 processes against 1, measured in the same run; timings depend on the machine and
on what else runs on it.

Usage:
    python bench/ddp.py                    # CPU, gloo: about a minute on 2 cores
    python bench/ddp.py --steps 50 --batch 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import translation_dataloaders
from course_pkg.device import seed_everything
from course_pkg.models.seq2seq import SETTINGS
from course_pkg.training.data_parallel import (
    all_reduce_gradients,
    free_port,
    process_group,
    sharded_loader,
    train_step,
)
from course_pkg.training.distributed import build_model
from course_pkg.training.loop import masked_cross_entropy

from _common import at_least

ROOT = Path(__file__).resolve().parents[1]


def _timed(device: torch.device, work) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def worker(args: argparse.Namespace) -> None:
    """One rank: time DDP steps, then take hand-written steps apart; rank 0 writes the JSON."""
    torch.set_num_threads(1)
    with process_group(args.device) as info:
        device = info.device
        data = translation_dataloaders(
            english_french_corpus(seed=0, num_pairs=args.num_pairs),
            args.batch,
            SETTINGS.num_steps,
        )
        pad = data.tgt_vocab.pad
        seed_everything(0)
        model = build_model(
            "transformer", len(data.src_vocab), len(data.tgt_vocab)
        ).to(device)
        ddp = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        loader = sharded_loader(
            data.train.dataset, args.batch, info.rank, info.world_size
        )
        batches = [
            tuple(t.to(device) for t in batch)
            for _, batch in zip(range(args.steps), loader)
        ]
        tokens = torch.stack(
            [(batch[3] != pad).sum() for batch in batches]
        ).sum()
        dist.all_reduce(tokens)

        # DDP: warm up, then time the whole run of steps
        for batch in batches[: args.warmup]:
            train_step(ddp, [batch], optimizer, pad, grad_clip=1.0)
        seconds = _timed(
            device,
            lambda: [
                train_step(ddp, [b], optimizer, pad, grad_clip=1.0)
                for b in batches
            ],
        )

        # Hand-written steps taken apart, on a replica of its own (DDP's hooks stay on the first):
        # compute, all-reduce per tensor, one flat all-reduce
        seed_everything(0)
        model = build_model(
            "transformer", len(data.src_vocab), len(data.tgt_vocab)
        ).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        compute, per_tensor, flat = [], [], []
        for i, (src, src_valid_len, tgt_in, tgt_out) in enumerate(batches):
            optimizer.zero_grad(set_to_none=True)

            def forward_backward():
                masked_cross_entropy(
                    model(src, tgt_in, src_valid_len), tgt_out, pad
                ).backward()

            def one_buffer():
                buffer = torch.cat(
                    [p.grad.flatten() for p in model.parameters()]
                )
                dist.all_reduce(buffer)

            dist.barrier()
            compute.append(_timed(device, forward_backward))
            dist.barrier()
            per_tensor.append(
                _timed(device, lambda: all_reduce_gradients(model))
            )
            dist.barrier()
            flat.append(_timed(device, one_buffer))
            optimizer.step()
        if info.rank == 0:
            num_params = sum(p.numel() for p in model.parameters())
            result = {
                "world_size": info.world_size,
                "backend": info.backend,
                "num_params": num_params,
                "num_tensors": len(list(model.parameters())),
                "tokens_per_s": int(tokens) / seconds,
                "step_ms": 1e3 * seconds / len(batches),
                "compute_ms": 1e3 * statistics.median(compute),
                "per_tensor_ms": 1e3 * statistics.median(per_tensor),
                "flat_ms": 1e3 * statistics.median(flat),
            }
            Path(args.json).write_text(json.dumps(result))


def launch(args: argparse.Namespace, world_size: int, device: str) -> dict:
    """Run this script's worker under torchrun on world_size processes; return rank 0's numbers."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result.json")
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={world_size}",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            __file__,
            "--worker",
            "--json",
            out,
            "--device",
            device,
            "--batch",
            str(args.batch),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--num-pairs",
            str(args.num_pairs),
        ]
        path = os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
        )
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads(Path(out).read_text())


def report(results: dict[int, dict]) -> None:
    first = results[1]
    gradient_mb = 4 * first["num_params"] / 1e6
    print(
        f"{first['backend']}: chapter-7 Transformer, {first['num_params']:,} parameters in "
        f"{first['num_tensors']} tensors ({gradient_mb:.2f} MB of float32 gradients)"
    )
    print(
        f"{'processes':>9} {'tokens/s (DDP)':>15} {'step ms':>8} {'fwd+bwd ms':>11} "
        f"{'all-reduce ms: per tensor':>26} {'one buffer':>11}"
    )
    for p, r in results.items():
        step = r["compute_ms"] + r["per_tensor_ms"]
        print(
            f"{p:>9} {r['tokens_per_s']:>15,.0f} {r['step_ms']:>8.1f} {r['compute_ms']:>11.1f} "
            f"{r['per_tensor_ms']:>15.2f} ({r['per_tensor_ms'] / step:4.0%}) "
            f"{r['flat_ms']:>6.2f} ({r['flat_ms'] / (r['compute_ms'] + r['flat_ms']):4.0%})"
        )
    two = results[2]
    print(
        f"2 processes / 1: tokens/s x{two['tokens_per_s'] / first['tokens_per_s']:.2f} "
        f"(ideal x2.00); all-reduce share of a hand-written step: "
        f"{two['per_tensor_ms'] / (two['compute_ms'] + two['per_tensor_ms']):.0%} per tensor, "
        f"{two['flat_ms'] / (two['compute_ms'] + two['flat_ms']):.0%} in one buffer"
    )
    sent = 2 * (2 - 1) / 2 * gradient_mb
    print(
        f"cost model: each rank sends and receives 2(p-1)/p x {gradient_mb:.2f} MB = {sent:.2f} MB "
        f"per step at p = 2; one buffer moved it at {sent / two['flat_ms']:.2f} GB/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch", type=at_least(2), default=64, help="global batch size G"
    )
    parser.add_argument(
        "--steps", type=at_least(1), default=30, help="timed steps"
    )
    parser.add_argument("--warmup", type=at_least(0), default=3)
    parser.add_argument(
        "--num-pairs",
        type=at_least(1),
        default=2000,
        help="corpus size (does not change the speed)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=None,
        help="default: cpu, and cuda too when there are >= 2 GPUs",
    )
    parser.add_argument(
        "--worker", action="store_true", help=argparse.SUPPRESS
    )
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    devices = (
        [args.device]
        if args.device
        else ["cpu"] + (["cuda"] if torch.cuda.device_count() >= 2 else [])
    )
    print(
        f"torch {torch.__version__}; G = {args.batch}, {args.steps} timed steps after {args.warmup}, "
        f"1 thread per process, {os.cpu_count()} CPU cores"
    )
    for device in devices:
        report({p: launch(args, p, device) for p in (1, 2)})


if __name__ == "__main__":
    main()
