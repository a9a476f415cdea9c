"""Data-parallel training with ``torch.distributed`` (chapter "Training on several processes").

Every process (a *rank*) holds a full replica of the model and reads its own shard of each
global batch of G examples, G / p per rank for p ranks. After the backward pass the ranks sum
their gradients with an all-reduce, so every replica takes the same optimizer step and the
replicas stay identical. The pieces, in the order the chapter introduces them:

- :func:`setup_process_group` / :func:`teardown_process_group`: join the group ``torchrun``
  describes in the environment (gloo on the CPU, NCCL on CUDA, one device per rank).
- :func:`sharded_loader`: a ``DistributedSampler`` gives each rank its shard of the course's
  translation batches.
- :func:`all_reduce_gradients`: the gradient sum written by hand; ``DistributedDataParallel``
  does the same in buckets, overlapped with the backward pass.
- :func:`train_step`: one step that is the same computation for 1 process, p processes and
  gradient accumulation: each micro-batch's loss is weighted by its share of the global number
  of target tokens, so the summed gradients are those of the token mean over the global batch.
- :func:`main`: ``torchrun --nproc_per_node=2 -m course_pkg.distributed --model transformer
  --epochs 1`` trains and prints the loss, the tokens per second and the world size.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from course_pkg.corpus import english_french_corpus
from course_pkg.data import translation_dataloaders
from course_pkg.device import seed_everything
from course_pkg.seq2seq import SETTINGS, seq2seq_model
from course_pkg.train import masked_cross_entropy
from course_pkg.transformer import Transformer

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


# What torchrun sets for every rank; MASTER_* say where rank 0 waits for the others.
RENDEZVOUS_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)

# ---------------------------------------------------------------------------------------------
# The process group
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankInfo:
    """Where this process stands in the group: its rank, the world size, its device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str


def _int_variable(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"environment variable {name} must be an integer, got {value!r}"
        ) from None


def setup_process_group(
    device_type: str | None = None, timeout_s: float = 120.0
) -> RankInfo:
    """Join the process group that ``torchrun`` describes in the environment.

    Args:
        device_type: ``"cpu"`` (gloo backend), ``"cuda"`` (NCCL, GPU ``LOCAL_RANK`` for each
            rank) or None: CUDA when this machine has a GPU for every local rank, else the CPU.
        timeout_s: how long a collective waits for the other ranks before failing.
    Returns:
        A :class:`RankInfo`; with CUDA, the current CUDA device is set to the rank's GPU.
    Raises:
        ValueError: if a variable of ``RENDEZVOUS_VARIABLES`` is missing or not an integer where
            one is needed, RANK is not in [0, WORLD_SIZE), device_type is unknown, or CUDA is
            asked for with fewer GPUs than ranks on this machine.
        RuntimeError: if this process is already in a process group.
    """
    missing = [name for name in RENDEZVOUS_VARIABLES if name not in os.environ]
    if missing:
        raise ValueError(
            f"missing rendezvous variable(s) {', '.join(missing)}: launch with torchrun "
            "(e.g. torchrun --nproc_per_node=2 -m course_pkg.distributed) or set "
            f"{', '.join(RENDEZVOUS_VARIABLES)} yourself"
        )
    rank, world_size, local_rank = (
        _int_variable(n) for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    )
    _int_variable("MASTER_PORT")
    if not 0 <= rank < world_size:
        raise ValueError(
            f"RANK must be in [0, WORLD_SIZE={world_size}), got {rank}"
        )
    if device_type not in (None, "cpu", "cuda"):
        raise ValueError(
            f"device_type must be None, 'cpu' or 'cuda', got {device_type!r}"
        )
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    num_gpus = torch.cuda.device_count()
    if device_type is None:
        device_type = "cuda" if num_gpus >= local_world_size else "cpu"
    if device_type == "cuda" and num_gpus < local_world_size:
        raise ValueError(
            f"device_type='cuda' needs one GPU per rank: {local_world_size} ranks on this machine "
            f"but {num_gpus} GPU(s); start fewer processes or use device_type='cpu' (gloo)"
        )
    if dist.is_initialized():
        raise RuntimeError(
            "this process is already in a process group; call teardown_process_group() first"
        )
    if device_type == "cuda":
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return RankInfo(rank, world_size, local_rank, device, backend)


def teardown_process_group() -> None:
    """Leave the process group (after a barrier, so no rank quits while another still sends)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


@contextlib.contextmanager
def process_group(device_type: str | None = None) -> Iterator[RankInfo]:
    """``with process_group() as info:`` runs :func:`setup_process_group`, then tears down.

    After an error the group is destroyed without the barrier: the other ranks may never reach it.
    """
    info = setup_process_group(device_type)
    try:
        yield info
    except BaseException:
        dist.destroy_process_group()
        raise
    teardown_process_group()


def free_port() -> int:
    """A TCP port on the loopback interface that no process listens on now (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Each rank's shard of the data
# ---------------------------------------------------------------------------------------------


def sharded_loader(
    dataset: Dataset,
    global_batch_size: int,
    rank: int,
    world_size: int,
    seed: int = 0,
) -> DataLoader:
    """Batches of this rank's shard: each global batch of G examples split into p of G / p.

    A ``DistributedSampler`` shuffles all indices with ``seed + epoch`` (the same permutation on
    every rank) and gives rank r every p-th one from r on. So step i of rank r reads its part of
    the permutation's slice [i G, (i + 1) G), and the p ranks together read exactly the global
    batch that one process would read with p = 1. Incomplete global batches are dropped. Call
    ``loader.sampler.set_epoch(epoch)`` before each epoch for a new order.

    Args:
        dataset: examples indexed by int, e.g. the ``TensorDataset`` of
            ``translation_dataloaders(...).train.dataset`` ((src, src_valid_len, tgt_in,
            tgt_out) with shapes (T,), (), (T,), (T,)).
        global_batch_size: G, summed over the ranks. rank, world_size: r and p.
        seed: seed of the shuffling.
    Returns:
        A DataLoader of per-rank batches (G / p examples each; for the translation data
        (B, T), (B,), (B, T), (B, T) with B = G / p), on the CPU.
    Raises:
        ValueError: if world_size < 1, rank is not in [0, world_size), or world_size does not
            divide global_batch_size.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"need world_size >= 1 and rank in [0, world_size), got rank={rank}, "
            f"world_size={world_size}"
        )
    if global_batch_size < 1 or global_batch_size % world_size:
        raise ValueError(
            f"the world size ({world_size}) must divide the global batch size, got "
            f"global_batch_size={global_batch_size}; choose a multiple of {world_size}"
        )
    sampler = DistributedSampler(
        dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=seed,
        drop_last=True,
    )
    return DataLoader(
        dataset,
        batch_size=global_batch_size // world_size,
        sampler=sampler,
        drop_last=True,
    )


# ---------------------------------------------------------------------------------------------
# One step: hand-written all-reduce or DDP
# ---------------------------------------------------------------------------------------------


def broadcast_parameters(model: nn.Module, src: int = 0) -> None:
    """Copy rank src's parameters and buffers to every rank, so all replicas start equal."""
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src)


def all_reduce_gradients(model: nn.Module) -> None:
    """Sum every parameter's gradient over the ranks, in place (one all-reduce per tensor).

    A parameter without a gradient contributes zeros, so every rank calls the same collectives.

    Raises:
        RuntimeError: if no process group is initialised.
    """
    if not dist.is_initialized():
        raise RuntimeError(
            "all_reduce_gradients needs a process group: call setup_process_group() first"
        )
    for param in model.parameters():
        if param.requires_grad:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)


def train_step(
    model: nn.Module,
    micro_batches: Sequence[Batch],
    optimizer: torch.optim.Optimizer,
    pad: int,
    *,
    grad_clip: float | None = None,
    all_reduce_by_hand: bool = False,
) -> float:
    """One optimizer step on this rank's micro-batches, as a part of a global batch.

    The loss is the mean cross-entropy over the non-pad target tokens of the *global* batch (all
    micro-batches of all ranks): each micro-batch's token mean is weighted by its share of the
    global token count, so the gradients, summed over micro-batches and ranks, are those of one
    process on the whole global batch. (Averaging each rank's token *mean* instead would weight a
    token by 1 / its shard's token count.)

    Args:
        model: the replica, plain or wrapped in ``DistributedDataParallel``;
            ``model(src, tgt_in, src_valid_len)`` gives (B, T, V) scores.
        micro_batches: one or more ``(src (B, T), src_valid_len (B,), tgt_in (B, T),
            tgt_out (B, T))`` on the model's device; several = gradient accumulation.
        optimizer: over the model's parameters. pad: the padding id.
        grad_clip: maximum global gradient norm, applied to the summed gradient, or None.
        all_reduce_by_hand: sum gradients with :func:`all_reduce_gradients` (plain model only).
    Returns:
        The loss on the global batch (the same float on every rank).
    Raises:
        ValueError: if micro_batches is empty, or all_reduce_by_hand is asked for a DDP model or
            without a process group.
    """
    if len(micro_batches) == 0:
        raise ValueError("micro_batches must hold at least one batch")
    is_ddp = isinstance(model, DistributedDataParallel)
    distributed = dist.is_available() and dist.is_initialized()
    if all_reduce_by_hand and (is_ddp or not distributed):
        raise ValueError(
            "all_reduce_by_hand=True needs a plain (not DDP) model and a process group"
        )
    token_counts = [(tgt_out != pad).sum() for *_, tgt_out in micro_batches]
    global_tokens = torch.stack(token_counts).sum()
    if distributed:
        dist.all_reduce(global_tokens)
    # DDP divides the summed gradients by the world size; the token shares already sum to 1.
    scale = dist.get_world_size() if is_ddp else 1
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for i, (src, src_valid_len, tgt_in, tgt_out) in enumerate(micro_batches):
        # With DDP, gradients are all-reduced only on the last micro-batch's backward.
        last = i == len(micro_batches) - 1
        with (
            model.no_sync()
            if is_ddp and not last
            else contextlib.nullcontext()
        ):
            Y_hat = model(src, tgt_in, src_valid_len)  # (B, T, V)
            loss = masked_cross_entropy(Y_hat, tgt_out, pad)
            # the share in the loss's dtype: a float32 share would limit float64 runs to 1e-8
            loss = loss * (
                token_counts[i].to(loss.dtype) / global_tokens.to(loss.dtype)
            )
            (loss * scale).backward()
        losses.append(loss.detach())
    if all_reduce_by_hand:
        all_reduce_gradients(model)
    if grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    loss_total = torch.stack(losses).sum()
    if distributed:
        dist.all_reduce(loss_total)
    return loss_total.item()


# ---------------------------------------------------------------------------------------------
# The training entry point
# ---------------------------------------------------------------------------------------------


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
        f"model must be 'transformer', 'gru' or 'bahdanau', got {name!r}"
    )


def train_data_parallel(
    args: argparse.Namespace, info: RankInfo | None = None, sync: str = "ddp"
) -> dict:
    """Train ``args.model`` on this rank's shards (every rank runs this); flags as in :func:`main`.

    Args:
        args: from :func:`parse_args`. info: from :func:`setup_process_group`, or None for one
            process without a process group (on the CPU, the reference the others must match).
        sync: ``"ddp"`` (DistributedDataParallel) or ``"hand"`` (:func:`all_reduce_gradients`);
            ignored when info is None.
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command-line flags of :func:`main` (``--help`` lists them)."""
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc_per_node=P -m course_pkg.distributed",
        description="Data-parallel training of a course model.",
    )
    parser.add_argument(
        "--model",
        choices=("transformer", "gru", "bahdanau"),
        default="transformer",
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop each epoch after this many steps",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=SETTINGS.batch_size,
        help="global batch size G",
    )
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="of the parameters (float64: to check the equality of runs beyond rounding)",
    )
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--grad-clip", type=float, default=SETTINGS.grad_clip)
    parser.add_argument(
        "--sync",
        choices=("ddp", "hand"),
        nargs="+",
        default=["ddp"],
        help="DistributedDataParallel and/or the hand-written all-reduce, trained in turn",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=None,
        help="default: CUDA if there is a GPU per rank, else the CPU",
    )
    parser.add_argument(
        "--num-pairs",
        type=int,
        default=8000,
        help="size of the generated corpus",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads per process"
    )
    parser.add_argument(
        "--save",
        default=None,
        help="rank 0 saves {sync: {'model': state_dict, 'step_loss': [...], "
        "'tokens_per_s': float}} to this file",
    )
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
