"""Sphinx extension: Colab and Binder launch buttons only once the course has a public repository.

The one setting is ``repository: url:`` in ``_config.yml``. While it is empty, no launch button
is configured, so no page links to a placeholder (and sphinx-book-theme, which fails on launch
buttons without a repository, builds). Once it is set, both buttons appear on every chapter.
"""

from __future__ import annotations

COLAB_URL = "https://colab.research.google.com"
BINDERHUB_URL = "https://mybinder.org"


def _configure(app, config) -> None:
    options = config.html_theme_options
    launch = dict(options.get("launch_buttons") or {})
    if (options.get("repository_url") or "").strip():
        # jupyter-book fills these with "" by default
        launch["colab_url"] = launch.get("colab_url") or COLAB_URL
        launch["binderhub_url"] = launch.get("binderhub_url") or BINDERHUB_URL
    else:
        launch["colab_url"] = launch["binderhub_url"] = ""
    options["launch_buttons"] = launch


def setup(app):
    app.connect("config-inited", _configure, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
