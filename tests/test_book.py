"""The book builds with warnings as errors, and the HTML works with no network."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.slow


def test_book_builds_without_warnings(book_build):
    log = book_build.stdout + book_build.stderr
    assert book_build.returncode == 0, f"jupyter-book build -W failed:\n{log[-6000:]}"
    # The kernel's own notice about its local TCP transport is not a warning about the book.
    kernel_notice = "Kernel is running over TCP without encryption"
    warnings = [l for l in log.splitlines()
                if ("WARNING" in l or "ERROR" in l) and kernel_notice not in l]
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
    mentions = [(p.relative_to(HTML).as_posix(), c) for p in _html_files() for c in cdns
                if c in p.read_text("utf-8")]
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
