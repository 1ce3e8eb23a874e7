"""attnlib speaks Chinese when asked: ATTNLIB_LANG=zh_CN (attnlib/i18n.py).

English by default (the other tests compare English messages); with the switch, the
checkers' feedback, the grader's report and the figures' words come from the catalog
inside the package, attnlib/locales/zh_CN/LC_MESSAGES/attnlib.po, and every message the
code looks up, every checker case's label, and every plain-English label a notebook passes
to attnlib.plot or writes on a figure it hands to plot.localize, has a translation there.
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
import matplotlib.pyplot as plt
import nbformat
import polib
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib import AttnlibError, check, i18n, plot
from coursetools import homework

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "attnlib" / "locales" / "zh_CN" / "LC_MESSAGES" / "attnlib.po"
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
N_ONE_HOT = len(check.CHECKS["ch01-one-hot"].cases())  # the cases of chapter 1's first checker
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
    n = N_ONE_HOT
    assert f"check.one_hot_rows: all {n} cases passed (shapes (T,) and (B, T)" in capsys.readouterr().out
    message = _message(check.one_hot_rows, lambda ids, V: one_hot(ids.flatten(), V))
    assert message.startswith(f"one_hot_rows: wrong shape\n  case: a batch (B, T) = (2, 3) [5 of {n}]\n  input: ")
    assert "\n  hint: row i has" in message
    message = _message(check.one_hot_rows, lambda ids, V: one_hot(ids, V) * (1 if V < 20 else 2))
    assert f"\n  case: random ids, shape (5,), vocab_size=22 [6 of {n}]\n" in message


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
    n = N_ONE_HOT
    assert english == again and english.startswith(f"check.one_hot_rows: all {n} cases passed")
    assert chinese.startswith(f"check.one_hot_rows：全部 {n} 个用例通过（") and chinese.endswith("）。")


# ------------------------------------------------------------------ checker feedback


def test_a_wrong_answer_in_chinese(zh):
    message = _message(check.one_hot_rows, lambda ids, V: one_hot(ids.flatten(), V))
    assert message.startswith(
        f"one_hot_rows：形状不对\n  用例：一批序列，(B, T) = (2, 3) [第 5 个，共 {N_ONE_HOT} 个]\n  输入："
    )
    assert "\n  应为形状：(2, 3, 3)\n  实际形状：(6, 3)\n  提示：第 i 行只有一个 1" in message
    message = _message(check.mean_embedding, lambda ids, table: attnlib.embed(ids, table).sum(0))
    assert "mean_embedding：值不对\n" in message and "\n  应为：" in message and "\n  实际：" in message
    assert "提示：对 table[ids] 的各行求平均" in message
    assert "expected" not in message and "hint" not in message


@pytest.mark.parametrize(
    "student, chinese",
    [
        (lambda ids, V: one_hot(ids, V).tolist(), "one_hot_rows：应返回 torch.Tensor，实际得到 list"),
        (lambda ids, V: ids[..., None] == torch.arange(V), "应返回浮点张量，实际的 dtype 是 torch.bool"),
        (lambda ids, V: one_hot(ids, V).double(), "dtype 不对\n  用例："),
        (lambda ids, V: 1 / 0, "one_hot_rows：你的函数抛出了 ZeroDivisionError：division by zero\n  用例："),
        (
            lambda ids, V: (_ for _ in ()).throw(NotImplementedError()),
            "one_hot_rows：还没有实现（它抛出了 NotImplementedError）",
        ),
        (None, "one_hot_rows：应传入一个函数，实际收到 None。请传入函数本身，例如 check.one_hot_rows(one_hot_rows)"),
    ],
)
def test_each_kind_of_message_in_chinese(zh, student, chinese):
    assert chinese in _message(check.one_hot_rows, student)


def test_the_success_line_in_chinese(zh, capsys):
    check.one_hot_rows(one_hot)
    assert capsys.readouterr().out == (
        f"check.one_hot_rows：全部 {N_ONE_HOT} 个用例通过"
        "（一维的 ids 和二维的 (B, T)，T = 0，vocab_size = 1；float32）。\n"
    )


def test_calling_the_answer_in_chinese(monkeypatch):
    def combine_masks(lengths, T):
        return attnlib.causal_mask(T) & attnlib.padding_mask(lengths, T)

    english = _message(check.combine_masks, combine_masks)
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    assert _message(check.stable_softmax, lambda x: attnlib.softmax(x)) == (
        "stable_softmax：请自己写 stable_softmax；attnlib.softmax 正是用来核对你的答案的参考实现"
    )
    assert _message(check.combine_masks, combine_masks) == (
        "combine_masks：练习 ch04-combine-masks 要求不借助 attnlib.causal_mask 写出 combine_masks：请用张量运算自己写"
    )
    other = check.CHECKS["ch03-unit-variance-scale"].reference  # another exercise's answer
    assert _message(check.scores, lambda x, w_q, w_k: other(4, 1.0, 1.0) * x @ w_q @ (x @ w_k).mT) == (
        "scores：attnlib.check.CHECKS['ch03-unit-variance-scale'].reference 是练习 ch03-unit-variance-scale "
        "的答案；请用张量运算自己写 scores"
    )
    monkeypatch.setenv("ATTNLIB_LANG", "en")  # the messages are kept per language, not once
    assert (
        _message(check.combine_masks, combine_masks)
        == english
        == (
            "combine_masks: exercise ch04-combine-masks asks you to write combine_masks without "
            "attnlib.causal_mask: write it yourself, with tensor operations"
        )
    )


def test_every_hint_and_edge_case_list_in_chinese(zh, capsys):
    for entry in check.CHECKS.values():
        assert CJK.search(i18n.tr(entry.hint)), f"{entry.exercise}: hint not translated"
        assert CJK.search(i18n.tr(entry.covers)), f"{entry.exercise}: covers not translated"


def test_a_failing_case_is_named_in_chinese(zh):
    """The case's label, whole ("a batch ...") or from a template ("random ids, shape {shape}, ...")."""
    message = _message(check.one_hot_rows, lambda ids, V: one_hot(ids, V) * (1 if V < 20 else 2))
    assert f"\n  用例：随机 id，形状为 (5,)，vocab_size=22 [第 6 个，共 {N_ONE_HOT} 个]\n" in message
    message = _message(check.mean_embedding, lambda ids, table: table[ids].mean(0) + (len(ids) > 1))
    assert (
        f"\n  用例：重复出现的 token [第 2 个，共 {len(check.CHECKS['ch01-mean-embedding'].cases())} 个]\n" in message
    )


def _case_entry(label: str) -> tuple[str | None, dict[str, str]]:
    """The msgctxt "case" entry that translates ``label`` (itself, or the template tr_case uses)
    and the values the label gives the template's placeholders."""
    if label in i18n.catalog("zh_CN", i18n.CASE):
        return label, {}
    for template, pattern in i18n._templates("zh_CN"):
        found = pattern.fullmatch(label)
        if found:
            return template, found.groupdict()
    return None, {}


def test_every_case_of_every_checker_has_a_chinese_label():
    used = set()
    for entry in check.CHECKS.values():
        for label, _ in entry.cases():
            template, values = _case_entry(label)
            assert template, f'{entry.exercise}: no msgctxt "case" entry in {CATALOG.name} for the case {label!r}'
            used.add(template)
            chinese = i18n.tr_case(label, "zh_CN")
            assert CJK.search(chinese) or chinese == label and not _plain_english(label), (label, chinese)
            for value in values.values():  # a value, not a stretch of the label: the right template
                assert value in chinese and not re.search(r"=|: ", value), (label, template, value)
    stale = set(i18n.catalog("zh_CN", i18n.CASE)) - used
    assert not stale, f"case labels no checker has any more: {sorted(stale)}"


# ------------------------------------------------------------------ the grader


def test_the_report_in_chinese(zh):
    results = [
        homework.Result("ch01-one-hot", "one_hot_rows", 1, 1, "pass", "全部 10 个用例通过"),
        homework.Result("ch01-mean-embedding", "mean_embedding", 0, 1, "fail", "mean_embedding：值不对\n..."),
    ]
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
    "def one_hot_rows(ids, vocab_size):\n    return torch.zeros(*ids.shape, vocab_size)",  # wrong values
    "def mean_embedding(ids, table):\n    return table[ids].mean(dim=0)",  # right
]


@pytest.mark.slow
def test_grading_is_the_same_in_both_languages(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in SUBMISSION])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "01_embeddings.ipynb"
    nbformat.write(nb, path)
    english = homework.grade_one(path, timeout=60)
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    chinese = homework.grade_one(path, timeout=60)
    assert (
        [(r.exercise, r.points, r.max_points, r.result) for r in english]
        == [(r.exercise, r.points, r.max_points, r.result) for r in chinese]
        == [("ch01-one-hot", 0, 1, "fail"), ("ch01-mean-embedding", 1, 1, "pass")]
    )
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
    assert "Q, K, V\n= X W_Q, X W_K, X W_V" in texts  # formulas as they are
    assert not [t for t in texts if re.search(r"\b(where|blocked|heads|ch\.)\b", t)], texts

    w = torch.softmax(torch.randn(3, 3), dim=-1)
    ax = plot.attention_heatmap(w, ["a", "cat", "is"], ["a", "cat", "is"], title="masked attention weights").axes[0]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == (
        "掩码后的注意力权重\n3 × 3",
        "键（被关注）",
        "查询（发出关注）",
    )
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "cat", "is"]  # tokens are data: kept

    fig = plot.show_matrices(
        [
            ("queries $Q$", torch.eye(3), ["row 0 (input 1)", "row 1 (input 2)", "row 2 (input 3)"]),
            ("not in the catalog", torch.eye(3)),
        ],
        xlabel="key (0-2 cached, 3-4 new)",
    )
    a, b = fig.axes
    assert a.get_title() == "查询 $Q$\n3 × 3" and b.get_title() == "not in the catalog\n3 × 3"
    assert [t.get_text() for t in a.get_yticklabels()] == [
        "第 0 行（输入 1）",
        "第 1 行（输入 2）",
        "第 2 行（输入 3）",
    ]
    assert a.get_xlabel() == "键（0-2 已缓存，3-4 是新的）"

    ax = plot.loss_curve([2.0, 1.0, 0.5], window=2, reference=2.0, reference_label="ln(11): a uniform guess").axes[0]
    assert [line.get_label() for line in ax.lines] == ["每一步的损失", "2 步滑动平均", "ln(11)：均匀猜测"]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("训练损失", "训练步", "损失（交叉熵）")

    ax = plot.scaling([1, 2, 4], {"explicit": [1, 4, 16]}, ylabel="time (ms)", guides=(2,)).axes[0]
    assert [line.get_label() for line in ax.lines] == ["显式计算：斜率 2.00", "$\\propto T^{2}$"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("序列长度 T", "时间（ms）")
    assert [a.get_title() for a in plot.heads_grid(torch.softmax(torch.randn(2, 3, 3), -1)).axes] == [
        "头 0\n3 × 3",
        "头 1\n3 × 3",
    ]


def test_english_figures_are_unchanged():
    fig = plot.overview("mask")
    assert "mask\n(-∞ where blocked)" in _texts(fig) and "ch. 4" in _texts(fig)
    ax = plot.attention_heatmap(torch.eye(2)).axes[0]
    assert (ax.get_title(), ax.get_xlabel()) == ("attention weights\n2 × 2", "key (attended to)")


def _drawn_with_matplotlib():
    """A figure whose words a notebook writes with matplotlib itself, as chapters 3, 5 and 9 do."""
    with plt.rc_context(plot.STYLE):
        fig, (a, b) = plt.subplots(1, 2, layout="constrained")
    a.plot([1, 2], label="theory: 1")
    a.legend()
    a.set(title="Where the parameters are", xlabel="position", ylabel="$d_k$")
    a.set_xticks([0, 1], ["cat", "position"])  # tick labels are data
    b.plot([1, 2], label="subtract the max first")
    b.plot([2, 1], label="dimension 2: $\\sin(\\mathrm{pos}\\,\\theta_1)$")
    b.text(0, 1, "uniform")
    b.annotate("one-hot", (0, 2))
    fig.suptitle("not in the catalog")
    return fig


def test_a_figure_drawn_with_matplotlib_in_chinese(zh):
    fig = _drawn_with_matplotlib()
    a, b = fig.axes
    assert plot.localize(fig) is fig
    b.legend()  # made after localize: Chinese too
    assert (a.get_title(), a.get_xlabel(), a.get_ylabel()) == ("参数都在哪里", "位置", "$d_k$")
    assert [t.get_text() for t in a.get_legend().get_texts()] == ["理论值：1"]
    assert [t.get_text() for t in b.get_legend().get_texts()] == [
        "先减去最大值",
        "维度 2：$\\sin(\\mathrm{pos}\\,\\theta_1)$",
    ]  # numbers in and out of math kept
    assert [t.get_text() for t in b.texts] == ["均匀", "独热"]
    assert [t.get_text() for t in a.get_xticklabels()] == ["cat", "position"]
    assert [t.get_text() for t in fig.texts] == ["not in the catalog"]
    installed = {f.name for f in matplotlib.font_manager.fontManager.ttflist}
    if installed & set(plot.CHINESE_FONTS):
        assert (
            a.title.get_fontfamily()[0] in plot.CHINESE_FONTS and b.texts[0].get_fontfamily()[0] in plot.CHINESE_FONTS
        )
        assert a.yaxis.label.get_fontfamily() == ["sans-serif"]  # math: matplotlib's own fonts


def test_localize_leaves_an_english_figure_as_it_was():
    import io

    def png(fig):
        out = io.BytesIO()
        fig.savefig(out, format="png", metadata={"Software": None})
        return out.getvalue()

    fig = _drawn_with_matplotlib()
    png(fig)  # the first drawing settles the layout
    before = png(fig)
    assert plot.localize(fig) is fig and png(fig) == before
    assert fig.axes[0].get_title() == "Where the parameters are"


def test_chinese_figures_use_a_font_with_chinese_characters(zh):
    """Drawn without a missing glyph; math and numbers keep matplotlib's own fonts."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    if not installed & set(plot.CHINESE_FONTS):
        pytest.skip(f"no font with Chinese characters installed (one of {plot.CHINESE_FONTS})")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*missing from font")
        with plt.rc_context(plot.STYLE):  # as the notebooks do: axes made before the plot function runs
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
    for context in (None, i18n.CASE):  # the messages, and the checkers' case labels
        assert i18n.catalog("zh_CN", context) == {
            e.msgid: e.msgstr
            for e in po
            if e.msgctxt == context and e.msgid and e.msgstr and not e.obsolete and "fuzzy" not in e.flags
        }
    assert {e.msgctxt for e in po} == {None, i18n.CASE}
    assert not [e.msgid for e in po if not e.msgstr or "fuzzy" in e.flags], "untranslated or fuzzy messages"


def _every_entry() -> list[tuple[str, str]]:
    """(msgid, msgstr) of every entry of the catalog, case labels (msgctxt "case") included."""
    return [*i18n.catalog("zh_CN").items(), *i18n.catalog("zh_CN", i18n.CASE).items()]


def _looked_up() -> dict[str, str]:
    """Every message the code looks up: tr("...") literals in attnlib/ and coursetools/ (the grader
    reports through attnlib's catalog), the checkers' hints and edge cases, the overview's boxes,
    the grader's results and plot's default titles."""
    found = {}
    for path in sorted((ROOT / "attnlib").rglob("*.py")) + sorted((ROOT / "coursetools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "tr"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found[node.args[0].value] = path.name
    for entry in check.CHECKS.values():
        found[entry.hint] = found[entry.covers] = entry.exercise
        found.update({message: entry.exercise for message, _ in entry.diagnoses})
        if hasattr(entry, "cost_diagnosis"):  # chapter 17's count of multiply-adds
            found[entry.cost_diagnosis] = entry.exercise
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
    for msgid, msgstr in _every_entry():
        fields = sorted(re.findall(r"\{\w*\}", msgid))
        assert sorted(re.findall(r"\{\w*\}", msgstr)) == fields, (msgid, msgstr)
        assert msgstr.count("\n") == msgid.count("\n") and msgstr.endswith("\n") == msgid.endswith("\n"), msgid
        assert msgstr.startswith("  ") == msgid.startswith("  "), msgid  # the indented lines of a message


def test_the_catalog_passes_the_translation_lint():
    sys.path.insert(0, str(ROOT / "book"))
    try:
        from catalog_lint import lint_message, terminology
    finally:
        sys.path.remove(str(ROOT / "book"))
    terms, never = terminology()
    problems = {m: p for m, s in _every_entry() if (p := lint_message(m, s, terms, never))}
    assert not problems, problems


# ------------------------------------------------------------------ labels the notebooks pass to attnlib.plot

PLOT_FUNCTIONS = {
    "show_matrix",
    "show_matrices",
    "attention_heatmap",
    "heads_grid",
    "overview",
    "loss_curve",
    "scaling",
    "score_growth",
}
NOT_TEXT = {"ops", "fmt", "highlight", "ax", "annotate"}
# the interactive views (issue 23): their only label is title= (their tokens and head names are data)
TITLE_ONLY = {"explore", "online_softmax_player", "live_model"}
KEPT_WORDS = {
    "token",
    "softmax",
    "RoPE",
    "SDPA",
    "FLOPs",
    "GPT",
    "MLP",
    "LayerNorm",
    "Transformer",
    "PyTorch",
    "dropout",
    "attnlib",
    "tile",
}  # stay English (terminology.md)
# the words a cell writes on a figure with matplotlib itself: the argument of these methods that holds them
# (ax.set_title("..."), ax.text(x, y, "..."), ...), and these keywords of any call (ax.plot(..., label="..."))
MPL_TEXT = {
    "set_title": 0,
    "set_xlabel": 0,
    "set_ylabel": 0,
    "suptitle": 0,
    "supxlabel": 0,
    "supylabel": 0,
    "set_label": 0,
    "text": 2,
    "annotate": 0,
}
MPL_TEXT_KEYWORDS = {"label", "title", "xlabel", "ylabel"}


def _strings(node, bound, names=True, seen=frozenset()):
    """The texts a node of a plot call's arguments stands for: strings, f-strings with {} for each
    value, and names bound to such literals (by an assignment or a for loop) in the notebook, with
    the iterables a loop takes them from (``for ax, (title, ...) in zip(axes, panels)``); not the
    names inside those literals (``(title, weights, tokens)``: tokens are data)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        yield "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    elif isinstance(node, ast.Name) and names and node.id not in seen:
        for value in bound.get(node.id, []):
            yield from _strings(value, bound, False, seen | {node.id})
    elif isinstance(node, (ast.List, ast.Tuple)):
        for e in node.elts:
            yield from _strings(e, bound, names, seen)
    elif isinstance(node, ast.Dict):
        for e in node.keys:
            yield from _strings(e, bound, names, seen)
    elif isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        yield from _strings(node.elt, bound, names, seen)
    elif (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("zip", "enumerate", "list")
    ):
        for a in node.args:  # the iterables of a loop
            yield from _strings(a, bound, names or isinstance(a, ast.Name), seen)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("items", "keys"):
        yield from _strings(node.func.value, bound, True, seen)  # for name, color in colors.items()


def _cells(path: Path) -> tuple[list[ast.AST], dict[str, list]]:
    """A chapter's code cells, parsed (not run), and the values bound to each name in any of them."""
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    trees = [
        ast.parse("\n".join(re.sub(r"^(\s*)[%!].*", r"\1pass", line) for line in source.splitlines()))
        for source in cells
    ]
    bound: dict[str, list] = {}
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (
                    [(target, node.value)]
                    if isinstance(target, ast.Name)
                    else list(zip(target.elts, node.value.elts))
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else []
                )
                for name, value in pairs:
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, []).append(value)
        elif isinstance(node, ast.For):
            for name in ast.walk(node.target):
                if isinstance(name, ast.Name):
                    bound.setdefault(name.id, []).append(node.iter)
    return trees, bound


def _plot_call(node, names) -> bool:
    """Whether ``node`` is a call of ``plot.<one of names>``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "plot"
    )


def _figure_words(tree, bound) -> set[str]:
    """The words a cell writes on a figure with matplotlib itself (titles, axis labels, legend
    entries, texts), not through attnlib.plot."""
    words = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _plot_call(node, PLOT_FUNCTIONS | TITLE_ONLY):
            continue
        args = [k.value for k in node.keywords if k.arg in MPL_TEXT_KEYWORDS]
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if method in MPL_TEXT and len(node.args) > MPL_TEXT[method]:
            args.append(node.args[MPL_TEXT[method]])
        for arg in args:
            words.update(_strings(arg, bound))
    return words


def _localizes(tree) -> bool:
    return any(_plot_call(node, {"localize"}) for node in ast.walk(tree))


def notebook_labels(path: Path) -> set[str]:
    """The titles and labels a chapter passes to attnlib.plot, and the words of the figures it draws with
    matplotlib itself and hands to plot.localize, read from its code (not run)."""
    trees, bound = _cells(path)
    labels = set()
    for tree in trees:
        for node in ast.walk(tree):
            if _plot_call(node, PLOT_FUNCTIONS):
                args = [k.value for k in node.keywords if k.arg not in NOT_TEXT]
                if node.func.attr != "overview":
                    args += node.args
                for arg in args:
                    labels.update(_strings(arg, bound))
            elif _plot_call(node, TITLE_ONLY):
                for keyword in node.keywords:
                    if keyword.arg == "title":
                        labels.update(_strings(keyword.value, bound))
        if _localizes(tree):
            labels |= _figure_words(tree, bound)
    return labels


def _plain_english(label: str) -> bool:
    """Words a Chinese reader should not meet: what is left without math, code and kept words."""
    text = re.sub(
        r"\$[^$]*\$|\w+\[[^\]]*\]|\w+\([^)]*\)|\w*_\w*|\b\w+=\S*|\{\}|\b(?:b?float|u?int)\d+\b", " ", label
    )  # ... and dtype names: float16
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
    assert "tokens" not in str(notebook_labels(ROOT / "notebooks" / "08_cross_attention.ipynb"))  # tokens are data
    # the words of figures drawn with matplotlib and handed to plot.localize: ax.set_xlabel, label= of a line
    # (an f-string, a dict's keys in a loop), ax.annotate's text from a list the loop takes it from
    assert {"dimension", "dimension {}: $\\sin(\\mathrm{pos}\\,\\theta_{})$"} <= notebook_labels(
        ROOT / "notebooks" / "09_positions.ipynb"
    )
    assert {"LayerNorms", "Where the parameters are"} <= notebook_labels(ROOT / "notebooks" / "07_parameters.ipynb")
    assert {"one-hot", "largest weight of a row"} <= notebook_labels(ROOT / "notebooks" / "03_scaling.ipynb")
    assert [
        label
        for label in ("x", "$W_Q$", "t={}", "O @ E = E[ids]", "token 0", "{} {}", "float16", "MLP")
        if _plain_english(label)
    ] == []
    catalog = {"length {}": "长度 {}", "before: head {}": "训练前：头 {}"}
    assert _has_entry("length 5", catalog) and _has_entry("length {}", catalog) and _has_entry("{}: head {}", catalog)
    assert not _has_entry("width {}", catalog)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_plain_english_label_a_notebook_passes_to_plot_has_an_entry(path):
    catalog = i18n.catalog("zh_CN")
    missing = sorted(
        label for label in notebook_labels(path) if _plain_english(label) and not _has_entry(label, catalog)
    )
    assert not missing, (
        f"{path.name} passes these labels to attnlib.plot; add them to {CATALOG.relative_to(ROOT)} "
        f"(numbers as {{}}): {missing}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_figure_whose_words_a_notebook_writes_itself_goes_through_plot_localize(path):
    """Words written with matplotlib itself (ax.set_xlabel("position")) stay English on the Chinese
    page unless the cell hands its figure to plot.localize (whose words the test above checks)."""
    trees, bound = _cells(path)
    english = [
        sorted(w for w in _figure_words(tree, bound) if _plain_english(w)) for tree in trees if not _localizes(tree)
    ]
    assert not [words for words in english if words], (
        f"{path.name}: call plot.localize(fig) before plt.show() in the cells that write {[w for w in english if w]}"
    )


# ------------------------------------------------------------------ the Chinese notebooks set the switch


def test_chinese_notebooks_and_student_versions_set_the_switch_first(tmp_path):
    from coursetools.translate import LANGUAGE_TAG, translate_notebook_file

    src = ROOT / "notebooks" / "04_masking.ipynb"
    translate_notebook_file(src, tmp_path / "zh" / src.name)
    (student,) = homework.release([src], tmp_path / "student-zh", lang="zh_CN")
    (english,) = homework.release([src], tmp_path / "student")
    for path in (tmp_path / "zh" / src.name, student):
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert LANGUAGE_TAG in code[0].metadata["tags"]
        assert code[0].source.endswith('import os\nos.environ["ATTNLIB_LANG"] = "zh_CN"')
        assert CJK.search(code[0].source.splitlines()[0])  # its comment is Chinese too
    code = [c.source for c in nbformat.read(student, as_version=4).cells if c.cell_type == "code"]
    assert code[1:] == [c.source for c in nbformat.read(english, as_version=4).cells if c.cell_type == "code"]


@pytest.mark.slow
def test_a_submission_is_graded_in_its_own_language(tmp_path, monkeypatch):
    """The grader's kernels start without ATTNLIB_LANG: an English submission's feedback stays
    English when the grader's shell asks for Chinese (the Chinese versions set it in their first cell)."""
    import nbformat

    from coursetools import homework

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in (
        "import torch\nfrom attnlib import check",
        "def one_hot_rows(ids, vocab_size):\n    return (ids[..., None] == torch.arange(vocab_size)).float()",
        'import os\nprint("ATTNLIB_LANG in the kernel:", os.environ.get("ATTNLIB_LANG"))',
    )]  # fmt: skip
    nbformat.write(nb, tmp_path / "01_embeddings.ipynb")
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    executed: list = []
    results = homework.grade_one(tmp_path / "01_embeddings.ipynb", timeout=60, executed=executed)
    printed = "".join(o.get("text", "") for o in executed[0].cells[-1].outputs)
    assert printed == "ATTNLIB_LANG in the kernel: None\n", printed
    assert {r.exercise: r.points for r in results}["ch01-one-hot"] == 1
