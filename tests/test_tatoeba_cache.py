"""The download cache is verified, not trusted (issue 15, item 4)."""

import hashlib
import zipfile

import pytest

from course_pkg.data.tatoeba import download_fra_eng

TEXT = "Go.\tVa !\nHi.\tSalut !\n"


@pytest.fixture
def source(tmp_path):
    """A fra-eng.zip reachable by a file:// URL, and its sha1."""
    folder = tmp_path / "remote"
    folder.mkdir()
    archive_path = folder / "fra-eng.zip"
    with zipfile.ZipFile(archive_path, "w") as archive:
        archive.writestr("fra-eng/fra.txt", TEXT)
    sha1 = hashlib.sha1(archive_path.read_bytes()).hexdigest()
    return archive_path.as_uri(), sha1, tmp_path / "cache"


@pytest.mark.parametrize(
    "edit", [b"", b"Go.\tVa !\n", b"Go.\tPars !\nHi.\tSalut !\n"]
)
def test_an_edited_or_emptied_cached_text_is_extracted_again(source, edit):
    url, sha1, cache = source
    path = download_fra_eng(cache, url=url, sha1=sha1)
    path.write_bytes(edit)
    assert download_fra_eng(cache, url=url, sha1=sha1).read_text() == TEXT


def test_an_upper_case_sha1_accepts_the_right_file(source):
    url, sha1, cache = source
    assert (
        download_fra_eng(cache, url=url, sha1=sha1.upper()).read_text() == TEXT
    )


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"sha1": None}, TypeError, "sha1"),
        ({"sha1": "abc"}, ValueError, "sha1"),
        ({"sha1": "g" * 40}, ValueError, "sha1"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": "5"}, TypeError, "timeout"),
        ({"url": b"file:///x"}, TypeError, "url"),
    ],
)
def test_bad_arguments_are_refused_before_any_file_is_written(
    source, kwargs, error, name
):
    url, sha1, cache = source
    arguments = {"url": url, "sha1": sha1, **kwargs}
    with pytest.raises(error, match=name):
        download_fra_eng(cache, **arguments)
    assert not cache.exists()
