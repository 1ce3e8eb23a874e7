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

And it links every page to the same page in the other edition: the English book
is at the site's root, the Chinese edition (built by ``book/editions.py`` with
``language: zh_CN``) under ``zh/``.

In the Chinese build it also lets a translated paragraph use ``{glue:text}`key```:
Sphinx parses each translation as a small document of its own, which lacks the
notebook's glue data, and myst-nb 1.4 then reports "No key ... found in glue data".
The translation is given the data of the notebook it belongs to.

Exercise titles (the argument of sphinx-exercise's ``exercise`` directive) carry no
source line, so Sphinx would neither extract nor translate them; they are marked
translatable here. And sphinx-exercise's own zh_CN catalog lacks "Solution":
``locales/zh_CN/LC_MESSAGES/exercise.po`` supplies it.
"""
from __future__ import annotations

from pathlib import Path

from sphinx.transforms import SphinxTransform

LOCALES = Path(__file__).resolve().parents[2] / "locales"  # book/_ext -> the repository's locales/

_NB_RENDERERS: dict = {}  # docname -> the notebook's myst-nb renderer (which holds its glue data)


class _TranslatableExerciseTitles(SphinxTransform):
    """Give exercise subtitles a source and line: then gettext extracts them and Locale translates them."""

    default_priority = 15  # before Sphinx's Locale transform (20)

    def apply(self, **kwargs):
        from sphinx_exercise.nodes import exercise_subtitle

        for node in self.document.findall(exercise_subtitle):
            if not node.source:
                node.source = self.document["source"]
                node.line = node.parent.line or node.parent.parent.line or 1
                node.rawsource = node.astext()  # the titles are plain text


def _glue_in_translations() -> None:
    """Let myst-nb's glue roles and directives inside a translated message find their notebook's data."""
    from myst_nb.ext.glue import directives, roles, utils

    original = utils.retrieve_glue_data

    def retrieve_glue_data(document, key):
        env = getattr(document.settings, "env", None)
        if env is not None:
            if "nb_renderer" in document:      # the notebook itself, while it is parsed (English text)
                _NB_RENDERERS[env.docname] = document["nb_renderer"]
            elif env.docname in _NB_RENDERERS:  # then a translation of one of its paragraphs
                document["nb_renderer"] = _NB_RENDERERS[env.docname]
                try:
                    return original(document, key)
                finally:  # only for this lookup: the renderer must not be pickled with the doctree
                    del document["nb_renderer"]
        return original(document, key)

    roles.retrieve_glue_data = directives.retrieve_glue_data = retrieve_glue_data


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


def _edition_link(app, pagename, templatename, context, doctree):
    """A link at the top of every page to the same page in the other language."""
    if "body" not in context:
        return
    up = "../" * pagename.count("/")  # from this page to its edition's root
    if (app.config.language or "en").startswith("zh"):
        href, label, lang, title = f"{up}../{pagename}.html", "English", "en", "Read this page in English"
    else:
        href, label, lang, title = f"{up}zh/{pagename}.html", "中文", "zh-CN", "阅读本页的中文版"
    link = (f'<p class="edition-link" style="text-align: right; margin: 0;">'
            f'<a class="edition-link" href="{href}" hreflang="{lang}" lang="{lang}" title="{title}">{label}</a></p>\n')
    context["body"] = link + context["body"]


def _exercise_labels(app):
    """Add the course's catalog for sphinx-exercise's labels, behind sphinx-exercise's own."""
    language = app.config.language or "en"
    if language == "en" or not (LOCALES / language / "LC_MESSAGES" / "exercise.po").exists():
        return
    from sphinx.locale import init
    from sphinx.util.i18n import CatalogInfo

    info = CatalogInfo(str(LOCALES / language / "LC_MESSAGES"), "exercise", "utf-8")
    if info.is_outdated():
        info.write_mo(language)
    init([str(LOCALES)], language, "exercise")


def setup(app):
    # early: html-page-context stops at the first handler that returns a template name
    app.connect("html-page-context", _keep_needed_scripts, priority=100)
    app.connect("html-page-context", _edition_link)
    app.add_transform(_TranslatableExerciseTitles)
    app.connect("builder-inited", _exercise_labels)
    app.connect("config-inited", lambda app, config: _glue_in_translations()
                if (config.language or "en") != "en" else None)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
