"""The Chinese edition: catalogs complete and current, terms kept, notebooks and homework from them.

The English pages and notebooks are the only source; `locales/zh_CN/LC_MESSAGES/`
holds one catalog per page. When English text changes, `make catalogs` marks the
changed messages fuzzy (or adds them empty), and these tests name each message
that must be translated again.
"""

from __future__ import annotations

import posixpath
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

from coursetools import homework  # noqa: E402
from coursetools.translate import catalog_path, load_catalog, translate_markdown, translate_notebook  # noqa: E402

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
    proc = subprocess.run(
        [sys.executable, str(ROOT / "book" / "editions.py"), "extract", str(out / "pot")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "pot"


@pytest.mark.parametrize("docname", PAGES)
def test_catalog_is_complete(docname):
    """No message untranslated, none fuzzy (an English change not yet translated again)."""
    po = _po(docname)
    untranslated = [e.msgid for e in po if not e.obsolete and not e.msgstr.strip()]
    fuzzy = [e.msgid for e in po if not e.obsolete and "fuzzy" in e.flags]
    assert not untranslated, f"{docname}: {len(untranslated)} messages not translated, e.g. {untranslated[:3]}"
    assert not fuzzy, (
        f"{docname}: {len(fuzzy)} messages whose English changed; translate them again "
        f"and remove the fuzzy flag: {fuzzy[:3]}"
    )


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
        f"{[m[:60] for m in gone[:5]]})"
    )


_DOC_LINK = re.compile(r"\{doc\}`([^`<]+?)\s*<([^`>]+)>`")


def _heading(docname: str) -> str:
    """The first heading of a page, as its catalog's msgid: a chapter's first markdown cell, a page's first "# "."""
    if docname.startswith("notebooks/"):
        nb = nbformat.read(ROOT / f"{docname}.ipynb", as_version=4)
        text = next(c.source for c in nb.cells if c.cell_type == "markdown")
    else:
        text = (ROOT / f"{docname}.md").read_text(encoding="utf-8")
    return re.search(r"(?m)^# (.+)$", text).group(1).strip()


def _titled_links(docname: str) -> list[tuple[str, str, str]]:
    """The {doc} links with a title in a page's catalog: (docname of the target, English title, Chinese title)."""
    links = []
    for e in _po(docname):
        en, zh = _DOC_LINK.findall(e.msgid), _DOC_LINK.findall(e.msgstr)
        assert [t for _, t in en] == [t for _, t in zh], f"{docname}: the links of {e.msgid[:60]!r} differ"
        for (en_title, target), (zh_title, _) in zip(en, zh):
            links.append((posixpath.normpath(posixpath.join(posixpath.dirname(docname), target)), en_title, zh_title))
    return links


def test_introduction_titles_are_the_pages_headings():
    """Each chapter has one title on every page (review M9): the title of each {doc} link in the
    introduction, in both languages, is its page's first heading ("N. " before it for a chapter)."""
    links = _titled_links("book/intro")
    assert len(links) == len(CHAPTERS), [t for _, t, _ in links]
    problems = []
    for target, en_title, zh_title in links:
        assert target in PAGES, f"the introduction links to {target}, not a page of the book"
        number = re.match(r"\d+\. ", en_title)
        prefix = number.group(0) if number else ""
        heading = _heading(target)
        if en_title != prefix + heading:
            problems.append(f"{target}: English title {en_title!r}, page heading {heading!r}")
        translated = {e.msgid: e.msgstr for e in _po(target)}.get(heading, "")
        if zh_title != prefix + translated:
            problems.append(f"{target}: Chinese title {zh_title!r}, page heading {prefix + translated!r}")
    assert not problems, "\n".join(problems)


def test_every_catalog_belongs_to_a_page():
    docnames = {p.relative_to(CATALOGS).with_suffix("").as_posix() for p in CATALOGS.rglob("*.po")}
    assert docnames - {"exercise"} == set(PAGES)  # exercise.po: sphinx-exercise's labels (book/_ext)


def test_sphinx_permalink_words_are_translated():
    """Every "Link to this ..." that Sphinx's HTML writer puts on a heading, a figure, a table ... is
    in exercise.po (book/_ext/course_html.py puts it before Sphinx's zh_CN catalog, which leaves them empty)."""
    import sphinx.writers.html5

    words = set(re.findall(r"_\('(Link to this [a-z]+)'\)", Path(sphinx.writers.html5.__file__).read_text("utf-8")))
    assert {"Link to this heading", "Link to this image"} <= words, words
    ours = {e.msgid: e.msgstr for e in polib.pofile(str(CATALOGS / "exercise.po"))}
    missing = sorted(w for w in words if not re.search(r"[\u4e00-\u9fff]", ours.get(w, "")))
    assert not missing, f"exercise.po lacks the Chinese of Sphinx's {missing}"


@pytest.mark.parametrize("docname", PAGES)
def test_translation_keeps_markup_and_terms(docname):
    """Math, code and cross-references as in the English; the terminology table's terms; no forbidden word."""
    terms, never = editions.terminology()
    problems = [
        f"{e.msgid[:60]!r}: {p}"
        for e in _po(docname)
        if not e.obsolete and e.msgstr
        for p in editions.lint_message(e.msgid, e.msgstr, terms, never)
    ]
    assert not problems, "\n".join(problems[:20])


def test_terminology_table_is_read_and_lint_can_fail():
    terms, never = editions.terminology()
    assert len(terms) >= 30 and "变压器" in never and "砝码" in never
    assert editions.lint_message("the causal mask", "因果掩码", terms, never) == []
    assert any("term" in p for p in editions.lint_message("the causal mask", "因果遮罩", terms, never))
    assert any("forbidden" in p for p in editions.lint_message("the Transformer", "变压器", terms, never))
    assert editions.lint_message("[E] writes 变压器", "[E] 写作 变压器", terms, never) == []  # a quote
    assert any("math" in p for p in editions.lint_message("with $d_k$", "用 $d_{k}$", terms, never))
    assert any("role" in p for p in editions.lint_message("see {ref}`sc-b-x`", "见上文", terms, never))
    assert any("bold" in p for p in editions.lint_message("the **mask**", "这个**“掩码”**的", terms, never))
    assert editions.lint_message("x", "", terms, never) == ["untranslated"]


# Each typography rule of the lint (book/catalog_lint.py), shown to fail on a bad string and to pass
# on the right one. `_typo` lints one message and keeps the typography problems.


def _typo(msgid, msgstr):
    terms, never = editions.terminology()
    return [
        p
        for p in editions.lint_message(msgid, msgstr, terms, never)
        if not p.startswith(("term", "forbidden", "math", "code", "role"))
    ]


def test_lint_fullwidth_punctuation_in_chinese_text():
    assert any("half-width" in p for p in _typo("the scores, then the weights", "先是分数,然后是权重"))
    assert _typo("the scores, then the weights", "先是分数，然后是权重") == []
    # parentheses glued to math or to a number, or before Chinese text (errata [22], [34])
    assert _typo("cannot multiply $X$ ($n \\times m$)", "无法与 $X$($n \\times m$)相乘")
    assert _typo("cannot multiply $X$ ($n \\times m$)", "无法与 $X$（$n \\times m$）相乘") == []
    assert _typo("divided by 64 ([B])", "都除以 64([B])")
    assert _typo("divided by 64 ([B])", "都除以 64（[B]）") == []
    # tuples, vectors, function calls, numbers, code and math keep their half-width marks
    assert (
        _typo(
            "the value row (2, 8, 0) at (cat, a); O(n), softmax([2, 4, 4]), 1,024, `(B, T)`, $(i, c)$",
            "值向量 (2, 8, 0) 位于 (cat, a) 处；O(n)、softmax([2, 4, 4])、1,024、`(B, T)`、$(i, c)$",
        )
        == []
    )
    assert _typo("which is ({glue:text}`row`)", "即 ({glue:text}`row`)") == []  # a glued vector "2, 8, 0"
    # an indented line (attnlib's messages) keeps its indentation before a full-width parenthesis
    assert _typo("  (the full hint comes later)", "  （完整提示稍后给出）") == []
    assert editions.fullwidth("  (完整提示稍后给出)") == "  （完整提示稍后给出）"
    # fullwidth() fixes what it reports
    assert editions.fullwidth("先是分数,然后是 $X$($n$)相乘") == "先是分数，然后是 $X$（$n$）相乘"


def test_lint_fullwidth_also_where_the_english_quotes_chinese():
    """A message quoting a Chinese source is checked too; only the verbatim quotes are left out."""
    msgid = '[E], step 5: "softmax([2, 4, 4]) = [0.0, 0.5, 0.5]", "注意，为了可读性,我们"'
    bad = '[E] 第 5 步: "softmax([2, 4, 4]) = [0.0, 0.5, 0.5]", "注意，为了可读性,我们"'
    good = "[E] 第 5 步：“softmax([2, 4, 4]) = [0.0, 0.5, 0.5]”，“注意，为了可读性,我们”"
    assert any("half-width" in p for p in _typo(msgid, bad))
    assert _typo(msgid, good) == []  # the quote keeps its own ","
    assert editions.fullwidth(bad, msgid).startswith("[E] 第 5 步：")
    assert _typo('[A]: "行列有误,所以"', '[A]: "行列有误,所以"') == []  # a quote copied as it is
    # Chinese words in the English that are not a quotation are Chinese text like any other
    assert _typo("The terms are 多头(注意力), 层归一化", "正确的术语是多头(注意力)、层归一化")
    assert _typo("The terms are 多头(注意力), 层归一化", "正确的术语是多头（注意力）、层归一化") == []


def test_lint_paragraph_ends_in_a_halfwidth_colon():
    for bad in ("即**分数矩阵** $S$:", "采用默认缩放的 `attnlib.qk_scores`:", "在本章的句子上:", "如下:\n\n第二段。"):
        assert any("colon" in p for p in _typo("the score matrix $S$ and `attnlib.qk_scores`:", bad)), bad
    assert _typo("the score matrix $S$ and `attnlib.qk_scores`:", "即**分数矩阵** $S$ 与 `attnlib.qk_scores`：") == []
    assert editions.fullwidth("即分数矩阵 $S$:") == "即分数矩阵 $S$："


def test_lint_link_target_only_when_it_looks_like_one():
    assert any(
        "half-width" in p for p in _typo("[A] to [E] (see {doc}`references`)", "[A] 到 [E](见 {doc}`references`)")
    )
    assert _typo("[A] to [E] (see {doc}`references`)", "[A] 到 [E]（见 {doc}`references`）") == []
    for target in ("https://pytorch.org/docs", "errata.md#errata-ch05", "#sc-b-diagonal", "references", "../book/x"):
        assert _typo(f"see [the page]({target})", f"见[这一页]({target})") == [], target


def test_lint_comma_between_digits():
    msgid = "a batch of 4, 12 heads and 1,024 tokens"
    assert any("thousands" in p for p in _typo(msgid, "批大小为 4,12 个头，1,024 个 token"))
    assert _typo(msgid, "批大小为 4，12 个头，1,024 个 token") == []
    assert _typo("6,755,078,400 parameters", "6,755,078,400 个参数") == []
    assert editions.fullwidth("批大小为 4,12 个头") == "批大小为 4，12 个头"


def test_lint_reduction_as_a_fraction_not_n_times_less():
    for bad in ("这比每个查询头各有一个键/值头时少四倍", "而不是 {per}次，少了 {ratio} 倍", "少了 {glue:text}`r` 倍"):
        assert any("multiple" in p for p in _typo("four times less, {per}, {ratio}, {glue:text}`r`", bad)), bad
    for good in (
        "只有每个查询头各配一个键/值头时的四分之一",
        "只有后者的 1/{ratio}",
        "多少 MiB？序列长度翻倍",
        "4 的整数倍",
    ):
        assert _typo("a quarter, {ratio}", good) == [], good


def test_lint_italics_on_chinese_characters():
    assert any("italics" in p for p in _typo("it is *masked* self-attention", "它是*带掩码的*自注意力"))
    assert _typo("it is *masked* self-attention", "它是**带掩码的**自注意力") == []
    assert _typo("it is *masked* self-attention", "它是「带掩码的」自注意力") == []
    assert _typo("the pronoun *it*", "代词 *it*") == []  # italics on Latin letters
    assert _typo("$a * b$ and `x*y`", "$a * b$ 与 `x*y`") == []


@pytest.mark.parametrize(
    "code",
    [
        "torch.arange(T)[:, None]",
        "w.reshape(n_heads, d_head // 2, 2, *w.shape[1:])",
        "(B, T, n_heads * d_head)",
        "document_ids[:, :, None] == document_ids[:, None, :]",
        "(n_heads, 2, d_head // 2, ...)",
        "-inf - (-inf)",
    ],
)
def test_lint_accepts_code_in_a_checkers_plain_text_hint(code):
    """attnlib.po's hints are plain text (no backticks): the Python in them keeps its half-width marks,
    while a half-width comma in the Chinese around it is still an error (review Y4)."""
    hint = f"with {code} of shape (B, T, T), combine the comparisons with & and |"  # as attnlib/check writes it
    assert _typo(hint, f"令 {code}，形状为 (B, T, T)，再用 & 和 | 组合这些比较") == []
    assert any("half-width" in p for p in _typo(hint, f"令 {code}，形状为 (B, T, T),再用 & 和 | 组合这些比较"))
    assert any("half-width" in p for p in _typo(hint, f"令 {code},再用 & 和 | 组合这些比较"))
    # the same code in Chinese text is an error where the English is a Markdown page, which puts code in `...`
    page = f"with `x` of shape {code}, combine"
    assert any("half-width" in p for p in _typo(page, f"令 `x` 的形状为 {code}，再组合"))
    terms, never = editions.terminology()
    assert not [
        p for p in editions.lint_message(page, f"令 `x` 为 {code}，再组合", terms, never, code=True) if "half" in p
    ]


def test_lint_code_spans_are_python_only():
    from catalog_lint import python_spans

    text = "令 i = torch.arange(T)[:, None]，softmax(分数,权重) 与 (B, T, n_heads * d_head)，而 (a, 这)"
    assert [text[a:b] for a, b in python_spans(text)] == ["torch.arange(T)[:, None]", "(B, T, n_heads * d_head)"]
    assert editions.fullwidth("令 i = torch.arange(T)[:, None],再比较", code=True) == (
        "令 i = torch.arange(T)[:, None]，再比较"
    )


def test_lint_terms_also_where_the_english_quotes_chinese():
    terms, never = editions.terminology()
    msgid = '[C] lets "m 个询问" form the queries'
    assert any("term" in p for p in editions.lint_message(msgid, "[C] 让“m 个询问”组成矩阵", terms, never))
    assert editions.lint_message(msgid, "[C] 让“m 个询问”组成查询", terms, never) == []
    # words of a quotation kept verbatim are the source's, not ours
    quote = '[A]: "i行代表的是第i个token的embedding 的query"'
    assert editions.lint_message(quote, quote, terms, never) == []


@pytest.mark.parametrize(
    "msgid, bad, good",
    [
        ("a batch size of 4", "批量大小为 4", "批大小为 4"),
        ("any number of batch axes", "任意多个批量轴", "任意多个批维度"),
        ("one tile of scores at a time", "每次一个块的分数", "每次一个 tile 的分数"),
        ("tile, tiling", "tile、分块", "tile、分块计算"),
        ("a block of queries against a block of keys", "一块查询对一块键", "一个查询块对一个键块"),
        ("its default block size", "默认的分块尺寸", "默认的块大小"),
        ("tile size", "tile 的分块大小", "tile 的块大小"),
        ("One GPT-2 block", "GPT-2 的一个块", "GPT-2 的一个 Transformer 块"),
        (
            "From GPT-2's block to Llama 3's and Qwen3's",
            "从 GPT-2 的块到 Llama 3 和 Qwen3 的块",
            "Transformer 块：从 GPT-2 到 Llama 3 和 Qwen3",
        ),
        ("Llama 3's and Qwen3's blocks", "Llama 3 和 Qwen3 的块", "Llama 3 和 Qwen3 的 Transformer 块"),
        ("the attention sink", "注意力汇聚", "注意力汇聚点（attention sink）"),
        ("a rolling KV cache", "滚动的 KV 缓存", "滚动 KV 缓存"),
        ("a fused kernel", "融合的计算核", "融合的内核"),
        ("windowed and full layers", "带窗口的层与完整的层", "滑动窗口层与全注意力层"),
        ("Gemma's local and global layers", "Gemma 的窗口层与完整层", "Gemma 的局部层与全局层"),
        ("the band mask", "带子掩码", "带状掩码"),
        ("the cache evicts a token", "缓存删掉一个 token", "缓存逐出一个 token"),
        ("read in chunks of 12 tokens", "分成 12 个 token 的块读入", "分成 12 个 token 的输入片段读入"),
        ("four heatmaps", "四张热图", "四张热力图"),
        ("the perplexity", "困惑程度", "困惑度"),
        ("interleaved pairs or rotate-half pairs", "交错对或 rotate-half 对", "交错配对或 rotate-half 配对"),
        ("today's open models", "当今开放模型", "当今开放权重模型"),
        ("the latent space", "潜向量空间", "潜空间"),
        ("the latent query", "潜向量查询", "潜空间查询"),
        ("the logits", "对数几率", "logits"),
        ("a pre-norm block", "前置归一化的 Transformer 块", "pre-norm Transformer 块"),
        ("one latent per token", "每个词元一个潜向量", "每个 token 一个潜向量"),
        ("a `tril` buffer", "一个 `tril` buffer", "一个 `tril` 缓冲区"),
        ("as many patches", "同样多的 patch", "同样多的图像块"),
        ("a prompt of 100 tokens", "100 个 token 的 prompt", "100 个 token 的提示词"),
        ("greedy generation", "贪婪生成", "贪心生成"),
        ("the worked example", "这个例子", "这个算例"),
        ('its "input 1" is our row 0', "它的“input 1”就是我们的第 0 行", "它的“输入 1”就是我们的第 0 行"),
        (
            "the worked example of *Illustrated: Self-Attention*",
            "*Illustrated: Self-Attention* 的算例",
            "《图解自注意力》的算例",
        ),
    ],
)
def test_terminology_decisions_are_enforced(msgid, bad, good):
    """The edition's term decisions (locales/zh_CN/terminology.md): a wrong variant fails, the term passes."""
    terms, never = editions.terminology()
    assert any(p.startswith(("term", "forbidden")) for p in editions.lint_message(msgid, bad, terms, never)), bad
    assert editions.lint_message(msgid, good, terms, never) == [], good


def test_terminology_leaves_other_senses_alone():
    terms, never = editions.terminology()
    assert (
        editions.lint_message("`.repeat` would tile the heads instead", "`.repeat` 则会把各个头平铺复制", terms, never)
        == []
    )
    assert editions.lint_message("Attention in tiles", "分块计算注意力", terms, never) == []
    assert editions.lint_message("the mask blocks a key", "掩码屏蔽一个键", terms, never) == []


def test_lint_display_math_text_may_be_translated():
    terms, never = editions.terminology()
    msgid = "\nO_{t j} = \\begin{cases} 1 & \\text{if } j = \\mathrm{id}_t, \\\\ 0 & \\text{otherwise.} \\end{cases}\n"
    assert editions.lint_message(msgid, msgid, terms, never) == []
    zh = msgid.replace("\\text{if }", "\\text{若 }").replace("\\text{otherwise.}", "\\text{否则。}")
    assert editions.lint_message(msgid, zh, terms, never) == []
    assert editions.lint_message(msgid, zh.replace("= \\mathrm{id}_t", "= \\mathrm{id}(t)"), terms, never)
    sub = "\nN = n_{\\text{vocab}}\\, d + \\underbrace{4d^2}_{\\text{attention}} .\n"
    assert editions.lint_message(sub, sub.replace("{\\text{attention}}", "{\\text{注意力}}"), terms, never) == []
    assert editions.lint_message(sub, sub.replace("\\text{vocab}", "\\text{词表}"), terms, never)  # notation
    assert editions.lint_message(sub, sub.replace("{\\text{attention}}", "{\\text{注意力,投影}}"), terms, never)


# ------------------------------------------------------------------ notebooks and homework in Chinese


def test_translate_markdown_places_whole_blocks_only():
    catalog = {
        "Summary": "小结",
        "A long paragraph that wraps.": "一段会换行的长段落。",
        "a list item": "列表项",
        "a cell": "单元格",
        "Summary of it": "它的小结",
    }
    source = (
        "## Summary\n\nA long paragraph\nthat wraps.\n\n- a list item\n\n| a cell | x |\n\n"
        "Summary of it\n\nNot a Summary here."
    )
    out, placed = translate_markdown(source, catalog)
    assert out == ("## 小结\n\n一段会换行的长段落。\n\n- 列表项\n\n| 单元格 | x |\n\n它的小结\n\nNot a Summary here.")
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
    english_left = [
        c.source
        for c in zh.cells
        if c.cell_type == "markdown"
        and re.search(r"\b(the|and|of|is)\b", re.sub(r"`[^`]*`|\$[^$]*\$|\*[^*]*\*|\{[^}]*\}`[^`]*`|>.*", "", c.source))
        and not re.search(r"[\u4e00-\u9fff]", c.source)
    ]
    assert not english_left, f"{path.name}: markdown cells left in English: {english_left[:2]}"


def test_notebooks_zh_never_overwrites_a_learners_file(tmp_path):
    from coursetools.translate import translate_notebook_file

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
    assert translate_notebook_file(src, fresh) == set()  # an earlier translation is replaced


def test_release_in_chinese(tmp_path):
    """The Chinese student version: Chinese text, no solutions, and the same code as the English one."""
    src = ROOT / "notebooks" / "04_masking.ipynb"
    (zh,) = homework.release([src], tmp_path / "zh", lang="zh_CN")
    (en,) = homework.release([src], tmp_path / "en")
    zh_nb, en_nb = nbformat.read(zh, as_version=4), nbformat.read(en, as_version=4)
    from coursetools.translate import LANGUAGE_TAG

    first = next(c for c in zh_nb.cells if c.cell_type == "code")  # the Chinese edition's one extra cell
    assert LANGUAGE_TAG in first.metadata["tags"] and 'os.environ["ATTNLIB_LANG"] = "zh_CN"' in first.source
    assert [c.source for c in zh_nb.cells if c.cell_type == "code" and c is not first] == [
        c.source for c in en_nb.cells if c.cell_type == "code"
    ]
    text = "\n".join(c.source for c in zh_nb.cells if c.cell_type == "markdown")
    assert "学生版" in text and "掩码" in text and "{solution-start}" not in text
    assert homework.exercises_of(zh_nb, zh) == homework.exercises_of(en_nb, en)  # graded alike
    with pytest.raises(homework.HomeworkError, match="--lang"):
        homework.release([src], tmp_path / "xx", lang="fr_FR")
    assert not (tmp_path / "xx").exists()


# ------------------------------------------------------------------ the built Chinese edition


def _executed_notebook(*outputs, code="attnlib.plot.show_matrix(w)") -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code, execution_count=1, outputs=list(outputs))]
    return nb


GLYPH_WARNING = nbformat.v4.new_output(
    "stream",
    name="stderr",
    text="/tmp/ipykernel_1/1.py:3: UserWarning: Glyph 26597 (\\N{CJK UNIFIED IDEOGRAPH-67E5}) missing from "
    "font(s) DejaVu Sans.\n  fig.canvas.draw()\n",
)


def test_missing_chinese_glyphs_are_found_in_executed_outputs():
    """The scan behind check_zh_figures: matplotlib's and attnlib's warnings name their page; a figure
    drawn in a Chinese font (no warning) does not."""
    png = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    attnlib_warning = nbformat.v4.new_output(
        "stream", name="stderr", text="UserWarning: ATTNLIB_LANG=zh_CN：matplotlib 找不到含中文字符的字体\n"
    )
    executed = [
        ("notebooks/04_masking", _executed_notebook(GLYPH_WARNING, png)),
        ("notebooks/05_softmax_values", _executed_notebook(png)),
        ("book/intro", _executed_notebook(attnlib_warning)),
        ("notebooks/06_multihead", _executed_notebook(nbformat.v4.new_output("stream", name="stdout", text="Glyph"))),
    ]
    found = editions.missing_glyphs(executed)
    assert sorted(found) == ["book/intro", "notebooks/04_masking"]
    assert "missing from font(s) DejaVu Sans" in found["notebooks/04_masking"]
    assert editions.missing_glyphs([("notebooks/05_softmax_values", _executed_notebook(png))]) == {}


def test_chinese_build_fails_on_figures_without_chinese_glyphs(tmp_path):
    """check_zh_figures reads the executed notebooks from a jupyter cache (as the Chinese build leaves
    it) and stops the build with the pages and the fix; a cache without the warnings passes."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache_dir = tmp_path / "cache"
    cache = get_cache(str(cache_dir))
    for name, outputs in (("bad", [GLYPH_WARNING]), ("good", [])):
        path = tmp_path / f"{name}.ipynb"
        code = f"show_matrix({name!r})"
        nbformat.write(_executed_notebook(code=code), path)  # the source, code only
        cache.add_nb_to_project(str(path))
        bundle = CacheBundleIn(_executed_notebook(*outputs, code=code), str(path))
        cache.cache_notebook_bundle(bundle, check_validity=False)
    (cache_dir / "attnlib.sha256").write_text("x")
    with pytest.raises(SystemExit) as failure:
        editions.check_zh_figures(cache_dir)
    message = str(failure.value)
    assert str(tmp_path / "bad") in message and str(tmp_path / "good") not in message
    assert "fonts-wqy-zenhei" in message and "MPLCONFIGDIR" in message and "matplotlib" in message
    assert not (cache_dir / "attnlib.sha256").exists()  # the next build executes the Chinese pages again
    editions.check_zh_figures(tmp_path / "no-cache")  # nothing executed yet: nothing to say


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
        text = re.sub(r"<(script|style|pre|code)\b.*?</\1>|<[^>]+>", "", zh_html, flags=re.S)
        assert "**" not in text, f"{chapter.stem}: literal ** in the Chinese page"


def test_the_lint_rejects_a_footnote_reference():
    """A MyST footnote reference does not survive Sphinx's translation of its message (the Chinese build
    fails with "inconsistent footnote references"): the lint says so before a build does."""
    problems = editions.lint_message("A common bug[^trim]. Then more.", "一个常见的错误[^trim]。然后。")
    assert any("footnote" in p for p in problems)
    assert not any("footnote" in p for p in editions.lint_message("`x[^2]` squared", "`x[^2]` 的平方"))
