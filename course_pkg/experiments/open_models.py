"""The chapter "Today's open models": the mixture-of-experts experiment and
what it claims from training.

A dense Llama-style character model and the same model with a mixture of
experts in every block, trained by the pretraining chapter's loop
(:func:`course_pkg.training.lm_pretraining.pretrain_lm`) on Shakespeare:

- the experts' model: E = 8 SwiGLU experts of width 64, top-2 (Mixtral's
  routing), with and without the load-balancing loss (weight 0.01, the
  Switch Transformer's);
- the dense model: one SwiGLU FFN of width 128, so that a token passes
  through as many FFN weights (2 x 64 x 3 D) as in the experts' model: equal
  *active* parameters, four times fewer in all.

The values are measured by the chapter's last cell in every run of the sweep
(``make claims CHAPTERS=open_models``); :class:`course_pkg.experiments.claims.Sweep`
reads them back for the prose and the asserts. Bits per byte are on the
held-out plays' 200 windows; "busiest expert" is the largest share of the
top-2 choices any expert of a block receives on those windows, over both
blocks, divided by the even share 1 / E (1 is a perfect balance, E / 2 = 4
the most a top-2 router can give one expert); "idle experts" counts the
experts (of 16) that receive under a quarter of the even share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from course_pkg.checks import check_bool, check_positive_number
from course_pkg.experiments.claims import Claim
from course_pkg.models.llama import Llama
from course_pkg.nn.moe import load_balancing_loss
from course_pkg.training.lm_pretraining import BRIEF_SETTINGS

MOE_SETTINGS = dataclasses.replace(
    BRIEF_SETTINGS, batch_size=16, num_updates=400, warmup_steps=20
)
"""The pretraining chapter's brief recipe, half the batch, half the updates."""
MOE_MODEL = {"num_hiddens": 64, "num_heads": 4, "num_blks": 2}
NUM_EXPERTS, TOP_K, EXPERT_WIDTH = 8, 2, 64
BALANCE_WEIGHT = 0.01


def char_model(vocab_size: int, max_len: int, experts: bool) -> Llama:
    """The experiment's model: ``MOE_MODEL`` with E = 8 experts of width
    64, 2 a token (``experts``), or one FFN of width 2 x 64 (dense).

    Raises:
        TypeError/ValueError: as :class:`Llama`; experts not a bool.
    """
    check_bool("experts", experts)
    if experts:
        ffn = dict(
            ffn_num_hiddens=EXPERT_WIDTH, num_experts=NUM_EXPERTS, top_k=TOP_K
        )
    else:
        ffn = dict(ffn_num_hiddens=TOP_K * EXPERT_WIDTH)
    return Llama(vocab_size, max_len=max_len, **MOE_MODEL, **ffn)


def balancing(weight: float) -> Callable[[nn.Module], torch.Tensor]:
    """The term added to the loss of each update: weight times the
    load-balancing loss of every block's router logits of the forward.

    Raises:
        TypeError/ValueError: weight not a finite number > 0.
    """
    check_positive_number("weight", weight)

    def aux_loss(model: nn.Module) -> torch.Tensor:
        return weight * load_balancing_loss(
            model.router_logits, NUM_EXPERTS, TOP_K
        )

    return aux_loss


CLAIMS = {
    # bits per byte on the held-out plays after 400 updates
    "bits/byte dense": Claim("range"),
    "bits/byte experts, balanced": Claim("range"),
    "bits/byte experts, unbalanced": Claim("range"),
    "experts balanced - dense": Claim("range"),
    "unbalanced - balanced": Claim("range"),
    # the experts' load on the held-out windows (1 = even); every gap between
    # the runs with and without the loss has the same sign in every seed but
    # a spread that leaves no margin under the rule: all stated
    "busiest expert, balanced": Claim("range"),
    "busiest expert, unbalanced": Claim("range"),
    "busiest: unbalanced - balanced": Claim("range"),
    "idle experts, balanced": Claim("range"),
    "idle experts, unbalanced": Claim("range"),
    # the balancing loss on the held-out windows (k = 2 when even), the mean
    # of the two blocks'
    "balance loss, balanced": Claim("range"),
    "balance loss, unbalanced": Claim("range"),
    "balance loss: unbalanced - balanced": Claim("range"),
}
