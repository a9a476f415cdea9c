"""The encoder–decoder interface that every translation model implements.

Chapter "The encoder–decoder architecture": an encoder maps a source
sequence to a state; a decoder turns that state and the target prefix into
next-token scores. The GRU models (:mod:`course_pkg.models.seq2seq`) and the
Transformer (:mod:`course_pkg.models.transformer`) fill in this interface, so one
training loop (:mod:`course_pkg.training.loop`) and one set of decoding functions
(:mod:`course_pkg.inference.decode`) serve every model.

The decoder contract. ``decoder.init_state(enc_all_outputs, enc_valid_lens)``
makes the state before any target token; ``decoder(X, state)`` takes X
(B, Q) target ids (``Q`` new positions) and returns ``(Y, new_state)`` with Y
(B, Q, V). Feeding a prefix one token at a time, each call given the state
the previous call returned, gives the same Y as one call on the whole prefix
from a fresh ``init_state`` (the "cached" and "uncached" decoding paths).
A call never changes the state it is given, so a search may branch from it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from course_pkg.checks import check_source_target


class Encoder(nn.Module):
    """Base encoder: ``forward(X, *args)`` maps X (B, T) ids to a state."""

    def forward(
        self, X: torch.Tensor, *args: Any
    ) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class Decoder(nn.Module):
    """Base decoder: ``init_state(enc_all_outputs, *args)``, then
    ``forward(X, state) -> (Y, state)``.

    X is (B, Q) target ids, Y is (B, Q, V) scores over the target vocabulary.
    """

    def init_state(
        self, enc_all_outputs: Any, *args: Any
    ) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(
        self, X: torch.Tensor, state: Any
    ) -> tuple[torch.Tensor, Any]:  # pragma: no cover - abstract
        raise NotImplementedError


class EncoderDecoder(nn.Module):
    """An encoder and a decoder trained together.

    Args:
        encoder: an :class:`Encoder`. decoder: a :class:`Decoder`.
    """

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(
        self, enc_X: torch.Tensor, dec_X: torch.Tensor, *args: Any
    ) -> torch.Tensor:
        """Scores of every target position, teacher-forced.

        Args:
            enc_X: (B, T) source ids. dec_X: (B, Q) target ids.
            args: passed to the encoder and to ``init_state`` (e.g. the
                source valid lengths (B,)).
        Returns:
            (B, Q, V) scores.
        """
        check_source_target(self, enc_X, dec_X, *args[:1])
        enc_all_outputs = self.encoder(enc_X, *args)
        dec_state = self.decoder.init_state(enc_all_outputs, *args)
        return self.decoder(dec_X, dec_state)[0]
