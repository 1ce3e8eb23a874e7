"""A tiny Sphinx extension for the course book: one copy of each inline script per page.

Jupyter Book 1 with Sphinx 7.4 emits the inline configuration scripts of
sphinx-thebe and sphinx-togglebutton twice on every page (added once before
and once after the HTML builder starts, with filenames "" and None, which
Sphinx does not see as equal); the second
``const THEBE_JS_URL = ...`` is a JavaScript error in the reader's browser
console (tests/test_browser.py checks for console errors). This extension keeps
the first copy of every script and drops exact repeats.
"""
from __future__ import annotations


def _drop_repeated_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # the same script may come once with filename None and once with "" (Sphinx 7.4)
        key = (getattr(script, "filename", None) or "", repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder and later handlers share this list


def setup(app):
    # early: html-page-context stops at the first handler that returns a template name
    app.connect("html-page-context", _drop_repeated_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
