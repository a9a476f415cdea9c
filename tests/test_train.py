"""Tests for course_pkg.training.loop: the masked loss (vs torch's ignore_index), the warm-up, the loop, checkpoints."""

from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_pkg.models.encoder_decoder import EncoderDecoder
from course_pkg.models.seq2seq import (
    SETTINGS,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)
from course_pkg.training.checkpoint import load_checkpoint, save_checkpoint
from course_pkg.training.loop import (
    linear_warmup,
    masked_cross_entropy,
    train_seq2seq,
    train_seq2seq_by_epoch,
)

PAD, BOS, EOS, V = 0, 1, 2, 9


# ----------------------------------------------------------------------------- warm-up


def test_linear_warmup_values_at_every_step():
    # W = 4: 1/4, 2/4, 3/4, then the full rate from step 4 on.
    assert [linear_warmup(s, 4) for s in range(1, 8)] == [
        0.25,
        0.5,
        0.75,
        1.0,
        1.0,
        1.0,
        1.0,
    ]
    assert [linear_warmup(s, 1) for s in range(1, 4)] == [1.0] * 3
    assert [linear_warmup(s, 0) for s in range(1, 4)] == [1.0] * 3
    # the chapter's warm-up: 48 steps, each 1/48 of the peak more
    factors = [linear_warmup(s, 48) for s in range(1, 129)]
    assert factors[0] == 1 / 48 and factors[46] < 1.0 and factors[47] == 1.0
    steps = torch.diff(torch.tensor(factors[:48], dtype=torch.float64))
    torch.testing.assert_close(
        steps, torch.full((47,), 1 / 48, dtype=torch.float64)
    )
    assert factors[48:] == [1.0] * 80


@pytest.mark.parametrize("warmup_steps", [1, 2, 3, 7, 48])
def test_linear_warmup_equals_torch_linear_lr(warmup_steps):
    # torch's LinearLR, a scheduler nobody here wrote, from 1/W to 1 in W - 1 steps
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LinearLR(
        optimizer,
        start_factor=1 / warmup_steps,
        end_factor=1.0,
        total_iters=max(warmup_steps - 1, 1),
    )
    for step in range(1, 2 * warmup_steps + 3):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(
            linear_warmup(step, warmup_steps), rel=1e-12
        )
        optimizer.step()
        scheduler.step()


@pytest.mark.parametrize(
    "step, warmup_steps, error, words",
    [
        (0, 4, ValueError, "step"),
        (-1, 4, ValueError, "step"),
        (1, -1, ValueError, "warmup_steps"),
        (1.0, 4, TypeError, "step"),
        (1, 4.0, TypeError, "warmup_steps"),
        (True, 4, TypeError, "step"),
        (1, None, TypeError, "warmup_steps"),
    ],
)
def test_linear_warmup_refuses_bad_input(step, warmup_steps, error, words):
    with pytest.raises(error, match=words):
        linear_warmup(step, warmup_steps)


# ----------------------------------------------------------------------------- masked loss


@settings(max_examples=40)
@given(
    shape=st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(2, 7)),
    seed=st.integers(0, 10**6),
)
def test_masked_cross_entropy_equals_torch_ignore_index(shape, seed):
    batch_size, steps, vocab = shape  # B, T, V
    gen = torch.Generator().manual_seed(seed)
    Y_hat = torch.randn(
        batch_size, steps, vocab, generator=gen, dtype=torch.float64
    ).requires_grad_()
    Y = torch.randint(0, vocab, (batch_size, steps), generator=gen)
    Y[0, 0] = 1  # at least one real token (pad = 0 below)
    ours = masked_cross_entropy(Y_hat, Y, pad=0)
    theirs = F.cross_entropy(Y_hat.transpose(1, 2), Y, ignore_index=0)
    # in float64 throughout, value and gradient: float32 would hide a difference below 1e-6
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    (our_grad,) = torch.autograd.grad(ours, Y_hat)
    (their_grad,) = torch.autograd.grad(theirs, Y_hat)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-12, atol=1e-12)


def test_padding_positions_change_nothing():
    torch.manual_seed(0)
    Y_hat = torch.randn(3, 5, V, requires_grad=True)
    Y = torch.tensor(
        [[4, 5, EOS, PAD, PAD], [6, EOS, PAD, PAD, PAD], [3, 4, 5, 6, EOS]]
    )
    loss = masked_cross_entropy(Y_hat, Y, PAD)
    (grad,) = torch.autograd.grad(loss, Y_hat)
    is_pad = (Y == PAD).unsqueeze(-1).expand_as(Y_hat)
    changed = torch.where(
        is_pad, torch.randn_like(Y_hat) * 100, Y_hat.detach()
    ).requires_grad_()
    changed_loss = masked_cross_entropy(changed, Y, PAD)
    (changed_grad,) = torch.autograd.grad(changed_loss, changed)
    assert changed_loss.item() == loss.item()
    assert torch.equal(changed_grad, grad)
    assert torch.all(grad[is_pad] == 0)
    with_inf = torch.where(
        is_pad, torch.full_like(Y_hat, float("inf")), Y_hat.detach()
    )
    assert masked_cross_entropy(with_inf, Y, PAD).item() == loss.item()


def test_mean_is_over_real_tokens_not_all_positions():
    Y_hat = torch.zeros(1, 4, V)  # uniform: every real token costs log V
    Y = torch.tensor([[4, EOS, PAD, PAD]])
    torch.testing.assert_close(
        masked_cross_entropy(Y_hat, Y, PAD), torch.log(torch.tensor(float(V)))
    )


def test_all_padding_gives_zero_not_nan():
    assert (
        float(
            masked_cross_entropy(
                torch.randn(2, 3, V), torch.full((2, 3), PAD), PAD
            )
        )
        == 0.0
    )


def test_masked_cross_entropy_on_device(device):
    Y_hat = torch.randn(2, 3, V, device=device, requires_grad=True)
    loss = masked_cross_entropy(
        Y_hat, torch.zeros(2, 3, dtype=torch.long, device=device), PAD
    )
    loss.backward()
    assert loss.shape == () and Y_hat.grad.device.type == device.type


@pytest.mark.parametrize(
    "Y_hat, Y, error",
    [
        (torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.long), ValueError),
        (
            torch.randn(2, 3, V),
            torch.zeros(2, 4, dtype=torch.long),
            ValueError,
        ),
        (torch.randn(2, 3, V), torch.zeros(2, 3), TypeError),
        (torch.randn(2, 3, V), torch.zeros(2, 3, dtype=torch.bool), TypeError),
    ],
)
def test_masked_cross_entropy_refuses_bad_input(Y_hat, Y, error):
    with pytest.raises(error, match="Y"):
        masked_cross_entropy(Y_hat, Y, PAD)


# ----------------------------------------------------------------------------- the training loop


def copy_task_batches(num_batches=6, batch_size=8, num_steps=6, seed=0):
    """Batches (src, src_valid_len, tgt_in, tgt_out) of a copy task: the target repeats the source."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        lengths = torch.randint(1, num_steps, (batch_size,), generator=gen)
        words = torch.randint(3, V, (batch_size, num_steps), generator=gen)
        src = torch.full((batch_size, num_steps), PAD)
        tgt_in = torch.full((batch_size, num_steps), PAD)
        tgt_out = torch.full((batch_size, num_steps), PAD)
        for b, n in enumerate(lengths.tolist()):
            src[b, :n], src[b, n] = words[b, :n], EOS
            tgt_in[b, 0], tgt_in[b, 1 : n + 1] = BOS, words[b, :n]
            tgt_out[b, :n], tgt_out[b, n] = words[b, :n], EOS
        batches.append((src, lengths + 1, tgt_in, tgt_out))
    return batches


def tiny_model(attention=False, seed=0):
    torch.manual_seed(seed)
    decoder = (Seq2SeqAttentionDecoder if attention else Seq2SeqDecoder)(
        V, 8, 16, 1
    )
    return EncoderDecoder(Seq2SeqEncoder(V, 8, 16, 1), decoder)


@pytest.mark.parametrize("attention", [False, True])
def test_training_lowers_the_loss_and_reports(attention):
    batches = copy_task_batches()
    model = tiny_model(attention)
    history = train_seq2seq(
        model,
        batches,
        lr=0.01,
        num_epochs=4,
        tgt_vocab_or_pad=PAD,
        progress=False,
    )
    assert len(history["epoch_loss"]) == 4 and len(
        history["step_loss"]
    ) == 4 * len(batches)
    assert history["epoch_loss"][-1] < 0.8 * history["epoch_loss"][0]
    real_tokens = sum(int((tgt_out != PAD).sum()) for *_, tgt_out in batches)
    assert history["num_tokens"] == 4 * real_tokens
    assert history["train_seconds"] > 0
    assert history["tokens_per_s"] == pytest.approx(
        history["num_tokens"] / history["train_seconds"]
    )
    assert not model.training


def test_epoch_loss_is_token_weighted_mean_of_step_losses():
    batches = copy_task_batches(num_batches=3)
    history = train_seq2seq(
        tiny_model(),
        batches,
        lr=0.01,
        num_epochs=1,
        tgt_vocab_or_pad=PAD,
        progress=False,
    )
    weights = [int((b[3] != PAD).sum()) for b in batches]
    expected = sum(w * s for w, s in zip(weights, history["step_loss"])) / sum(
        weights
    )
    assert history["epoch_loss"][0] == pytest.approx(expected)


def test_by_epoch_sets_each_epochs_rate_on_one_adam():
    # Written out: one Adam, its rate set before each epoch, one epoch of
    # train_seq2seq at a time (the GPT chapter's loop before it moved here).
    batches, rates = copy_task_batches(num_batches=3), [0.02, 0.01, 0.005]
    expected = tiny_model()
    optimizer = torch.optim.Adam(expected.parameters())
    step_loss = []
    for lr in rates:
        for group in optimizer.param_groups:
            group["lr"] = lr
        step_loss += train_seq2seq(
            expected, batches, lr, 1, PAD, progress=False, optimizer=optimizer
        )["step_loss"]
    model = tiny_model()
    history = train_seq2seq_by_epoch(model, batches, rates, PAD)
    assert history["step_loss"] == step_loss
    assert len(history["epoch_loss"]) == 3 and history["train_seconds"] > 0
    for a, b in zip(
        model.state_dict().values(), expected.state_dict().values()
    ):
        assert torch.equal(a, b)
    # A constant schedule is train_seq2seq with num_epochs epochs.
    constant = tiny_model()
    train_seq2seq(constant, batches, 0.01, 2, PAD, progress=False)
    again = tiny_model()
    train_seq2seq_by_epoch(again, batches, [0.01, 0.01], PAD)
    for a, b in zip(
        again.state_dict().values(), constant.state_dict().values()
    ):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "rates, error",
    [([], ValueError), ((0.01, -1.0), ValueError), (0.01, TypeError),
     ([0.01, float("nan")], ValueError), (["0.01"], TypeError)],
)  # fmt: skip
def test_by_epoch_refuses_bad_rates_before_training(rates, error):
    model = tiny_model()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(error, match="lr_per_epoch"):
        train_seq2seq_by_epoch(model, copy_task_batches(), rates, PAD)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


class _VocabLike:
    pad = PAD


def test_pad_taken_from_vocab_or_int_gives_same_training():
    batches = copy_task_batches(num_batches=2)
    from_int = train_seq2seq(
        tiny_model(), batches, 0.01, 1, PAD, progress=False
    )["step_loss"]
    from_vocab = train_seq2seq(
        tiny_model(), batches, 0.01, 1, _VocabLike(), progress=False
    )["step_loss"]
    assert from_int == from_vocab


def test_clipping_changes_the_update():
    batches = copy_task_batches(num_batches=2)
    clipped, unclipped = tiny_model(), tiny_model()
    train_seq2seq(
        clipped, batches, 0.01, 1, PAD, grad_clip=1e-3, progress=False
    )
    train_seq2seq(
        unclipped, batches, 0.01, 1, PAD, grad_clip=None, progress=False
    )
    differs = [
        not torch.equal(a, b)
        for a, b in zip(clipped.parameters(), unclipped.parameters())
    ]
    assert any(differs)


def test_bf16_refused_off_cuda():
    with pytest.raises(ValueError, match="bf16"):
        train_seq2seq(
            tiny_model(),
            copy_task_batches(1),
            0.01,
            1,
            PAD,
            device="cpu",
            bf16=True,
        )


@pytest.mark.cuda  # bf16 autocast is CUDA-only here
def test_bf16_on_cuda_trains():
    model = tiny_model()
    history = train_seq2seq(
        model,
        copy_task_batches(),
        0.01,
        3,
        PAD,
        device="cuda",
        bf16=True,
        progress=False,
    )
    assert history["epoch_loss"][-1] < history["epoch_loss"][0]
    assert next(model.parameters()).device.type == "cuda"


# Not the meta device: training reads loss values, which meta tensors do not have (the modules'
# meta forward+backward is tested in test_gru_decoders.py).
@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
)
def test_batches_are_moved_to_the_training_device(device):
    device = torch.device(device)
    model = tiny_model()
    history = train_seq2seq(
        model,
        copy_task_batches(2),
        0.01,
        1,
        PAD,
        device=device,
        progress=False,
    )
    assert all(p.device.type == device.type for p in model.parameters())
    assert len(history["step_loss"]) == 2


def test_progress_bar_silent_when_not_interactive(capsys):
    train_seq2seq(
        tiny_model(), copy_task_batches(1), 0.01, 1, PAD
    )  # progress=None, stderr captured: not a tty
    assert capsys.readouterr().err == ""
    train_seq2seq(
        tiny_model(), copy_task_batches(1), 0.01, 1, PAD, progress=True
    )
    assert "epochs" in capsys.readouterr().err


@pytest.mark.parametrize(
    "kwargs, words", [({"num_epochs": -1}, "num_epochs"), ({"lr": 0.0}, "lr")]
)
def test_train_refuses_bad_arguments(kwargs, words):
    arguments = {"lr": 0.01, "num_epochs": 1} | kwargs
    with pytest.raises(ValueError, match=words):
        train_seq2seq(
            tiny_model(),
            copy_task_batches(1),
            tgt_vocab_or_pad=PAD,
            progress=False,
            **arguments,
        )


def test_settings_are_shared_and_frozen():
    assert SETTINGS.as_dict()["num_hiddens"] == SETTINGS.num_hiddens
    with pytest.raises(AttributeError):
        SETTINGS.lr = 1.0


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.usefixtures("float64")
def test_checkpoint_round_trip_and_resume(tmp_path):
    batches = copy_task_batches(num_batches=3)
    straight = tiny_model(attention=True)
    train_seq2seq(straight, batches, 0.01, 2, PAD, progress=False)

    first = tiny_model(attention=True)
    optimizer = torch.optim.Adam(first.parameters(), lr=0.01)
    train_seq2seq(
        first, batches, 0.01, 1, PAD, progress=False, optimizer=optimizer
    )
    path = tmp_path / "model.pt"
    save_checkpoint(path, first, optimizer, epoch=1, settings={"lr": 0.01})

    resumed = tiny_model(attention=True, seed=123)  # different initial weights
    resumed_optimizer = torch.optim.Adam(resumed.parameters(), lr=0.01)
    extra = load_checkpoint(path, resumed, resumed_optimizer)
    assert extra == {"epoch": 1, "settings": {"lr": 0.01}}
    for (name, a), (_, b) in zip(
        first.state_dict().items(), resumed.state_dict().items()
    ):
        assert torch.equal(a, b), name
    src, valid_lens, tgt_in, _ = batches[0]
    assert torch.equal(
        first(src, tgt_in, valid_lens), resumed(src, tgt_in, valid_lens)
    )

    train_seq2seq(
        resumed,
        batches,
        0.01,
        1,
        PAD,
        progress=False,
        optimizer=resumed_optimizer,
    )
    for (name, a), (_, b) in zip(
        straight.state_dict().items(), resumed.state_dict().items()
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "model.pt"
    model = tiny_model()
    save_checkpoint(path, model, step=1)
    before = path.read_bytes()

    def failing_save(obj, handle, *args, **kwargs):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, tiny_model(seed=1), step=2)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [
        "model.pt"
    ]  # no temporary file left behind


def test_load_checkpoint_without_optimizer_state(tmp_path):
    path = tmp_path / "model.pt"
    model = tiny_model()
    save_checkpoint(path, model)
    assert load_checkpoint(path, tiny_model(seed=1)) == {}
    with pytest.raises(ValueError, match="optimizer"):
        load_checkpoint(
            path, tiny_model(), torch.optim.Adam(model.parameters())
        )
