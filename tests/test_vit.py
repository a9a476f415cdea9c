"""The Vision Transformer (course_pkg.models.vit).

- equal to ``torchvision.models.VisionTransformer`` and to ``transformers``'
  ``ViTForImageClassification`` (logits and every token's last hidden state)
  with copied weights, in float64;
- the patch embedding equals cutting the image into patches by hand and one
  linear map;
- 2-D sinusoidal positions: the row half depends on the row only, the
  column half on the column only, with the 1-D formula's values;
- the explicit path (weights kept) equals the fused one, and its weights
  are distributions over the N + 1 tokens;
- the converters refuse a state dict that does not fit.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision

from course_pkg.models.vit import (
    PatchEmbedding,
    ViT,
    attention_cost,
    num_patches,
    sincos_2d_positions,
    vit_from_hf,
    vit_from_torchvision,
)

F64 = torch.float64
SIZES = dict(img_size=8, patch_size=4, num_hiddens=8, mlp_num_hiddens=16)


def _ours(num_blks=2, num_classes=3, **options):
    return ViT(
        SIZES["img_size"], SIZES["patch_size"], SIZES["num_hiddens"],
        SIZES["mlp_num_hiddens"], 2, num_blks, 0.0, 0.0, True, num_classes,
        **options,
    ).to(F64).eval()  # fmt: skip


def _images(batch=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, 8, 8, generator=gen, dtype=F64)


def test_equals_torchvision_vision_transformer():
    torch.manual_seed(0)
    peer = torchvision.models.VisionTransformer(
        image_size=8, patch_size=4, num_layers=2, num_heads=2, hidden_dim=8,
        mlp_dim=16, num_classes=3,
    ).to(F64).eval()  # fmt: skip
    with torch.no_grad():  # non-zero class token and biases
        for p in peer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = _ours(norm_eps=1e-6)
    ours.load_state_dict(vit_from_torchvision(peer.state_dict()))
    X = _images()
    torch.testing.assert_close(ours(X), peer(X), rtol=0, atol=1e-12)


def _hf_model():
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=16, image_size=8, patch_size=4, num_channels=3,
        num_labels=3, layer_norm_eps=1e-6, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ViTForImageClassification(config).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _peer_and_ours(
    norm_eps: float,
) -> tuple[torch.nn.Module, ViT, torch.Tensor]:
    """The peer, ours with its converted weights and that eps, and images."""
    peer = _hf_model()
    ours = _ours(norm_eps=norm_eps)
    ours.load_state_dict(vit_from_hf(peer.state_dict()))
    return peer, ours, _images(seed=1)


def test_equals_transformers_vit_logits_and_hidden_states():
    peer, ours, X = _peer_and_ours(norm_eps=1e-6)
    with torch.no_grad():
        logits = peer(pixel_values=X).logits
        hidden = peer.vit(pixel_values=X).last_hidden_state
    torch.testing.assert_close(ours(X), logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.encode(X), hidden, rtol=0, atol=1e-12)


def test_the_peers_differ_from_a_wrong_eps():
    # the bound above is not loose: eps 1e-5 instead of 1e-6 moves the output
    peer, ours, X = _peer_and_ours(norm_eps=1e-5)
    with torch.no_grad():
        logits = peer(pixel_values=X).logits
    assert (ours(X) - logits).abs().max() > 1e-9


def test_patch_embedding_is_one_linear_map_of_each_patch():
    torch.manual_seed(2)
    layer = PatchEmbedding(8, 4, 6, in_channels=3).to(F64)
    X = _images(batch=2)
    patches = X.unfold(2, 4, 4).unfold(3, 4, 4)  # (B, C, 2, 2, 4, 4)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 4, 3 * 16)
    W = layer.conv.weight.reshape(6, 3 * 16)
    expected = patches @ W.T + layer.conv.bias
    torch.testing.assert_close(layer(X), expected, rtol=0, atol=1e-12)


def test_sincos_2d_positions():
    G, D = 3, 8
    P = sincos_2d_positions(G, D).reshape(G, G, D)
    # the row half is the same along a row, the column half down a column
    assert torch.equal(
        P[:, :1, : D // 2].expand(G, G, D // 2), P[..., : D // 2]
    )
    assert torch.equal(
        P[:1, :, D // 2 :].expand(G, G, D // 2), P[..., D // 2 :]
    )
    # the values of the 1-D formula: sin(r / 10000^(i / (D/4))), then cos
    r, c = 2, 1
    for i in range(D // 4):
        w = 10000.0 ** (-i / (D // 4))
        assert P[r, c, i].item() == pytest.approx(
            torch.tensor(r * w).sin().item()
        )
        assert P[r, c, D // 4 + i].item() == pytest.approx(
            torch.tensor(r * w).cos().item()
        )
        assert P[r, c, D // 2 + i].item() == pytest.approx(
            torch.tensor(c * w).sin().item()
        )


def test_sincos_model_has_fixed_positions_and_a_zero_class_position():
    model = _ours(positions="sincos2d")
    assert "pos_embedding" not in dict(model.named_parameters())
    assert torch.equal(model.pos_embedding[0, 0], torch.zeros(8, dtype=F64))
    grid = sincos_2d_positions(2, 8).to(F64)
    assert torch.equal(model.pos_embedding[0, 1:], grid)


def test_explicit_path_equals_fused_and_keeps_distributions():
    torch.manual_seed(3)
    model = _ours()
    X = _images()
    fused = model(X)
    explicit = model(X, need_weights=True)
    torch.testing.assert_close(explicit, fused, rtol=0, atol=1e-12)
    maps = model.attention_maps()
    assert [m.shape for m in maps] == [(5, 2, 5, 5)] * 2
    for weights in maps:
        torch.testing.assert_close(
            weights.sum(-1), torch.ones(5, 2, 5, dtype=F64), rtol=0, atol=1e-12
        )
    model(X)  # a fused call keeps none
    with pytest.raises(ValueError, match="need_weights"):
        model.attention_maps()


def test_patch_counts_and_attention_cost():
    assert num_patches(28, 7) == 16 and num_patches(28, 4) == 49
    assert attention_cost(28, 7, 64) == 2 * 17 * 17 * 64
    assert (
        attention_cost(28, 4, 64) * 17**2 == attention_cost(28, 7, 64) * 50**2
    )


def test_converters_refuse_a_state_dict_that_does_not_fit():
    torch.manual_seed(0)
    peer = torchvision.models.VisionTransformer(
        image_size=8, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8,
        mlp_dim=16, num_classes=3,
    )  # fmt: skip
    state = peer.state_dict()
    missing = {k: v for k, v in state.items() if k != "encoder.ln.weight"}
    with pytest.raises(ValueError, match="encoder.ln.weight"):
        vit_from_torchvision(missing)
    with pytest.raises(ValueError, match="does not know"):
        vit_from_torchvision(state | {"extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="q, k and v"):
        bad = dict(state)
        name = "encoder.layers.encoder_layer_0.self_attention.in_proj_weight"
        bad[name] = bad[name][:-1]
        vit_from_torchvision(bad)
    with pytest.raises(TypeError, match="state_dict"):
        vit_from_hf([("a", torch.zeros(1))])
