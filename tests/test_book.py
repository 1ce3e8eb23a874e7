"""The book builds with warnings as errors, and the HTML works with no network."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
ZH = HTML / "zh"
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.slow


def test_book_builds_without_warnings(book_build):
    log = book_build.stdout + book_build.stderr
    assert book_build.returncode == 0, f"jupyter-book build -W failed:\n{log[-6000:]}"
    # The kernel's own notice about its local TCP transport is not a warning about the book.
    kernel_notice = "Kernel is running over TCP without encryption"
    warnings = [l for l in log.splitlines() if ("WARNING" in l or "ERROR" in l) and kernel_notice not in l]
    assert not warnings, "\n".join(warnings)
    assert (HTML / "index.html").exists()


def _html_files():
    return sorted(HTML.rglob("*.html"))


def test_no_script_from_the_network(book_build):
    assert book_build.returncode == 0
    remote = re.compile(r"""<script[^>]*\ssrc=["'](?:https?:)?//""", re.I)
    offenders = [p.relative_to(HTML).as_posix() for p in _html_files() if remote.search(p.read_text("utf-8"))]
    assert not offenders, f"pages load JavaScript from the network: {offenders}"
    cdns = ("unpkg.com", "cdn.jsdelivr.net", "cdnjs.cloudflare.com", "mathjax.org")
    mentions = [(p.relative_to(HTML).as_posix(), c) for p in _html_files() for c in cdns if c in p.read_text("utf-8")]
    assert not mentions, f"pages mention a CDN: {mentions}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_page(book_build, chapter):
    assert book_build.returncode == 0
    page = HTML / "notebooks" / f"{chapter}.html"
    html = page.read_text("utf-8")
    # MathJax is served from the book itself, and the page has math for it to typeset.
    assert re.search(r"""<script[^>]*src=["'][./]*_static/mathjax/[^"']*\.js""", html), "no local MathJax"
    assert (HTML / "_static" / "mathjax").is_dir()
    assert re.search(r'class="math[ "]', html), "no math on the page"
    # Outputs are in the page: at least one figure, exercises, solutions in closed dropdowns.
    assert re.search(r'<img[^>]+src="[^"]+\.png"', html), "no figure"
    assert "<figcaption" in html, "no figure with a caption (cell metadata mystnb.figure.caption)"
    assert 'class="exercise' in html
    assert re.search(r'class="[^"]*solution[^"]*dropdown', html), "solutions are not dropdowns"
    for img in re.findall(r'<img[^>]+src="([^"]+)"', html):
        if not img.startswith(("http", "data:")):
            assert (page.parent / img).resolve().exists(), f"missing image {img}"


def test_launch_and_repository_buttons(book_build):
    assert book_build.returncode == 0
    html = (HTML / "notebooks" / f"{CHAPTERS[0]}.html").read_text("utf-8")
    for what in ("colab.research.google.com", "mybinder.org", "/issues"):
        assert what in html, f"no {what} button"


# ------------------------------------------------------------------ the Chinese edition (_build/html/zh)


def _images(page: Path) -> list[str]:
    """The article's figures, by file name (Sphinx names an output image by a hash of its content)."""
    html = page.read_text("utf-8")
    return [Path(src).name for src in re.findall(r'<img[^>]+src="([^"]+_images/[^"]+\.png)"', html)]


def test_chinese_edition_has_one_title(book_build):
    """The site's title, the introduction's heading and the browser tab agree (book/editions.py takes
    the site's title from the introduction's catalog); the parts of the table of contents are Chinese."""
    assert book_build.returncode == 0
    html = (ZH / "book" / "intro.html").read_text("utf-8")
    heading = re.search(r"<h1>([^<]+)", html).group(1).strip()
    tab = re.search(r"<title>([^<]+)</title>", html).group(1).replace("&#8212;", "—")
    assert heading == "一步一步理解自注意力"
    assert tab == f"{heading} — {heading}", tab  # the page's heading, then the site's title
    captions = re.findall(r'role="heading"><span class="caption-text">([^<]+)<', html)  # the parts
    assert captions == ["开始之前", "章节", "当今模型中的注意力", "参考资料"], captions


def test_chinese_exercise_titles_use_fullwidth_parentheses(book_build):
    assert book_build.returncode == 0
    titles = [
        t
        for c in CHAPTERS
        for t in re.findall(
            r'<p class="admonition-title"><span class="caption-number">练习[^<]*</span>([^<]*)',
            (ZH / "notebooks" / f"{c}.html").read_text("utf-8"),
        )
    ]
    assert titles, "no exercise titles found on the Chinese pages"
    wrong = [t for t in titles if t.strip() and not (t.strip().startswith("（") and t.strip().endswith("）"))]
    assert not wrong, f"exercise titles without full-width parentheses: {wrong[:5]}"


def test_chinese_figures_are_drawn_in_chinese(book_build):
    """The Chinese build executes the notebooks with ATTNLIB_LANG=zh_CN: its figures are not the
    English ones (the overview figure of the introduction and of every chapter has Chinese words)."""
    assert book_build.returncode == 0
    for page in ["book/intro"] + [f"notebooks/{c}" for c in CHAPTERS]:
        english, chinese = _images(HTML / f"{page}.html"), _images(ZH / f"{page}.html")
        assert english and len(chinese) == len(english), (page, english, chinese)
        assert chinese[0] != english[0], f"{page}: the Chinese page shows the English overview figure"


def test_chinese_search_index_has_the_course_terms(book_build):
    """jieba, with the course's terms as a dictionary, keeps them whole in the index; single-character
    terms (键, 值) are indexed too."""
    assert book_build.returncode == 0
    text = (ZH / "searchindex.js").read_text("utf-8")
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    docs = index["docnames"]
    where = {}  # a word of a page's title is indexed there only
    for table in ("terms", "titleterms"):
        for term, found in index[table].items():
            where.setdefault(term, set()).update(docs[i] for i in ([found] if isinstance(found, int) else found))
    for term, page in [
        ("自注意力", "notebooks/08_cross_attention"),
        ("因果掩码", "notebooks/04_masking"),
        ("分组查询注意力", "notebooks/12_kv_cache"),
        ("键", "notebooks/02_queries_keys"),
        ("值", "notebooks/05_softmax_values"),
    ]:
        assert page in where.get(term, set()), f"{term!r} is not indexed for {page}"
    language_data = (ZH / "_static" / "language_data.js").read_text("utf-8")
    assert "function splitQuery" in language_data and "自注意力" in language_data
    assert "function splitQuery" not in (HTML / "_static" / "language_data.js").read_text("utf-8")


def test_chapter_numbers_continue_across_parts(book_build):
    """Part III starts at chapter 15: the chapters are numbered 1, 2, ... in the navigation of
    both editions, across the parts (Jupyter Book's multi-toctree numbering), not from 1 again."""
    assert book_build.returncode == 0
    for root in (HTML, ZH):
        nav = (root / "book" / "intro.html").read_text("utf-8")
        numbers = {
            chapter: re.search(rf'href="[./]*notebooks/{chapter}\.html">\s*(\d+)\.', nav) for chapter in CHAPTERS
        }
        got = {c: int(m.group(1)) if m else None for c, m in numbers.items()}
        assert got == {c: int(c[:2]) for c in CHAPTERS}, got
