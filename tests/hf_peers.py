"""What the parity tests against Hugging Face's decoders share: their weights redrawn, token
ids, and the comparisons (max gaps, cached chunks, greedy continuations, state dicts).

A peer built from a config holds its own initialisation (std 0.02, norm gains 1), under
which some options barely change the logits; redrawn larger, every option shows.
"""

from __future__ import annotations

import torch

from course_pkg.models.gpt import generate


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


def gap(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got - expected|."""
    return (got - expected).abs().max().item()


def chunked_gap(model: torch.nn.Module, X: torch.Tensor, *cuts: int) -> float:
    """max |model(X) - the same positions run through model.forward_with_cache in the pieces
    of X cut at cuts, each piece on the cache the pieces before it left|."""
    with torch.no_grad():
        whole = model(X)
        pieces, cache = [], None
        for piece in torch.tensor_split(X, cuts, dim=1):
            out, cache = model.forward_with_cache(piece, cache)
            pieces.append(out)
    return gap(torch.cat(pieces, 1), whole)


def logit_and_router_gaps(
    ours: torch.nn.Module, theirs: torch.nn.Module, X: torch.Tensor
) -> tuple[float, float]:
    """max |ours - theirs| over the logits, and over every block's router logits."""
    with torch.no_grad():
        expected = theirs(X, output_router_logits=True)
        got = ours(X)
    routers = max(
        gap(a, b)
        for a, b in zip(
            ours.router_logits, expected.router_logits, strict=True
        )
    )
    return gap(got, expected.logits), routers


def assert_greedy_equals_theirs(
    ours: torch.nn.Module,
    theirs: torch.nn.Module,
    prompt: torch.Tensor,
    new_tokens: int,
) -> None:
    """Ours continues the prompt by new_tokens greedy tokens (course_pkg's generate, top_k=1),
    all of them, token for token as their generate without sampling."""
    with torch.no_grad():
        expected = theirs.generate(
            prompt, max_new_tokens=new_tokens, do_sample=False
        )
    got = generate(ours, prompt, new_tokens, top_k=1)
    assert got.shape == (prompt.shape[0], prompt.shape[1] + new_tokens)
    assert torch.equal(got, expected)


def assert_same_state(
    got: dict, expected: dict, dropped: frozenset[str] = frozenset()
) -> None:
    """got holds the names of expected but dropped, each tensor equal to the last bit."""
    assert got.keys() == expected.keys() - dropped
    for name in got:
        assert torch.equal(got[name], expected[name]), name
