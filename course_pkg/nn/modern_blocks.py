"""The block of today's Transformers: RMSNorm, a SwiGLU feed-forward network
and pre-norm residual connections.

Chapter: "Attention at scale". The post-norm block of the paper is
:class:`course_pkg.nn.blocks.TransformerEncoderBlock`:
``LayerNorm(X + sublayer(X))``. A pre-norm block normalises each sublayer's
input instead, ``X + sublayer(norm(X))``, so the residual path from the
input to the output is the identity and the gradients reach early blocks
without passing through a norm; it trains without learning-rate warm-up
(Xiong et al. 2020). A stack of pre-norm blocks needs one final norm after
its last block, since nothing normalises the sum otherwise.

Shape letters: ``B`` batch, ``T`` sequence length, ``D`` model width
(``num_hiddens``), ``H`` heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_features,
    check_nonnegative_number,
    check_sizes,
    check_tensor,
)
from course_pkg.nn.blocks import PositionWiseFFN, ffn_input_size
from course_pkg.nn.grouped_query import GroupedQueryAttention


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019): X / rms(X) * weight.

    Unlike layer norm it neither subtracts the mean nor adds a bias:
    rms(x) = sqrt(mean_i x_i^2 + eps) over the last axis.

    Args:
        num_hiddens: D, the width of the last axis.
        eps: added under the square root; None means
            ``torch.finfo(X.dtype).eps``, as in ``torch.nn.RMSNorm``.
    Attributes:
        weight: (D,) learned gain, initialised to ones.
    Raises:
        TypeError: if num_hiddens is not an int or eps not a number.
        ValueError: if num_hiddens is not positive or eps is negative.
    """

    def __init__(self, num_hiddens: int, eps: float | None = None):
        super().__init__()
        _check_rms_norm_args(num_hiddens, eps)
        self.num_hiddens, self.eps = num_hiddens, eps
        self.weight = nn.Parameter(torch.ones(num_hiddens))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (..., D) -> (..., D), every row scaled to root-mean-square 1,
        then by weight. A float16/bfloat16 X is normalised in float32 and
        cast back, as ``torch.nn.RMSNorm`` does: the square of an entry
        above 256 overflows float16.

        Raises TypeError/ValueError if X is not a tensor of last width D.
        """
        _check_width(X, self.num_hiddens, self, dtype=False)  # half X is fine
        return self._normalise(X)

    def _normalise(self, X: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` on a checked X (..., D) -> (..., D)."""
        eps = torch.finfo(X.dtype).eps if self.eps is None else self.eps
        half = X.dtype in (torch.float16, torch.bfloat16)
        wide = X.float() if half else X
        mean_square = wide.pow(2).mean(-1, keepdim=True)  # (..., 1)
        normed = wide * torch.rsqrt(mean_square + eps)
        return normed.to(X.dtype) * self.weight


def _check_rms_norm_args(num_hiddens: object, eps: object) -> None:
    """num_hiddens D an int >= 1; eps None or a number >= 0."""
    check_sizes(num_hiddens=num_hiddens)
    if eps is not None:
        check_nonnegative_number("eps", eps)


class SwiGLUFFN(nn.Module):
    """Gated feed-forward network (Shazeer 2020): down(SiLU(gate(X)) * up(X)).

    SiLU(z) = z * sigmoid(z) (Swish with beta = 1). The gate has its own
    projection, so at equal hidden width it has 3/2 the parameters of the
    two-layer ReLU network; models usually shrink ffn_num_hiddens by 2/3.

    Args:
        ffn_num_hiddens: width of the hidden (gated) layer.
        ffn_num_outputs: output width (D in a block).
        input_size: input width (default ffn_num_outputs).
        bias: whether the three projections have a bias (default False, as
            in most models that use it).
    Raises:
        TypeError/ValueError: if a width is not an int >= 1.
    """

    def __init__(
        self,
        ffn_num_hiddens: int,
        ffn_num_outputs: int,
        *,
        input_size: int | None = None,
        bias: bool = False,
    ):
        super().__init__()
        self.input_size = ffn_input_size(
            ffn_num_hiddens, ffn_num_outputs, input_size
        )
        self.gate = nn.Linear(self.input_size, ffn_num_hiddens, bias=bias)
        self.up = nn.Linear(self.input_size, ffn_num_hiddens, bias=bias)
        self.down = nn.Linear(ffn_num_hiddens, ffn_num_outputs, bias=bias)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (..., input_size) -> (..., ffn_num_outputs).

        Raises TypeError/ValueError if X is not a tensor of last width
        input_size.
        """
        _check_width(X, self.input_size, self)
        return self.down(F.silu(self.gate(X)) * self.up(X))


class GeGLUFFN(SwiGLUFFN):
    """The gated FFN with GELU as the gate's activation (GeGLU, Shazeer
    2020; Gemma): down(GELU(gate(X)) * up(X)), GELU in its tanh form.

    Same arguments and parameters as :class:`SwiGLUFFN`.
    """

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (..., input_size) -> (..., ffn_num_outputs); TypeError/ValueError
        as :meth:`SwiGLUFFN.forward`."""
        _check_width(X, self.input_size, self)
        gate = F.gelu(self.gate(X), approximate="tanh")
        return self.down(gate * self.up(X))


# The block's options: name -> layer class.
NORMS = {"layer": nn.LayerNorm, "rms": RMSNorm}
FFNS = {"relu": PositionWiseFFN, "swiglu": SwiGLUFFN}


def check_block_options(norm: str, ffn: str) -> None:
    """Refuse a norm other than "layer"/"rms" or an FFN other than "relu"/"swiglu"."""
    if norm not in NORMS:
        raise ValueError(f"norm must be 'layer' or 'rms', got {norm!r}")
    if ffn not in FFNS:
        raise ValueError(f"ffn must be 'relu' or 'swiglu', got {ffn!r}")


class PreNormEncoderBlock(nn.Module):
    """Pre-norm encoder block: X + attention(norm(X)), then + FFN(norm(.)).

    With norm="layer", ffn="relu" and num_kv_heads=None it is
    ``torch.nn.TransformerEncoderLayer(norm_first=True)``; the other options
    give the block of recent decoder-only models (RMSNorm, SwiGLU,
    grouped-query attention).

    Args:
        num_hiddens: D, divisible by num_heads.
        ffn_num_hiddens: hidden width of the FFN.
        num_heads: H.
        dropout: on the attention weights and on each sublayer's output.
        use_bias: biases in the attention projections.
        norm: "layer" (``nn.LayerNorm``) or "rms" (:class:`RMSNorm`).
        ffn: "relu" (:class:`course_pkg.nn.blocks.PositionWiseFFN`) or
            "swiglu" (:class:`SwiGLUFFN`).
        num_kv_heads: key/value heads of the attention (default H).
        rotary: rotary position embedding inside the attention.
    Raises:
        ValueError: on an unknown norm or ffn, or head counts that do not
            divide (see :class:`GroupedQueryAttention`).
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float,
        use_bias: bool = False,
        *,
        norm: str = "layer",
        ffn: str = "relu",
        num_kv_heads: int | None = None,
        rotary: bool = False,
    ):
        super().__init__()
        _check_pre_norm_encoder_block_args(
            num_hiddens, ffn_num_hiddens, num_heads, dropout, norm, ffn,
            num_kv_heads,
        )  # fmt: skip
        norms, ffns = NORMS, FFNS
        self.num_hiddens = num_hiddens
        self.norm1 = norms[norm](num_hiddens)
        self.attention = GroupedQueryAttention(
            num_hiddens,
            num_heads,
            dropout,
            use_bias,
            num_kv_heads=num_kv_heads,
            rotary=rotary,
        )
        self.norm2 = norms[norm](num_hiddens)
        self.ffn = ffns[ffn](ffn_num_hiddens, num_hiddens)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        X: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        causal: bool = False,
    ) -> torch.Tensor:
        """X (B, T, D), valid_lens None or (B,) -> (B, T, D).

        causal=True hides later positions (a decoder-only block).
        Raises TypeError/ValueError if X is not (B, T, D) or valid_lens does
        not fit it.
        """
        _check_pre_norm_encoder_block_forward(self, X)
        normed = self.norm1(X)
        X = X + self.dropout(
            self.attention(normed, normed, normed, valid_lens, causal=causal)
        )
        return X + self.dropout(self.ffn(self.norm2(X)))


def _check_pre_norm_encoder_block_args(
    num_hiddens: object,
    ffn_num_hiddens: object,
    num_heads: object,
    dropout: object,
    norm: object,
    ffn: object,
    num_kv_heads: object,
) -> None:
    """norm and ffn keys of :data:`NORMS` and :data:`FFNS`; the sizes ints
    >= 1 with num_heads dividing num_hiddens and num_kv_heads (None: H)
    dividing num_heads; dropout in [0, 1)."""
    check_block_options(norm, ffn)
    check_block_sizes(
        num_hiddens, ffn_num_hiddens, num_heads, dropout, num_kv_heads
    )


def _check_pre_norm_encoder_block_forward(
    block: PreNormEncoderBlock, X: object
) -> None:
    """X (B, T, D) float, D the block's width, of its dtype and device
    (valid_lens: the attention's checks)."""
    shape = f"(B, T, {block.num_hiddens})"
    check_tensor("X", X, 3, shape)
    check_features("X", X, block.num_hiddens, block)


def _check_width(
    X: object, width: int, module: nn.Module, *, dtype: bool = True
) -> None:
    """X must be a float tensor (..., width) on module's device (and of its
    dtype if ``dtype``)."""
    check_features("X", X, width, module, dtype=dtype)
