"""What the parity tests against Hugging Face's decoders share: their weights redrawn, and
token ids.

A peer built from a config holds its own initialisation (std 0.02, norm gains 1), under
which some options barely change the logits; redrawn larger, every option shows.
"""

from __future__ import annotations

import torch


def redraw(
    model: torch.nn.Module, seed: int, norm_offset: float = 1.0
) -> torch.nn.Module:
    """Every parameter of model redrawn from seed, in place: matrices N(0, 0.2^2), vectors
    (norm gains) norm_offset + N(0, 0.2^2); Gemma stores its gains minus one (offset 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parameter in sorted(model.named_parameters()):
            noise = torch.randn(
                parameter.shape, generator=generator, dtype=torch.float64
            )
            offset = norm_offset if parameter.dim() == 1 else 0.0
            parameter.copy_(offset + 0.2 * noise)
    return model


def tokens(
    vocab_size: int, batch: int, length: int, seed: int = 1
) -> torch.Tensor:
    """(batch, length) ids in [0, vocab_size), drawn from seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=generator)
