"""A tiny Sphinx extension for the course book: only the scripts the book uses, once each.

Jupyter Book 1 with Sphinx 7.4 emits the inline configuration scripts of
sphinx-thebe and sphinx-togglebutton twice on every page (added once before
and once after the HTML builder starts, with filenames "" and None, which
Sphinx does not see as equal); the second
``const THEBE_JS_URL = ...`` is a JavaScript error in the reader's browser
console (tests/test_browser.py checks for console errors). This extension keeps
the first copy of every script and drops exact repeats.

It also drops sphinx-thebe's scripts: the book offers no live code cells (use
the Colab and Binder buttons), and thebe would load its code from a CDN, while
every page of this book must work with no network.
"""
from __future__ import annotations


def _keep_needed_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        name = getattr(script, "filename", None) or ""
        body = getattr(script, "attributes", {}).get("body", "")
        if name.endswith("sphinx-thebe.js") or "THEBE_JS_URL" in body:
            continue  # no thebe: it would load from a CDN
        # the same script may come once with filename None and once with "" (Sphinx 7.4)
        key = (name, repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder and later handlers share this list


def setup(app):
    # early: html-page-context stops at the first handler that returns a template name
    app.connect("html-page-context", _keep_needed_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
