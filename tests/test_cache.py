"""The on-disk cache of computed values (files.cached_json) and the corpus kept in it."""

from __future__ import annotations

import json

import pytest

from course_pkg.data import corpus
from course_pkg.files import cache_dir, cached_json


class Counting:
    """A compute function that counts its calls."""

    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return self.value


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_value_is_computed_once_per_key_and_comes_back_as_json(folder):
    compute = Counting({"pairs": [("a", "b")], "n": 3})
    first = cached_json("thing", "key-1", compute)
    second = cached_json("thing", "key-1", compute)
    assert first == second == {"pairs": [["a", "b"]], "n": 3}
    assert compute.calls == 1
    assert (folder / "thing.json").is_file()
    # another key: computed again and stored in place of the old value
    assert cached_json("thing", "key-2", Counting([1])) == [1]
    assert cached_json("thing", "key-1", compute) == first
    assert compute.calls == 2


@pytest.mark.parametrize(
    "damage",
    ["truncate", "garbage", "value", "digest", "empty"],
)
def test_a_damaged_file_is_recomputed_and_rewritten(folder, damage):
    compute = Counting(["x", 1.5])
    cached_json("thing", "k", compute)
    path = folder / "thing.json"
    text = path.read_text(encoding="utf-8")
    if damage == "truncate":
        path.write_text(text[: len(text) // 2], encoding="utf-8")
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        record = json.loads(text)
        if damage == "value":  # the value changed, its digest not
            record["value"] = json.dumps(["y", 1.5])
        else:
            record["sha256"] = "0" * 64
        path.write_text(json.dumps(record), encoding="utf-8")
    assert cached_json("thing", "k", compute) == ["x", 1.5]
    assert compute.calls == 2
    assert cached_json("thing", "k", compute) == ["x", 1.5]
    assert compute.calls == 2  # the rewritten file is read


def test_no_folder_or_an_unwritable_one_still_gives_the_value(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("COURSE_CACHE_DIR", "")
    assert cache_dir() is None
    compute = Counting([2])
    assert cached_json("thing", "k", compute) == [2]
    assert cached_json("thing", "k", compute) == [2]
    assert compute.calls == 2
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("COURSE_CACHE_DIR", str(blocker / "cache"))
    assert cached_json("thing", "k", compute) == [2]
    assert compute.calls == 3


def test_the_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("COURSE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "course_pkg"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "course_pkg"


def test_the_cached_corpus_and_labels_equal_freshly_generated_ones(
    folder, monkeypatch
):
    def fresh():
        corpus._generate_corpus.cache_clear()
        corpus.english_sentence_labels.cache_clear()
        return (
            corpus.english_french_corpus(3, 60),
            corpus.english_sentence_labels(3, 60),
        )

    written = fresh()  # generated, then stored
    assert sorted(p.name for p in folder.iterdir()) == [
        "corpus-3-60.json",
        "labels-3-60.json",
    ]
    read = fresh()  # read back from the files
    monkeypatch.setenv("COURSE_CACHE_DIR", "")
    generated = fresh()  # no cache at all
    assert written == read == generated
    assert isinstance(read[0][0], list) and isinstance(read[0][0][0], tuple)
    assert isinstance(read[1][0][0], tuple)
    # a file made by other code (another key) is not used
    record = json.loads(
        (folder / "corpus-3-60.json").read_text(encoding="utf-8")
    )
    record["key"] = "from an older grammar"
    record["value"] = json.dumps([[["a", "b"]], [], []])
    (folder / "corpus-3-60.json").write_text(
        json.dumps(record), encoding="utf-8"
    )
    monkeypatch.setenv("COURSE_CACHE_DIR", str(folder))
    assert fresh() == generated
