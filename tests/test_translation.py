"""The Chinese edition: catalogs complete and current, terms kept, notebooks and homework from them.

The English pages and notebooks are the only source; `locales/zh_CN/LC_MESSAGES/`
holds one catalog per page. When English text changes, `make catalogs` marks the
changed messages fuzzy (or adds them empty), and these tests name each message
that must be translated again.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import polib
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))
import editions  # noqa: E402  (book/editions.py: the build and the checks of a translation)

from attnlib import homework  # noqa: E402
from attnlib.translate import catalog_path, load_catalog, translate_markdown, translate_notebook  # noqa: E402

CATALOGS = ROOT / "locales" / "zh_CN" / "LC_MESSAGES"
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PAGES = [f"book/{p.stem}" for p in sorted((ROOT / "book").glob("*.md"))] + [f"notebooks/{p.stem}" for p in CHAPTERS]


def _po(docname: str) -> polib.POFile:
    path = catalog_path(docname)
    assert path.exists(), f"no Chinese catalog for {docname}: run `make catalogs` and translate {path}"
    return polib.pofile(str(path))


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> Path:
    """The English text extracted afresh, as `make catalogs` does (no notebook is executed)."""
    out = tmp_path_factory.mktemp("pot")
    proc = subprocess.run([sys.executable, str(ROOT / "book" / "editions.py"), "extract", str(out / "pot")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "pot"


@pytest.mark.parametrize("docname", PAGES)
def test_catalog_is_complete(docname):
    """No message untranslated, none fuzzy (an English change not yet translated again)."""
    po = _po(docname)
    untranslated = [e.msgid for e in po if not e.obsolete and not e.msgstr.strip()]
    fuzzy = [e.msgid for e in po if not e.obsolete and "fuzzy" in e.flags]
    assert not untranslated, f"{docname}: {len(untranslated)} messages not translated, e.g. {untranslated[:3]}"
    assert not fuzzy, (f"{docname}: {len(fuzzy)} messages whose English changed; translate them again "
                       f"and remove the fuzzy flag: {fuzzy[:3]}")


@pytest.mark.parametrize("docname", PAGES)
def test_catalog_is_current(templates, docname):
    """The catalog holds exactly the messages of the English page as it is now."""
    pot = polib.pofile(str(templates / f"{docname}.pot"))
    english = {e.msgid for e in pot}
    catalog = {e.msgid for e in _po(docname) if not e.obsolete}
    new, gone = sorted(english - catalog), sorted(catalog - english)
    assert not new and not gone, (
        f"{docname}: the catalog is out of date with the English text; run `make catalogs`, then "
        f"translate the new messages {[m[:60] for m in new[:5]]} (gone from the English: "
        f"{[m[:60] for m in gone[:5]]})")


def test_every_catalog_belongs_to_a_page():
    docnames = {p.relative_to(CATALOGS).with_suffix("").as_posix() for p in CATALOGS.rglob("*.po")}
    assert docnames - {"exercise"} == set(PAGES)   # exercise.po: sphinx-exercise's labels (book/_ext)


@pytest.mark.parametrize("docname", PAGES)
def test_translation_keeps_markup_and_terms(docname):
    """Math, code and cross-references as in the English; the terminology table's terms; no forbidden word."""
    terms, never = editions.terminology()
    problems = [f"{e.msgid[:60]!r}: {p}" for e in _po(docname) if not e.obsolete and e.msgstr
                for p in editions.lint_message(e.msgid, e.msgstr, terms, never)]
    assert not problems, "\n".join(problems[:20])


def test_terminology_table_is_read_and_lint_can_fail():
    terms, never = editions.terminology()
    assert len(terms) >= 30 and "变压器" in never and "砝码" in never
    assert editions.lint_message("the causal mask", "因果掩码", terms, never) == []
    assert any("term" in p for p in editions.lint_message("the causal mask", "因果遮罩", terms, never))
    assert any("forbidden" in p for p in editions.lint_message("the Transformer", "变压器", terms, never))
    assert editions.lint_message("[E] writes 变压器", "[E] 写作 变压器", terms, never) == []   # a quote
    assert any("math" in p for p in editions.lint_message("with $d_k$", "用 $d_{k}$", terms, never))
    assert any("role" in p for p in editions.lint_message("see {ref}`sc-b-x`", "见上文", terms, never))
    assert any("bold" in p for p in editions.lint_message("the **mask**", "这个**“掩码”**的", terms, never))
    assert editions.lint_message("x", "", terms, never) == ["untranslated"]


# ------------------------------------------------------------------ notebooks and homework in Chinese

def test_translate_markdown_places_whole_blocks_only():
    catalog = {"Summary": "小结", "A long paragraph that wraps.": "一段会换行的长段落。",
               "a list item": "列表项", "a cell": "单元格", "Summary of it": "它的小结"}
    source = ("## Summary\n\nA long paragraph\nthat wraps.\n\n- a list item\n\n| a cell | x |\n\n"
              "Summary of it\n\nNot a Summary here.")
    out, placed = translate_markdown(source, catalog)
    assert out == ("## 小结\n\n一段会换行的长段落。\n\n- 列表项\n\n| 单元格 | x |\n\n"
                   "它的小结\n\nNot a Summary here.")
    assert placed == set(catalog)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chinese_notebook_from_the_catalog(path):
    """Every message lands in the notebook; code and outputs are the English notebook's, byte for byte."""
    nb = nbformat.read(path, as_version=4)
    zh, missing = translate_notebook(nb, load_catalog(f"notebooks/{path.stem}"))
    assert not missing, f"{path.name}: messages not found in the notebook: {sorted(missing)[:3]}"
    assert len(zh.cells) == len(nb.cells)
    for en_cell, zh_cell in zip(nb.cells, zh.cells):
        if en_cell.cell_type == "code":
            assert zh_cell.source == en_cell.source and zh_cell.outputs == en_cell.outputs
    title = next(c.source for c in zh.cells if c.cell_type == "markdown").splitlines()[0]
    assert title.startswith("# ") and re.search(r"[\u4e00-\u9fff]", title), title
    english_left = [c.source for c in zh.cells if c.cell_type == "markdown"
                    and re.search(r"\b(the|and|of|is)\b", re.sub(r"`[^`]*`|\$[^$]*\$|\*[^*]*\*|\{[^}]*\}`[^`]*`|>.*", "", c.source))
                    and not re.search(r"[\u4e00-\u9fff]", c.source)]
    assert not english_left, f"{path.name}: markdown cells left in English: {english_left[:2]}"


def test_notebooks_zh_never_overwrites_a_learners_file(tmp_path):
    from attnlib.translate import translate_notebook_file
    src = CHAPTERS[0]
    mine = tmp_path / src.name
    mine.write_text("my notes", encoding="utf-8")
    with pytest.raises(FileExistsError):
        translate_notebook_file(src, mine)
    assert mine.read_text(encoding="utf-8") == "my notes"
    with pytest.raises(ValueError):
        translate_notebook_file(src, src)
    fresh = tmp_path / "zh" / src.name
    assert translate_notebook_file(src, fresh) == set()
    assert translate_notebook_file(src, fresh) == set()   # an earlier translation is replaced


def test_release_in_chinese(tmp_path):
    """The Chinese student version: Chinese text, no solutions, and the same code as the English one."""
    src = ROOT / "notebooks" / "04_masking.ipynb"
    (zh,) = homework.release([src], tmp_path / "zh", lang="zh_CN")
    (en,) = homework.release([src], tmp_path / "en")
    zh_nb, en_nb = nbformat.read(zh, as_version=4), nbformat.read(en, as_version=4)
    assert [c.source for c in zh_nb.cells if c.cell_type == "code"] == \
        [c.source for c in en_nb.cells if c.cell_type == "code"]
    text = "\n".join(c.source for c in zh_nb.cells if c.cell_type == "markdown")
    assert "学生版" in text and "掩码" in text and "{solution-start}" not in text
    assert homework.exercises_of(zh_nb, zh) == homework.exercises_of(en_nb, en)  # graded alike
    with pytest.raises(homework.HomeworkError, match="--lang"):
        homework.release([src], tmp_path / "xx", lang="fr_FR")
    assert not (tmp_path / "xx").exists()


# ------------------------------------------------------------------ the built Chinese edition

@pytest.mark.slow
def test_chinese_edition_is_built_and_linked(book_build):
    assert book_build.returncode == 0, (book_build.stdout + book_build.stderr)[-6000:]
    html = ROOT / "_build" / "html"
    captions = re.findall(r'caption-text">([^<]*)', (html / "zh" / "book" / "intro.html").read_text("utf-8"))
    assert captions and all(re.search(r"[\u4e00-\u9fff]", c) for c in captions), f"parts of the toc: {captions}"
    for chapter in CHAPTERS:
        en = html / "notebooks" / f"{chapter.stem}.html"
        zh = html / "zh" / "notebooks" / f"{chapter.stem}.html"
        assert en.exists() and zh.exists()
        zh_html = zh.read_text("utf-8")
        assert 'lang="zh-CN"' in zh_html or 'lang="zh_CN"' in zh_html
        title = re.search(r"<h1>(.*?)<a", zh_html, re.S).group(1)
        assert re.search(r"[\u4e00-\u9fff]", title), f"{chapter.stem}: title not in Chinese: {title}"
        # links between the editions, both ways, to files that exist
        to_en = re.search(r'<a class="edition-link" href="([^"]+)"', zh_html).group(1)
        assert (zh.parent / to_en).resolve() == en.resolve()
        to_zh = re.search(r'<a class="edition-link" href="([^"]+)"', en.read_text("utf-8")).group(1)
        assert (en.parent / to_zh).resolve() == zh.resolve()
        assert "解答" in zh_html and ">Solution<" not in zh_html, f"{chapter.stem}: solution label not in Chinese"
        # bold and emphasis that Markdown did not parse would show their asterisks
        text = re.sub(r"<(script|style|pre)\b.*?</\1>|<[^>]+>", "", zh_html, flags=re.S)
        assert "**" not in text, f"{chapter.stem}: literal ** in the Chinese page"
