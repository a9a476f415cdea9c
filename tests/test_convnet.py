"""The small CNN, the ViT's peer (course_pkg.models.convnet).

- shapes: (B, C, H, W) -> (B, V) for several sizes, rows that do not mix;
- ``convnet_parameters`` equals the parameters of the model it describes;
- ``convnet_channels`` is the width of closest count, the smaller on a tie,
  against a search over every width to 200;
- forward and backward on the meta device, gradcheck in float64;
- bad input refused with an error that names the argument.
"""

from __future__ import annotations

import pytest
import torch

from course_pkg.models.convnet import (
    ConvNet,
    convnet_channels,
    convnet_parameters,
)

F64 = torch.float64
WIDTHS = range(1, 201)


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _closest_by_search(target: int, **sizes: int) -> int:
    """The width of closest count over WIDTHS, the smaller on a tie."""
    return min(
        WIDTHS,
        key=lambda c: (
            abs(convnet_parameters(channels=c, **sizes) - target),
            c,
        ),
    )


@pytest.mark.parametrize(
    ("img_size", "in_channels"), [(28, 1), (32, 3), (4, 1), (12, 2)]
)
def test_forward_gives_one_score_per_class(img_size, in_channels):
    torch.manual_seed(0)
    model = ConvNet(
        num_classes=10, channels=4, img_size=img_size, in_channels=in_channels
    )
    scores = model(torch.randn(3, in_channels, img_size, img_size))
    assert scores.shape == (3, 10) and scores.dtype == torch.float32
    assert torch.isfinite(scores).all()


def test_rows_do_not_mix():
    torch.manual_seed(0)
    model = ConvNet(num_classes=5, channels=3, img_size=12)
    X = torch.randn(4, 1, 12, 12)
    alone = torch.cat([model(x[None]) for x in X])
    torch.testing.assert_close(model(X), alone)


@pytest.mark.parametrize(
    "sizes",
    [
        dict(num_classes=1, channels=1, img_size=4, in_channels=1),
        dict(num_classes=10, channels=1, img_size=28, in_channels=1),
        dict(num_classes=10, channels=8, img_size=28, in_channels=1),
        dict(num_classes=3, channels=5, img_size=32, in_channels=3),
        dict(num_classes=7, channels=16, img_size=8, in_channels=2),
        dict(num_classes=2, channels=40, img_size=12, in_channels=4),
    ],
    ids=str,
)
def test_the_formula_counts_every_parameter(sizes):
    assert convnet_parameters(**sizes) == _count(ConvNet(**sizes))


CONFIGS = [
    dict(num_classes=10, img_size=28, in_channels=1),  # the digits
    dict(num_classes=3, img_size=32, in_channels=3),
    dict(num_classes=2, img_size=8, in_channels=2),
]


@pytest.mark.parametrize("sizes", CONFIGS, ids=str)
@pytest.mark.parametrize(
    "target", [1, 2, 50, 123, 1000, 4321, 19_402, 23_722, 77_777, 300_000]
)
def test_convnet_channels_is_the_closest_width(target, sizes):
    assert convnet_channels(target, **sizes) == _closest_by_search(
        target, **sizes
    )


@pytest.mark.parametrize("channels", [1, 2, 9, 30, 150])
def test_an_exact_count_gives_its_own_width(channels):
    target = convnet_parameters(10, channels)
    assert convnet_channels(target, 10) == channels
    # one parameter either side still rounds to it
    assert convnet_channels(target - 1, 10) == channels
    assert convnet_channels(target + 1, 10) == channels


# with an odd number of input channels two neighbouring widths' counts
# differ by an even number, so a whole number lies halfway between them
@pytest.mark.parametrize("sizes", CONFIGS[:2], ids=str)
@pytest.mark.parametrize("channels", [1, 5, 20, 99])
def test_a_tie_gives_the_smaller_width(channels, sizes):
    low = convnet_parameters(channels=channels, **sizes)
    high = convnet_parameters(channels=channels + 1, **sizes)
    middle = (low + high) // 2
    assert middle - low == high - middle  # as far from both counts
    assert convnet_channels(middle, **sizes) == channels
    assert convnet_channels(middle + 1, **sizes) == channels + 1
    assert _closest_by_search(middle, **sizes) == channels


def test_below_the_smallest_model_the_width_is_one():
    assert convnet_parameters(10, 1) > 1
    assert convnet_channels(1, 10) == 1


def test_forward_and_backward_on_meta():
    model = ConvNet(num_classes=10, channels=4, img_size=16, in_channels=3)
    model = model.to("meta")
    X = torch.randn(2, 3, 16, 16, device="meta", requires_grad=True)
    scores = model(X)
    assert scores.device.type == "meta" and scores.shape == (2, 10)
    scores.sum().backward()
    assert X.grad is not None and X.grad.shape == X.shape
    assert all(p.grad.device.type == "meta" for p in model.parameters())


def test_gradcheck_float64():
    # continuous random inputs: a tie inside a max-pool window, or a
    # pre-activation within gradcheck's step of 0, has probability ~0
    torch.manual_seed(0)
    model = ConvNet(num_classes=3, channels=2, img_size=8, in_channels=2)
    model = model.to(F64)
    names = [name for name, _ in model.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    X = torch.randn(2, 2, 8, 8, dtype=F64, requires_grad=True)

    def scores(X, *weights):
        state = dict(zip(names, weights))
        return torch.func.functional_call(model, state, (X,))

    assert torch.autograd.gradcheck(scores, (X, *params))


# ----------------------------------------------------------------- bad input

GOOD = dict(num_classes=10, channels=4, img_size=8, in_channels=1)
BAD_SIZES = [
    (dict(num_classes=0), ValueError, "num_classes"),
    (dict(num_classes=2.0), TypeError, "num_classes"),
    (dict(channels=-1), ValueError, "channels"),
    (dict(channels=True), TypeError, "channels"),
    (dict(img_size=0), ValueError, "img_size"),
    (dict(img_size=10), ValueError, "img_size"),  # not a multiple of 4
    (dict(img_size=8.0), TypeError, "img_size"),
    (dict(in_channels=0), ValueError, "in_channels"),
    (dict(in_channels="1"), TypeError, "in_channels"),
]


@pytest.mark.parametrize(("bad", "error", "name"), BAD_SIZES)
def test_bad_sizes_are_refused_by_name(bad, error, name):
    sizes = GOOD | bad
    with pytest.raises(error, match=rf"\b{name}\b"):
        ConvNet(**sizes)
    with pytest.raises(error, match=rf"\b{name}\b"):
        convnet_parameters(**sizes)
    if name != "channels":
        sizes["num_parameters"] = 100 * sizes.pop("channels")
        with pytest.raises(error, match=rf"\b{name}\b"):
            convnet_channels(**sizes)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (0, ValueError),
        (-5, ValueError),
        (100.0, TypeError),
        (False, TypeError),
    ],
)
def test_a_bad_parameter_count_is_refused_by_name(bad, error):
    with pytest.raises(error, match="num_parameters"):
        convnet_channels(bad, 10)


@pytest.mark.parametrize(
    ("X", "error"),
    [
        (torch.zeros(1, 8, 8), ValueError),  # no batch axis
        (torch.zeros(2, 1, 1, 8, 8), ValueError),  # one axis too many
        (torch.zeros(2, 3, 8, 8), ValueError),  # 3 channels, the model's 1
        (torch.zeros(2, 1, 4, 8), ValueError),  # H not the model's 8
        (torch.zeros(2, 1, 8, 12), ValueError),  # W not the model's 8
        (torch.zeros(2, 1, 12, 12), ValueError),  # both, square
        (torch.zeros(2, 1, 8, 8, dtype=torch.long), TypeError),
        (torch.zeros(2, 1, 8, 8, dtype=F64), TypeError),  # not the model's
        (torch.zeros(2, 1, 8, 8, device="meta"), ValueError),  # device
        ([[[[0.0] * 8] * 8]], TypeError),
    ],
)
def test_bad_images_are_refused_by_name(X, error):
    model = ConvNet(**GOOD)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(error, match=r"\bX\b"):
        model(X)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name])
