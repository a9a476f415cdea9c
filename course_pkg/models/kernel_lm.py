"""A small causal language model whose attention is exact softmax attention
or one of its linear-time stand-ins, everything else equal.

Chapter: "Beyond softmax attention". :class:`KernelLM` is a pre-norm
decoder-only stack (learned positions, layer norm, a ReLU FFN) in which
only the way each head mixes the past changes (``ATTENTIONS``):

- ``"softmax"``: exact causal softmax attention (PyTorch's fused
  ``scaled_dot_product_attention``), the reference;
- ``"linear"``: causal linear attention with phi(x) = elu(x) + 1
  (:mod:`course_pkg.nn.linear_attention`), an RNN with an (m, d) state;
- ``"performer"``: positive random features for exp(q . k / sqrt(d))
  (:mod:`course_pkg.nn.random_features`), m = ``num_features`` rows drawn
  once when the layer is built (a buffer, saved with the model);
- ``"decayed"``: linear attention whose state decays by gamma_h per step,
  one fixed gamma a head (:func:`retnet_decays`), written in its parallel
  form: the (T, T) matrix of phi(q_i) . phi(k_j) gamma^(i - j), as RetNet
  trains (and runs it as the recurrence at inference).

So the chapter's comparisons differ in the attention alone: same sizes, same
number of weights (the random features are not trained), same data and
budget.

Shape letters (see the package docstring): ``B`` batch, ``T`` sequence
length, ``V`` vocabulary size, ``D`` width, ``H`` heads, ``d`` = D / H.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_choice,
    check_features,
    check_module_input,
    check_positive_int,
    check_tensor,
    check_token_ids,
)
from course_pkg.nn.blocks import PositionWiseFFN
from course_pkg.nn.linear_attention import (
    _elu_features,
    _quadratic_kernel_attention,
)
from course_pkg.nn.random_features import (
    _performer_features,
    draw_orthogonal_features,
)

ATTENTIONS = ("softmax", "linear", "performer", "decayed")
EPS = 1e-6


def retnet_decays(num_heads: int) -> torch.Tensor:
    """RetNet's decays, gamma_h = 1 - 2^(-5 - h) for heads h = 0..H-1: the
    first head forgets fastest (a memory of about 32 steps), each next one
    half as fast.

    Returns:
        (H,) float32.
    Raises:
        TypeError/ValueError: num_heads not an int >= 1.
    """
    check_positive_int("num_heads", num_heads)
    return 1 - 2.0 ** (-5 - torch.arange(num_heads, dtype=torch.float32))


class KernelSelfAttention(nn.Module):
    """Causal multi-head self-attention whose heads mix the past as
    ``attention`` says (module docstring); the projections W_q, W_k, W_v,
    W_o (D, D), without biases, are the same for every kind.

    Args:
        num_hiddens: D, divisible by num_heads. num_heads: H.
        attention: one of ``ATTENTIONS``.
        num_features: m, the random features of ``"performer"`` (default
            2 d); ignored by the other kinds.
    Raises:
        TypeError/ValueError: on sizes that are not ints >= 1, D not
            divisible by H, or an unknown attention.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        attention: str = "softmax",
        num_features: int | None = None,
    ):
        _check_layer(num_hiddens, None, num_heads, attention, num_features)
        head_width = num_hiddens // num_heads
        if num_features is None:
            num_features = 2 * head_width
        super().__init__()
        self.num_heads, self.attention = num_heads, attention
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=False)
        if attention == "performer":  # drawn from torch's global generator
            features = draw_orthogonal_features(num_features, head_width)
            self.register_buffer("features", features)  # (m, d)
        if attention == "decayed":  # (1, H, 1), as the kernels take it
            gamma = retnet_decays(num_heads).reshape(1, num_heads, 1)
            self.register_buffer("gamma", gamma)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); position i reads positions <= i only.

        Raises:
            TypeError/ValueError: X not a float (B, T, D) tensor of the
                layer's dtype and device.
        """
        _check_kernel_self_attention_forward(self, X)
        return self._attend(X)

    def _attend(self, X: torch.Tensor) -> torch.Tensor:
        """forward without the checks."""
        batch, steps, width = X.shape
        q, k, v = (
            W(X).view(batch, steps, self.num_heads, -1).transpose(1, 2)
            for W in (self.W_q, self.W_k, self.W_v)
        )  # (B, H, T, d) each
        if self.attention == "softmax":
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # kernel attention in its parallel form: fastest at small T
            eps, gamma = EPS, None
            if self.attention == "performer":  # eps at the keys' scale
                phi_q, phi_k, eps_scale = _performer_features(
                    q, k, self.features, True
                )
                eps = EPS * eps_scale  # (B, H, T, 1)
            else:
                phi_q, phi_k = _elu_features(q), _elu_features(k)
            if self.attention == "decayed":
                gamma = self.gamma
            heads = _quadratic_kernel_attention(
                phi_q, phi_k, v, True, gamma, eps
            )  # (B, H, T, d)
        return self.W_o(heads.transpose(1, 2).reshape(batch, steps, width))


def _check_kernel_self_attention_forward(
    layer: KernelSelfAttention, X: object
) -> None:
    """X a float (B, T, D) tensor of the layer's width, dtype and device."""
    check_features("X", X, layer.W_q.in_features, layer, shape="(B, T, D)")
    check_tensor("X", X, 3, "(B, T, D)")


class KernelBlock(nn.Module):
    """Pre-norm block: X + attention(LN(X)), then X + FFN(LN(X)).

    Args: as :class:`KernelSelfAttention`, and ffn_num_hiddens, the FFN's
    hidden width.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        attention: str = "softmax",
        num_features: int | None = None,
    ):
        _check_layer(
            num_hiddens, ffn_num_hiddens, num_heads, attention, num_features
        )
        super().__init__()
        self.norm1 = nn.LayerNorm(num_hiddens)
        self.attention = KernelSelfAttention(
            num_hiddens, num_heads, attention, num_features
        )
        self.norm2 = nn.LayerNorm(num_hiddens)
        self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D).

        Raises:
            TypeError/ValueError: as :meth:`KernelSelfAttention.forward`.
        """
        _check_kernel_block_forward(self, X)
        return self._block(X)

    def _block(self, X: torch.Tensor) -> torch.Tensor:
        """forward without the checks."""
        X = X + self.attention._attend(self.norm1(X))
        return X + self.ffn(self.norm2(X))


def _check_kernel_block_forward(block: KernelBlock, X: object) -> None:
    """X a float (B, T, D) tensor of the block's width, dtype and device."""
    width = block.norm1.normalized_shape[0]
    check_features("X", X, width, block, shape="(B, T, D)")
    check_tensor("X", X, 3, "(B, T, D)")


class KernelLM(nn.Module):
    """A decoder-only language model whose blocks' attention is
    ``attention`` (module docstring): token embedding + learned positions,
    num_blks :class:`KernelBlock`, a final layer norm and an output layer.

    Args:
        vocab_size: V. num_hiddens: D. num_heads: H. num_blks: blocks.
        max_len: longest sequence (the positions' table).
        attention: one of ``ATTENTIONS`` (default "softmax").
        ffn_num_hiddens: the FFN's hidden width (default 4 D).
        num_features: m of "performer" (default 2 d).
    Raises:
        TypeError/ValueError: on a size that is not an int >= 1, D not
            divisible by H, or an unknown attention.
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        num_heads: int,
        num_blks: int,
        max_len: int,
        attention: str = "softmax",
        ffn_num_hiddens: int | None = None,
        num_features: int | None = None,
    ):
        _check_kernel_lm_args(
            vocab_size, num_hiddens, num_heads, num_blks, max_len, attention,
            ffn_num_hiddens, num_features,
        )  # fmt: skip
        if ffn_num_hiddens is None:
            ffn_num_hiddens = 4 * num_hiddens
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.attention = attention
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.positions = nn.Embedding(max_len, num_hiddens)
        self.blks = nn.ModuleList(
            KernelBlock(
                num_hiddens,
                ffn_num_hiddens,
                num_heads,
                attention,
                num_features,
            )  # fmt: skip
            for _ in range(num_blks)
        )
        self.norm = nn.LayerNorm(num_hiddens)
        self.output = nn.Linear(num_hiddens, vocab_size)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Scores of the next token at every position.

        Args:
            X: (B, T) token ids in [0, V), 1 <= T <= max_len, on the
                model's device.
        Returns:
            (B, T, V); position t depends on X[:, :t + 1] only.
        Raises:
            TypeError/ValueError: X not (B, T) ids in range, T > max_len.
        """
        _check_kernel_lm_forward(self, X)
        steps = torch.arange(X.shape[1], device=X.device)
        H = self.embedding(X) + self.positions(steps)  # (B, T, D)
        for blk in self.blks:
            H = blk._block(H)
        return self.output(self.norm(H))  # (B, T, V)


def _check_kernel_lm_args(
    vocab_size: object,
    num_hiddens: object,
    num_heads: object,
    num_blks: object,
    max_len: object,
    attention: object,
    ffn_num_hiddens: object,
    num_features: object,
) -> None:
    """The blocks' sizes and attention (``_check_layer``); vocab_size,
    num_blks and max_len ints >= 1."""
    _check_layer(
        num_hiddens, ffn_num_hiddens, num_heads, attention, num_features
    )
    for name, size in (
        ("vocab_size", vocab_size), ("num_blks", num_blks),
        ("max_len", max_len),
    ):  # fmt: skip
        check_positive_int(name, size)


def _check_kernel_lm_forward(model: KernelLM, X: object) -> None:
    """X (B, T) ids in [0, V) on the model's device, 1 <= T <= max_len."""
    check_token_ids("X", X, model.vocab_size, min_steps=1)
    check_module_input("X", X, model, dtype=False)
    if X.shape[1] > model.max_len:
        raise ValueError(
            f"X must have at most max_len={model.max_len} steps, "
            f"got shape {tuple(X.shape)}"
        )


def _check_layer(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    attention: object,
    num_features: object,
) -> None:
    """Sizes ints >= 1 (ffn_num_hiddens, num_features may be None), D
    divisible by H, attention one of ``ATTENTIONS``: checked before
    any layer is built. TypeError, ValueError naming the argument."""
    check_block_sizes(num_hiddens, ffn_num_hiddens, num_heads, 0.0)
    check_choice("attention", attention, ATTENTIONS)
    if num_features is not None:
        check_positive_int("num_features", num_features)
