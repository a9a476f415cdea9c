"""What the tests of the GRU decoders share (tests/test_seq2seq.py, tests/test_luong.py,
tests/test_gru_decoders.py): the sizes, random batches and a made-up encoder run."""

from __future__ import annotations

import torch

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
