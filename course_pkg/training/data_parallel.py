"""Data parallelism by hand (chapter "Training on several processes"): the group, the shards, the sum.

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

The command-line entry point that trains a course model with these pieces is
:mod:`course_pkg.training.distributed`.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from course_pkg.checks import (
    check_grad_clip,
    check_int,
    check_seed,
    check_sizes,
)
from course_pkg.training.loop import masked_cross_entropy

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


def _rendezvous() -> tuple[int, int, int]:
    """RANK, WORLD_SIZE and LOCAL_RANK from the variables torchrun sets.

    Raises:
        ValueError: if a variable of ``RENDEZVOUS_VARIABLES`` is missing or not an integer where
            one is needed, or RANK is not in [0, WORLD_SIZE).
    """
    missing = [name for name in RENDEZVOUS_VARIABLES if name not in os.environ]
    if missing:
        raise ValueError(
            f"missing rendezvous variable(s) {', '.join(missing)}: launch with torchrun "
            "(e.g. torchrun --nproc_per_node=2 -m course_pkg.training.distributed) or set "
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
    return rank, world_size, local_rank


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
        ValueError: on rendezvous variables that are missing or wrong (``_rendezvous``), an
            unknown device_type, or CUDA asked for with fewer GPUs than ranks on this machine.
        RuntimeError: if this process is already in a process group.
    """
    rank, world_size, local_rank = _rendezvous()
    device_type = _check_setup_process_group(device_type, world_size)
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


def _check_setup_process_group(device_type: object, world_size: int) -> str:
    """device_type None, "cpu" or "cuda" (None: "cuda" when there is a GPU per
    local rank); "cuda" only with one GPU per local rank; no group yet.
    Returns the device type, "cpu" or "cuda"."""
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
    return device_type


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
    _check_sharded_loader(global_batch_size, rank, world_size, seed)
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


def _check_sharded_loader(
    global_batch_size: object, rank: object, world_size: object, seed: object
) -> None:
    """global_batch_size (G), world_size (p) ints >= 1 with p dividing G;
    rank an int in [0, p); seed an int."""
    check_sizes(global_batch_size=global_batch_size, world_size=world_size)
    check_int("rank", rank)
    check_seed("seed", seed)
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


def _check_step(
    model: nn.Module,
    micro_batches: Sequence[Batch],
    pad: int,
    grad_clip: float | None,
    all_reduce_by_hand: bool,
) -> tuple[bool, bool]:
    """Validate :func:`train_step`'s arguments; return (model is DDP, a process group is up)."""
    is_ddp = isinstance(model, DistributedDataParallel)
    distributed = dist.is_available() and dist.is_initialized()
    _check_micro_batches(
        micro_batches, all_reduce_by_hand, is_ddp, distributed, pad, grad_clip
    )
    return is_ddp, distributed


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

    The loss is the token mean of the *global* batch (all ranks' micro-batches): each micro-batch's
    mean is weighted by its share of the global token count, as one process on the whole batch.

    Args:
        model: the replica (plain or DDP-wrapped); ``model(src, tgt_in, src_valid_len)`` -> (B, T, V).
        micro_batches: one or more ``(src (B, T), src_valid_len (B,), tgt_in (B, T),
            tgt_out (B, T))`` on the model's device; several = gradient accumulation.
        optimizer: over the model's parameters. pad: the padding id. grad_clip: maximum
            global norm of the summed gradient, or None. all_reduce_by_hand: sum gradients
            with :func:`all_reduce_gradients` (plain model only).
    Returns:
        The global batch's loss, the same float on every rank (0.0 if all padding).
    Raises:
        TypeError, ValueError: on no micro-batch, a pad or grad_clip of the
            wrong type or value, or all_reduce_by_hand with DDP or no group.
    """
    is_ddp, distributed = _check_step(
        model, micro_batches, pad, grad_clip, all_reduce_by_hand
    )
    token_counts = [(tgt_out != pad).sum() for *_, tgt_out in micro_batches]
    global_tokens = torch.stack(token_counts).sum()
    if distributed:
        dist.all_reduce(global_tokens)
    global_tokens = global_tokens.clamp(min=1)  # all padding: loss 0, not 0/0
    # DDP divides the summed gradients by the world size; the token shares already sum to 1.
    scale = dist.get_world_size() if is_ddp else 1
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for i, (src, src_valid_len, tgt_in, tgt_out) in enumerate(micro_batches):
        # With DDP, gradients are all-reduced only on the last micro-batch's backward.
        defer = is_ddp and i < len(micro_batches) - 1
        with model.no_sync() if defer else contextlib.nullcontext():
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


def _check_micro_batches(
    micro_batches: Any,
    all_reduce_by_hand: bool,
    is_ddp: bool,
    distributed: bool,
    pad: Any = 0,
    grad_clip: Any = None,
) -> None:
    """A data-parallel step's input: at least one micro-batch, an int pad id,
    a valid grad_clip, and gradients summed by hand only for a plain (not
    DDP) model in a process group.

    Raises:
        TypeError: if pad is not an int, or grad_clip not a number or None.
        ValueError: if micro_batches is empty, grad_clip is not positive, or
            all_reduce_by_hand is asked for a DDP model or without a process
            group.
    """
    if len(micro_batches) == 0:
        raise ValueError("micro_batches must hold at least one batch")
    check_int("pad", pad)
    check_grad_clip(grad_clip)
    if all_reduce_by_hand and (is_ddp or not distributed):
        raise ValueError(
            "all_reduce_by_hand=True needs a plain (not DDP) model and a process group"
        )
