"""The Vision Transformer (Dosovitskiy et al. 2021): an image cut into
patches, each patch a token, read by a stack of pre-norm encoder blocks.

Chapter: "Attention on images". A (C, H, W) image becomes N = (H / p)(W / p)
patches of p x p pixels; one linear map (a convolution of kernel and stride
p) sends each to a vector of width D (:class:`PatchEmbedding`). A learned
class token is put in front, positions are added, and the N + 1 tokens go
through the encoder blocks of Part I in their pre-norm form
(:class:`ViTBlock`: X + MHA(LN(X)), then X + MLP(LN(X)), a GELU MLP). The
class token's output, normalised, is the image's representation; a linear
head maps it to the class scores.

Names and arguments follow d2l's ViT (``img_size``, ``patch_size``,
``num_hiddens``, ``mlp_num_hiddens``, ``num_heads``, ``num_blks``,
``emb_dropout``, ``blk_dropout``, ``use_bias``); beyond d2l, ``in_channels``
(no lazy layers), ``norm_eps`` (torchvision's ViT uses 1e-6, Hugging Face's
1e-12) and ``positions``: ``"learned"`` (a learned vector per position, as
in the paper, d2l, torchvision and Hugging Face) or ``"sincos2d"`` (fixed
2-D sinusoids, :func:`sincos_2d_positions`). The tests check the model equal
to ``torchvision.models.VisionTransformer`` and to ``transformers``'
``ViTModel`` with copied weights (``vit_from_torchvision``,
``vit_from_hf``).

Shape letters (see the package docstring): ``B`` batch, ``C`` channels,
``H``, ``W`` image height and width (here ``img_size``), ``p`` patch size,
``N`` patches, ``D`` width, ``V`` classes.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from course_pkg.checks import (
    check_block_sizes,
    check_choice,
    check_features,
    check_images,
    check_positive_int,
    check_positive_number,
    check_probability,
    check_sizes,
    check_tensor,
)
from course_pkg.models.hf_weights import (
    StateDict,
    _check_all_used,
    _check_state_dict,
    _count_blocks,
    _take,
)
from course_pkg.nn.attention import MultiHeadAttention
from course_pkg.nn.blocks import PositionWiseFFN

POSITIONS = ("learned", "sincos2d")


def sincos_2d_positions(
    grid_size: int, num_hiddens: int, temperature: float = 10000.0
) -> torch.Tensor:
    """Fixed 2-D sinusoidal positions: the first D/2 numbers encode a
    patch's row, the last D/2 its column, each half with the 1-D sinusoids
    of the Transformer (sines then cosines of D/4 frequencies).

    Args:
        grid_size: the patches per side, G (N = G^2).
        num_hiddens: D, divisible by 4.
        temperature: the base of the frequencies.
    Returns:
        (N, D) float32, row-major over the grid (patch n = row * G + column).
    Raises:
        TypeError/ValueError: sizes not ints >= 1, D not divisible by 4,
            temperature not a number > 0.
    """
    _check_sincos_2d_positions(grid_size, num_hiddens, temperature)
    quarter = num_hiddens // 4
    frequencies = temperature ** (-torch.arange(quarter) / quarter)  # (D/4,)
    coordinate = torch.arange(grid_size, dtype=torch.float32)
    angles = coordinate[:, None] * frequencies[None, :]  # (G, D/4)
    one_axis = torch.cat([angles.sin(), angles.cos()], dim=1)  # (G, D/2)
    rows = one_axis.repeat_interleave(grid_size, dim=0)  # (N, D/2)
    columns = one_axis.repeat(grid_size, 1)  # (N, D/2)
    return torch.cat([rows, columns], dim=1)


def _check_sincos_2d_positions(
    grid_size: object, num_hiddens: object, temperature: object
) -> None:
    """grid_size G and num_hiddens D ints >= 1, D divisible by 4;
    temperature a number > 0."""
    check_positive_int("grid_size", grid_size)
    check_positive_int("num_hiddens", num_hiddens)
    check_positive_number("temperature", temperature)
    if num_hiddens % 4:
        raise ValueError(
            f"num_hiddens must be divisible by 4, got {num_hiddens}"
        )


class PatchEmbedding(nn.Module):
    """Cut an image into p x p patches and map each to D numbers: a
    convolution with kernel and stride p.

    Args:
        img_size: H = W, divisible by patch_size. patch_size: p.
        num_hiddens: D. in_channels: C.
    Raises:
        TypeError/ValueError: sizes not ints >= 1, img_size not divisible by
            patch_size.
    """

    def __init__(
        self,
        img_size: int = 96,
        patch_size: int = 16,
        num_hiddens: int = 512,
        *,
        in_channels: int = 3,
    ):
        _check_patch_embedding_args(
            img_size, patch_size, num_hiddens, in_channels
        )
        super().__init__()
        self.img_size, self.in_channels = img_size, in_channels
        self.num_patches = (img_size // patch_size) ** 2
        self.conv = nn.Conv2d(
            in_channels, num_hiddens, kernel_size=patch_size, stride=patch_size
        )

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N, D), the patches in row-major order.

        Raises:
            TypeError/ValueError: X not a float (B, C, H, W) tensor of the
                layer's sizes, dtype and device.
        """
        check_images("X", X, self.in_channels, self.img_size, self)
        return self._embed(X)

    def _embed(self, X: torch.Tensor) -> torch.Tensor:
        """forward without the checks."""
        return self.conv(X).flatten(2).transpose(1, 2)  # (B, N, D)


def _check_patch_embedding_args(
    img_size: object,
    patch_size: object,
    num_hiddens: object,
    in_channels: object,
) -> None:
    """img_size and patch_size ints >= 1, img_size divisible by patch_size;
    num_hiddens D and in_channels C ints >= 1."""
    _check_patches(img_size, patch_size)
    check_positive_int("num_hiddens", num_hiddens)
    check_positive_int("in_channels", in_channels)


class ViTBlock(nn.Module):
    """The pre-norm encoder block of the ViT: X + MHA(LN(X)), then
    X + MLP(LN(X)) with a GELU MLP; dropout on each sublayer's output (and
    inside the MLP, after the GELU, as d2l does).

    Args:
        num_hiddens: D, divisible by num_heads. norm_shape: D (the layer
            norms' shape, as in d2l). mlp_num_hiddens: the MLP's width.
        num_heads: H. dropout: in [0, 1). use_bias: biases in the attention
            projections. norm_eps: the layer norms' eps.
    Raises:
        TypeError/ValueError: on sizes that are not ints >= 1, D not
            divisible by H, norm_shape other than D, a dropout outside
            [0, 1) or norm_eps not > 0.
    """

    def __init__(
        self,
        num_hiddens: int,
        norm_shape: int,
        mlp_num_hiddens: int,
        num_heads: int,
        dropout: float,
        use_bias: bool = False,
        *,
        norm_eps: float = 1e-5,
    ):
        _check_vit_block_args(
            num_hiddens, norm_shape, mlp_num_hiddens, num_heads, dropout,
            norm_eps,
        )  # fmt: skip
        super().__init__()
        self.num_hiddens = num_hiddens
        self.ln1 = nn.LayerNorm(norm_shape, eps=norm_eps)
        self.attention = MultiHeadAttention(
            num_hiddens, num_heads, dropout, use_bias
        )
        self.ln2 = nn.LayerNorm(norm_shape, eps=norm_eps)
        self.mlp = PositionWiseFFN(
            mlp_num_hiddens, num_hiddens, activation="gelu"
        )
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, X: torch.Tensor, *, need_weights: bool = True
    ) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); every token attends to every token.

        need_weights: keep the attention weights
        (``attention.attention_weights``, (B, H, T, T)); False takes the
        fused path.

        Raises:
            TypeError/ValueError: X not a float (B, T, D) tensor of the
                block's width, dtype and device.
        """
        _check_vit_block_forward(self, X)
        return self._block(X, need_weights)

    def _block(self, X: torch.Tensor, need_weights: bool) -> torch.Tensor:
        """forward without the checks."""
        normed = self.ln1(X)
        attended = self.attention(
            normed, normed, normed, need_weights=need_weights
        )
        X = X + self.dropout(attended)
        return X + self.dropout(self.mlp(self.ln2(X)))


def _check_vit_block_args(
    num_hiddens: object,
    norm_shape: object,
    mlp_num_hiddens: object,
    num_heads: object,
    dropout: object,
    norm_eps: object,
) -> None:
    """Sizes ints >= 1 with D divisible by H; dropout in [0, 1); norm_shape
    equal to D; norm_eps a number > 0."""
    check_sizes(mlp_num_hiddens=mlp_num_hiddens)
    check_block_sizes(num_hiddens, mlp_num_hiddens, num_heads, dropout)
    if norm_shape != num_hiddens:
        raise ValueError(
            f"norm_shape must equal num_hiddens={num_hiddens}, "
            f"got {norm_shape!r}"
        )
    check_positive_number("norm_eps", norm_eps)


def _check_vit_block_forward(block: ViTBlock, X: object) -> None:
    """X a float (B, T, D) tensor of the block's width, dtype and device."""
    check_features("X", X, block.num_hiddens, block, shape="(B, T, D)")
    check_tensor("X", X, 3, "(B, T, D)")


class ViT(nn.Module):
    """The Vision Transformer: patches + a class token + positions, num_blks
    :class:`ViTBlock`, a final layer norm on the class token, a linear head.

    Args:
        img_size: H = W. patch_size: p, dividing img_size.
        num_hiddens: D. mlp_num_hiddens: the blocks' MLP width.
        num_heads: H. num_blks: blocks.
        emb_dropout: on the tokens after the positions are added.
        blk_dropout: inside the blocks.
        use_bias: biases in the attention projections.
        num_classes: V.
        in_channels: C. norm_eps: every layer norm's eps.
        positions: "learned" or "sincos2d" (module docstring).
    Attributes:
        cls_token: (1, 1, D), zeros at first. pos_embedding: (1, N + 1, D),
            learned (N(0, 0.02) at first) or a fixed buffer (the class token
            at position 0 gets zeros).
    Raises:
        TypeError/ValueError: on a size that is not an int >= 1, img_size
            not divisible by patch_size, D not divisible by H (or by 4 for
            sincos2d), a dropout outside [0, 1), norm_eps not > 0 or unknown
            positions.
    """

    def __init__(
        self,
        img_size: int,
        patch_size: int,
        num_hiddens: int,
        mlp_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        emb_dropout: float,
        blk_dropout: float,
        use_bias: bool = False,
        num_classes: int = 10,
        *,
        in_channels: int = 3,
        norm_eps: float = 1e-5,
        positions: str = "learned",
    ):
        _check_vit_args(
            img_size, patch_size, num_hiddens, mlp_num_hiddens, num_heads,
            num_blks, emb_dropout, blk_dropout, num_classes, in_channels,
            norm_eps, positions,
        )  # fmt: skip
        super().__init__()
        self.patch_embedding = PatchEmbedding(
            img_size, patch_size, num_hiddens, in_channels=in_channels
        )
        num_steps = self.patch_embedding.num_patches + 1  # the class token
        self.cls_token = nn.Parameter(torch.zeros(1, 1, num_hiddens))
        if positions == "learned":
            self.pos_embedding = nn.Parameter(
                torch.randn(1, num_steps, num_hiddens) * 0.02
            )
        else:
            grid = sincos_2d_positions(img_size // patch_size, num_hiddens)
            fixed = torch.cat([torch.zeros(1, num_hiddens), grid])[None]
            self.register_buffer("pos_embedding", fixed)  # (1, N + 1, D)
        self.dropout = nn.Dropout(emb_dropout)
        self.blks = nn.ModuleList(
            ViTBlock(
                num_hiddens,
                num_hiddens,
                mlp_num_hiddens,
                num_heads,
                blk_dropout,
                use_bias,
                norm_eps=norm_eps,
            )  # fmt: skip
            for _ in range(num_blks)
        )
        self.norm = nn.LayerNorm(num_hiddens, eps=norm_eps)
        self.head = nn.Linear(num_hiddens, num_classes)

    def forward(
        self, X: torch.Tensor, *, need_weights: bool = False
    ) -> torch.Tensor:
        """Class scores of a batch of images.

        Args:
            X: (B, C, H, W) float images of the model's size, dtype and
                device.
            need_weights: keep each block's attention weights (for
                :meth:`attention_maps`); False takes the fused path.
        Returns:
            (B, V).
        Raises:
            TypeError/ValueError: X not such a tensor.
        """
        check_images("X", X, self.patch_embedding.in_channels,
                      self.patch_embedding.img_size, self)  # fmt: skip
        return self.head(self._encode(X, need_weights)[:, 0])

    def encode(
        self, X: torch.Tensor, *, need_weights: bool = False
    ) -> torch.Tensor:
        """Every token's final representation, the final norm applied.

        Args: as :meth:`forward`.
        Returns:
            (B, N + 1, D); position 0 is the class token.
        """
        check_images("X", X, self.patch_embedding.in_channels,
                      self.patch_embedding.img_size, self)  # fmt: skip
        return self._encode(X, need_weights)

    def attention_maps(self) -> list[torch.Tensor]:
        """Each block's attention weights of the last call with
        need_weights=True: a list of num_blks (B, H, N + 1, N + 1).

        Raises:
            ValueError: if the last call kept no weights.
        """
        maps = [blk.attention.attention_weights for blk in self.blks]
        if any(weights is None for weights in maps):
            raise ValueError(
                "no attention weights: call the model with need_weights=True"
            )
        return maps

    def _encode(self, X: torch.Tensor, need_weights: bool) -> torch.Tensor:
        """(B, C, H, W) -> (B, N + 1, D), unchecked."""
        patches = self.patch_embedding._embed(X)  # (B, N, D)
        cls = self.cls_token.expand(X.shape[0], -1, -1)  # (B, 1, D)
        H = self.dropout(torch.cat([cls, patches], dim=1) + self.pos_embedding)
        for blk in self.blks:
            H = blk._block(H, need_weights)
        return self.norm(H)


def _check_vit_args(
    img_size: object,
    patch_size: object,
    num_hiddens: object,
    mlp_num_hiddens: object,
    num_heads: object,
    num_blks: object,
    emb_dropout: object,
    blk_dropout: object,
    num_classes: object,
    in_channels: object,
    norm_eps: object,
    positions: object,
) -> None:
    """img_size divisible by patch_size; sizes ints >= 1 with D divisible by
    H (and by 4 for sincos2d); dropouts in [0, 1); norm_eps > 0; positions
    one of POSITIONS."""
    _check_patches(img_size, patch_size)
    check_sizes(mlp_num_hiddens=mlp_num_hiddens)
    check_probability("emb_dropout", emb_dropout)
    check_probability("blk_dropout", blk_dropout)
    check_block_sizes(num_hiddens, mlp_num_hiddens, num_heads, 0.0)
    for name, size in (
        ("num_blks", num_blks), ("num_classes", num_classes),
        ("in_channels", in_channels),
    ):  # fmt: skip
        check_positive_int(name, size)
    check_positive_number("norm_eps", norm_eps)
    check_choice("positions", positions, POSITIONS)
    if positions == "sincos2d" and num_hiddens % 4:
        raise ValueError(
            "sincos2d positions need num_hiddens divisible by 4, "
            f"got {num_hiddens}"
        )


def _check_patches(img_size: object, patch_size: object) -> None:
    """Ints >= 1, img_size divisible by patch_size."""
    check_positive_int("img_size", img_size)
    check_positive_int("patch_size", patch_size)
    if img_size % patch_size:
        raise ValueError(
            f"img_size={img_size} must be divisible by patch_size={patch_size}"
        )


def num_patches(img_size: int, patch_size: int) -> int:
    """N = (img_size / patch_size)^2, the tokens an image becomes (the
    class token not counted).

    Raises:
        TypeError/ValueError: as :class:`PatchEmbedding`.
    """
    _check_patches(img_size, patch_size)
    return (img_size // patch_size) ** 2


def attention_cost(img_size: int, patch_size: int, num_hiddens: int) -> int:
    """Multiply-adds of one block's attention scores and weighted sum,
    2 (N + 1)^2 D: quadratic in the number of patches, so a patch half as
    wide costs about 16 times as much.

    Raises:
        TypeError/ValueError: as :class:`PatchEmbedding`, num_hiddens not an
            int >= 1.
    """
    check_positive_int("num_hiddens", num_hiddens)
    tokens = num_patches(img_size, patch_size) + 1
    return 2 * tokens * tokens * num_hiddens


def vit_from_torchvision(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """A :class:`ViT` state dict from ``torchvision.models.VisionTransformer``'s.

    torchvision keeps the three input projections in one ``in_proj_weight``
    (3D, D), q then k then v; everything else is renamed.

    Args:
        state_dict: ``VisionTransformer.state_dict()`` (with its ``heads.head``;
            no ``representation_size`` layer).
    Returns:
        {name: tensor} for ``ViT(..., use_bias=True, norm_eps=1e-6)``.
    Raises:
        TypeError: state_dict not a mapping of str to tensors.
        ValueError: a tensor missing, left over or of the wrong shape.
    """
    theirs = _check_state_dict("state_dict", state_dict)
    num_blks = _count_blocks(
        theirs, r"encoder\.layers\.encoder_layer_(\d+)\.ln_1\.weight"
    )
    ours = {
        "cls_token": "class_token",
        "pos_embedding": "encoder.pos_embedding",
        "patch_embedding.conv.weight": "conv_proj.weight",
        "patch_embedding.conv.bias": "conv_proj.bias",
        "norm.weight": "encoder.ln.weight",
        "norm.bias": "encoder.ln.bias",
        "head.weight": "heads.head.weight",
        "head.bias": "heads.head.bias",
    }
    fused = {}
    for i in range(num_blks):
        layer = f"encoder.layers.encoder_layer_{i}."
        for kind in ("weight", "bias"):
            for our, their in (
                ("ln1", "ln_1"), ("ln2", "ln_2"), ("mlp.dense1", "mlp.0"),
                ("mlp.dense2", "mlp.3"),
                ("attention.W_o", "self_attention.out_proj"),
            ):  # fmt: skip
                ours[f"blks.{i}.{our}.{kind}"] = f"{layer}{their}.{kind}"
            fused[i, kind] = f"{layer}self_attention.in_proj_{kind}"
    used: set[str] = set()
    state = {our: _take(theirs, their, used) for our, their in ours.items()}
    for (i, kind), name in fused.items():
        W = _take(theirs, name, used)
        if W.shape[0] % 3:
            raise ValueError(
                f"state_dict[{name!r}] must stack q, k and v (3 D rows), "
                f"got shape {tuple(W.shape)}"
            )
        for part, chunk in zip("qkv", W.chunk(3, dim=0)):
            state[f"blks.{i}.attention.W_{part}.{kind}"] = chunk
    _check_all_used(theirs, used)
    return state


def vit_from_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """A :class:`ViT` state dict from ``transformers``'
    ``ViTForImageClassification``'s (or ``ViTModel``'s, prefixed ``vit.``,
    without a classifier: then the head is left out).

    Args:
        state_dict: the model's ``state_dict()``.
    Returns:
        {name: tensor} for ``ViT(..., use_bias=True, norm_eps=<the
        config's layer_norm_eps>)`` (strict loading needs the head).
    Raises:
        TypeError: state_dict not a mapping of str to tensors.
        ValueError: a tensor missing or left over.
    """
    theirs = _check_state_dict("state_dict", state_dict)
    theirs = {
        name.removeprefix("vit."): tensor
        for name, tensor in theirs.items()
        if not name.startswith("vit.pooler.")
    }
    num_blks = _count_blocks(
        theirs, r"layers\.(\d+)\.layernorm_before\.weight"
    )
    ours = {
        "cls_token": "embeddings.cls_token",
        "pos_embedding": "embeddings.position_embeddings",
        "patch_embedding.conv.weight": "embeddings.patch_embeddings.projection.weight",
        "patch_embedding.conv.bias": "embeddings.patch_embeddings.projection.bias",
        "norm.weight": "layernorm.weight",
        "norm.bias": "layernorm.bias",
    }
    if "classifier.weight" in theirs:
        ours |= {
            "head.weight": "classifier.weight",
            "head.bias": "classifier.bias",
        }
    for i in range(num_blks):
        for kind in ("weight", "bias"):
            for our, their in (
                ("ln1", "layernorm_before"), ("ln2", "layernorm_after"),
                ("mlp.dense1", "mlp.fc1"), ("mlp.dense2", "mlp.fc2"),
                ("attention.W_q", "attention.q_proj"),
                ("attention.W_k", "attention.k_proj"),
                ("attention.W_v", "attention.v_proj"),
                ("attention.W_o", "attention.o_proj"),
            ):  # fmt: skip
                ours[f"blks.{i}.{our}.{kind}"] = f"layers.{i}.{their}.{kind}"
    used: set[str] = set()
    state = {our: _take(theirs, their, used) for our, their in ours.items()}
    _check_all_used(theirs, used)
    return state
