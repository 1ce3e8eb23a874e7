"""attnlib speaks Chinese when asked: ATTNLIB_LANG=zh_CN (attnlib/i18n.py).

English by default (the other tests compare English messages); with the switch, the
checkers' feedback, the grader's report and the figures' words come from the catalog
inside the package, attnlib/locales/zh_CN/LC_MESSAGES/attnlib.po, and every message the
code looks up, and every plain-English label a notebook passes to attnlib.plot, has a
translation there.
"""
from __future__ import annotations

import ast
import inspect
import re
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import polib  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import attnlib  # noqa: E402
from attnlib import AttnlibError, check, homework, i18n, plot  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "attnlib" / "locales" / "zh_CN" / "LC_MESSAGES" / "attnlib.po"
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CJK = re.compile(r"[\u3400-\u9fff]")


@pytest.fixture
def zh(monkeypatch):
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")


@pytest.fixture(autouse=True)
def english_unless_asked(monkeypatch):
    monkeypatch.delenv("ATTNLIB_LANG", raising=False)
    yield
    plt.close("all")


def one_hot(ids, V):
    return F.one_hot(ids, V).float()


def _message(checker, fn) -> str:
    with pytest.raises(AssertionError) as info:
        checker(fn)
    return str(info.value)


# ------------------------------------------------------------------ the switch

def test_english_by_default(capsys):
    assert i18n.language() == "en"
    check.one_hot_rows(one_hot)
    assert "check.one_hot_rows: all 10 cases passed (shapes (T,) and (B, T)" in capsys.readouterr().out
    message = _message(check.one_hot_rows, lambda ids, V: one_hot(ids.flatten(), V))
    assert message.startswith("one_hot_rows: wrong shape\n  case: ") and "\n  hint: row i has" in message


@pytest.mark.parametrize("value", ["en", "", "zh_CN"])
def test_accepted_values(monkeypatch, value):
    monkeypatch.setenv("ATTNLIB_LANG", value)
    assert i18n.language() == (value or "en")


def test_an_unknown_language_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ATTNLIB_LANG", "zh")
    expected = r"ATTNLIB_LANG: expected one of en, zh_CN \(or unset: English\), received 'zh'"
    with pytest.raises(AttnlibError, match=expected):
        check.one_hot_rows(one_hot)
    with pytest.raises(AttnlibError, match=expected):
        plot.overview("mask")


def test_read_when_the_message_is_made(monkeypatch, capsys):
    """Set in a notebook cell after `import attnlib`, the switch applies to the next check."""
    check.one_hot_rows(one_hot)
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    check.one_hot_rows(one_hot)
    monkeypatch.setenv("ATTNLIB_LANG", "en")
    check.one_hot_rows(one_hot)
    english, chinese, again = capsys.readouterr().out.splitlines()
    assert english == again and english.startswith("check.one_hot_rows: all 10 cases passed")
    assert chinese.startswith("check.one_hot_rows：全部 10 个用例通过（") and chinese.endswith("）。")


# ------------------------------------------------------------------ checker feedback

def test_a_wrong_answer_in_chinese(zh):
    message = _message(check.one_hot_rows, lambda ids, V: one_hot(ids.flatten(), V))
    assert message.startswith("one_hot_rows：形状不对\n  用例：a batch (B, T) = (2, 3) [第 5 个，共 10 个]\n  输入：")
    assert "\n  应为形状：(2, 3, 3)\n  实际形状：(6, 3)\n  提示：第 i 行只有一个 1" in message
    message = _message(check.mean_embedding, lambda ids, table: attnlib.embed(ids, table).sum(0))
    assert "mean_embedding：值不对\n" in message and "\n  应为：" in message and "\n  实际：" in message
    assert "提示：对 table[ids] 的各行求平均" in message
    assert "expected" not in message and "hint" not in message


@pytest.mark.parametrize("student, chinese", [
    (lambda ids, V: one_hot(ids, V).tolist(), "one_hot_rows：应返回 torch.Tensor，实际得到 list"),
    (lambda ids, V: ids[..., None] == torch.arange(V), "应返回浮点张量，实际的 dtype 是 torch.bool"),
    (lambda ids, V: one_hot(ids, V).double(), "dtype 不对\n  用例："),
    (lambda ids, V: 1 / 0, "one_hot_rows：你的函数抛出了 ZeroDivisionError：division by zero\n  用例："),
    (lambda ids, V: (_ for _ in ()).throw(NotImplementedError()), "one_hot_rows：还没有实现（它抛出了 NotImplementedError）"),
    (None, "one_hot_rows：应传入一个函数，实际收到 None。请传入函数本身，例如 check.one_hot_rows(one_hot_rows)"),
])
def test_each_kind_of_message_in_chinese(zh, student, chinese):
    assert chinese in _message(check.one_hot_rows, student)


def test_the_success_line_in_chinese(zh, capsys):
    check.one_hot_rows(one_hot)
    assert capsys.readouterr().out == ("check.one_hot_rows：全部 10 个用例通过"
                                       "（一维的 ids 和二维的 (B, T)，T = 0，vocab_size = 1；float32）。\n")


def test_calling_the_answer_in_chinese(monkeypatch):
    def combine_masks(lengths, T):
        return attnlib.causal_mask(T) & attnlib.padding_mask(lengths, T)
    english = _message(check.combine_masks, combine_masks)
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    assert _message(check.stable_softmax, lambda x: attnlib.softmax(x)) == (
        "stable_softmax：请自己写 stable_softmax；attnlib.softmax 正是用来核对你的答案的参考实现")
    assert _message(check.combine_masks, combine_masks) == (
        "combine_masks：练习 ch04-combine-masks 要求不借助 attnlib.causal_mask 写出 combine_masks：请用张量运算自己写")
    other = check.CHECKS["ch03-unit-variance-scale"].reference            # another exercise's answer
    assert _message(check.scores, lambda x, w_q, w_k: other(4, 1.0, 1.0) * x @ w_q @ (x @ w_k).mT) == (
        "scores：attnlib.check.CHECKS['ch03-unit-variance-scale'].reference 是练习 ch03-unit-variance-scale "
        "的答案；请用张量运算自己写 scores")
    monkeypatch.setenv("ATTNLIB_LANG", "en")            # the messages are kept per language, not once
    assert _message(check.combine_masks, combine_masks) == english == (
        "combine_masks: exercise ch04-combine-masks asks you to write combine_masks without "
        "attnlib.causal_mask: write it yourself, with tensor operations")


def test_every_hint_and_edge_case_list_in_chinese(zh, capsys):
    for entry in check.CHECKS.values():
        assert CJK.search(i18n.tr(entry.hint)), f"{entry.exercise}: hint not translated"
        assert CJK.search(i18n.tr(entry.covers)), f"{entry.exercise}: covers not translated"


# ------------------------------------------------------------------ the grader

def test_the_report_in_chinese(zh):
    results = [homework.Result("ch01-one-hot", "one_hot_rows", 1, 1, "pass", "全部 10 个用例通过"),
               homework.Result("ch01-mean-embedding", "mean_embedding", 0, 1, "fail", "mean_embedding：值不对\n...")]
    lines = homework.report(Path("s/01_embeddings.ipynb"), results).splitlines()
    assert lines == [
        "s/01_embeddings.ipynb",
        "练习                 得分  结果    说明",
        "-------------------  ----  ------  ----",
        "ch01-one-hot         1/1   通过    全部 10 个用例通过",
        "ch01-mean-embedding  0/1   未通过  mean_embedding：值不对",
        "总分：1/2",
    ]


SUBMISSION = [
    "import torch\nimport attnlib\nfrom attnlib import check",
    "def one_hot_rows(ids, vocab_size):\n    return torch.zeros(*ids.shape, vocab_size)",         # wrong values
    "def mean_embedding(ids, table):\n    return table[ids].mean(dim=0)",                        # right
]


def test_grading_is_the_same_in_both_languages(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in SUBMISSION])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "01_embeddings.ipynb"
    nbformat.write(nb, path)
    english = homework.grade_one(path, timeout=60)
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    chinese = homework.grade_one(path, timeout=60)
    assert [(r.exercise, r.points, r.max_points, r.result) for r in english] == \
           [(r.exercise, r.points, r.max_points, r.result) for r in chinese] == \
           [("ch01-one-hot", 0, 1, "fail"), ("ch01-mean-embedding", 1, 1, "pass")]
    assert english[0].message.startswith("one_hot_rows: wrong values")
    assert chinese[0].message.startswith("one_hot_rows：值不对") and chinese[1].message == "全部 8 个用例通过"


# ------------------------------------------------------------------ figures

def _texts(fig) -> list[str]:
    from matplotlib.text import Text
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def test_figures_in_chinese(zh):
    fig = plot.overview("mask")
    texts = _texts(fig)
    assert "掩码\n（屏蔽处为 -∞）" in texts and "第 4 章" in texts and "一个头（共 n_heads 个并排计算）" in texts
    assert "Q, K, V\n= X W_Q, X W_K, X W_V" in texts                     # formulas as they are
    assert not [t for t in texts if re.search(r"\b(where|blocked|heads|ch\.)\b", t)], texts

    w = torch.softmax(torch.randn(3, 3), dim=-1)
    ax = plot.attention_heatmap(w, ["a", "cat", "is"], ["a", "cat", "is"], title="masked attention weights").axes[0]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("掩码后的注意力权重\n3 × 3", "键（被关注）", "查询（发出关注）")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "cat", "is"]     # tokens are data: kept

    fig = plot.show_matrices([("queries $Q$", torch.eye(3), ["row 0 (input 1)", "row 1 (input 2)", "row 2 (input 3)"]),
                              ("not in the catalog", torch.eye(3))], xlabel="key (0-2 cached, 3-4 new)")
    a, b = fig.axes
    assert a.get_title() == "查询 $Q$\n3 × 3" and b.get_title() == "not in the catalog\n3 × 3"
    assert [t.get_text() for t in a.get_yticklabels()] == ["第 0 行（输入 1）", "第 1 行（输入 2）", "第 2 行（输入 3）"]
    assert a.get_xlabel() == "键（0-2 已缓存，3-4 是新的）"

    ax = plot.loss_curve([2.0, 1.0, 0.5], window=2, reference=2.0, reference_label="ln(11): a uniform guess").axes[0]
    assert [line.get_label() for line in ax.lines] == ["每一步的损失", "2 步滑动平均", "ln(11)：均匀猜测"]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("训练损失", "训练步", "损失（交叉熵）")

    ax = plot.scaling([1, 2, 4], {"explicit": [1, 4, 16]}, ylabel="time (ms)", guides=(2,)).axes[0]
    assert [line.get_label() for line in ax.lines] == ["显式计算：斜率 2.00", "$\\propto T^{2}$"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("序列长度 T", "时间（ms）")
    assert [a.get_title() for a in plot.heads_grid(torch.softmax(torch.randn(2, 3, 3), -1)).axes] == \
           ["头 0\n3 × 3", "头 1\n3 × 3"]


def test_english_figures_are_unchanged():
    fig = plot.overview("mask")
    assert "mask\n(-∞ where blocked)" in _texts(fig) and "ch. 4" in _texts(fig)
    ax = plot.attention_heatmap(torch.eye(2)).axes[0]
    assert (ax.get_title(), ax.get_xlabel()) == ("attention weights\n2 × 2", "key (attended to)")


def test_chinese_figures_use_a_font_with_chinese_characters(zh):
    """Drawn without a missing glyph; math and numbers keep matplotlib's own fonts."""
    from matplotlib import font_manager
    installed = {f.name for f in font_manager.fontManager.ttflist}
    if not installed & set(plot.CHINESE_FONTS):
        pytest.skip(f"no font with Chinese characters installed (one of {plot.CHINESE_FONTS})")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*missing from font")
        with plt.rc_context(plot.STYLE):       # as the notebooks do: axes made before the plot function runs
            fig, axes = plt.subplots(1, 2)
        plot.attention_heatmap(torch.eye(2), ["key 0", "key 1"], title="scores $S = QK^T$", ax=axes[0])
        plot.loss_curve([1.0, 0.5, 0.1], log=True, ax=axes[1])
        fig.canvas.draw()
        plot.overview("all").canvas.draw()
    from matplotlib.text import Text
    for t in fig.findobj(Text):
        family = t.get_fontfamily()[0]
        if CJK.search(t.get_text()):
            assert family in plot.CHINESE_FONTS, (t.get_text(), family)


def test_without_a_chinese_font_a_warning_says_what_to_install(zh, monkeypatch):
    monkeypatch.setattr(plot, "CHINESE_FONTS", ("No Such Font SC",))
    with pytest.warns(UserWarning, match=r"找不到含中文字符的字体.*`apt-get install fonts-noto-cjk`.*No Such Font SC"):
        plot.overview("mask")


# ------------------------------------------------------------------ the catalog

def test_the_catalog_is_read_as_polib_reads_it():
    po = polib.pofile(str(CATALOG))
    assert i18n.catalog("zh_CN") == {e.msgid: e.msgstr for e in po
                                      if e.msgid and e.msgstr and not e.obsolete and "fuzzy" not in e.flags}
    assert not [e.msgid for e in po if not e.msgstr or "fuzzy" in e.flags], "untranslated or fuzzy messages"


def _looked_up() -> dict[str, str]:
    """Every message the code looks up: tr("...") literals in attnlib/, the checkers' hints and
    edge cases, the overview's boxes, the grader's results and plot's default titles."""
    found = {}
    for path in sorted((ROOT / "attnlib").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tr"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                found[node.args[0].value] = path.name
    for entry in check.CHECKS.values():
        found[entry.hint] = found[entry.covers] = entry.exercise
    found.update({text: "plot.OVERVIEW_STEPS" for _, text, _ in plot.OVERVIEW_STEPS})
    found.update({result: "homework.RESULTS" for result in homework.RESULTS})
    for name in ("attention_heatmap", "loss_curve"):
        found[inspect.signature(getattr(plot, name)).parameters["title"].default] = f"plot.{name}"
    found[inspect.signature(plot.heads_grid).parameters["title"].default + " {}"] = "plot.heads_grid"
    return found


def test_every_message_the_code_looks_up_is_translated():
    looked_up = _looked_up()
    assert len(looked_up) > 100 and "check.{function}: all {n} cases passed ({covers})." in looked_up
    catalog = i18n.catalog("zh_CN")
    missing = {m: where for m, where in looked_up.items() if m not in catalog}
    assert not missing, f"no translation in {CATALOG.name}: {missing}"
    english = {m: catalog[m] for m in looked_up if catalog[m] == m and re.search(r"[a-z]{2,}", m)}
    assert not english, f"translations that are still English: {english}"


def test_translations_keep_placeholders_and_lines():
    """A translation fills in the same {placeholders} and keeps the lines a message is built of."""
    for msgid, msgstr in i18n.catalog("zh_CN").items():
        fields = sorted(re.findall(r"\{\w*\}", msgid))
        assert sorted(re.findall(r"\{\w*\}", msgstr)) == fields, (msgid, msgstr)
        assert msgstr.count("\n") == msgid.count("\n") and msgstr.endswith("\n") == msgid.endswith("\n"), msgid
        assert msgstr.startswith("  ") == msgid.startswith("  "), msgid       # the indented lines of a message


def test_the_catalog_passes_the_translation_lint():
    sys.path.insert(0, str(ROOT / "book"))
    try:
        from catalog_lint import lint_message, terminology
    finally:
        sys.path.remove(str(ROOT / "book"))
    terms, never = terminology()
    problems = {m: p for m, s in i18n.catalog("zh_CN").items() if (p := lint_message(m, s, terms, never))}
    assert not problems, problems


# ------------------------------------------------------------------ labels the notebooks pass to attnlib.plot

PLOT_FUNCTIONS = {"show_matrix", "show_matrices", "attention_heatmap", "heads_grid", "overview", "loss_curve", "scaling"}
NOT_TEXT = {"ops", "fmt", "highlight", "ax", "annotate"}
KEPT_WORDS = {"token", "softmax", "RoPE", "SDPA", "FLOPs", "GPT"}      # stay English (terminology.md)


def _strings(node, bound):
    """The texts a node of a plot call's arguments stands for: strings, f-strings with {} for each
    value, and names bound to such literals (by an assignment or a for loop) in the notebook."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        yield "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    elif isinstance(node, ast.Name):
        for value in bound.get(node.id, []):
            yield from _strings(value, {})
    elif isinstance(node, (ast.List, ast.Tuple)):
        for e in node.elts:
            yield from _strings(e, bound)
    elif isinstance(node, ast.Dict):
        for e in node.keys:
            yield from _strings(e, bound)
    elif isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        yield from _strings(node.elt, bound)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("zip", "enumerate", "list"):
        for a in node.args:
            yield from _strings(a, bound)


def notebook_labels(path: Path) -> set[str]:
    """The titles and labels a chapter passes to attnlib.plot, read from its code (not run)."""
    lines = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    tree = ast.parse("\n".join(re.sub(r"^(\s*)[%!].*", r"\1pass", line) for line in lines.splitlines()))
    bound: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = ([(target, node.value)] if isinstance(target, ast.Name) else
                         list(zip(target.elts, node.value.elts)) if isinstance(target, ast.Tuple)
                         and isinstance(node.value, ast.Tuple) else [])
                for name, value in pairs:
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, []).append(value)
        elif isinstance(node, ast.For):
            for name in ast.walk(node.target):
                if isinstance(name, ast.Name):
                    bound.setdefault(name.id, []).append(node.iter)
    labels = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PLOT_FUNCTIONS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "plot"):
            args = [k.value for k in node.keywords if k.arg not in NOT_TEXT]
            if node.func.attr != "overview":
                args += node.args
            for arg in args:
                labels.update(_strings(arg, bound))
    return labels


def _plain_english(label: str) -> bool:
    """Words a Chinese reader should not meet: what is left without math, code and kept words."""
    text = re.sub(r"\$[^$]*\$|\w+\[[^\]]*\]|\w+\([^)]*\)|\w*_\w*|\b\w+=\S*|\{\}", " ", label)
    return bool([w for w in re.findall(r"[A-Za-z]{2,}", text) if w not in KEPT_WORDS])


def _has_entry(label: str, catalog: dict[str, str]) -> bool:
    """As plot finds a label: whole, or with its numbers as {}; a {} of an f-string stands for anything."""
    pattern = re.sub(r"\d+(?:\.\d+)?", "{}", label) if "{" not in label.replace("{}", "") else label
    if label in catalog or pattern in catalog:
        return True
    anything = re.compile(".+".join(re.escape(p) for p in pattern.split("{}")) + r"\Z")
    return "{}" in pattern and any(anything.match(m) for m in catalog)


def test_the_label_scan_finds_the_notebooks_labels():
    labels = notebook_labels(ROOT / "notebooks" / "12_kv_cache.ipynb")
    assert {"new token 3", "query head {}", "key (0-{} cached, {}-{} new)", "top left: causal_mask(2, 5)"} <= labels
    assert "encoder self-attention" in notebook_labels(ROOT / "notebooks" / "08_cross_attention.ipynb")  # a loop
    assert "{}: head {}" in notebook_labels(ROOT / "notebooks" / "10_trained_attention.ipynb")  # the notebook's helper
    assert [label for label in ("x", "$W_Q$", "t={}", "O @ E = E[ids]", "token 0", "{} {}") if _plain_english(label)] == []
    catalog = {"length {}": "长度 {}", "before: head {}": "训练前：头 {}"}
    assert _has_entry("length 5", catalog) and _has_entry("length {}", catalog) and _has_entry("{}: head {}", catalog)
    assert not _has_entry("width {}", catalog)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_plain_english_label_a_notebook_passes_to_plot_has_an_entry(path):
    catalog = i18n.catalog("zh_CN")
    missing = sorted(label for label in notebook_labels(path) if _plain_english(label) and not _has_entry(label, catalog))
    assert not missing, (f"{path.name} passes these labels to attnlib.plot; add them to {CATALOG.relative_to(ROOT)} "
                         f"(numbers as {{}}): {missing}")


# ------------------------------------------------------------------ the Chinese notebooks set the switch

def test_chinese_notebooks_and_student_versions_set_the_switch_first(tmp_path):
    from attnlib.translate import LANGUAGE_TAG, translate_notebook_file

    src = ROOT / "notebooks" / "04_masking.ipynb"
    translate_notebook_file(src, tmp_path / "zh" / src.name)
    (student,) = homework.release([src], tmp_path / "student-zh", lang="zh_CN")
    (english,) = homework.release([src], tmp_path / "student")
    for path in (tmp_path / "zh" / src.name, student):
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert LANGUAGE_TAG in code[0].metadata["tags"]
        assert code[0].source.endswith('import os\nos.environ["ATTNLIB_LANG"] = "zh_CN"')
        assert CJK.search(code[0].source.splitlines()[0])                       # its comment is Chinese too
    code = [c.source for c in nbformat.read(student, as_version=4).cells if c.cell_type == "code"]
    assert code[1:] == [c.source for c in nbformat.read(english, as_version=4).cells if c.cell_type == "code"]
