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
translatable here.

For the reader of either edition:

- Search order (``search_scorer.js``, Sphinx's ``html_search_scorer``): the chapter whose title is the
  query comes first, not the page whose title sorts first as text ("10." before "4.").
- Every page has a ``<meta name="description">``: its first paragraph of prose (or its title), in
  the page's language, shortened to about 160 characters.
- ``static/course.css``: long inline code and headings may break, so that no page is wider than a
  phone's screen.

The rest is for the Chinese edition only (a build whose ``language`` is not English):

- The words the extensions and the theme write themselves (sphinx-exercise's
  "Solution", Sphinx's "Link to this heading", the theme's buttons and footer) come
  from ``locales/zh_CN/LC_MESSAGES/exercise.po``, put in front of their own
  catalogs. sphinx-book-theme writes a few words into its templates in English (its
  sidebar buttons' titles); they are read through the translation here.
- An exercise's title reads "练习 5.1（数值稳定的 softmax）": sphinx-exercise puts the
  title between half-width parentheses.
- Search: Sphinx indexes Chinese text cut into words by jieba, but the search page
  splits a query only at spaces and punctuation, so a Chinese query of several words
  (自注意力) matched no indexed word, and single-character words (键, 值) were never
  indexed. jieba gets the course's terms as a user dictionary (``html_search_options``,
  written by book/editions.py); the search page cuts the query, longest word first,
  into words of that dictionary and of the index; single-character terms are kept.
- Nodes that a translated message brings into a page no longer refer to the small
  document the message was parsed in: that document's settings hold the whole build
  environment, which was then saved with every page (a 3 MB doctree for chapter 13)
  and loaded again for every cross-reference.
"""

from __future__ import annotations

import json
from pathlib import Path

from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform

LOCALES = Path(__file__).resolve().parents[2] / "locales"  # book/_ext -> the repository's locales/
HERE = Path(__file__).resolve().parent
DESCRIPTION_CHARS = 160  # search engines show about this much of a page's description

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
            if "nb_renderer" in document:  # the notebook itself, while it is parsed (English text)
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
    link = (
        f'<p class="edition-link" style="text-align: right; margin: 0;">'
        f'<a class="edition-link" href="{href}" hreflang="{lang}" lang="{lang}" title="{title}">{label}</a></p>\n'
    )
    context["body"] = link + context["body"]


def _first_paragraph(doctree) -> str:
    """The text of the page's first paragraph of prose: not in a code cell's output, an exercise or an admonition."""
    from docutils import nodes

    for paragraph in doctree.findall(nodes.paragraph):
        parent, prose = paragraph.parent, True
        while parent is not None:
            classes = parent.get("classes", []) if isinstance(parent, nodes.Element) else []
            if isinstance(parent, nodes.Admonition) or any(
                c.startswith(("cell", "exercise", "solution")) for c in classes
            ):
                prose = False
                break
            parent = parent.parent
        text = " ".join(paragraph.astext().split())
        if prose and text:
            return text
    return ""


def _shorten(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """``text`` cut to ``limit`` characters, at a space when it has spaces (English), with "…"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"


def _meta_description(app, pagename, templatename, context, doctree):
    """<meta name="description">: the page's first paragraph (in this edition's language), else its title."""
    import html
    import re

    if 'name="description"' in context.get("metatags", ""):
        return
    text = _first_paragraph(doctree) if doctree is not None else ""
    if not text:  # the search page, the index: "title – the book's title"
        title = " ".join(html.unescape(re.sub(r"<[^>]+>", "", context.get("title") or "")).split())
        project = context.get("docstitle") or app.config.project or ""
        text = f"{title} – {project}" if title and project and title != project else title or project
    context["metatags"] = (
        context.get("metatags", "") + f'\n<meta name="description" content="{html.escape(_shorten(text))}" />'
    )


# With MathJax's formulas out of the Tab order (_config.yml), a displayed formula wider than a phone
# scrolls sideways where a keyboard cannot reach it: such a formula, and only it, is a Tab stop, as the
# theme does for code boxes and tables. An inline formula wider than its line (MathJax does not break
# lines) would widen the whole page: it gets a sideways-scrolling box of its own (course.css). Both
# are updated when the window changes size.
SCROLLING_MATH_JS = """
(() => {
  const update = () => {
    const all = [...document.querySelectorAll("mjx-container")];
    all.forEach((m) => m.classList.remove("course-wide-math"));
    all.filter((m) => m.getAttribute("display") !== "true").forEach((m) => {
      const line = m.parentElement.closest("p, li, dd, td, th, div") || document.body;
      if (m.getBoundingClientRect().width > line.clientWidth) m.classList.add("course-wide-math");
    });
    all.forEach((m) => { m.tabIndex = m.scrollWidth > m.clientWidth + 1 ? 0 : -1; });
  };
  let timer = null;
  const later = () => { clearTimeout(timer); timer = setTimeout(update, 200); };
  const start = () => {
    if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return;
    MathJax.startup.promise.then(() => { update(); new ResizeObserver(later).observe(document.body); });
  };
  if (document.readyState === "complete") start(); else window.addEventListener("load", start);
})();
"""


def _reader_settings(app, config):
    """The search order and the stylesheet, for both editions (see the module's docstring)."""
    if not config.html_search_scorer:
        config.html_search_scorer = str(HERE / "search_scorer.js")
    config.html_static_path.append(str(HERE / "static"))
    app.add_css_file("course.css")
    app.add_js_file(None, body=SCROLLING_MATH_JS)


def _translated(app) -> bool:
    return (app.config.language or "en") != "en"


def _our_catalog(language: str):
    """locales/<language>/LC_MESSAGES/exercise.po, compiled, as a new translations object (or None)."""
    import gettext

    from sphinx.util.i18n import CatalogInfo

    info = CatalogInfo(str(LOCALES / language / "LC_MESSAGES"), "exercise", "utf-8")
    if not Path(info.po_path).exists():
        return None
    if info.is_outdated():
        info.write_mo(language)
    with open(info.mo_path, "rb") as mo:
        return gettext.GNUTranslations(mo)


def _put_our_catalog_first(app, domain: str):
    """Our words first, then the domain's own catalogs (extensions', theme's, Sphinx's) behind them."""
    from sphinx import locale

    ours = _our_catalog(app.config.language)
    if ours is None:
        return None
    key = ("general", domain)
    if key in locale.translators:
        ours.add_fallback(locale.translators[key])
    locale.translators[key] = ours
    return ours


def _catalog_for_templates(app, config):
    """Sphinx's own words and those of the theme's templates (domain "sphinx"): before the builder
    gives the templates app.translator."""
    if _translated(app):
        ours = _put_our_catalog_first(app, "sphinx")
        if ours is not None:
            app.translator = ours


def _catalogs_for_extensions(app):
    """sphinx-exercise's and sphinx-book-theme's words (looked up when they are written)."""
    if _translated(app):
        for domain in ("exercise", "booktheme"):
            _put_our_catalog_first(app, domain)


# English that sphinx-book-theme writes into its templates as it is: template -> attribute values
THEME_WORDS = {
    "toggle-primary-sidebar.html": ['title="Toggle primary sidebar"'],
    "toggle-secondary-sidebar.html": ['title="Toggle secondary sidebar"'],
    "sbt-sidebar-nav.html": ['aria-label="Main"'],
    "layout.html": ['aria-label="Page"'],
}


def _translatable_theme_words(app):
    """The theme's templates above, with those words read through the translation (ours: exercise.po)."""
    import jinja2

    templates = getattr(app.builder, "templates", None)
    if not _translated(app) or not hasattr(templates, "loaders"):
        return
    sources = {}
    for name, attributes in THEME_WORDS.items():
        source = templates.get_source(templates.environment, name)[0]
        for attribute in attributes:
            key, text = attribute.split("=", 1)
            source = source.replace(attribute, f'{key}="{{{{ _({text}) }}}}"')
        sources[name] = source
    templates.loaders.insert(0, jinja2.DictLoader(sources))


class _FullWidthExerciseTitles(SphinxPostTransform):
    """练习 5.1（数值稳定的 softmax）: full-width parentheses around an exercise's title in Chinese."""

    default_priority = 21  # after sphinx-exercise's ResolveTitlesInExercises (20)

    def run(self, **kwargs):
        from docutils import nodes
        from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node

        if not (self.config.language or "en").startswith("zh"):
            return
        for node in self.document.findall(lambda n: isinstance(n, (exercise_node, exercise_enumerable_node))):
            title = node.children[0] if node.children else None
            if not isinstance(title, nodes.title):
                continue
            for child in list(title.children):
                if isinstance(child, nodes.Text) and str(child) in (" (", ")"):
                    title.replace(child, nodes.Text("（" if str(child) == " (" else "）"))


def _adopt_translated_nodes(app, doctree):
    """Nodes of a translated message belong to the page, not to the message's own small document."""
    if not _translated(app):
        return
    for node in doctree.findall(include_self=False):
        if getattr(node, "_document", None) not in (None, doctree):
            node.document = doctree


# ------------------------------------------------------------------ Chinese search

SPLIT_QUERY_JS = r"""
/* book/_ext/course_html.py: split a Chinese query into the words of the index (see its docstring) */
const COURSE_WORDS = new Set(@WORDS@);
function splitQuery(query) {
  const index = (typeof Search !== "undefined" && Search._index) || {};
  const has = (table, word) => !!table && Object.prototype.hasOwnProperty.call(table, word);
  const known = (word) => COURSE_WORDS.has(word) || has(index.terms, word) || has(index.titleterms, word);
  const words = [];
  for (const token of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    for (const part of token.match(/\p{Script=Han}+|[^\p{Script=Han}]+/gu) || []) {
      if (!/\p{Script=Han}/u.test(part)) {
        words.push(part);
        continue;
      }
      for (let i = 0; i < part.length; ) {      // the longest known word first
        let j = Math.min(part.length, i + @LONGEST@);
        while (j > i + 1 && !known(part.slice(i, j))) j--;
        words.push(part.slice(i, j));
        i = j;
      }
    }
  }
  return words;
}
"""


def _course_search_language():
    """Sphinx's Chinese search (jieba) with the course's dictionary on both sides (see the docstring)."""
    from sphinx.search.zh import JIEBA, SearchChinese

    class CourseSearchChinese(SearchChinese):
        def init(self, options):
            super().init(options)  # loads options["dict"] into jieba
            path = Path(options.get("dict") or "")
            self.words = set(path.read_text(encoding="utf-8").split()) if path.is_file() else set()
            self.latin_terms = set()  # Sphinx's is a list, searched for every word of every page
            words = json.dumps(sorted(self.words), ensure_ascii=False)
            longest = max([8] + [len(w) for w in self.words])
            self.js_splitter_code = SPLIT_QUERY_JS.replace("@WORDS@", words).replace("@LONGEST@", str(longest))

        def split(self, input):
            import jieba

            chinese = list(jieba.cut_for_search(input)) if JIEBA else []
            latin = [term.strip() for term in self.latin1_letters.findall(input)]
            self.latin_terms.update(latin)
            return chinese + latin

        def word_filter(self, stemmed_word):
            return len(stemmed_word) > 1 or stemmed_word in self.words  # 键, 值, 头, 批

    return CourseSearchChinese


def _chinese_search(app, config):
    if (config.language or "en").startswith("zh"):
        app.add_search_language(_course_search_language())


def setup(app):
    # early: html-page-context stops at the first handler that returns a template name
    app.connect("html-page-context", _keep_needed_scripts, priority=100)
    app.connect("html-page-context", _edition_link)
    app.connect("html-page-context", _meta_description)
    app.connect("config-inited", _reader_settings)
    app.add_transform(_TranslatableExerciseTitles)
    app.add_post_transform(_FullWidthExerciseTitles)
    app.connect("config-inited", _catalog_for_templates)
    app.connect("config-inited", _chinese_search)
    app.connect("builder-inited", _catalogs_for_extensions)
    app.connect("builder-inited", _translatable_theme_words)
    app.connect("doctree-read", _adopt_translated_nodes)
    app.connect(
        "config-inited", lambda app, config: _glue_in_translations() if (config.language or "en") != "en" else None
    )
    return {"parallel_read_safe": True, "parallel_write_safe": True}
