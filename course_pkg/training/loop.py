"""Training an encoder–decoder: masked loss and loop (checkpoints: :mod:`course_pkg.training.checkpoint`).

Chapters "The encoder–decoder architecture", "Bahdanau attention" and "The
Transformer": the loop works for any model that follows the contract of
:mod:`course_pkg.models.encoder_decoder`; each model's settings live beside it. Teacher forcing: the
decoder reads the reference target shifted right (``tgt_in``, starting with
<bos>) and is scored on predicting it (``tgt_out``, ending with <eos>).

The loss averages over real target tokens only. Padding positions carry no
information, so they must neither add to the loss nor dilute it (d2l's book
masks them, but its packaged ``Seq2Seq`` loss does not; this one does, and a
test holds it to that).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# The text bar: tqdm.auto warns in notebooks that lack ipywidgets.
from tqdm import tqdm

from course_pkg.checks import (
    check_device,
    check_finite_number,
    check_float_dtype,
    check_grad_clip,
    check_int,
    check_integer_dtype,
    check_logits,
    check_nonnegative_int,
    check_positive_int,
    check_positive_number,
    check_probability,
    check_range,
    check_rates,
    check_same_device,
    check_tensor,
)
from course_pkg.device import model_device

# -------------------------------------------------------------------- the loss


def masked_cross_entropy(
    Y_hat: torch.Tensor,
    Y: torch.Tensor,
    pad: int,
    *,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Mean cross-entropy over the target positions that are not padding.

    Equals ``F.cross_entropy(Y_hat.transpose(1, 2), Y, ignore_index=pad,
    label_smoothing=label_smoothing)``; written out so the chapter can show
    where the mask enters. Scores at padding positions do not affect the value
    or the gradient (as long as they are finite).

    With label smoothing eps (Szegedy et al., 2016; Vaswani et al., 2017 use
    0.1) the target is (1 - eps) on the reference token plus eps / V on every
    token: per position the loss is
    (1 - eps) * (-log p_y) + eps * mean_v(-log p_v).

    Args:
        Y_hat: (B, T, V) unnormalised scores. Y: (B, T) target ids. pad: the
            padding id. label_smoothing: eps in [0, 1).
    Returns:
        Scalar tensor: the sum of -log p(y) over non-pad positions divided by
        their number (0 if none).
    Raises:
        TypeError: if Y_hat or Y is not a tensor, Y_hat is not floating
            point, Y is not integer, or pad is not an int.
        ValueError: if the shapes are not (B, T, V) and (B, T), V = 0, the
            two are on different devices, or (on the CPU) a non-pad target
            is outside [0, V).
    """
    mask = _check_loss_inputs(Y_hat, Y, pad, label_smoothing)  # (B, T)
    # at least float32, also under bf16 autocast
    dtype = torch.promote_types(Y_hat.dtype, torch.float32)
    log_probs = F.log_softmax(Y_hat.to(dtype), dim=-1)
    # a pad id outside [0, V) (e.g. -100) is gathered as 0, then masked out
    targets = Y.long().masked_fill(~mask, 0).unsqueeze(-1)
    nll = -log_probs.gather(-1, targets).squeeze(-1)  # (B, T)
    if label_smoothing:
        uniform = -log_probs.mean(dim=-1)  # (B, T)
        nll = (1 - label_smoothing) * nll + label_smoothing * uniform
    # where (not a product) so an inf at a pad position cannot turn the sum
    # into NaN
    total = torch.where(mask, nll, torch.zeros_like(nll)).sum()
    return total / mask.sum().clamp(min=1)


def _check_loss_inputs(
    Y_hat: torch.Tensor, Y: torch.Tensor, pad: int, label_smoothing: float
) -> torch.Tensor:
    """Validate :func:`masked_cross_entropy`'s arguments; return the (B, T) mask
    of non-pad targets (their range is checked on the CPU only)."""
    check_logits("Y_hat", Y_hat, 3, "(B, T, V)")
    check_tensor("Y", Y, 2, "(B, T)")
    check_integer_dtype("Y", Y)
    check_same_device(Y_hat=Y_hat, Y=Y)
    check_int("pad", pad)
    check_probability("label_smoothing", label_smoothing)
    if tuple(Y.shape) != tuple(Y_hat.shape[:2]):
        raise ValueError(
            f"Y must have shape (B, T)={tuple(Y_hat.shape[:2])} to match "
            f"Y_hat, got {tuple(Y.shape)}"
        )
    mask = Y != pad  # (B, T)
    if Y.device.type == "cpu":
        check_range(
            "Y (outside pad positions)", Y[mask], 0, Y_hat.shape[-1] - 1
        )
    return mask


# ----------------------------------------------------------- the learning rate


def linear_warmup(step: int, warmup_steps: int) -> float:
    """Factor on the learning rate at one update of a linear warm-up.

    The factor grows by ``1 / warmup_steps`` per update, from
    ``1 / warmup_steps`` at the first update to 1 at update ``warmup_steps``,
    and stays 1 after it (torch's ``LinearLR`` with
    ``start_factor=1 / warmup_steps`` gives the same values).

    Args:
        step: the update's number, counted from 1.
        warmup_steps: W, the update at which the full rate is reached; 0 means
            no warm-up (the factor is always 1).
    Returns:
        ``min(step / W, 1.0)``, or 1.0 when W = 0.
    Raises:
        TypeError: if step or warmup_steps is not an int.
        ValueError: if step < 1 or warmup_steps < 0.
    """
    _check_linear_warmup(step, warmup_steps)
    if warmup_steps == 0:
        return 1.0
    return min(step / warmup_steps, 1.0)


def _check_linear_warmup(step: object, warmup_steps: object) -> None:
    """step an int >= 1; warmup_steps an int >= 0."""
    check_positive_int("step", step)
    check_nonnegative_int("warmup_steps", warmup_steps)


def warmup_inverse_sqrt(
    optimizer: torch.optim.Optimizer, num_hiddens: int, warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning rate of Vaswani et al. (2017, eq. 3), step by step:

    lr(s) = D^-1/2 * min(s^-1/2, s * warmup_steps^-3/2),  s = 1, 2, ...

    a linear warm-up to D^-1/2 * warmup_steps^-1/2 at s = warmup_steps, then a
    decay like 1/sqrt(s). The optimizer's own lr must be 1 (it multiplies).

    Args:
        optimizer: its param groups get the rate. num_hiddens: D.
        warmup_steps: steps of warm-up, >= 1.
    Returns:
        A ``LambdaLR``; call its ``step()`` after every optimizer step (as
        :func:`train_seq2seq` does with ``scheduler=``).
    """
    _check_warmup_inverse_sqrt(num_hiddens, warmup_steps)

    def rate(step: int) -> float:  # LambdaLR counts from 0
        s = step + 1
        return num_hiddens**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def _check_warmup_inverse_sqrt(
    num_hiddens: object, warmup_steps: object
) -> None:
    """num_hiddens (D) and warmup_steps ints >= 1."""
    check_positive_int("num_hiddens", num_hiddens)
    check_positive_int("warmup_steps", warmup_steps)


# -------------------------------------------------------------------- the loop


def optimizer_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    grad_clip: float | None,
) -> float:
    """One update: backward pass, gradient-norm clipping, optimizer step.

    Args:
        model: whose parameters the optimizer updates. loss: a scalar.
        grad_clip: maximum global gradient norm, or None for no clipping.
    Returns:
        The loss as a Python float.
    """
    _check_optimizer_step(loss, grad_clip)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


def _check_optimizer_step(loss: object, grad_clip: object) -> None:
    """loss a () float tensor; grad_clip None or a finite number > 0."""
    check_tensor("loss", loss, 0, "()")
    check_float_dtype("loss", loss)
    check_grad_clip(grad_clip)


def training_record(
    model: nn.Module,
    start: float,
    epoch_loss: list[float],
    step_loss: list[float],
    num_tokens: int | None = None,
) -> dict[str, Any]:
    """End a training run: wait for the device, put the model in eval mode.

    Args:
        start: the ``time.perf_counter()`` of the run's start.
        epoch_loss, step_loss: the losses recorded.
        num_tokens: None, or the (non-pad target) tokens trained on.
    Returns:
        dict with ``epoch_loss``, ``step_loss`` and ``train_seconds``, and
        with num_tokens also ``tokens_per_s`` and ``num_tokens``.
    Raises:
        TypeError, ValueError: if start is not a finite number, or
            num_tokens is neither None nor an int >= 0.
    """
    _check_training_record(start, num_tokens)
    device = model_device(model)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    model.eval()
    record = {
        "epoch_loss": epoch_loss,
        "step_loss": step_loss,
        "train_seconds": seconds,
    }
    if num_tokens is not None:
        record["tokens_per_s"] = (
            num_tokens / seconds if seconds > 0 else float("nan")
        )
        record["num_tokens"] = num_tokens
    return record


def _check_training_record(start: object, num_tokens: object) -> None:
    """start a finite number; num_tokens None or an int >= 0."""
    check_finite_number("start", start)
    if num_tokens is not None:
        check_nonnegative_int("num_tokens", num_tokens)


def _pad_and_device(
    model: nn.Module, tgt_vocab_or_pad: Any, device: Any, bf16: bool
) -> tuple[int, torch.device]:
    """:func:`train_seq2seq`'s pad id and device (None: the model's),
    checked: an int pad, a device that exists, bf16 only on CUDA."""
    pad = getattr(tgt_vocab_or_pad, "pad", tgt_vocab_or_pad)
    check_int("tgt_vocab_or_pad (or its .pad)", pad)
    device = (
        model_device(model)
        if device is None
        else check_device("device", device)
    )
    if bf16 and device.type != "cuda":
        raise ValueError(f"bf16=True needs a CUDA device, got {device}")
    return pad, device


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
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    label_smoothing: float = 0.0,
) -> dict[str, Any]:
    """Train an encoder–decoder: teacher forcing, Adam, gradient clipping.

    Args:
        model: ``model(src, tgt_in, src_valid_len)`` returns (B, T, V).
        train_iter: re-iterable over batches (src (B, T), src_valid_len (B,),
            tgt_in (B, T), tgt_out (B, T)).
        lr: Adam's. num_epochs: passes over train_iter. tgt_vocab_or_pad:
            the target vocabulary (its ``.pad``) or the pad id. device: None:
            the model's. grad_clip: max global gradient norm, or None. bf16:
            bfloat16 autocast, CUDA only. progress: tqdm bar (None: on a tty).
        optimizer: None makes ``Adam(lr=lr)``. scheduler: stepped every batch,
            or None. label_smoothing: eps of :func:`masked_cross_entropy`.
    Returns:
        :func:`training_record`'s dict (``epoch_loss``: token-weighted mean
        per epoch, ``step_loss``, ...); the model is left in eval mode.
    Raises:
        TypeError, ValueError: num_epochs, lr or grad_clip; bf16 off CUDA.
    """
    _check_training(num_epochs, lr, grad_clip)
    pad, device = _pad_and_device(model, tgt_vocab_or_pad, device, bf16)
    model.to(device)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    show = sys.stderr.isatty() if progress is None else progress
    epoch_loss, step_loss, num_tokens = [], [], 0
    model.train()
    start = time.perf_counter()
    for _ in tqdm(range(num_epochs), desc="epochs", disable=not show):
        loss_sum, epoch_tokens = 0.0, 0
        for batch in train_iter:
            src, src_valid_len, tgt_in, tgt_out = (t.to(device) for t in batch)
            with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
                Y_hat = model(src, tgt_in, src_valid_len)
            loss = masked_cross_entropy(
                Y_hat, tgt_out, pad, label_smoothing=label_smoothing
            )
            step_loss.append(optimizer_step(model, optimizer, loss, grad_clip))
            if scheduler is not None:
                scheduler.step()
            batch_tokens = int((tgt_out != pad).sum())
            loss_sum += step_loss[-1] * batch_tokens
            epoch_tokens += batch_tokens
        num_tokens += epoch_tokens
        epoch_loss.append(loss_sum / max(epoch_tokens, 1))
    return training_record(model, start, epoch_loss, step_loss, num_tokens)


def train_seq2seq_by_epoch(
    model: nn.Module,
    train_iter: Iterable,
    lr_per_epoch: Sequence[float],
    tgt_vocab_or_pad: Any,
    device: torch.device | str | None = None,
    grad_clip: float | None = 1.0,
    *,
    label_smoothing: float = 0.0,
) -> dict[str, Any]:
    """:func:`train_seq2seq` with its own learning rate in each epoch: one
    Adam for the whole run, its rate set to ``lr_per_epoch[e]`` before
    epoch e (the schedule of the Transformer chapters).

    Args:
        lr_per_epoch: one rate per epoch; their number is the number of
            epochs. The others as in :func:`train_seq2seq`.
    Returns:
        dict with ``epoch_loss`` (one per epoch), ``step_loss`` and
        ``train_seconds`` (all epochs); the model is left in eval mode.
    Raises:
        TypeError, ValueError: lr_per_epoch not a non-empty list or tuple
            of finite rates > 0; what :func:`train_seq2seq` refuses, before
            the first epoch.
    """
    _check_train_seq2seq_by_epoch(
        model, lr_per_epoch, tgt_vocab_or_pad, device, grad_clip,
        label_smoothing,
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=lr_per_epoch[0])
    record = {"epoch_loss": [], "step_loss": [], "train_seconds": 0.0}
    for lr in lr_per_epoch:
        for group in optimizer.param_groups:
            group["lr"] = lr
        epoch = train_seq2seq(
            model, train_iter, lr, 1, tgt_vocab_or_pad, device, grad_clip,
            optimizer=optimizer, label_smoothing=label_smoothing,
        )  # fmt: skip
        for key in record:
            record[key] += epoch[key]
    return record


def _check_train_seq2seq_by_epoch(
    model: object,
    lr_per_epoch: object,
    tgt_vocab_or_pad: object,
    device: object,
    grad_clip: object,
    label_smoothing: object,
) -> None:
    """The rates, then what :func:`train_seq2seq` checks (model, pad,
    device, grad_clip) and label_smoothing in [0, 1)."""
    check_rates("lr_per_epoch", lr_per_epoch)
    _check_training(1, lr_per_epoch[0], grad_clip)
    _pad_and_device(model, tgt_vocab_or_pad, device, False)
    check_probability("label_smoothing", label_smoothing)


def _check_training(num_epochs: Any, lr: Any, grad_clip: Any = None) -> None:
    """A training loop's num_epochs (an int >= 0), learning rate and
    gradient clip (None, or a finite number > 0).

    Raises:
        TypeError: if num_epochs is not an int, or lr or grad_clip is not a
            number.
        ValueError: if num_epochs < 0, or lr or grad_clip is not finite > 0.
    """
    check_nonnegative_int("num_epochs", num_epochs)
    check_positive_number("lr", lr)
    if grad_clip is not None:
        check_positive_number("grad_clip", grad_clip)
