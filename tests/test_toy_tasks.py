"""The toy tasks of course_pkg.experiments.toy_tasks: the attention options of CopyBack,
the checks of ``shift``, and the devices the helpers draw their tokens for.
"""

import numpy as np
import pytest
import torch

from course_pkg.experiments.toy_tasks import (
    CopyBack,
    NeighbourReader,
    accuracy_by_position,
    neighbour_accuracy,
    neighbour_batch,
    train_copy_back,
    train_neighbour_reader,
)
from course_pkg.nn.attention import MultiHeadAttention
from course_pkg.nn.grouped_query import GroupedQueryAttention
from course_pkg.nn.positional import PositionalEncoding


def _tokens(batch=3, steps=7, vocab=10, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, steps), generator=generator)


def test_default_copy_back_uses_multi_head_attention():
    model = CopyBack(PositionalEncoding(32, 0.0))
    assert type(model.attention) is MultiHeadAttention


@pytest.mark.parametrize(
    "options", [dict(num_kv_heads=2), dict(num_kv_heads=1), dict(rotary=True)]
)
def test_copy_back_options_give_grouped_query_attention(options):
    model = CopyBack(None, **options)
    assert isinstance(model.attention, GroupedQueryAttention)
    assert model.attention.num_kv_heads == options.get("num_kv_heads", 2)
    assert (model.attention.rotary is not None) == options.get("rotary", False)
    assert isinstance(model.positional, torch.nn.Identity)
    assert model(_tokens()).shape == (3, 7, 10)


@pytest.mark.usefixtures("float64")
def test_copy_back_with_as_many_kv_heads_as_heads_is_the_default():
    torch.manual_seed(0)
    default = CopyBack(PositionalEncoding(32, 0.0))
    grouped = CopyBack(PositionalEncoding(32, 0.0), num_kv_heads=2)
    grouped.load_state_dict(default.state_dict())
    tokens = _tokens()
    assert torch.allclose(grouped(tokens), default(tokens), rtol=0, atol=1e-12)


@pytest.mark.usefixtures("float64")
def test_without_positions_only_rotary_sees_the_order():
    # With nothing added to the embeddings, attention without rotary is
    # permutation-equivariant; with rotary the scores depend on offsets.
    tokens = _tokens(steps=9)
    order = torch.randperm(9, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    plain = CopyBack(None, num_kv_heads=2)
    rotary = CopyBack(None, num_kv_heads=2, rotary=True)
    rotary.load_state_dict(plain.state_dict())
    assert torch.allclose(
        plain(tokens[:, order]), plain(tokens)[:, order], rtol=0, atol=1e-12
    )
    assert not torch.allclose(
        rotary(tokens[:, order]), rotary(tokens)[:, order], atol=1e-3
    )


@pytest.mark.parametrize(
    "options", [dict(), dict(rotary=True, num_kv_heads=1)]
)
def test_copy_back_variants_forward_and_backward(device, options):
    positional = None if options else PositionalEncoding(32, 0.0)
    model = CopyBack(positional, **options).to(device)
    scores = model(_tokens().to(device))
    assert scores.device.type == device.type and scores.shape == (3, 7, 10)
    scores.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_accuracy_by_position_draws_on_the_cpu_for_any_device(device):
    torch.manual_seed(0)
    model = CopyBack(None, rotary=True)
    on_cpu = accuracy_by_position(model, 12, seed=5)
    moved = accuracy_by_position(model.to(device), 12, seed=5)
    assert moved.shape == (10,) and moved.device.type == device.type
    if device.type != "meta":
        # The same sequences: the same counts of correct answers. A GPU
        # takes the mean of the 1,000 0/1 values in another order, which
        # may round the last bit (seen on an H100: equal to 4 decimals,
        # not bit for bit); one flipped answer would move it by 1e-3.
        assert (moved.cpu() - on_cpu).abs().max() < 1e-6


def test_accuracy_by_position_seed_changes_the_sequences():
    torch.manual_seed(0)
    model = CopyBack(PositionalEncoding(32, 0.0))
    assert not torch.equal(
        accuracy_by_position(model, 12, seed=2),
        accuracy_by_position(model, 12, seed=3),
    )


def test_train_copy_back_seeds_are_arguments():
    def train(**seeds):
        return train_copy_back(None, num_steps=3, rotary=True, **seeds)

    first, again = train(seed=0, data_seed=1), train(seed=0, data_seed=1)
    other_data = train(seed=0, data_seed=2)
    weights = [m.readout.weight for m in (first, again, other_data)]
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], weights[2])


def test_trainers_run_on_the_device(device):
    copy_back = train_copy_back(None, num_steps=2, rotary=True, device=device)
    reader = train_neighbour_reader(2, num_steps=2, device=device)
    for model in (copy_back, reader):
        assert model.readout.weight.device.type == device.type


def test_neighbour_helpers_move_tokens_to_the_device(device):
    generator = torch.Generator().manual_seed(0)
    tokens, left, right = neighbour_batch(4, generator, device=device)
    assert {t.device.type for t in (tokens, left, right)} == {device.type}
    if device.type != "meta":  # neighbour_accuracy returns numbers
        torch.manual_seed(0)
        model = NeighbourReader(2).to(device)
        left_acc, right_acc = neighbour_accuracy(
            model, tokens.cpu(), left.cpu(), right.cpu()
        )
        assert 0 <= left_acc <= 1 and 0 <= right_acc <= 1


@pytest.mark.parametrize("shift", [0, -1, 16, 17])
def test_train_copy_back_refuses_a_shift_outside_the_lengths(shift):
    state = torch.get_rng_state()
    with pytest.raises(ValueError, match="shift"):
        train_copy_back(None, num_steps=1, shift=shift, rotary=True)
    assert torch.equal(torch.get_rng_state(), state)  # refused before seeding


@pytest.mark.parametrize("shift", [0, -1, 12, 13])
def test_accuracy_by_position_refuses_a_shift_outside_the_length(shift):
    model = CopyBack(PositionalEncoding(32, 0.0))
    with pytest.raises(ValueError, match="shift"):
        accuracy_by_position(model, 12, shift=shift)


def test_shift_must_be_an_int():
    model = CopyBack(PositionalEncoding(32, 0.0))
    with pytest.raises(TypeError, match="shift"):
        accuracy_by_position(model, 12, shift=1.5)
    with pytest.raises(TypeError, match="shift"):
        train_copy_back(None, shift=2.0, rotary=True)
    # An offset, so a Python int (checks.check_size), not a NumPy integer.
    with pytest.raises(TypeError, match="shift must be an int, got int64"):
        accuracy_by_position(model, 12, shift=np.int64(2))


def test_the_largest_and_smallest_shifts_work():
    torch.manual_seed(0)
    model = CopyBack(PositionalEncoding(32, 0.0))
    assert accuracy_by_position(model, 12, shift=1).shape == (11,)
    assert accuracy_by_position(model, 12, shift=11).shape == (1,)
    trained = train_copy_back(None, num_steps=2, shift=15, rotary=True)
    assert isinstance(trained, CopyBack)
