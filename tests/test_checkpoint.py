"""Checkpoints: verified before anything is loaded, every accepted value
round-trips, bad files are refused with a named error and change nothing."""

import copy
import os
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from course_pkg.models.seq2seq import Seq2SeqSettings
from course_pkg.training.checkpoint import load_checkpoint, save_checkpoint


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


# Exhaustive, not sampled: every one-byte change and every cut of a small
# checkpoint (a 1x1 linear layer and its SGD momentum: about 2.8 kB, so about
# 12 000 refusals, a few seconds) must be refused before anything is copied.
# Three XOR masks per byte: 0x01 (a hex digit stays a hex digit, so the digest
# check must catch it), 0x20 (a lowercase hex letter becomes uppercase) and
# 0x80 (no longer ASCII). The newline after the digest (once never read: any
# byte there passed) and the digest's first and last byte also take each of
# their 255 other values.
FLIP_MASKS = (0x01, 0x20, 0x80)
MAGIC_LEN = len(b"course_pkg checkpoint v2\n")
HEADER_LEN = MAGIC_LEN + 64 + 1
EVERY_VALUE_AT = (MAGIC_LEN, MAGIC_LEN + 63, MAGIC_LEN + 64)


def _small_checkpoint(path):
    torch.manual_seed(0)
    source = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(source.parameters(), lr=0.1, momentum=0.9)
    source(torch.ones(1, 1)).sum().backward()
    optimizer.step()
    save_checkpoint(path, source, optimizer, step=1)
    return path.read_bytes()


def _every_corruption(good):
    for at in range(len(good)):
        for mask in FLIP_MASKS:
            yield good[:at] + bytes([good[at] ^ mask]) + good[at + 1 :]
    for at in EVERY_VALUE_AT:
        for value in range(256):
            if value != good[at] and value ^ good[at] not in FLIP_MASKS:
                yield good[:at] + bytes([value]) + good[at + 1 :]
    for length in range(len(good)):
        yield good[:length]


def test_every_flipped_byte_and_every_cut_is_refused_and_changes_nothing(
    tmp_path,
):
    good = _small_checkpoint(tmp_path / "good.pt")
    assert good[HEADER_LEN - 1 : HEADER_LEN] == b"\n"
    torch.manual_seed(1)
    target = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(target.parameters(), lr=0.5, momentum=0.5)
    target(torch.ones(1, 1)).sum().backward()
    optimizer.step()
    before = snapshot(target)
    optimizer_before = copy.deepcopy(optimizer.state_dict())
    corrupted = tmp_path / "corrupted.pt"
    count = 0
    for bad in _every_corruption(good):
        # a new file each time: rewriting one in place makes ext4 flush it
        corrupted.write_bytes(bad)
        with pytest.raises(ValueError, match="corrupted|not a course_pkg"):
            load_checkpoint(corrupted, target, optimizer)
        corrupted.unlink()
        count += 1
    assert count == 4 * len(good) + len(EVERY_VALUE_AT) * (
        255 - len(FLIP_MASKS)
    )
    assert_unchanged(target, before)
    after = optimizer.state_dict()
    assert after["param_groups"] == optimizer_before["param_groups"]
    for index, state in optimizer_before["state"].items():
        assert torch.equal(
            after["state"][index]["momentum_buffer"],
            state["momentum_buffer"],
        )
    # and the good file still loads into it
    corrupted.write_bytes(good)
    assert load_checkpoint(corrupted, target, optimizer) == {"step": 1}


@pytest.mark.parametrize(
    "at, value, error",
    [
        (MAGIC_LEN + 64, b"X", "byte 89 .*newline"),
        (MAGIC_LEN + 3, b"A", "byte 28 .*hex"),
        (3, b"x", "not a course_pkg checkpoint"),
    ],
)
def test_a_bad_header_byte_is_named(tmp_path, at, value, error):
    good = _small_checkpoint(tmp_path / "good.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(good[:at] + value + good[at + 1 :])
    with pytest.raises(ValueError, match=error):
        load_checkpoint(bad, nn.Linear(1, 1))


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
