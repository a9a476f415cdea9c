"""Sphinx extension: drop script tags that appear twice on a page.

Sphinx 7.4 writes inline scripts added with ``add_js_file(None, body=...)`` twice, so
sphinx-thebe's ``const THEBE_JS_URL`` is declared twice and every page logs a script error
(fixed upstream in Sphinx 8, which jupyter-book 1.x cannot use).
"""

from __future__ import annotations


def _drop_duplicate_scripts(
    app, pagename, templatename, context, doctree
) -> None:
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (
            getattr(script, "filename", script) or "",
            tuple(sorted(getattr(script, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
