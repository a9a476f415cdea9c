"""Image captioning with visual attention ("Show, Attend and Tell", Xu et
al. 2015): a small CNN's grid of features as keys and values, and the
Bahdanau decoder of Part I attending over it while it writes.

Chapter: "Attention on images". :class:`GridEncoder` turns a (3, H, W)
image into a G x G grid of D features (three 3 x 3 convolutions, each
followed by ReLU and a 2 x 2 max-pool: H / 8 = G), adds a learned vector
for each cell (the decoder must know *where* a feature is to write "left
of"), and returns them as the encoder outputs the decoder expects, time-major
(G^2, B, D), with an initial state tanh(W mean(features)) for each of the
decoder's L layers. The decoder is
:class:`course_pkg.models.seq2seq.Seq2SeqAttentionDecoder`, unchanged: at each
step its hidden state scores the G^2 cells (additive attention) and reads
their weighted sum; :attr:`ImageCaptioner.attention_weights` keeps (B, Q,
G^2), the weights of every step over every cell.

Xu et al. add a "doubly stochastic" penalty: each step's weights sum to 1
over the cells (the softmax); the penalty pushes each cell's weights to sum
to about 1 over the steps too, lambda sum_i (1 - sum_t alpha_ti)^2
(:func:`doubly_stochastic_penalty`), so that the caption looks at every
part of the image once.

Shape letters (see the package docstring): ``B`` batch, ``C`` channels,
``H = W`` image side, ``G`` grid side, ``D`` width, ``L`` decoder layers,
``Q`` caption steps, ``V`` vocabulary size.
"""

from __future__ import annotations

import torch
from torch import nn

from course_pkg.checks import (
    check_float_tensor,
    check_images,
    check_positive_int,
    check_same_device,
    check_token_ids,
)
from course_pkg.models.seq2seq import Seq2SeqAttentionDecoder
from course_pkg.nn.gru import check_gru_sizes


class GridEncoder(nn.Module):
    """A CNN whose output grid is the decoder's sequence of keys and values.

    Args:
        num_hiddens: D (the decoder's width). num_layers: L, the decoder's
            GRU layers (one initial state each).
        img_size: H = W, a multiple of 8. in_channels: C.
        channels: the width of the first two convolutions.
    Raises:
        TypeError/ValueError: sizes not ints >= 1, img_size not a multiple
            of 8.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_layers: int = 1,
        img_size: int = 32,
        in_channels: int = 3,
        channels: int = 32,
    ):
        _check_grid_encoder_args(
            num_hiddens, num_layers, img_size, in_channels, channels
        )
        super().__init__()
        self.img_size, self.in_channels = img_size, in_channels
        self.num_hiddens, self.num_layers = num_hiddens, num_layers
        self.grid_size = img_size // 8
        layers = []
        for c_in, c_out in (
            (in_channels, channels), (channels, channels),
            (channels, num_hiddens),
        ):  # fmt: skip
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(),
                       nn.MaxPool2d(2)]  # fmt: skip
        self.cnn = nn.Sequential(*layers)
        self.cell_embedding = nn.Parameter(
            torch.randn(self.grid_size**2, num_hiddens) * 0.02
        )
        self.init = nn.Linear(num_hiddens, num_layers * num_hiddens)

    def forward(
        self, images: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Images -> (outputs (G^2, B, D), state (L, B, D)); cell n of the
        outputs is row n // G, column n % G of the grid.

        Raises:
            TypeError/ValueError: images not a float (B, C, H, W) tensor of
                the encoder's sizes, dtype and device.
        """
        check_images("images", images, self.in_channels, self.img_size, self)
        return self._encode(images)

    def _encode(
        self, images: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """forward without the checks."""
        grid = self.cnn(images)  # (B, D, G, G)
        cells = (
            grid.flatten(2).transpose(1, 2) + self.cell_embedding
        )  # (B, G^2, D)
        first = torch.tanh(self.init(cells.mean(1)))  # (B, L D)
        state = first.reshape(-1, self.num_layers, self.num_hiddens)
        return cells.transpose(0, 1), state.transpose(0, 1).contiguous()


def _check_grid_encoder_args(
    num_hiddens: object,
    num_layers: object,
    img_size: object,
    in_channels: object,
    channels: object,
) -> None:
    """Sizes D, L, H, C and channels ints >= 1; img_size a multiple of 8."""
    for name, size in (
        ("num_hiddens", num_hiddens), ("num_layers", num_layers),
        ("img_size", img_size), ("in_channels", in_channels),
        ("channels", channels),
    ):  # fmt: skip
        check_positive_int(name, size)
    if img_size % 8:
        raise ValueError(f"img_size must be a multiple of 8, got {img_size}")


class ImageCaptioner(nn.Module):
    """:class:`GridEncoder` and the Bahdanau decoder of Part I.

    Args:
        vocab_size: V. embed_size: the word embeddings' width.
        num_hiddens: D. num_layers: L. dropout: the decoder's.
        img_size, in_channels, channels: the encoder's.
    Raises:
        TypeError/ValueError: as the encoder and the decoder.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        *,
        img_size: int = 32,
        in_channels: int = 3,
        channels: int = 32,
    ):
        # every size checked before any weight is drawn
        _check_image_captioner_args(
            vocab_size, embed_size, num_hiddens, num_layers, dropout,
            img_size, in_channels, channels,
        )  # fmt: skip
        super().__init__()
        self.encoder = GridEncoder(
            num_hiddens, num_layers, img_size, in_channels, channels
        )
        self.decoder = Seq2SeqAttentionDecoder(
            vocab_size, embed_size, num_hiddens, num_layers, dropout
        )

    def forward(
        self, images: torch.Tensor, dec_X: torch.Tensor
    ) -> torch.Tensor:
        """Scores of every caption position, teacher-forced.

        Args:
            images: (B, C, H, W). dec_X: (B, Q) caption ids, starting with
                <bos>.
        Returns:
            (B, Q, V); :attr:`attention_weights` then holds (B, Q, G^2).
        Raises:
            TypeError/ValueError: images as :meth:`GridEncoder.forward`,
                dec_X not (B, Q) ids in [0, V) of the same B.
        """
        _check_image_captioner_forward(self, images, dec_X)
        encoder = self.encoder
        state = self.decoder.init_state(encoder._encode(images))
        scores, _ = self.decoder(dec_X, state)
        return scores

    @property
    def attention_weights(self) -> torch.Tensor | None:
        """(B, Q, G^2) weights of the last forward call over the cells."""
        return self.decoder.attention_weights


def _check_image_captioner_args(
    vocab_size: object,
    embed_size: object,
    num_hiddens: object,
    num_layers: object,
    dropout: object,
    img_size: object,
    in_channels: object,
    channels: object,
) -> None:
    """The decoder's GRU sizes and dropout; the encoder's sizes (ints >= 1,
    img_size a multiple of 8)."""
    check_gru_sizes(
        vocab_size, embed_size, num_hiddens, num_layers, dropout=dropout
    )
    _check_encoder_sizes(img_size, in_channels, channels)


def _check_image_captioner_forward(
    captioner: ImageCaptioner, images: object, dec_X: object
) -> None:
    """images a float (B, C, H, W) tensor of the model's sizes, dtype and
    device; dec_X (B, Q) ids in [0, V), Q >= 1, of the same B."""
    encoder = captioner.encoder
    check_images(
        "images", images, encoder.in_channels, encoder.img_size, captioner
    )
    check_token_ids("dec_X", dec_X, captioner.decoder.embedding, min_steps=1)
    if dec_X.shape[0] != images.shape[0]:
        raise ValueError(
            f"dec_X must have images' batch size {images.shape[0]}, "
            f"got shape {tuple(dec_X.shape)}"
        )


def greedy_captions(
    model: ImageCaptioner,
    images: torch.Tensor,
    bos: int,
    eos: int,
    max_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Caption each image with the most likely word at every step.

    Args:
        model: an :class:`ImageCaptioner`. images: (B, C, H, W).
        bos, eos: the ids that start and end a caption. max_len: the most
            words (eos included), >= 1.
    Returns:
        ids (B, n) of the words written (after eos: eos), n <= max_len, and
        the weights (B, n, G^2) of the step that wrote each.
    Raises:
        TypeError/ValueError: as :meth:`ImageCaptioner.forward`, ids outside
            the vocabulary, max_len < 1.
    """
    _check_greedy_captions(model, images, bos, eos, max_len)
    encoder, decoder = model.encoder, model.decoder
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            state = decoder.init_state(encoder._encode(images))
            token = images.new_full(
                (images.shape[0], 1), bos, dtype=torch.long
            )
            done = torch.zeros(
                images.shape[0], dtype=torch.bool, device=images.device
            )
            words, weights = [], []
            for _ in range(max_len):
                scores, state = decoder(token, state)  # (B, 1, V)
                token = scores.argmax(-1).masked_fill(done[:, None], eos)
                done = done | (token[:, 0] == eos)
                words.append(token)
                weights.append(decoder.attention_weights)  # (B, 1, G^2)
                if bool(done.all()):
                    break
    finally:
        model.train(was_training)
    return torch.cat(words, dim=1), torch.cat(weights, dim=1)


def _check_greedy_captions(
    model: object, images: object, bos: object, eos: object, max_len: object
) -> None:
    """model an ImageCaptioner; images a float (B, C, H, W) tensor of its
    sizes; bos and eos int ids in [0, V); max_len an int >= 1."""
    if not isinstance(model, ImageCaptioner):
        raise TypeError(
            f"model must be an ImageCaptioner, got {type(model).__name__}"
        )
    encoder, decoder = model.encoder, model.decoder
    check_images(
        "images", images, encoder.in_channels, encoder.img_size, model
    )
    vocab_size = decoder.embedding.num_embeddings
    for name, token in (("bos", bos), ("eos", eos)):
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError(
                f"{name} must be an int id, got {type(token).__name__}"
            )
        if not 0 <= token < vocab_size:
            raise ValueError(
                f"{name} must be in [0, {vocab_size}), got {token}"
            )
    check_positive_int("max_len", max_len)


def doubly_stochastic_penalty(
    weights: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Xu et al.'s penalty sum_i (1 - sum_t alpha_ti)^2, averaged over the
    batch: small when every cell gets a total weight of about 1 over the
    caption's steps.

    Args:
        weights: (B, Q, T) attention weights of Q steps over T cells.
        valid: None, or (B, Q) bool, the steps that count (not padding).
    Returns:
        A scalar.
    Raises:
        TypeError/ValueError: weights not a float (B, Q, T) tensor, valid
            not a bool tensor of shape (B, Q).
    """
    _check_doubly_stochastic_penalty(weights, valid)
    if valid is not None:
        weights = weights * valid[..., None]
    totals = weights.sum(1)  # (B, T): each cell's weight over the steps
    return ((1 - totals) ** 2).sum(1).mean()


def _check_doubly_stochastic_penalty(weights: object, valid: object) -> None:
    """weights a float (B, Q, T) tensor; valid None or a bool (B, Q) tensor
    on its device."""
    check_float_tensor("weights", weights, 3, "(B, Q, T)")
    if valid is not None:
        if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool:
            raise TypeError("valid must be a bool tensor of shape (B, Q)")
        if valid.shape != weights.shape[:2]:
            raise ValueError(
                f"valid must have shape {tuple(weights.shape[:2])}, "
                f"got {tuple(valid.shape)}"
            )
        check_same_device(weights=weights, valid=valid)


def _check_encoder_sizes(
    img_size: object, in_channels: object, channels: object
) -> None:
    """Ints >= 1, img_size a multiple of 8."""
    for name, size in (
        ("img_size", img_size), ("in_channels", in_channels), ("channels", channels),
    ):  # fmt: skip
        check_positive_int(name, size)
    if img_size % 8:
        raise ValueError(f"img_size must be a multiple of 8, got {img_size}")
