"""The book's configuration: launch buttons follow the one repository setting, toc and notebooks agree."""

from __future__ import annotations

import importlib.util
import pathlib
import re
from types import SimpleNamespace

import pytest
import yaml

from tests.toc_notebooks import LONGEST, toc_files, toc_notebooks, toc_part

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _launch_extension():
    spec = importlib.util.spec_from_file_location(
        "launch_buttons", ROOT / "_ext" / "launch_buttons.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _configured(repository_url: str) -> dict:
    # What jupyter-book hands Sphinx: empty launch URLs by default.
    options = {
        "repository_url": repository_url,
        "launch_buttons": {"colab_url": "", "binderhub_url": ""},
    }
    _launch_extension()._configure(
        None, SimpleNamespace(html_theme_options=options)
    )
    return options["launch_buttons"]


def test_no_launch_button_without_a_repository():
    launch = _configured("")
    assert not launch["colab_url"] and not launch["binderhub_url"]


def test_launch_buttons_once_the_repository_is_set():
    launch = _configured("https://github.com/owner/attention-tested")
    assert launch["colab_url"].startswith("https://colab.research.google.com")
    assert launch["binderhub_url"].startswith("https://mybinder.org")


def test_config_keeps_the_promises_of_the_readme():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert (
        config["execute"]["execute_notebooks"] == "off"
    )  # nbval runs them; the build reads outputs
    assert config["html"]["use_download_button"] is True
    assert "sphinx-mathjax-offline" in config["sphinx"]["extra_extensions"]
    assert {"dollarmath", "amsmath", "colon_fence"} <= set(
        config["parse"]["myst_enable_extensions"]
    )


def test_every_chapter_notebook_is_in_the_toc():
    listed = set(toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text())))
    notebooks = {
        p.relative_to(ROOT).with_suffix("").as_posix()
        for p in (ROOT / "book").glob("*.ipynb")
    }
    assert notebooks <= listed, (
        f"not in _toc.yml, so neither built nor tested: {sorted(notebooks - listed)}"
    )
    assert toc_notebooks(), "nbval would have nothing to run"


def test_the_two_parts_of_the_portable_pass_are_every_notebook_once():
    first, second = toc_part(1), toc_part(2)
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(toc_notebooks())
    # a renamed notebook would silently move to part 2
    assert [p.relative_to(ROOT).with_suffix("").as_posix() for p in first] == [
        name
        for name in toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
        if name in LONGEST
    ]
    assert len(first) == len(LONGEST)
    with pytest.raises(ValueError, match="part"):
        toc_part(3)


def test_the_bibliography_parses_without_duplicate_keys():
    """book/references.bib is valid BibTeX (a missing brace stops the book build)."""
    from pybtex.database import parse_file

    bib = ROOT / "book" / "references.bib"
    keys = re.findall(
        r"^@\w+\{([^,]+),", bib.read_text(encoding="utf-8"), re.M
    )
    assert len(keys) == len(set(keys)), "duplicate keys in references.bib"
    assert len(parse_file(str(bib)).entries) == len(keys)
