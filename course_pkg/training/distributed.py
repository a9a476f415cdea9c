"""Train a course model on several processes: ``torchrun ... -m course_pkg.training.distributed``.

``torchrun --nproc_per_node=2 -m course_pkg.training.distributed --model transformer --epochs 1`` starts
two ranks; each runs :func:`main`, which joins the process group, wraps the model in
``DistributedDataParallel`` (or sums the gradients by hand, ``--sync hand``), trains on its
shard of every global batch with the pieces of :mod:`course_pkg.training.data_parallel`, and rank 0
prints the loss, the tokens per second and the world size.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import translation_dataloaders
from course_pkg.device import seed_everything
from course_pkg.models.seq2seq import SETTINGS, seq2seq_model
from course_pkg.models.transformer import Transformer
from course_pkg.training.data_parallel import (
    RankInfo,
    broadcast_parameters,
    process_group,
    sharded_loader,
    train_step,
)


def build_model(
    name: str, src_vocab_size: int, tgt_vocab_size: int
) -> nn.Module:
    """A course model on the CPU: ``"transformer"`` (the chapter's sizes), ``"gru"`` or ``"bahdanau"``.

    Raises:
        ValueError: if name is none of the three.
    """
    if name == "transformer":
        # The chapter's sizes; in training mode it takes the fused path.
        return Transformer.from_settings(src_vocab_size, tgt_vocab_size)
    if name in ("gru", "bahdanau"):
        return seq2seq_model(
            name == "bahdanau", src_vocab_size, tgt_vocab_size
        )
    raise ValueError(
        f"name must be 'transformer', 'gru' or 'bahdanau', got {name!r}"
    )


def train_data_parallel(
    args: argparse.Namespace, info: RankInfo | None = None, sync: str = "ddp"
) -> dict:
    """Train ``args.model`` on this rank's shards (every rank runs this); flags as in :func:`main`.

    Args:
        args: from :func:`parse_args`.
        info: from :func:`~course_pkg.training.data_parallel.setup_process_group`, or None for
            one process without a process group (on the CPU, the reference the others
            must match).
        sync: ``"ddp"`` (DistributedDataParallel) or ``"hand"``
            (:func:`~course_pkg.training.data_parallel.all_reduce_gradients`); ignored when info
            is None.
    Returns:
        dict with ``step_loss`` (list, global-batch losses), ``tokens_per_s`` (non-pad target
        tokens of all ranks per second), ``seconds`` and the trained ``model`` (not wrapped).
    Raises:
        ValueError: if sync is neither "ddp" nor "hand".
    """
    if sync not in ("ddp", "hand"):
        raise ValueError(f"sync must be 'ddp' or 'hand', got {sync!r}")
    rank, world_size = (0, 1) if info is None else (info.rank, info.world_size)
    device = torch.device("cpu") if info is None else info.device
    splits = english_french_corpus(seed=0, num_pairs=args.num_pairs)
    data = translation_dataloaders(splits, args.batch_size, SETTINGS.num_steps)
    pad = data.tgt_vocab.pad
    seed_everything(args.seed)
    dtype = getattr(torch, args.dtype)
    model = build_model(
        args.model, len(data.src_vocab), len(data.tgt_vocab)
    ).to(device, dtype)
    replica = model
    if info is not None and sync == "ddp":
        # DDP broadcasts rank 0's parameters when it wraps the model.
        replica = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    elif info is not None:
        broadcast_parameters(model)
    loader = sharded_loader(
        data.train.dataset, args.batch_size, rank, world_size, args.seed
    )
    optimizer_class = (
        torch.optim.Adam if args.optimizer == "adam" else torch.optim.SGD
    )
    optimizer = optimizer_class(model.parameters(), lr=args.lr)
    step_loss, num_tokens = (
        [],
        torch.zeros((), dtype=torch.long, device=device),
    )
    replica.train()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for step, batch in enumerate(loader):
            if args.max_steps is not None and step >= args.max_steps:
                break
            batch = tuple(tensor.to(device) for tensor in batch)
            step_loss.append(
                train_step(
                    replica,
                    [batch],
                    optimizer,
                    pad,
                    grad_clip=args.grad_clip,
                    all_reduce_by_hand=info is not None and sync == "hand",
                )
            )
            num_tokens += (batch[3] != pad).sum()
    if info is not None:
        dist.all_reduce(num_tokens)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    return {
        "step_loss": step_loss,
        "tokens_per_s": int(num_tokens) / seconds,
        "seconds": seconds,
        "model": model,
    }


FLAGS: dict[str, dict] = {
    "--model": dict(
        choices=("transformer", "gru", "bahdanau"), default="transformer"
    ),
    "--epochs": dict(type=int, default=1),
    "--max-steps": dict(
        type=int, help="stop each epoch after this many steps"
    ),
    "--batch-size": dict(
        type=int, default=SETTINGS.batch_size, help="global batch size G"
    ),
    "--optimizer": dict(choices=("adam", "sgd"), default="adam"),
    "--dtype": dict(
        choices=("float32", "float64"),
        default="float32",
        help="of the parameters (float64: to check the equality of runs beyond rounding)",
    ),
    "--lr": dict(type=float, default=0.01),
    "--grad-clip": dict(type=float, default=SETTINGS.grad_clip),
    "--sync": dict(
        choices=("ddp", "hand"),
        nargs="+",
        default=["ddp"],
        help="DistributedDataParallel and/or the hand-written all-reduce, trained in turn",
    ),
    "--device": dict(
        choices=("cpu", "cuda"),
        help="default: CUDA if there is a GPU per rank, else the CPU",
    ),
    "--num-pairs": dict(
        type=int, default=8000, help="size of the generated corpus"
    ),
    "--seed": dict(type=int, default=0),
    "--threads": dict(type=int, default=1, help="CPU threads per process"),
    "--save": dict(
        help="rank 0 saves {sync: {'model': state_dict, 'step_loss': [...], "
        "'tokens_per_s': float}} to this file"
    ),
}
"""The flags of :func:`main`: each flag's name and its ``argparse`` keywords."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command-line flags of :func:`main` (``--help`` lists them; see :data:`FLAGS`)."""
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc_per_node=P -m course_pkg.training.distributed",
        description="Data-parallel training of a course model.",
    )
    for flag, keywords in FLAGS.items():
        parser.add_argument(flag, **keywords)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Train with one process per rank (run it under torchrun); rank 0 prints and saves."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with process_group(args.device) as info:
        trained = {}
        for sync in args.sync:
            result = train_data_parallel(args, info, sync)
            trained[sync] = {
                "model": {
                    name: t.cpu()
                    for name, t in result["model"].state_dict().items()
                },
                "step_loss": result["step_loss"],
                "tokens_per_s": result["tokens_per_s"],
            }
            if info.rank == 0:
                losses = result["step_loss"]
                print(
                    f"world size {info.world_size} ({info.backend}, {sync}), {args.model}: "
                    f"{len(losses)} steps of {args.batch_size} pairs, loss {losses[0]:.3f} -> "
                    f"{losses[-1]:.3f}, {result['tokens_per_s']:,.0f} tokens/s",
                    flush=True,
                )
        if info.rank == 0 and args.save:
            torch.save(trained, args.save)


if __name__ == "__main__":
    main()
