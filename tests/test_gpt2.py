"""Tests of course_pkg.gpt2: GPT-2's architecture built from the course's pieces.

The parity tests against Hugging Face ``transformers`` (logits, padding, generation) are in
``tests/test_hf.py``; here: shapes, the tied output layer, GPT-2's initialisation, the cache
and :func:`course_pkg.gpt.generate`, the meta device.
"""

from __future__ import annotations

import torch

from course_pkg.gpt import generate
from course_pkg.gpt2 import GPT2

V, D, H, N, MAX_LEN = 17, 16, 4, 2, 12


def make_model(seed: int = 0) -> GPT2:
    torch.manual_seed(seed)
    return GPT2(V, D, H, N, MAX_LEN).eval()


def test_forward_gives_scores_and_gradients_reach_every_parameter():
    model = make_model()
    X = torch.randint(0, V, (3, 7), generator=torch.Generator().manual_seed(1))
    scores = model(X)
    assert scores.shape == (3, 7, V)
    scores.square().sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, (
            name
        )


def test_generate_runs_with_the_cache():
    model = make_model()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = generate(model, prompt, 5, top_k=1)
    assert out.shape == (2, 8) and torch.equal(out[:, :3], prompt)
    assert torch.equal(
        out, generate(model, prompt, 5, top_k=1, use_cache=False)
    )
