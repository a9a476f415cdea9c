"""Training an encoder–decoder: masked loss, loop, checkpoints, settings.

Chapters "The encoder–decoder architecture" and "Bahdanau attention" (and "The
Transformer", whose decoder follows the same contract). Teacher forcing: the
decoder reads the reference target shifted right (``tgt_in``, starting with
<bos>) and is scored on predicting it (``tgt_out``, ending with <eos>).

The loss averages over real target tokens only. Padding positions carry no
information, so they must neither add to the loss nor dilute it (d2l's book
masks them, but its packaged ``Seq2Seq`` loss does not; this one does, and a
test holds it to that).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# The text bar: tqdm.auto warns in notebooks that lack ipywidgets.
from tqdm import tqdm

from course_pkg.seq2seq import (
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)

# ------------------------------------------------------ the chapters' settings


@dataclass(frozen=True)
class Seq2SeqSettings:
    """Hyperparameters of the two GRU chapters and ``bench/seq2seq.py``.

    One place, so that the chapters and the benchmark cannot drift apart.

    Both models (plain and Bahdanau) get the same sizes and the same training
    budget, so the chapter "Bahdanau attention" compares architectures, not
    budgets.
    """

    embed_size: int = 64
    num_hiddens: int = 128
    num_layers: int = 1
    dropout: float = 0.1
    batch_size: int = 64
    # num_steps covers all but two of the 6,400 training targets (+ <eos>).
    num_steps: int = 18
    lr: float = 0.01
    # What a 2-core CPU trains in about 10 s (plain) and 25 s (attention).
    num_epochs: int = 3
    grad_clip: float = 1.0
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


SETTINGS = Seq2SeqSettings()


def seq2seq_model(
    attention: bool,
    src_vocab_size: int,
    tgt_vocab_size: int,
    settings: Seq2SeqSettings = SETTINGS,
) -> EncoderDecoder:
    """The chapters' GRU encoder–decoder, plain or with Bahdanau attention.

    Args:
        attention: use :class:`Seq2SeqAttentionDecoder` (else
            :class:`Seq2SeqDecoder`).
        src_vocab_size, tgt_vocab_size: V of each language. settings: sizes and
            dropout.
    Returns:
        A freshly initialised ``EncoderDecoder`` on the CPU (seed torch first
        for repeatable weights).
    """
    sizes = (
        settings.embed_size,
        settings.num_hiddens,
        settings.num_layers,
        settings.dropout,
    )
    decoder_class = Seq2SeqAttentionDecoder if attention else Seq2SeqDecoder
    return EncoderDecoder(
        Seq2SeqEncoder(src_vocab_size, *sizes),
        decoder_class(tgt_vocab_size, *sizes),
    )


# -------------------------------------------------------------------- the loss


def masked_cross_entropy(
    Y_hat: torch.Tensor, Y: torch.Tensor, pad: int
) -> torch.Tensor:
    """Mean cross-entropy over the target positions that are not padding.

    Equals ``F.cross_entropy(Y_hat.transpose(1, 2), Y, ignore_index=pad)``;
    written out so the chapter can show where the mask enters. Scores at
    padding positions do not affect the value or the gradient (as long as they
    are finite).

    Args:
        Y_hat: (B, T, V) unnormalised scores. Y: (B, T) target ids. pad: the
            padding id.
    Returns:
        Scalar tensor: the sum of -log p(y) over non-pad positions divided by
        their number (0 if none).
    Raises:
        TypeError/ValueError: if Y is not integer, or the shapes are not
            (B, T, V) and (B, T).
    """
    if not isinstance(Y_hat, torch.Tensor) or Y_hat.dim() != 3:
        raise ValueError(
            f"Y_hat must be a tensor of shape (B, T, V), got {getattr(Y_hat, 'shape', type(Y_hat))}"
        )
    if (
        not isinstance(Y, torch.Tensor)
        or Y.dtype.is_floating_point
        or Y.dtype.is_complex
        or Y.dtype == torch.bool
    ):
        raise TypeError(
            f"Y must be an integer tensor of target ids, got {getattr(Y, 'dtype', type(Y))}"
        )
    if tuple(Y.shape) != tuple(Y_hat.shape[:2]):
        raise ValueError(
            f"Y must have shape (B, T)={tuple(Y_hat.shape[:2])} to match Y_hat, got {tuple(Y.shape)}"
        )
    # at least float32, also under bf16 autocast
    dtype = torch.promote_types(Y_hat.dtype, torch.float32)
    log_probs = F.log_softmax(Y_hat.to(dtype), dim=-1)
    nll = -log_probs.gather(-1, Y.long().unsqueeze(-1)).squeeze(-1)  # (B, T)
    mask = Y != pad  # (B, T)
    # where (not a product) so an inf at a pad position cannot turn the sum
    # into NaN
    total = torch.where(mask, nll, torch.zeros_like(nll)).sum()
    return total / mask.sum().clamp(min=1)


# -------------------------------------------------------------------- the loop


def _model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def train_seq2seq(
    model: nn.Module,
    train_iter: Iterable,
    lr: float,
    num_epochs: int,
    tgt_vocab_or_pad: Any,
    device: torch.device | str | None = None,
    grad_clip: float | None = 1.0,
    bf16: bool = False,
    progress: bool | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict[str, Any]:
    """Train an encoder–decoder: teacher forcing, Adam, gradient clipping.

    Args:
        model: an ``EncoderDecoder``; ``model(src, tgt_in, src_valid_len)``
            must return (B, T, V).
        train_iter: re-iterable over batches ``(src (B, T), src_valid_len (B,),
            tgt_in (B, T), tgt_out (B, T))``.
        lr: Adam's learning rate. num_epochs: passes over train_iter.
        tgt_vocab_or_pad: the target vocabulary (its ``.pad`` is used) or the
            pad id itself.
        device: where to train; the model and every batch are moved there.
            None: the model's device.
        grad_clip: maximum global gradient norm, or None for no clipping.
        bf16: run forward passes under bfloat16 autocast. CUDA only: a CPU bf16
            autocast is slow on most CPUs and would change the chapters' stored
            numbers, so it is refused rather than ignored.
        progress: show a tqdm bar over epochs; None shows it only when stderr
            is a terminal.
        optimizer: an optimizer over model's parameters to continue with (e.g.
            restored by :func:`load_checkpoint`); None makes a fresh
            ``Adam(lr=lr)``.
    Returns:
        dict with ``epoch_loss`` (list, token-weighted mean loss per epoch),
        ``step_loss`` (list, one per batch), ``train_seconds``,
        ``tokens_per_s`` (non-pad target tokens per second) and ``num_tokens``.
        The model is left in eval mode.
    Raises:
        ValueError: if num_epochs < 0, lr <= 0, or bf16 is asked for off CUDA.
    """
    if num_epochs < 0:
        raise ValueError(f"num_epochs must be >= 0, got {num_epochs}")
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    pad = getattr(tgt_vocab_or_pad, "pad", tgt_vocab_or_pad)
    device = _model_device(model) if device is None else torch.device(device)
    if bf16 and device.type != "cuda":
        raise ValueError(f"bf16=True needs a CUDA device, got {device}")
    model.to(device)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    show = sys.stderr.isatty() if progress is None else progress
    epoch_loss: list[float] = []
    step_loss: list[float] = []
    num_tokens = 0
    model.train()
    start = time.perf_counter()
    for _ in tqdm(range(num_epochs), desc="epochs", disable=not show):
        loss_sum, epoch_tokens = 0.0, 0
        for batch in train_iter:
            src, src_valid_len, tgt_in, tgt_out = (t.to(device) for t in batch)
            with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
                Y_hat = model(src, tgt_in, src_valid_len)
            loss = masked_cross_entropy(Y_hat, tgt_out, pad)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            batch_tokens = int((tgt_out != pad).sum())
            step_loss.append(loss.item())
            loss_sum += step_loss[-1] * batch_tokens
            epoch_tokens += batch_tokens
        num_tokens += epoch_tokens
        epoch_loss.append(loss_sum / max(epoch_tokens, 1))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    model.eval()
    return {
        "epoch_loss": epoch_loss,
        "step_loss": step_loss,
        "train_seconds": seconds,
        "tokens_per_s": num_tokens / seconds if seconds > 0 else float("nan"),
        "num_tokens": num_tokens,
    }


# ----------------------------------------------------------------- checkpoints


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    **extra: Any,
) -> None:
    """Write model and optimizer state and ``extra`` to ``path``, atomically.

    The file is written next to ``path`` under a temporary name and then
    renamed, so a crash never leaves a half-written checkpoint where a good one
    was.

    Args:
        path: destination file. model: its ``state_dict`` is saved. optimizer:
            saved too if given.
        extra: plain data to store with it (numbers, strings, lists, dicts,
            tensors), e.g. settings.
    """
    path = Path(path)
    payload = {
        "model": model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "extra": extra,
    }
    fd, tmp_name = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    map_location: torch.device | str | None = None,
) -> dict[str, Any]:
    """Load a :func:`save_checkpoint` file into ``model`` (and ``optimizer``).

    Loads with ``weights_only=True``: a checkpoint cannot run code.

    Args:
        path: the file. model: receives the saved state (strictly: every key
            must match).
        optimizer: receives the saved optimizer state if given. map_location:
            as in ``torch.load``.
    Returns:
        The ``extra`` dict given to :func:`save_checkpoint`.
    Raises:
        ValueError: if an optimizer is given but the checkpoint holds none.
    """
    payload = torch.load(path, map_location=map_location, weights_only=True)
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        if payload["optimizer"] is None:
            raise ValueError(f"{path} holds no optimizer state")
        optimizer.load_state_dict(payload["optimizer"])
    return payload["extra"]
