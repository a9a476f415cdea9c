"""A mixture-of-experts feed-forward layer (Shazeer et al. 2017; Fedus et
al. 2022; Mixtral, Jiang et al. 2024), its load-balancing loss, and the
converters of one layer's weights to and from Hugging Face's
``MixtralSparseMoeBlock`` / ``Qwen3MoeSparseMoeBlock``.

Chapter: "Today's open models". The layer holds E feed-forward networks, the
experts (each a :class:`~course_pkg.nn.modern_blocks.SwiGLUFFN`), and a
linear router. For each token x the router scores the experts,
p = softmax(W_r x), keeps the k largest probabilities (top-k), and the
output is the sum of those k experts' outputs, each weighted by its gate:
its probability, divided by the sum of the k kept (renormalised, as in
Mixtral; Qwen3-MoE makes that optional, ``norm_topk_prob``). A token pays for
k experts, while the layer holds E of them.

Left alone, the router favours a few experts; the load-balancing loss of
the Switch Transformer, E * sum_e f_e * P_e (f_e: how often expert e is
chosen per token, P_e: its mean router probability; see
:func:`load_balancing_loss`), is smallest when the experts share the tokens
evenly. :class:`DeepSeekMoE` is DeepSeek-V3's variant: shared experts every
token passes through, a sigmoid router, a choice restricted to the best groups
of experts, and a bias on the choice in place of the loss.

Shape letters (see the package docstring): ``B`` batch, ``T`` length, ``D``
width, ``F`` one expert's hidden width; here also ``E`` the number of experts
(``num_experts``), ``k`` the experts per token (``top_k``) and ``N`` the
number of tokens (B * T).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from course_pkg.checks import (
    check_bool,
    check_choice,
    check_features,
    check_float_tensor,
    check_positive_number,
    check_same_float_dtype,
    check_sizes,
)
from course_pkg.nn.modern_blocks import SwiGLUFFN

StateDict = dict[str, torch.Tensor]


def _check_top_k(top_k: object, num_experts: object) -> None:
    """num_experts and top_k ints >= 1, top_k <= num_experts."""
    check_sizes(num_experts=num_experts, top_k=top_k)
    if top_k > num_experts:
        raise ValueError(
            f"top_k must be <= num_experts={num_experts}, got {top_k}"
        )


def _probabilities(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the experts, (N, E) -> (N, E); float16/bfloat16 logits
    in float32 (as ``RMSNorm`` does), every other dtype in its own."""
    half = logits.dtype in (torch.float16, torch.bfloat16)
    return torch.softmax(logits, dim=-1, dtype=torch.float32 if half else None)


def _mix_experts(
    experts: nn.ModuleList,
    flat: torch.Tensor,
    gates: torch.Tensor,
    chosen: torch.Tensor,
) -> torch.Tensor:
    """For every token (row of flat (N, D)), the sum over its chosen experts
    (N, k) of gate (N, k) times that expert's output: (N, D). Each expert
    runs on its own tokens; on the meta device every expert runs on every
    token, weighted 0 where not chosen."""
    if flat.device.type == "meta":  # no data to select the tokens by
        weights = torch.zeros(
            flat.shape[0], len(experts), dtype=gates.dtype, device=flat.device
        ).scatter(-1, chosen, gates)
        outputs = torch.stack([expert(flat) for expert in experts], 1)
        return (weights[:, :, None] * outputs).sum(1)
    mixed = torch.zeros_like(flat)
    for e, expert in enumerate(experts):
        token, slot = torch.where(chosen == e)  # the tokens that chose e
        if token.numel():
            output = gates[token, slot, None] * expert(flat[token])
            mixed = mixed.index_add(0, token, output)
    return mixed


class MoEFeedForward(nn.Module):
    """A sparse mixture of SwiGLU experts with a top-k linear router.

    For tokens x (rows of X): logits = router(x) (E,); p = softmax(logits);
    the k largest p_e give the chosen experts and their gates g_e (p_e, or
    p_e / sum of the k kept when ``norm_topk_prob``); the output is
    sum over the chosen e of g_e * expert_e(x).

    Each expert runs on the tokens that chose it (``_mix_experts``), so
    a token costs k experts, not E; on the meta device, which has no data to
    select tokens by, every expert runs on every token, weighted 0 where not
    chosen (the same sum).

    Like :class:`SwiGLUFFN`, ``forward`` maps X to one tensor, so the layer
    can take an FFN's place in a block. The router's logits, which the
    load-balancing loss needs, are kept in the attribute ``router_logits``
    after each forward (as Hugging Face's MoE blocks return only the hidden
    states and record the logits on the side): a second output would break
    that drop-in use.

    Args:
        num_hiddens: D, the input and output width.
        ffn_num_hiddens: F, each expert's hidden width.
        num_experts: E >= 1.
        top_k: k, the experts per token, 1 <= k <= E (Mixtral: 2 of 8).
        norm_topk_prob: whether the k gates are divided by their sum (so they
            sum to 1): True in Mixtral, a setting in Qwen3-MoE.
    Attributes:
        router: ``nn.Linear(D, E, bias=False)``.
        experts: E :class:`SwiGLUFFN` of hidden width F.
        router_logits: (N, E) tensor of the last forward (with its graph, for
            the loss), None before the first.
    Raises:
        TypeError: if a size is not an int or norm_topk_prob not a bool.
        ValueError: if a size is < 1 or top_k > num_experts.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_experts: int,
        top_k: int = 2,
        *,
        norm_topk_prob: bool = True,
    ):
        super().__init__()
        _check_moe_feed_forward_args(
            num_hiddens, ffn_num_hiddens, num_experts, top_k, norm_topk_prob
        )
        self.num_hiddens, self.num_experts = num_hiddens, num_experts
        self.top_k, self.norm_topk_prob = top_k, norm_topk_prob
        self.router = nn.Linear(num_hiddens, num_experts, bias=False)
        self.experts = nn.ModuleList(
            SwiGLUFFN(ffn_num_hiddens, num_hiddens) for _ in range(num_experts)
        )
        self.router_logits: torch.Tensor | None = None

    def route(
        self, X: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The router's decision for every token of X (..., D).

        Returns:
            logits (N, E) in X's dtype; gates (N, k) in X's dtype, the kept
            probabilities, largest first (summing to 1 when
            ``norm_topk_prob``); experts (N, k) int64, the chosen experts.
            N is the number of rows of X (B * T for (B, T, D)).
        Raises:
            TypeError/ValueError: if X is not a float tensor (..., D) of the
                layer's dtype and device.
        """
        self._check_input(X)
        return self._route(X)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (..., D), e.g. (B, T, D) -> (..., D); sets ``router_logits``
        (N, E).

        Raises:
            TypeError/ValueError: if X is not a float tensor (..., D) of the
                layer's dtype and device.
        """
        self._check_input(X)
        logits, gates, chosen = self._route(X)
        flat = X.reshape(-1, self.num_hiddens)  # (N, D)
        # (N, E): each token's gate for every expert, 0 for those not chosen
        mixed = _mix_experts(self.experts, flat, gates, chosen)  # (N, D)
        self.router_logits = logits
        return mixed.reshape(X.shape)

    def _check_input(self, X: object) -> None:
        check_features("X", X, self.num_hiddens, self)

    def _route(
        self, X: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.router(X.reshape(-1, self.num_hiddens))  # (N, E)
        gates, chosen = _probabilities(logits).topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            gates = gates / gates.sum(-1, keepdim=True)
        return logits, gates.to(X.dtype), chosen


def _check_moe_feed_forward_args(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_experts: object,
    top_k: object,
    norm_topk_prob: object,
) -> None:
    """:class:`MoEFeedForward`'s settings: the sizes ints >= 1 with
    top_k <= num_experts, norm_topk_prob a bool."""
    check_sizes(num_hiddens=num_hiddens, ffn_num_hiddens=ffn_num_hiddens)
    _check_top_k(top_k, num_experts)
    check_bool("norm_topk_prob", norm_topk_prob)


class DeepSeekMoE(nn.Module):
    """DeepSeek-V3's mixture of experts (DeepSeek-AI 2024): shared experts
    that every token passes through, and routed ones chosen by a sigmoid
    router whose choice, not its gates, carries a balancing bias.

    For a token x: s = sigmoid(router(x)) (E,); the experts are split into
    ``num_groups`` groups, each scored by the sum of its two best
    s_e + b_e, and only the ``top_groups`` best groups may be chosen; within
    them the k largest s_e + b_e are chosen. The gates are the chosen s_e
    (divided by their sum when ``norm_topk_prob``) times ``routed_scale``.
    The bias b (``choice_bias``, a buffer) is not learned by gradients:
    DeepSeek-V3 raises it for experts that got too few tokens and lowers it
    for those that got too many, which balances the load without an
    auxiliary loss. Output: sum of g_e expert_e(x) + shared(x).

    Each routed expert runs on the tokens that chose it, as in
    :class:`MoEFeedForward`.

    Args:
        num_hiddens: D. ffn_num_hiddens: F, one expert's hidden width.
        num_experts: E. top_k: k, the routed experts a token.
        num_shared: the shared experts, one SwiGLU FFN of width F * num_shared.
        num_groups: groups of experts, dividing E (at least 2 experts
            each); top_groups: the groups a token may use.
        routed_scale: the gates' factor (2.5 in DeepSeek-V3).
        norm_topk_prob: divide the k gates by their sum.
    Attributes:
        router: ``Linear(D, E, bias=False)``. choice_bias: (E,) buffer.
        experts: E :class:`SwiGLUFFN` of width F. shared: a SwiGLUFFN of width
            F * num_shared. router_logits: (N, E) of the last forward.
    Raises:
        TypeError/ValueError: naming a size or setting that does not fit.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_experts: int,
        top_k: int,
        *,
        num_shared: int = 1,
        num_groups: int = 1,
        top_groups: int = 1,
        routed_scale: float = 1.0,
        norm_topk_prob: bool = True,
    ):
        _check_deepseek(
            num_hiddens, ffn_num_hiddens, num_experts, top_k, num_shared,
            num_groups, top_groups, routed_scale, norm_topk_prob,
        )  # fmt: skip
        super().__init__()
        self.num_hiddens, self.num_experts = num_hiddens, num_experts
        self.top_k, self.norm_topk_prob = top_k, norm_topk_prob
        self.num_groups, self.top_groups = num_groups, top_groups
        self.routed_scale = float(routed_scale)
        self.router = nn.Linear(num_hiddens, num_experts, bias=False)
        self.register_buffer("choice_bias", torch.zeros(num_experts))
        self.experts = nn.ModuleList(
            SwiGLUFFN(ffn_num_hiddens, num_hiddens) for _ in range(num_experts)
        )
        self.shared = SwiGLUFFN(ffn_num_hiddens * num_shared, num_hiddens)
        self.router_logits: torch.Tensor | None = None

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (..., D) -> (..., D); sets ``router_logits`` (N, E).

        Raises:
            TypeError/ValueError: if X is not a float tensor (..., D) of the
                layer's dtype and device.
        """
        check_features("X", X, self.num_hiddens, self)
        flat = X.reshape(-1, self.num_hiddens)  # (N, D)
        logits = self.router(flat)  # (N, E)
        gates, chosen = self._route(logits)
        mixed = _mix_experts(self.experts, flat, gates, chosen)
        mixed = mixed + self.shared(flat)
        self.router_logits = logits
        return mixed.reshape(X.shape)

    def _route(
        self, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gates (N, k) and chosen experts (N, k) from logits (N, E)."""
        scores = logits.sigmoid()
        choice = scores + self.choice_bias
        grouped = choice.view(
            -1, self.num_groups, self.num_experts // self.num_groups
        )
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)  # (N, groups)
        best = group_scores.topk(self.top_groups, dim=-1).indices
        allowed = torch.zeros_like(group_scores, dtype=torch.bool)
        allowed = allowed.scatter(1, best, True).repeat_interleave(
            self.num_experts // self.num_groups, dim=1
        )  # (N, E)
        choice = choice.masked_fill(~allowed, float("-inf"))
        chosen = choice.topk(self.top_k, dim=-1).indices
        gates = scores.gather(1, chosen)
        if self.norm_topk_prob:
            gates = gates / (gates.sum(-1, keepdim=True) + 1e-20)
        return gates * self.routed_scale, chosen


def _check_deepseek(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_experts: object,
    top_k: object,
    num_shared: object,
    num_groups: object,
    top_groups: object,
    routed_scale: object,
    norm_topk_prob: object,
) -> None:
    """:class:`DeepSeekMoE`'s settings, refused naming the argument."""
    check_sizes(
        num_hiddens=num_hiddens, ffn_num_hiddens=ffn_num_hiddens,
        num_shared=num_shared, num_groups=num_groups,
        top_groups=top_groups,
    )  # fmt: skip
    _check_top_k(top_k, num_experts)
    check_positive_number("routed_scale", routed_scale)
    if num_experts % num_groups or num_experts // num_groups < 2:
        raise ValueError(
            f"num_groups={num_groups} must divide num_experts="
            f"{num_experts} into groups of at least 2 experts"
        )
    per_group = num_experts // num_groups
    if top_groups > num_groups or top_k > top_groups * per_group:
        raise ValueError(
            f"top_groups={top_groups} must be <= num_groups={num_groups} "
            f"and hold top_k={top_k} experts ({per_group} a group)"
        )
    check_bool("norm_topk_prob", norm_topk_prob)


def load_balancing_loss(
    router_logits: torch.Tensor | Sequence[torch.Tensor],
    num_experts: int,
    top_k: int = 2,
) -> torch.Tensor:
    """The Switch Transformer's auxiliary loss (Fedus et al. 2022, eqs. 4-6)
    as Hugging Face's ``load_balancing_loss_func`` computes it without an
    attention mask: E * sum_e f_e * P_e, where f_e is the number of top-k
    choices of expert e divided by N (so the f_e sum to k) and P_e the mean
    router probability of expert e over the N tokens.

    Under a perfectly even routing f_e = k / E and P_e = 1 / E, and the loss
    is k; its gradient reaches the router through P (the counts f are
    constants).

    Args:
        router_logits: (N, E) logits, e.g. :attr:`MoEFeedForward.router_logits`,
            or a non-empty list/tuple of such tensors (one per layer, of any
            N each), which counts as their concatenation, as in Hugging Face.
        num_experts: E. top_k: k, 1 <= k <= E.
    Returns:
        () tensor in the logits' dtype (float32 for float16/bfloat16).
    Raises:
        TypeError: if router_logits is not a float tensor or a list/tuple of
            them of one dtype, or a size is not an int.
        ValueError: if a tensor is not (N, E) with N >= 1, the tensors are
            on different devices, a size is < 1 or top_k > num_experts.
    """
    logits = _checked_logits(router_logits, num_experts, top_k)  # (N, E)
    probs = _probabilities(logits)
    tokens_per_expert = (
        _choices(probs, top_k) / logits.shape[0]
    )  # f, sums to k
    prob_per_expert = probs.mean(0)  # P, sums to 1
    return num_experts * (tokens_per_expert * prob_per_expert).sum()


def expert_load(
    router_logits: torch.Tensor | Sequence[torch.Tensor],
    num_experts: int,
    top_k: int = 2,
) -> torch.Tensor:
    """Each expert's share of the top-k choices the router made: how the
    layer's work was split. An even split gives 1 / E each.

    Args:
        router_logits, num_experts, top_k: as :func:`load_balancing_loss`.
    Returns:
        (E,) tensor in the probabilities' dtype, summing to 1: f_e / k.
    Raises:
        TypeError/ValueError: as :func:`load_balancing_loss`.
    """
    logits = _checked_logits(router_logits, num_experts, top_k)
    choices = _choices(_probabilities(logits), top_k)
    return choices / choices.sum()


def _checked_logits(
    router_logits: object, num_experts: object, top_k: object
) -> torch.Tensor:
    """The router logits (N, E) of one layer or of a list of layers,
    checked and concatenated."""
    _check_top_k(top_k, num_experts)
    shape = f"(N, E={num_experts})"
    if isinstance(router_logits, (list, tuple)):
        if not router_logits:
            raise ValueError(
                "router_logits must be a tensor or a non-empty list/tuple of "
                f"tensors {shape}, got an empty {type(router_logits).__name__}"
            )
        named = {f"router_logits[{i}]": t for i, t in enumerate(router_logits)}
    else:
        named = {"router_logits": router_logits}
    for name, logits in named.items():
        check_float_tensor(name, logits, 2, shape)
        if logits.shape[1] != num_experts or logits.shape[0] < 1:
            raise ValueError(
                f"{name} must have shape {shape} with N >= 1, "
                f"got {tuple(logits.shape)}"
            )
    check_same_float_dtype(**named)
    return torch.cat(list(named.values()))


def _choices(probs: torch.Tensor, top_k: int) -> torch.Tensor:
    """How many tokens chose each expert among their top k: (N, E) -> (E,)
    in probs' dtype."""
    chosen = probs.topk(top_k, dim=-1).indices.reshape(-1)  # (N k,)
    counts = torch.zeros(
        probs.shape[1], dtype=probs.dtype, device=probs.device
    )
    return counts.scatter_add(
        0, chosen, torch.ones_like(chosen, dtype=probs.dtype)
    )


# ------------------------------------------------------- Hugging Face's weights

# Hugging Face's names of one sparse MoE block (its own state_dict, no
# prefix). transformers 5 keeps every expert in two stacked tensors,
#   gate.weight (E, D), experts.gate_up_proj (E, 2F, D) (gate rows, then up
#   rows), experts.down_proj (E, D, F);
# the published checkpoints (and transformers 4) have one module per expert:
# Mixtral's experts.{e}.w1 (gate), w3 (up), w2 (down), Qwen3-MoE's
# experts.{e}.gate_proj, up_proj, down_proj (transformers' own
# conversion_mapping.py maps them so).
HF_LAYOUTS = ("fused", "mixtral", "qwen3")
_PER_EXPERT = {
    "mixtral": ("w1", "w3", "w2"),
    "qwen3": ("gate_proj", "up_proj", "down_proj"),
}
_OURS = ("gate", "up", "down")


def moe_from_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """A :class:`MoEFeedForward` state dict from one Hugging Face MoE block's.

    Args:
        state_dict: ``MixtralSparseMoeBlock.state_dict()`` or
            ``Qwen3MoeSparseMoeBlock.state_dict()`` (transformers 5: gate.weight
            (E, D), experts.gate_up_proj (E, 2F, D), experts.down_proj
            (E, D, F)), or the per-expert names of the published checkpoints
            (gate.weight and experts.{e}.w1/w3/w2.weight for Mixtral,
            experts.{e}.gate_proj/up_proj/down_proj.weight for Qwen3-MoE),
            without a layer prefix.
    Returns:
        {name: tensor}: router.weight (E, D) and experts.{e}.gate.weight
        (F, D), .up.weight (F, D), .down.weight (D, F), in the given dtype.
    Raises:
        TypeError: if state_dict is not a mapping of str to tensors.
        ValueError: naming a missing tensor, one left over or a shape that
            does not fit the others.
    """
    theirs = _check_state_dict(state_dict)
    router = _take(theirs, "gate.weight", 2, "(E, D)")
    num_experts, width = router.shape
    ours: StateDict = {"router.weight": router}
    if "experts.gate_up_proj" in theirs:
        gate_up = _take(theirs, "experts.gate_up_proj", 3, "(E, 2F, D)")
        hidden = gate_up.shape[1] // 2
        _check_size(
            "experts.gate_up_proj",
            gate_up,
            (num_experts, 2 * hidden, width),
            "(E, 2F, D)",
        )
        down = _take(theirs, "experts.down_proj", 3, "(E, D, F)")
        _check_size(
            "experts.down_proj",
            down,
            (num_experts, width, hidden),
            "(E, D, F)",
        )
        for e in range(num_experts):
            ours[f"experts.{e}.gate.weight"] = gate_up[e, :hidden].contiguous()
            ours[f"experts.{e}.up.weight"] = gate_up[e, hidden:].contiguous()
            ours[f"experts.{e}.down.weight"] = down[e].contiguous()
    else:
        layout = _per_expert_layout(theirs)
        hidden = None
        for e in range(num_experts):
            for our, their in zip(_OURS, _PER_EXPERT[layout], strict=True):
                name = f"experts.{e}.{their}.weight"
                letters = "(D, F)" if our == "down" else "(F, D)"
                tensor = _take(theirs, name, 2, letters)
                if hidden is None:
                    hidden = tensor.shape[0]
                sizes = (width, hidden) if our == "down" else (hidden, width)
                _check_size(name, tensor, sizes, letters)
                ours[f"experts.{e}.{our}.weight"] = tensor
    _check_all_used(theirs)
    return ours


def moe_to_hf(
    state_dict: Mapping[str, torch.Tensor], layout: str = "fused"
) -> StateDict:
    """Hugging Face's MoE block state dict from a :class:`MoEFeedForward`'s:
    the inverse of :func:`moe_from_hf`.

    Args:
        state_dict: ``MoEFeedForward.state_dict()``.
        layout: "fused" (``MixtralSparseMoeBlock`` / ``Qwen3MoeSparseMoeBlock``
            of transformers 5, the same names for both), "mixtral" or "qwen3"
            (the published checkpoints' per-expert names).
    Returns:
        {name: tensor} for that block's ``load_state_dict``.
    Raises:
        TypeError: if state_dict is not a mapping of str to tensors or
            layout not a str.
        ValueError: on an unknown layout, a missing, left-over or misshapen
            tensor.
    """
    ours = _check_moe_to_hf(state_dict, layout)
    router = _take(ours, "router.weight", 2, "(E, D)")
    num_experts, width = router.shape
    experts: dict[str, list[torch.Tensor]] = {name: [] for name in _OURS}
    hidden = None
    for e in range(num_experts):
        for our in _OURS:
            name = f"experts.{e}.{our}.weight"
            letters = "(D, F)" if our == "down" else "(F, D)"
            tensor = _take(ours, name, 2, letters)
            if hidden is None:  # F, from experts.0.gate.weight
                hidden = tensor.shape[0]
            sizes = (width, hidden) if our == "down" else (hidden, width)
            _check_size(name, tensor, sizes, letters)
            experts[our].append(tensor)
    _check_all_used(ours)
    theirs: StateDict = {"gate.weight": router}
    if layout == "fused":
        theirs["experts.gate_up_proj"] = torch.stack(
            [torch.cat(pair) for pair in zip(experts["gate"], experts["up"])]
        )
        theirs["experts.down_proj"] = torch.stack(experts["down"])
        return theirs
    for e in range(num_experts):
        for our, their in zip(_OURS, _PER_EXPERT[layout], strict=True):
            theirs[f"experts.{e}.{their}.weight"] = experts[our][e]
    return theirs


def _check_moe_to_hf(state_dict: object, layout: object) -> StateDict:
    """layout a str of :data:`HF_LAYOUTS`; state_dict a mapping of str to
    tensors, returned as a (shallow-copied) dict. The tensors' names and
    shapes are checked as :func:`moe_to_hf` reads them."""
    check_choice("layout", layout, HF_LAYOUTS)
    return _check_state_dict(state_dict)


def _check_state_dict(state_dict: object) -> StateDict:
    """A mapping of str to tensors, as a (shallow-copied) dict."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            "state_dict must be a mapping of names to tensors (a state dict), "
            f"got {type(state_dict).__name__}"
        )
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise TypeError(
                f"state_dict must map str names to tensors, got {key!r}: "
                f"{type(value).__name__}"
            )
    return dict(state_dict)


def _take(
    state: StateDict, name: str, rank: int, letters: str
) -> torch.Tensor:
    """Remove and return state[name], refusing a missing one or another rank."""
    if name not in state:
        raise ValueError(f"state_dict is missing {name!r} {letters}")
    tensor = state.pop(name)
    if tensor.dim() != rank or 0 in tensor.shape:
        raise ValueError(
            f"state_dict's {name} must have shape {letters} (no empty axis), "
            f"got {tuple(tensor.shape)}"
        )
    return tensor


def _check_size(
    name: str, tensor: torch.Tensor, sizes: tuple[int, ...], letters: str
) -> None:
    if tuple(tensor.shape) != sizes:
        raise ValueError(
            f"state_dict's {name} must have shape {letters}={sizes} (from "
            f"the router and the first expert), got {tuple(tensor.shape)}"
        )


def _per_expert_layout(state: StateDict) -> str:
    """Which per-expert names a state dict without stacked experts uses."""
    for layout, names in _PER_EXPERT.items():
        if any(
            re.fullmatch(rf"experts\.\d+\.{names[0]}\.weight", n)
            for n in state
        ):
            return layout
    raise ValueError(
        "state_dict must hold experts.gate_up_proj and experts.down_proj "
        "(transformers 5), or experts.{e}.w1/w2/w3.weight (Mixtral) or "
        "experts.{e}.gate_proj/up_proj/down_proj.weight (Qwen3-MoE); found "
        f"{sorted(state)}"
    )


def _check_all_used(state: StateDict) -> None:
    """Refuse the tensors no name of the layout took."""
    if state:
        raise ValueError(
            f"state_dict has tensors this layer does not use: {sorted(state)}"
        )
