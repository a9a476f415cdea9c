"""The paper's recipe items the Part I Transformer can switch on (Vaswani et al., 2017): label
smoothing (against torch's own), the warm-up + inverse-square-root rate (against eq. 3 written
out), shared input/output embeddings, and dropout on the attention weights and the residual
branches. The defaults leave the chapter's model and loss unchanged."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.models.transformer import Transformer, TransformerSettings
from course_pkg.training.loop import (
    masked_cross_entropy,
    train_seq2seq,
    warmup_inverse_sqrt,
)

PAD = 1


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_label_smoothing_equals_torch(eps):
    gen = torch.Generator().manual_seed(0)
    Y_hat = torch.randn(
        3, 5, 7, generator=gen, dtype=torch.float64, requires_grad=True
    )
    Y = torch.randint(0, 7, (3, 5), generator=gen)
    Y[0, 3:] = PAD
    ours = masked_cross_entropy(Y_hat, Y, PAD, label_smoothing=eps)
    theirs = F.cross_entropy(
        Y_hat.transpose(1, 2), Y, ignore_index=PAD, label_smoothing=eps
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    g_ours, g_theirs = (
        torch.autograd.grad(x, Y_hat)[0] for x in (ours, theirs)
    )
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-12, atol=1e-12)


def test_label_smoothing_formula_and_checks():
    """(1 - eps) * NLL + eps * mean over the vocabulary of -log p, on one position."""
    Y_hat = torch.tensor([[[2.0, 0.0, -1.0, 0.5]]], dtype=torch.float64)
    log_p = Y_hat.log_softmax(-1)[0, 0]
    expected = 0.9 * -log_p[0] + 0.1 * -log_p.mean()
    got = masked_cross_entropy(
        Y_hat, torch.tensor([[0]]), PAD, label_smoothing=0.1
    )
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert not torch.isclose(got, -log_p[0])  # smoothing changes the value
    for bad, error in (
        (1.0, ValueError),
        (-0.1, ValueError),
        ("0.1", TypeError),
    ):
        with pytest.raises(error, match="label_smoothing"):
            masked_cross_entropy(
                Y_hat, torch.tensor([[0]]), PAD, label_smoothing=bad
            )


def test_warmup_inverse_sqrt_is_equation_3():
    D, warmup = 32, 10
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = warmup_inverse_sqrt(opt, D, warmup)
    rates = []
    for _ in range(40):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    expected = [D**-0.5 * min(s**-0.5, s * warmup**-1.5) for s in range(1, 41)]
    assert rates == pytest.approx(expected, rel=1e-12)
    peak = max(range(40), key=rates.__getitem__)
    assert peak == warmup - 1  # step s = warmup
    assert all(a < b for a, b in zip(rates[:warmup], rates[1:warmup]))
    assert all(a > b for a, b in zip(rates[warmup - 1 :], rates[warmup:]))
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_inverse_sqrt(opt, D, 0)


def _batches(num=3, B=4, T=5, V=11, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        src = torch.randint(3, V, (B, T), generator=gen)
        tgt = torch.randint(3, V, (B, T + 1), generator=gen)
        out.append((src, torch.full((B,), T), tgt[:, :-1], tgt[:, 1:]))
    return out


def test_train_seq2seq_steps_the_scheduler_and_smooths_the_loss():
    torch.manual_seed(0)
    model = Transformer.from_settings(
        11, 11, TransformerSettings(16, 32, 2, 1, 0.0)
    )
    batches = _batches()
    src, valid, tgt_in, tgt_out = batches[0]
    with torch.no_grad():
        smoothed = masked_cross_entropy(
            model(src, tgt_in, valid), tgt_out, PAD, label_smoothing=0.1
        ).item()
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    scheduler = warmup_inverse_sqrt(opt, 16, 4)
    history = train_seq2seq(
        model,
        batches,
        1.0,
        2,
        PAD,
        optimizer=opt,
        scheduler=scheduler,
        label_smoothing=0.1,
    )
    assert scheduler.last_epoch == 2 * len(batches)  # one step per batch
    assert history["step_loss"][0] == pytest.approx(smoothed, rel=1e-6)


def test_shared_embeddings_are_one_parameter():
    settings = TransformerSettings(16, 32, 2, 1, 0.0)
    torch.manual_seed(0)
    plain = Transformer.from_settings(11, 13, settings)
    torch.manual_seed(0)
    shared = Transformer.from_settings(11, 13, settings, share_embeddings=True)
    assert plain.decoder.dense.weight is not plain.decoder.embedding.weight
    assert shared.decoder.dense.weight is shared.decoder.embedding.weight
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(plain) - count(shared) == 13 * 16  # one (V, D) matrix fewer
    src, valid, tgt_in, _ = _batches(1, V=11)[0]
    Y = shared(src, tgt_in, valid)
    # the gradient of the one matrix is the sum of its two uses
    (grad,) = torch.autograd.grad(Y.sum(), [shared.decoder.embedding.weight])
    H = shared.decoder.dense
    H.weight = nn.Parameter(shared.decoder.embedding.weight.detach().clone())
    shared.decoder.embedding.weight = nn.Parameter(H.weight.detach().clone())
    Y2 = shared(src, tgt_in, valid)
    torch.testing.assert_close(Y2, Y)
    g_out, g_in = torch.autograd.grad(
        Y2.sum(), [H.weight, shared.decoder.embedding.weight]
    )
    torch.testing.assert_close(grad, g_out + g_in)


def test_dropout_sits_on_attention_weights_residuals_and_embeddings():
    """dropout=p puts nn.Dropout(p) on the embeddings + positions, on every attention layer's
    weights and on every residual branch, active in train mode only; dropout=0 is the identity."""
    torch.manual_seed(0)
    model = Transformer.from_settings(
        11, 11, TransformerSettings(16, 32, 2, 2, 0.3)
    )
    names = {
        n
        for n, m in model.named_modules()
        if isinstance(m, nn.Dropout) and m.p == 0.3
    }
    assert any(n.endswith("attention.attention.dropout") for n in names), names
    assert any(n.endswith("addnorm1.dropout") for n in names)
    assert {
        "encoder.pos_encoding.dropout",
        "decoder.pos_encoding.dropout",
    } <= names
    # encoder: 2 blocks x (1 attention + 2 residuals); decoder: 2 x (2 + 3); 2 encodings
    assert len(names) == 2 * 3 + 2 * 5 + 2
    src, valid, tgt_in, _ = _batches(1, V=11)[0]
    model.train()
    assert not torch.equal(
        model(src, tgt_in, valid), model(src, tgt_in, valid)
    )
    model.eval()
    assert torch.equal(model(src, tgt_in, valid), model(src, tgt_in, valid))
