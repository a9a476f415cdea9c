"""Checkpoints: verified before anything is loaded, every accepted value
round-trips, bad files are refused with a named error and change nothing."""

import os
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from course_pkg.checkpoint import load_checkpoint, save_checkpoint
from course_pkg.seq2seq import Seq2SeqSettings


def model(seed=0, width=4):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 2))


def snapshot(module):
    return {k: v.clone() for k, v in module.state_dict().items()}


def assert_unchanged(module, before):
    after = module.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "model.pt"
    first = model(0)
    optimizer = torch.optim.Adam(first.parameters(), lr=0.1)
    first(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    save_checkpoint(path, first, optimizer, step=3)
    return path, first


def test_round_trip_restores_model_optimizer_and_extra(saved):
    path, first = saved
    second = model(1)
    optimizer = torch.optim.Adam(second.parameters(), lr=0.1)
    assert load_checkpoint(path, second, optimizer) == {"step": 3}
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            first.state_dict().values(), second.state_dict().values()
        )
    )
    assert optimizer.state_dict()["state"][0]["step"] == 1


def test_file_mode_respects_the_umask_like_torch_save(saved, tmp_path):
    path, first = saved
    torch.save(first.state_dict(), tmp_path / "plain.pt")
    plain_mode = os.stat(tmp_path / "plain.pt").st_mode & 0o777
    assert os.stat(path).st_mode & 0o777 == plain_mode


EXTRA_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=5)
    | st.sampled_from(
        [np.float32(1.5), np.int64(-3), np.bool_(True), np.float64(2.0)]
    )
    | st.builds(pathlib.Path, st.sampled_from(["a/b.txt", "/tmp/x", "."]))
    | st.just(Seq2SeqSettings()),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(value=EXTRA_VALUES)
def test_every_accepted_extra_value_round_trips_with_its_type(tmp_path, value):
    path = tmp_path / "extra.pt"
    save_checkpoint(path, model(), value=value)
    loaded = load_checkpoint(path, model())["value"]

    def same(a, b):
        assert type(a) is type(b)
        if isinstance(a, (list, tuple)):
            assert len(a) == len(b) and all(map(same, a, b)) is not None
        elif isinstance(a, dict):
            assert a.keys() == b.keys()
            for key in a:
                same(a[key], b[key])
        else:
            assert a == b
        return True

    same(value, loaded)


@pytest.mark.parametrize(
    "value",
    [object(), {1.5: "x"}, {"a": {2, 3}}, complex(1, 2), torch.nn.ReLU()],
)
def test_unsavable_extra_values_are_refused_before_writing(tmp_path, value):
    path = tmp_path / "bad.pt"
    with pytest.raises(TypeError, match="extra"):
        save_checkpoint(path, model(), extra_value=value)
    assert not path.exists()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_flipped_or_cut_bytes_are_refused_and_change_nothing(saved, data):
    path, _ = saved
    good = path.read_bytes()
    kind = data.draw(st.sampled_from(["flip", "truncate"]))
    if kind == "flip":
        at = data.draw(st.integers(0, len(good) - 1))
        bad = good[:at] + bytes([good[at] ^ 0x01]) + good[at + 1 :]
    else:
        bad = good[: data.draw(st.integers(0, len(good) - 1))]
    corrupted = path.with_name("corrupted.pt")
    corrupted.write_bytes(bad)
    target = model(1)
    optimizer = torch.optim.Adam(target.parameters(), lr=0.1)
    before = snapshot(target)
    with pytest.raises(ValueError, match="corrupted|not a course_pkg"):
        load_checkpoint(corrupted, target, optimizer)
    assert_unchanged(target, before)
    assert optimizer.state_dict()["state"] == {}


@pytest.mark.parametrize("contents", ["empty", "garbage", "foreign"])
def test_empty_garbage_and_foreign_files_are_refused(tmp_path, contents):
    path = tmp_path / "other.pt"
    if contents == "foreign":
        torch.save(model().state_dict(), path)
    else:
        path.write_bytes(b"" if contents == "empty" else os.urandom(300))
    with pytest.raises(ValueError, match="not a course_pkg checkpoint"):
        load_checkpoint(path, model())


def test_another_models_checkpoint_is_refused_before_any_copy(saved):
    path, _ = saved
    other = model(2, width=5)
    before = snapshot(other)
    with pytest.raises(ValueError, match="shape"):
        load_checkpoint(path, other)
    assert_unchanged(other, before)
    wider = nn.Sequential(model(2), nn.Linear(2, 2))
    with pytest.raises(ValueError, match="missing keys"):
        load_checkpoint(path, wider)


def test_a_dtype_mismatch_is_refused(saved):
    path, _ = saved
    with pytest.raises(ValueError, match="dtype"):
        load_checkpoint(path, model(1).double())


def test_asking_for_a_missing_optimizer_changes_nothing(tmp_path):
    path = tmp_path / "no_opt.pt"
    save_checkpoint(path, model(0))
    target = model(1)
    before = snapshot(target)
    with pytest.raises(ValueError, match="no optimizer state"):
        load_checkpoint(
            path, target, torch.optim.SGD(target.parameters(), lr=1)
        )
    assert_unchanged(target, before)


@pytest.mark.parametrize(
    "args, error",
    [
        (("x.pt", "model"), TypeError),
        (("x.pt", nn.Linear(1, 1), "adam"), TypeError),
        ((3, nn.Linear(1, 1)), TypeError),
    ],
)
def test_wrong_argument_types_are_named(tmp_path, args, error):
    for function in (save_checkpoint, load_checkpoint):
        with pytest.raises(error, match="model|optimizer|path"):
            function(*args)
