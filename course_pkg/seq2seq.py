"""The encoder–decoder interface (chapter "The encoder–decoder architecture").

An encoder maps a source sequence to a state; a decoder turns that state and the target prefix
into next-token scores. The GRU models of the chapter and the Transformer both fill in this
interface, so one training loop and one decoder serve them all.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Encoder(nn.Module):
    """Base encoder: ``forward(X, *args)`` with X (B, T) token ids returns whatever its decoder needs."""

    def forward(self, X: torch.Tensor, *args: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class Decoder(nn.Module):
    """Base decoder: ``init_state(enc_all_outputs, *args)`` then ``forward(X, state) -> (Y, state)``.

    X is (B, T) target ids, Y is (B, T, V) scores over the target vocabulary.
    """

    def init_state(self, enc_all_outputs: Any, *args: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, X: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:  # pragma: no cover - abstract
        raise NotImplementedError


class EncoderDecoder(nn.Module):
    """An encoder and a decoder trained together.

    Args:
        encoder: an :class:`Encoder`. decoder: a :class:`Decoder`.
    """

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, enc_X: torch.Tensor, dec_X: torch.Tensor, *args: Any) -> torch.Tensor:
        """enc_X (B, T_src) and dec_X (B, T_tgt) ids, args e.g. src valid lengths (B,) -> (B, T_tgt, V)."""
        enc_all_outputs = self.encoder(enc_X, *args)
        dec_state = self.decoder.init_state(enc_all_outputs, *args)
        return self.decoder(dec_X, dec_state)[0]
