"""The published book as a reader meets it, in headless Chromium with no network.

Serves the built `_build/html` on 127.0.0.1 and opens every chapter in Debian's
Chromium (`/usr/bin/chromium`, `/usr/bin/chromedriver`; never a downloaded
browser). Every host name but 127.0.0.1 fails to resolve, and the test checks
that no request left loopback. A screenshot of every chapter (its first 1600 pixels;
the whole page with `SCREENSHOTS=full`) goes to `_build/screenshots/`. The Chinese
edition (`_build/html/zh`) gets the same checks, and its own: its search finds the
chapter that teaches each course term, no page shows the theme's English words, and
the introduction shows its figure.

The browser does its work in the background (tests/_background.py): as soon as the book is
built, one Chromium runs the check of every selected test of this module (``CHECKS``), beside
the other tests, which keep the other core busy; each test then raises what its check raised.

Without Chromium the test is skipped, with a message saying so; under CI
(`CI=true`) a missing browser is a failure.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import _background
import pytest
from _chromium import requests, require_browser, start_chromium

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.slow


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass


# test function -> its check, called as check(browser, site, *the test's parameters) (filled below)
CHECKS: dict[str, Callable] = {}


def _key(item: pytest.Item) -> tuple:
    """A test's function and parameters: ("test_chapter_page", "01_embeddings")."""
    callspec = getattr(item, "callspec", None)
    return (item.originalname, *(callspec.params.values() if callspec else ()))


@_background.job(needs_book=True)
def browsed() -> dict[tuple, BaseException | None]:
    """The check of every selected test (``CHECKS``) in one headless Chromium, on the built book
    served on 127.0.0.1 (a free port): the test's key (``_key``) -> what its check raised, or None.

    In the background once the book is built, beside the other tests and jobs."""
    require_browser()
    assert _background.book_returncode() == 0, "the book did not build; see test_book.py"
    keys = dict.fromkeys(map(_key, _background.JOBS["browsed"].items or ()))  # the selected tests, in order
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{server.server_address[1]}"
    driver = start_chromium(_background.temporary_dir("chromium-profile-"))
    outcomes: dict[tuple, BaseException | None] = {}
    try:
        for key in keys:
            if _background.CANCELLED.is_set():
                break
            try:
                CHECKS[key[0]](driver, site, *key[1:])
                outcomes[key] = None
            except (Exception, pytest.skip.Exception, pytest.fail.Exception) as e:
                outcomes[key] = e
    finally:
        driver.quit()
        server.shutdown()
    return outcomes


def _outcome(browsed: dict, request: pytest.FixtureRequest) -> None:
    """Raise what the test's check raised in the background (an assertion, a skip), if anything."""
    key = _key(request.node)
    assert key in browsed, f"the browser job did not run {key}: it runs the tests selected at collection"
    error = browsed[key]
    if error is not None:
        raise error


def _wait(driver, timeout: float):
    """selenium's WebDriverWait, asking every 50 ms (its default, 500 ms, costs up to half a second a wait)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05)


def _open(driver, url: str) -> None:
    driver.get_log("browser"), driver.get_log("performance")  # drop what earlier pages logged
    driver.get(url)


def _wait_for_mathjax(driver) -> bool:
    """Wait (at most 20 s) until MathJax has typeset the page; False if it never did."""
    return driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const give_up = Date.now() + 20000;
        const wait = () => {
            if (window.MathJax && MathJax.startup && MathJax.startup.promise)
                MathJax.startup.promise.then(() => done(true));
            else if (Date.now() > give_up) done(false);
            else setTimeout(wait, 50);
        };
        wait();""")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_page(browsed, request, chapter):
    """A chapter as a reader meets it (_check_page); its link to the Chinese page; and its solutions,
    closed dropdowns that open on a click (checked on the same page load: each load typesets the math)."""
    _outcome(browsed, request)


def _chapter_page(browser, site, chapter):
    _check_page(browser, site, f"{site}/notebooks/{chapter}.html", SHOTS / f"{chapter}.png")
    _check_edition_link(browser, "中文", f"{site}/zh/notebooks/{chapter}.html")
    _check_solutions(browser, chapter)
    _check_explorers(browser, chapter, "en")
    _check_for_readers(browser, "en")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chinese_chapter_page(browsed, request, chapter):
    """The Chinese edition (_build/html/zh): the same checks, a Chinese title, none of the theme's English
    words (THEME_ENGLISH), and a link to the English page."""
    _outcome(browsed, request)


def _chinese_chapter_page(browser, site, chapter):
    page = _check_page(browser, site, f"{site}/zh/notebooks/{chapter}.html", SHOTS / "zh" / f"{chapter}.png")
    english = _theme_english(browser)  # the check of test_chinese_pages_have_no_english_theme_words, on this load
    assert not english, f"English theme words on the Chinese page: {english}"
    assert any("\u4e00" <= ch <= "\u9fff" for ch in page["title"]), f"not a Chinese title: {page['title']!r}"
    assert any("\u4e00" <= ch <= "\u9fff" for ch in page["text"][:2000])
    english_alt = [alt for alt in page["alts"] if not any("\u4e00" <= ch <= "\u9fff" for ch in alt)]
    assert not english_alt, f"figures whose alt text is not in Chinese: {english_alt}"
    _check_edition_link(browser, "English", f"{site}/notebooks/{chapter}.html")
    _check_explorers(browser, chapter, "zh_CN")
    _check_for_readers(browser, "zh_CN")


CHECKS.update(test_chapter_page=_chapter_page, test_chinese_chapter_page=_chinese_chapter_page)


def _check_edition_link(browser, label: str, target: str) -> None:
    """The page's link to the other edition: its label, and a target the server has (a plain link:
    where the browser would go is its resolved href, fetched here without loading a second page)."""
    from urllib.request import urlopen

    from selenium.webdriver.common.by import By

    link = browser.find_element(By.CSS_SELECTOR, "a.edition-link")
    assert link.text.strip() == label
    assert link.get_attribute("href") == target
    with urlopen(target, timeout=30) as response:
        assert response.status == 200 and b'class="edition-link"' in response.read()


def _check_page(browser, site, url: str, shot: Path) -> dict:
    """Open a chapter page and check what a reader sees: math, figures, alt text, no errors, no network."""
    _open(browser, url)
    assert _wait_for_mathjax(browser), "MathJax did not start (is _static/mathjax served?)"
    page = browser.execute_script("""
        const article = document.querySelector('article') || document.body;
        const prose = article.cloneNode(true);
        prose.querySelectorAll('pre, code, .cell_output, mjx-container, script').forEach(e => e.remove());
        const images = [...document.querySelectorAll('article img')];
        return {
            title: (document.querySelector('article h1') || {innerText: ''}).innerText,
            math: document.querySelectorAll('mjx-container').length,
            text: prose.innerText,
            images: images.map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0]),
            alts: images.map(i => i.getAttribute('alt') || ''),
        };""")
    assert page["math"] > 0, "no math was typeset (MathJax output missing)"
    for raw in ("$$", "\\frac", "\\sqrt", "\\begin{"):
        assert raw not in page["text"], f"raw TeX {raw!r} left on the page: MathJax did not typeset it"
    assert page["images"], "the chapter has no figure"
    not_loaded = [src for src, ok in page["images"] if not ok]
    assert not not_loaded, f"images that did not load: {not_loaded}"
    assert all(alt.strip() for alt in page["alts"]), "every image needs alt text"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"JavaScript console errors: {errors}"
    network = ("http:", "https:", "ws:", "wss:", "ftp:")  # not data:, blob: or chrome:// (the browser's own)
    outside = [u for u in requests(browser) if u.startswith(network) and not u.startswith(site)]
    assert not outside, f"the page asked the network for: {outside}"
    _save_screenshot(browser, shot)
    return page


def _save_screenshot(driver, path: Path) -> None:
    """A PNG of the page as a reader first sees it: the window, 1280 x 1600 pixels. With
    ``SCREENSHOTS=full`` in the environment, the whole page (up to 16,000 pixels tall), rendered
    beyond the window by Chromium's DevTools protocol: about ten times the work of the window
    (seconds a page on the course's 2-core machine), so the suite does it only when asked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.environ.get("SCREENSHOTS", "") != "full":
        assert driver.save_screenshot(str(path)), f"could not write {path}"
        return
    height = driver.execute_script("return document.documentElement.scrollHeight")
    clip = {"x": 0, "y": 0, "width": 1280, "height": min(height, 16000), "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.write_bytes(base64.b64decode(shot["data"]))


# The chapters where the issue asks for the attention explorer (issue 23)
EXPLORED = {"02", "04", "06", "08", "10", "12", "16"}


def _stored_explorers(chapter: str) -> list[dict]:
    """The data of every explorer in the chapter's stored outputs: what the notebook computed."""
    import re

    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4)
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            page = out.get("data", {}).get("text/html", "")
            page = "".join(page) if isinstance(page, list) else page
            if 'class="attnl"' in page:
                continue  # chapter 10's live model: its explorer is filled in by the page (_check_live_views)
            found += [
                json.loads(m)
                for m in re.findall(r'<script type="application/json" class="attnx-data">(.*?)</script>', page, re.S)
            ]
    return found


def _check_explorers(browser, chapter: str, lang: str) -> None:
    """Every explorer on the open page runs (its script replaced the still view's notice), holds the
    weights the notebook computed, and shows row i of them when query i is hovered (a real mouse
    event; 2 decimals, masked keys marked), with its words in the edition's language."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    from attnlib.i18n import tr
    from attnlib.views.explore import HINT

    outside_live = "//div[contains(concat(' ', @class, ' '), ' attnx ') and not(ancestor::div[@class='attnl'])]"
    explorers = browser.find_elements(By.XPATH, outside_live)
    stored = _stored_explorers(chapter)
    assert len(explorers) == len(stored), "the page shows another number of explorers than the notebook stores"
    if chapter[:2] in EXPLORED:
        assert explorers, f"chapter {chapter} has no attention explorer"
    for explorer, want in zip(explorers, stored):
        data = json.loads(explorer.find_element(By.CSS_SELECTOR, "script.attnx-data").get_attribute("textContent"))
        assert (data["w"], data["mask"], data["steps"]) == (want["w"], want["mask"], want["steps"])
        hint = explorer.find_element(By.CSS_SELECTOR, ".attnx-hint")
        assert hint.text == tr(HINT, lang), "the explorer's script did not run"
        assert explorer.find_element(By.CSS_SELECTOR, '[data-i18n="queries"]').text == tr("queries", lang)
        queries = explorer.find_elements(By.CSS_SELECTOR, ".attnx-q")
        i = len(queries) // 2
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", queries[i])
        ActionChains(browser).move_to_element(queries[i]).perform()
        step = (
            int(explorer.find_element(By.CSS_SELECTOR, ".attnx-step").get_attribute("value"))
            if len(data["w"]) > 1
            else 0
        )
        heads = data["w"][step][0]  # the first layer, every head (the default view)
        mask = data["mask"]
        if mask is not None and isinstance(mask[0][0], list):
            mask = mask[step]  # one mask per step (chapter 12)
        rows = browser.execute_script(  # the table's rows as shown, read in one call: [data-head, [cell texts]]
            "return [...arguments[0].querySelectorAll('.attnx-table tbody tr')]"
            ".map(r => [r.getAttribute('data-head'), [...r.querySelectorAll('td')].map(c => c.innerText.trim())]);",
            explorer,
        )
        for h, cells in rows:
            for j, text in enumerate(cells):
                if mask is not None and not mask[i][j]:
                    assert text == tr("masked", lang)
                else:
                    assert abs(float(text) - heads[int(h)][i][j] / data["scale"]) <= 0.005 + 1e-9, (chapter, h, i, j)
        assert len(rows) == len(data["heads"])
    _check_live_views(browser, chapter)


def _check_live_views(browser, chapter: str) -> None:
    """Chapter 10's live model has run its example in the page (tests/test_live.py compares it with
    PyTorch), and chapter 13's player, stepped to its end with the keyboard, ends on softmax's row."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    live = browser.find_elements(By.CSS_SELECTOR, "div.attnl")
    players = browser.find_elements(By.CSS_SELECTOR, "div.osp")
    assert bool(live) == chapter.startswith("10"), "chapter 10, and only it, runs the trained model in the page"
    assert bool(players) == chapter.startswith("13"), "chapter 13, and only it, has the online softmax player"
    for view in live:
        result = view.find_element(By.CSS_SELECTOR, ".attnl-result")
        _wait(browser, 10).until(lambda _: result.get_attribute("data-ids"))
        ids = json.loads(result.get_attribute("data-ids"))
        assert len(ids) == len(view.find_elements(By.CSS_SELECTOR, ".attnl-result .attnl-tok")) > 0
        assert view.find_elements(By.CSS_SELECTOR, ".attnx[data-ready] .attnx-q"), "the live model's explorer is empty"
    for player in players:
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", player)
        ActionChains(browser).click(player.find_element(By.CSS_SELECTOR, "button")).send_keys(Keys.END).perform()
        final = player.find_element(By.CSS_SELECTOR, ".osp-final")
        _wait(browser, 10).until(lambda _: final.get_attribute("data-equal") == "true")


def _check_solutions(browser, chapter: str) -> None:
    """The solutions of the open chapter page are closed dropdowns, and open on a click."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    solutions = browser.find_elements(By.CSS_SELECTOR, "div.solution.dropdown")
    assert solutions, f"no solution dropdowns on the page ({browser.current_url})"
    coded = [s for s in solutions if s.find_elements(By.CSS_SELECTOR, "div.cell_input")]
    assert coded, "no solution shows code"
    for solution in coded:
        code = solution.find_element(By.CSS_SELECTOR, "div.cell_input")
        assert not code.is_displayed(), "a solution is open before it is clicked"
        button = solution.find_element(By.CSS_SELECTOR, "button.toggle-button")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
        button.click()
        _wait(browser, 10).until(ec.visibility_of(code))
        assert code.text.strip(), "the opened solution shows no code"
        outputs = solution.find_elements(By.CSS_SELECTOR, "div.cell_output")
        assert all(o.is_displayed() for o in outputs), "the opened solution hides its output"


SEARCHES = [("", "causal"), ("zh/", "掩码")]


@pytest.mark.parametrize("edition, query", SEARCHES, ids=["en", "zh"])
def test_search_finds_the_masking_chapter(browsed, request, edition, query):
    """Each edition's search finds chapter 4 (the Chinese one splits words with jieba); the results are
    read once the search has finished (its summary is written last), not when the first one appears."""
    _outcome(browsed, request)


def _search_finds_the_masking_chapter(browser, site, edition, query):
    masking = [c for c in CHAPTERS if "masking" in c]
    if not masking:
        pytest.skip("the masking chapter is not written yet")
    links = _search(browser, site, edition, query)
    assert any(f"/{edition}notebooks/{masking[0]}.html" in href for href in links), links


# ------------------------------------------------------------------ the Chinese edition's chrome and search

# Each course term, and the chapter that teaches it: the Chinese search must find that chapter.
# Chinese has no spaces: the index is cut into words by jieba, and the search page must cut the
# query the same way (book/_ext/course_html.py), or a term of several words finds nothing.
CHINESE_TERMS = [
    ("自注意力", "08_cross_attention"),
    ("注意力权重", "05_softmax_values"),
    ("查询", "02_queries_keys"),
    ("键", "02_queries_keys"),
    ("值", "05_softmax_values"),
    ("掩码", "04_masking"),
    ("因果掩码", "04_masking"),
    ("多头注意力", "06_multihead"),
    ("位置编码", "09_positions"),
    ("旋转位置编码", "09_positions"),
    ("键值缓存", "12_kv_cache"),
    ("分组查询注意力", "12_kv_cache"),
    ("在线 softmax", "13_tiled_attention"),
]


def _search(browser, site, edition: str, query: str) -> list[str]:
    """The pages the book's search page lists for ``query`` (once it has finished searching)."""
    from urllib.parse import quote

    from selenium.webdriver.common.by import By

    _open(browser, f"{site}/{edition}search.html?q={quote(query)}")
    _wait(browser, 30).until(  # the summary ("找到 N 个…" / "Search finished…") comes last
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#search-results p.search-summary")
            and d.find_element(By.CSS_SELECTOR, "#search-results p.search-summary").text.strip()
        )
    )
    return [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#search-results ul.search li a")]


@pytest.mark.parametrize("query, chapter", CHINESE_TERMS, ids=[q for q, _ in CHINESE_TERMS])
def test_chinese_search_finds_the_chapter_that_teaches_a_term(browsed, request, query, chapter):
    """The Chinese search finds the chapter that teaches each course term, with no console error."""
    _outcome(browsed, request)


def _chinese_search_finds_the_chapter(browser, site, query, chapter):
    if chapter not in CHAPTERS:
        pytest.skip(f"{chapter} is not written yet")
    links = _search(browser, site, "zh/", query)
    pages = [href.split("/zh/")[-1].split("#")[0].split("?")[0] for href in links]
    assert f"notebooks/{chapter}.html" in pages, f"searching for {query!r} does not find {chapter}: {pages}"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"JavaScript console errors on the search page: {errors}"


# What the themes and Jupyter Book write in English on every page, unless translated
# (locales/zh_CN/LC_MESSAGES/exercise.po; book/_ext/course_html.py, book/editions.py)
THEME_ENGLISH = [
    "Search this book",
    "Repository",
    "Open issue",
    "Launch on Binder",
    "Launch on Colab",
    "Toggle primary sidebar",
    "Toggle secondary sidebar",
    "Color mode",
    "System Settings",
    "Launch interactive content",
    "Source repositories",
    "Table of contents",
    "Link to this heading",
    "© Copyright",
    "The attention course authors",
    "列印",
]

_SEEN_TEXT = """
    const page = document.body.cloneNode(true);   // with the text of closed menus (Repository, Open issue)
    page.querySelectorAll('script, style, template').forEach(e => e.remove());
    const seen = [document.title, document.body.innerText, page.textContent];
    for (const el of document.querySelectorAll('*'))
        for (const name of ['title', 'aria-label', 'placeholder', 'alt', 'data-bs-title', 'data-bs-original-title'])
            if (el.getAttribute(name)) seen.push(el.getAttribute(name));
    return seen;"""


def _pages(edition: Path) -> list[str]:
    return sorted(
        p.relative_to(edition).as_posix()
        for p in edition.rglob("*.html")
        if not p.relative_to(edition).parts[0].startswith(("_", "reports"))
    )


def test_chinese_pages_have_no_english_theme_words(browsed, request):
    """On every Chinese page: none of the theme's English words in the text, placeholders, titles,
    tooltips, aria-labels or alt texts (the English pages keep them). The chapters are checked by
    test_chinese_chapter_page, on the page it has loaded; this test opens every other page."""
    _outcome(browsed, request)


def _no_english_theme_words(browser, site):
    pages = _pages(HTML / "zh")
    assert "book/intro.html" in pages and "search.html" in pages and len(pages) >= 20, pages
    chapters = {f"notebooks/{c}.html" for c in CHAPTERS}
    assert chapters <= set(pages), "a chapter is missing from the Chinese edition"
    found = {}
    for page in pages:
        if page in chapters:
            continue  # checked on the load of test_chinese_chapter_page
        _open(browser, f"{site}/zh/{page}")
        english = _theme_english(browser)
        if english:
            found[page] = english
    assert not found, f"English theme words on Chinese pages: {found}"
    _open(browser, f"{site}/notebooks/{CHAPTERS[0]}.html")
    words, deadline = ("Search this book", "Toggle primary sidebar", "Link to this heading", "© Copyright"), 0
    while deadline < 20:  # the theme's scripts may still be filling the page on a loaded machine: up to 10 s
        seen = browser.execute_script(_SEEN_TEXT)
        lost = [word for word in words if not any(word in text for text in seen)]
        if not lost:
            break
        time.sleep(0.5)
        deadline += 1
    assert not lost, f"the English page lost {lost}"


def _theme_english(browser) -> list[str]:
    """The words of THEME_ENGLISH that the open page shows anywhere _SEEN_TEXT looks."""
    seen = browser.execute_script(_SEEN_TEXT)
    return sorted({word for word in THEME_ENGLISH for text in seen if word in text})


def test_chinese_introduction_shows_the_overview_figure(browsed, request):
    """The introduction's figure is on the Chinese page (the Chinese build executes book/intro.md),
    with Chinese alt text and caption."""
    _outcome(browsed, request)


def _chinese_introduction_figure(browser, site):
    _open(browser, f"{site}/zh/book/intro.html")
    figure = browser.execute_script("""
        const img = document.querySelector('article figure img');
        const caption = document.querySelector('article figure figcaption');
        return img && {alt: img.getAttribute('alt') || '', loaded: img.complete && img.naturalWidth > 0,
                       caption: caption ? caption.innerText : ''};""")
    assert figure, "no figure on the Chinese introduction"
    assert figure["loaded"], "the figure did not load"
    for what in ("alt", "caption"):
        assert any("\u4e00" <= ch <= "\u9fff" for ch in figure[what]), f"not Chinese: the {what} {figure[what]!r}"


CHECKS.update(
    test_search_finds_the_masking_chapter=_search_finds_the_masking_chapter,
    test_chinese_search_finds_the_chapter_that_teaches_a_term=_chinese_search_finds_the_chapter,
    test_chinese_pages_have_no_english_theme_words=_no_english_theme_words,
    test_chinese_introduction_shows_the_overview_figure=_chinese_introduction_figure,
)


# ------------------------------------------------------------------ every page, as phones, keyboards and screen readers meet it

PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}  # a phone's screen, in CSS pixels
AXE = ROOT / "tests" / "axe" / "node_modules" / "axe-core" / "axe.min.js"  # `npm ci` in tests/axe (make test)

# axe-core's findings that are not the course's to fix: (rule, CSS selector of the node or an ancestor, why).
# Every other serious or critical violation fails the test.
AXE_NOT_OURS = [
    # sphinxcontrib-bibtex's reference list: a role="list" whose children are its doc-backlink links
    ("aria-required-children", "div.citation-list", "sphinxcontrib-bibtex markup (references page)"),
    # sphinx-exercise paints exercises on #ecf3ff, where the theme's link colour #176de8 reaches 4.29:1
    ("color-contrast", "div.exercise a.reference", "sphinx-exercise background + theme link colour"),
    ("color-contrast", "div.solution a.reference", "sphinx-exercise background + theme link colour"),
    # the theme's "Back to top" button (shown once the page is scrolled): the theme's colours
    ("color-contrast", "#pst-back-to-top", "pydata-sphinx-theme's back-to-top button"),
]
# Not given to axe-core at all: the code cells' syntax highlighting, coloured by the theme's Pygments style
# (about half of axe's time on a chapter, in its colour-contrast rule; the course sets none of those colours).
AXE_SKIPPED = ["div.highlight"]

_AXE_RUN = """
    const [context, options, notOurs, done] = arguments;
    axe.run(context, options).then(result => done(result.violations.flatMap(v => v.nodes
        .filter(n => ['serious', 'critical'].includes(n.impact))
        .filter(n => {
            const el = document.querySelector(n.target[0]);
            return !notOurs.some(([rule, selector]) => rule === v.id && el && el.closest(selector));
        })
        .map(n => `${v.id} (${n.impact}): ${n.target.join(' ')} :: ${n.html.slice(0, 160)}`))))
      .catch(e => done([`axe failed: ${e}`]));"""


@functools.cache
def _axe_source() -> str:
    if not AXE.exists():
        message = "axe-core is not installed: run `npm ci` in tests/axe (make test does)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + ": required under CI")
        pytest.skip(message)
    return AXE.read_text(encoding="utf-8")


def _axe(browser, context: str | None = None) -> list[str]:
    """axe-core's serious and critical violations on the open page (``context``: a JS expression; by
    default the page less AXE_SKIPPED), less AXE_NOT_OURS, one line each."""
    if not browser.execute_script("return !!window.axe"):
        browser.execute_script(_axe_source())
    return browser.execute_async_script(
        f"return (function() {{ {_AXE_RUN} }}).apply(null, [{context or json.dumps({'exclude': [[s] for s in AXE_SKIPPED]})}, ...arguments]);",
        {"resultTypes": ["violations"]} if context is None else {"runOnly": ["color-contrast"]},
        [list(x[:2]) for x in AXE_NOT_OURS],
    )


def _check_for_readers(browser, lang: str) -> None:
    """On the open page: a description in the page's language; no formula in the Tab order (but those that
    scroll sideways, book/_ext/course_html.py); no part of the
    page wider than a phone; no serious or critical axe-core violation (as the page is on a phone, the
    views in the state the checks before left them, and, in English, the views once more in the theme's dark
    mode) on every English page and every Chinese page with a view (the other Chinese pages share the English
    markup)."""
    url = browser.current_url
    state = browser.execute_script("""
        const meta = document.querySelector('meta[name="description"]');
        return {description: meta ? meta.content : null,
                tabbable_math: [...document.querySelectorAll('mjx-container')]  // a formula that scrolls may be
                    .filter(m => m.tabIndex >= 0 && m.scrollWidth <= m.clientWidth + 1).length,
                views: document.querySelectorAll('.attnx, .osp, .attnl').length};""")
    description = state["description"] or ""
    assert description.strip(), f"{url}: no <meta name='description'>"
    chinese = any("\u4e00" <= ch <= "\u9fff" for ch in description)
    assert chinese == (lang != "en"), f"{url}: the description is not in the page's language: {description!r}"
    assert state["tabbable_math"] == 0, f"{url}: {state['tabbable_math']} formulas are Tab stops"
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    try:
        wide = browser.execute_script("""
            const width = document.documentElement.scrollWidth;
            const culprits = width <= 390 ? [] : [...document.querySelectorAll('article *')]
                .filter(e => e.getBoundingClientRect().right > 391 && !e.closest('pre, .output, .cell_output, table, mjx-container, .MathJax'))
                .slice(-3).map(e => e.outerHTML.slice(0, 120));
            return [width, culprits];""")
        assert wide[0] <= 390, f"{url} is {wide[0]} px wide on a 390 px phone: {wide[1]}"
        if lang != "en" and not state["views"]:
            # the same markup as the English page, in other words: axe-core (2-3 s a page) runs on the Chinese
            # pages that hold the course's views only, whose words (and so whose boxes) differ
            return
        # the theme makes a table or code box that now scrolls a Tab stop, 300 ms after a resize (debounced)
        browser.execute_async_script("setTimeout(arguments[arguments.length - 1], 400);")
        violations = _axe(browser)
        if state["views"] and lang == "en":  # the same colours in both editions
            browser.execute_script("document.documentElement.dataset.theme = 'dark';")
            violations += [f"(dark mode) {v}" for v in _axe(browser, "{include: [['.attnx'], ['.osp'], ['.attnl']]}")]
            browser.execute_script("document.documentElement.dataset.theme = 'light';")
        assert not violations, f"{url}: axe-core {len(violations)} serious or critical:\n" + "\n".join(violations)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.parametrize("edition", ["", "zh/"], ids=["en", "zh"])
def test_other_pages_for_readers(browsed, request, edition):
    """Every page but the chapters (which test_chapter_page and test_chinese_chapter_page check on their own
    load), in each edition: the checks of _check_for_readers (description, Tab order, phone width, axe-core)."""
    _outcome(browsed, request)


def _other_pages_for_readers(browser, site, edition):
    chapters = {f"notebooks/{c}.html" for c in CHAPTERS}
    pages = [p for p in _pages(HTML / edition) if p not in chapters and not p.startswith("zh/")]
    assert "book/intro.html" in pages and "search.html" in pages, pages
    for page in pages:
        _open(browser, f"{site}/{edition}{page}")
        if browser.execute_script("return !!document.querySelector('script[src*=\"mathjax\"]')"):
            assert _wait_for_mathjax(browser), f"{page}: MathJax did not start"
        _check_for_readers(browser, "zh_CN" if edition else "en")


# Queries and the chapter that must come first in the search results: the chapter whose title is the
# query, or that teaches the term (Sphinx alone ordered equal scores by title text: "10." before "4.")
FIRST_RESULTS = {
    "": [
        ("attention mask", "04_masking"),
        ("masking", "04_masking"),
        ("softmax", "05_softmax_values"),
        ("multi-head", "06_multihead"),
        ("multi-head attention", "06_multihead"),
        ("cross-attention", "08_cross_attention"),
        ("RoPE", "09_positions"),
        ("KV cache", "12_kv_cache"),
        ("sliding window", "16_local_attention"),
        ("latent attention", "17_latent_attention"),
    ],
    "zh/": [
        ("注意力掩码", "04_masking"),
        ("掩码", "04_masking"),
        ("softmax", "05_softmax_values"),
        ("多头注意力", "06_multihead"),
        ("multi-head", "06_multihead"),
        ("交叉注意力", "08_cross_attention"),
        ("RoPE", "09_positions"),
        ("键值缓存", "12_kv_cache"),
        ("KV cache", "12_kv_cache"),
        ("attention mask", "04_masking"),
    ],
}


@pytest.mark.parametrize(
    "edition, query, chapter",
    [(e, q, c) for e, cases in FIRST_RESULTS.items() for q, c in cases],
    ids=[f"{e or 'en/'}{q}" for e, cases in FIRST_RESULTS.items() for q, _ in cases],
)
def test_search_lists_the_chapter_first(browsed, request, edition, query, chapter):
    """The book's search page lists first the chapter whose title is the query (book/_ext/search_scorer.js)."""
    _outcome(browsed, request)


def _search_lists_the_chapter_first(browser, site, edition, query, chapter):
    links = _search(browser, site, edition, query)
    pages = [href.split(site + "/" + edition)[-1].split("#")[0].split("?")[0] for href in links]
    assert pages and pages[0] == f"notebooks/{chapter}.html", f"{edition}search for {query!r}: {pages[:8]}"


CHECKS.update(
    test_other_pages_for_readers=_other_pages_for_readers,
    test_search_lists_the_chapter_first=_search_lists_the_chapter_first,
)
