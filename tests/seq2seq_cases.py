"""What the tests of the GRU decoders share (tests/test_seq2seq.py, tests/test_luong.py).

The sizes, random batches, a made-up encoder run, and the checks every decoder that attends over
the encoder outputs must pass: padding gets weight 0 and changes nothing, and forward and backward
run on each device.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

SRC_V, TGT_V, EMBED, HIDDEN = 11, 13, 6, 8


def random_batch(batch_size=3, src_len=5, tgt_len=4, seed=0):
    """(src (B, T), tgt (B, t), valid_lens (B,)) from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, SRC_V, (batch_size, src_len), generator=gen)
    tgt = torch.randint(0, TGT_V, (batch_size, tgt_len), generator=gen)
    valid_lens = torch.randint(1, src_len + 1, (batch_size,), generator=gen)
    return src, tgt, valid_lens


def encoder_run():
    """A float64 encoder run of one layer, 3 sources of 6 steps with lengths 2, 6, 4, and targets
    (3, 5), drawn from torch's global generator: (outputs (T, B, D), hidden (1, B, D), valid_lens,
    tgt)."""
    outputs = torch.randn(6, 3, HIDDEN, dtype=torch.float64)
    hidden = torch.randn(1, 3, HIDDEN, dtype=torch.float64)
    valid_lens = torch.tensor([2, 6, 4])
    tgt = torch.randint(0, TGT_V, (3, 5))
    return outputs, hidden, valid_lens, tgt


def assert_padding_ignored(decoder) -> None:
    """Encoder outputs past a row's valid length get weight 0, so changing them changes nothing."""
    outputs, hidden, valid_lens, tgt = encoder_run()
    Y, _ = decoder(tgt, decoder.init_state((outputs, hidden), valid_lens))
    weights = decoder.attention_weights  # (B, t, T)
    pads = (
        torch.arange(outputs.shape[0])[None, :] >= valid_lens[:, None]
    )  # (B, T)
    assert (weights.masked_select(pads[:, None].expand_as(weights)) == 0).all()
    torch.testing.assert_close(
        weights.sum(-1), torch.ones_like(weights[..., 0])
    )
    changed = outputs.clone()
    changed[pads.t()] = 1e3  # (T, B) positions that are padding
    Y_changed, _ = decoder(
        tgt, decoder.init_state((changed, hidden), valid_lens)
    )
    torch.testing.assert_close(Y_changed, Y, rtol=0, atol=0)


def assert_forward_backward_on(model, device) -> None:
    """An encoder–decoder in float32 on ``device``: scores (2, 4, TGT_V) there, every gradient
    there."""
    model = model.float().to(device)
    src = torch.zeros(2, 5, dtype=torch.long, device=device)
    tgt = torch.zeros(2, 4, dtype=torch.long, device=device)
    valid_lens = torch.tensor([5, 3], device=device)
    Y = model(src, tgt, valid_lens)
    assert Y.shape == (2, 4, TGT_V) and Y.device.type == device.type
    Y.sum().backward()
    assert all(
        p.grad is not None and p.grad.device.type == device.type
        for p in model.parameters()
    )


# Random shapes and batches for the property tests: @given(**SHAPES).
SHAPES = dict(
    batch_size=st.integers(1, 4),
    src_len=st.integers(1, 6),
    tgt_len=st.integers(1, 6),
    seed=st.integers(0, 10**6),
)


def assert_steps_equal_whole(model, batch_size, src_len, tgt_len, seed):
    """Decoding one target token a call, each from the state the call before returned, gives the
    scores, attention weights (where the decoder has them) and final state of one call on the
    whole target. Returns the initial state (for checks that no call changed it)."""
    src, tgt, valid_lens = random_batch(batch_size, src_len, tgt_len, seed)
    fresh = model.decoder.init_state(model.encoder(src), valid_lens)
    whole, whole_state = model.decoder(tgt, fresh)
    attends = hasattr(model.decoder, "attention_weights")
    whole_weights = model.decoder.attention_weights if attends else None
    state, steps, weights = fresh, [], []
    for t in range(tgt_len):
        Y, state = model.decoder(tgt[:, t : t + 1], state)
        steps.append(Y)
        if attends:
            weights.append(model.decoder.attention_weights)
    close = dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.cat(steps, 1), whole, **close)
    if attends:
        torch.testing.assert_close(
            torch.cat(weights, 1), whole_weights, **close
        )
    for ours, theirs in zip(state, whole_state):
        if ours is not None:
            torch.testing.assert_close(ours, theirs, **close)
    return fresh
