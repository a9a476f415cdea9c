"""Small checks that several test files share."""

from __future__ import annotations

import torch

from course_pkg.models.deepseek import DeepSeekV3


def assert_backward_reaches_every_parameter_on_meta(
    loss: torch.Tensor, *modules: torch.nn.Module
) -> None:
    """loss.backward() gives every parameter of modules a gradient, on the meta device."""
    loss.backward()
    params = [p for module in modules for p in module.parameters()]
    assert params
    assert all(
        p.grad is not None and p.grad.device.type == "meta" for p in params
    )


def refusals(
    error: type[Exception], **bad: object
) -> list[tuple[dict, type[Exception], str]]:
    """Cases (change, error, name) for a refusal test: each option of bad alone, to be refused
    with error, its message naming the option."""
    return [({name: value}, error, name) for name, value in bad.items()]


# The sizes of the tiny decoders that the sweeps build (test_bad_input, test_every_module): 11
# ids, width 8, FFN 16, 2 heads sharing 1 KV head, 2 blocks.
TINY_DECODER = dict(
    vocab_size=11, num_hiddens=8, ffn_num_hiddens=16, num_heads=2,
    num_blks=2, num_kv_heads=1,
)  # fmt: skip


def tiny_deepseek_v3(vocab_size: int = 11, **change) -> DeepSeekV3:
    """DeepSeek-V3 over vocab_size ids, width 8, 2 heads, 2 blocks (max_len 16): a latent of 4, keys
    of 2 + 2 rotated features, values of 3, 4 experts of width 4 in 2 groups, 2 a token;
    options changed by change."""
    options = dict(
        kv_rank=4, nope_width=2, rope_width=2, value_width=3, expert_width=4,
        num_experts=4, top_k=2, num_groups=2,
    )  # fmt: skip
    options.update(change)
    return DeepSeekV3(vocab_size, 8, 16, 2, 2, 16, **options)
