"""Figures in one style for every chapter.

* ``show_matrix``: one matrix as a heatmap, its shape in the title.
* ``show_matrices``: several matrices side by side, e.g. ``one_hot @ table = rows``.
* ``attention_heatmap``: attention weights with token labels on both axes.
* ``heads_grid``: one attention heatmap per head.
* ``overview``: the whole computation, tokens to output, with one chapter's steps highlighted.
* ``loss_curve``: a training loss, step by step, with its running mean.
* ``scaling``: costs measured at growing sizes, log-log, with fitted slopes (chapter 11).
* ``score_growth``: the scores and the softmax of a layer whose ``W_Q``, ``W_K`` grow (chapter 14).
* ``localize``: a figure drawn with matplotlib itself, its words in the reader's language.

Signed matrices use a diverging colour map centred on 0 (blue < 0 < red);
non-negative ones (one-hot rows, attention weights) a sequential one. Every
function returns the matplotlib ``Figure``; call ``plt.show()`` in a notebook.

With ``ATTNLIB_LANG=zh_CN`` (``attnlib.i18n``) every word a figure shows is Chinese: the
words attnlib draws, and the titles and labels you pass, looked up whole in attnlib's
catalog (a label's numbers stand for themselves: "length 5" is found as "length {}");
a label the catalog lacks, math (``$...$``) and code names stay as they are. Texts with
Chinese characters are set in a font that has them (``CHINESE_FONTS``). A figure whose words
a notebook writes with matplotlib itself (``ax.set_xlabel("position")``) gets the same with
``plot.localize(fig)`` before ``plt.show()``.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import font_manager
from matplotlib.text import Text

from ._validate import describe, ensure_number, fail
from .i18n import language, tr

STYLE = {
    "figure.dpi": 100,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
}
SEQUENTIAL = "Blues"
DIVERGING = "RdBu_r"
# Fonts with Chinese characters, in order of preference: with ATTNLIB_LANG=zh_CN the first one
# matplotlib knows sets every text that has Chinese in it (numbers and math keep matplotlib's fonts).
CHINESE_FONTS = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Heiti SC",
)


def _font(artist) -> None:
    """In Chinese, the Chinese texts of ``artist`` (an Axes or a Figure) in a font that has their characters.

    The first of CHINESE_FONTS that matplotlib knows, then its default sans-serif for the
    symbols that font lacks; a warning says what to install when there is none. Set on the
    texts themselves, not through rcParams: an Axes' title and labels exist before a plot
    function fills them in.
    """
    if language() == "en":
        return
    installed = {f.name for f in font_manager.fontManager.ttflist}
    font = next((f for f in CHINESE_FONTS if f in installed), None)
    if font is None:
        warnings.warn(
            tr(
                "ATTNLIB_LANG=zh_CN: matplotlib finds no font with Chinese characters, so the "
                "Chinese text of the figures shows as empty boxes. Install one, e.g. "
                "`apt-get install fonts-noto-cjk` on Debian, Ubuntu or Colab (macOS and Windows "
                "have one already), then delete matplotlib's font cache ({cache}) and restart "
                "Python. The fonts looked for: {fonts}."
            ).format(cache=matplotlib.get_cachedir(), fonts=", ".join(CHINESE_FONTS)),
            stacklevel=3,
        )
        return
    # some of these fonts come in one weight: matplotlib would log a line for every bold title
    logging.getLogger("matplotlib.font_manager").addFilter(_one_weight)
    for text in artist.findobj(Text):
        if re.search("[\u3400-\u9fff\uff00-\uffef]", text.get_text()):  # the rest keeps matplotlib's fonts
            text.set_fontfamily([font, "sans-serif"])


def _one_weight(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("findfont: Failed to find font weight")


def _label(text):
    """A title or label passed to a plot function, in the language of ATTNLIB_LANG.

    The catalog's translation of the whole text, or of the text with each number as ``{}``
    (then filled in again, in order; other braces, as in ``$\\mathrm{pos}$``, stay as they
    are); otherwise the text itself, and anything that is not a string.
    """
    if not isinstance(text, str) or language() == "en":
        return text
    whole = tr(text)
    if whole != text or "{}" in text:
        return whole
    numbers = re.findall(r"\d+(?:\.\d+)?", text)
    pattern = re.sub(r"\d+(?:\.\d+)?", "{}", text)  # "length 5" -> "length {}"
    translation = tr(pattern)
    parts = translation.split("{}")
    if not numbers or translation == pattern or len(parts) != len(numbers) + 1:
        return text
    return parts[0] + "".join(n + part for n, part in zip(numbers, parts[1:]))


def _labels(texts):
    return None if texts is None else [_label(t) for t in texts]


def localize(fig):
    """The words of ``fig``, a figure drawn with matplotlib itself, in the language of ATTNLIB_LANG.

    The plot functions translate the words they are given; ``localize`` does the same for the
    words a notebook writes with matplotlib: titles, axis labels, legend entries (``label=``),
    ``ax.text`` and ``ax.annotate``. Each is looked up whole in attnlib's catalog, or with its
    numbers as ``{}``; math, code names and words the catalog lacks stay as they are, and so do
    tick labels (data: tokens, numbers, model names). Chinese texts get a font that has their
    characters. In English nothing changes. Call it when the figure is drawn, before
    ``plt.show()`` (and before ``fig.tight_layout()``, which measures the words). Returns ``fig``.

    >>> import os
    >>> fig, ax = plt.subplots()
    >>> _ = ax.plot([0, 1], label="theory: 1"), ax.legend(), ax.set_title("length 5")
    >>> _ = ax.set_xlabel("position"), ax.set_ylabel("$d_k$")
    >>> localize(fig) is fig                     # English (ATTNLIB_LANG unset): as it was
    True
    >>> ax.get_xlabel(), ax.get_title()
    ('position', 'length 5')
    >>> os.environ["ATTNLIB_LANG"] = "zh_CN"
    >>> _ = localize(fig)
    >>> ax.get_xlabel(), ax.get_ylabel(), ax.get_title(), [t.get_text() for t in ax.get_legend().get_texts()]
    ('位置', '$d_k$', '长度 5', ['理论值：1'])
    >>> del os.environ["ATTNLIB_LANG"]; plt.close(fig)
    """
    if language() == "en":
        return fig
    ticks = {
        id(label)
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for tick in axis.get_major_ticks() + axis.get_minor_ticks()
        for label in (tick.label1, tick.label2)
    }
    for text in fig.findobj(Text):
        if id(text) not in ticks and text.get_text():
            text.set_text(_label(text.get_text()))
    for ax in fig.axes:  # what a legend made after this call will show
        for artist in ax.get_children() + list(ax.containers):
            label = artist.get_label()
            if isinstance(label, str) and label and not label.startswith("_"):
                artist.set_label(_label(label))
    _font(fig)
    return fig


def _as_2d(name: str, m) -> np.ndarray:
    if isinstance(m, torch.Tensor):
        m = m.detach().to("cpu", torch.float64).numpy()
    m = np.asarray(m, dtype=float)
    if m.ndim == 1:
        m = m[None, :]  # (n,) -> (1, n): a single row
    if m.ndim != 2:
        raise fail(name, "a 1-D or 2-D matrix", describe(torch.as_tensor(m)))
    return m


def _draw(
    ax,
    m: np.ndarray,
    title: str,
    row_labels=None,
    col_labels=None,
    annotate: bool | None = None,
    vmin=None,
    vmax=None,
    fmt: str = ".2f",
):
    """Draw matrix ``m`` on ``ax`` as a heatmap, with the shape in the title."""
    title, row_labels, col_labels = _label(title), _labels(row_labels), _labels(col_labels)
    signed = (m < 0).any()
    if signed:
        lim = float(np.abs(m).max()) or 1.0
        cmap, vmin, vmax = DIVERGING, -lim, lim
    else:
        cmap = SEQUENTIAL
        vmin = 0.0 if vmin is None else vmin
        vmax = (float(m.max()) or 1.0) if vmax is None else vmax
    ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal")
    ax.set_title(f"{title}\n{m.shape[0]} × {m.shape[1]}" if title else f"{m.shape[0]} × {m.shape[1]}")
    ax.set_xticks(range(m.shape[1]), col_labels if col_labels is not None else range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]), row_labels if row_labels is not None else range(m.shape[0]))
    if col_labels is not None:
        ax.tick_params(axis="x", labelrotation=45)
    if annotate is None:
        annotate = m.size <= 120
    if annotate:
        mid = (vmin + vmax) / 2
        if np.all(m == np.round(m)):
            fmt = ".0f"  # whole numbers (one-hot rows, counts): no decimals
        for (i, j), v in np.ndenumerate(m):
            strong = abs(v) > 0.6 * max(abs(vmax), abs(vmin)) if signed else v > mid
            text = format(v, fmt)
            if text.startswith("-") and float(text) == 0:
                text = text[1:]  # -0.001 shown as 0.00, not -0.00
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if strong else "black")
    for side in ax.spines.values():
        side.set_visible(False)


def show_matrix(
    m,
    title: str = "",
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    annotate: bool | None = None,
    fmt: str = ".2f",
    ax=None,
):
    """Show one matrix ``m`` of shape ``(rows, cols)`` (or ``(n,)``) as a heatmap.

    The title gets the shape, ``rows × cols``. Values are written in the cells
    when there are at most 120 of them (``annotate`` forces it on or off).
    Returns the Figure.
    """
    with plt.rc_context(STYLE):
        m = _as_2d("m", m)
        if ax is None:
            fig, ax = plt.subplots(figsize=(0.55 * m.shape[1] + 1.6, 0.45 * m.shape[0] + 1.2), layout="constrained")
        _draw(ax, m, title, row_labels, col_labels, annotate, fmt=fmt)
        _font(ax)
        return ax.figure


def show_matrices(
    mats: Sequence[tuple],
    ops: Sequence[str] = (),
    row_labels: Sequence[str] | None = None,
    annotate: bool | None = None,
    fmt: str = ".2f",
    cell: float = 0.5,
    col_labels: Sequence[str] | None = None,
    xlabel: str = "",
):
    """Show matrices side by side, with operator symbols between them.

    Args:
        mats: a list of ``(title, matrix)`` or ``(title, matrix, row_labels)``,
            each matrix ``(rows, cols)``.
        ops: the symbols between consecutive matrices, e.g. ``["@", "="]``;
            ``len(ops) == len(mats) - 1`` (or empty for none).
        row_labels: labels for the rows of every matrix that has as many rows
            and no labels of its own.
        cell: the size of one matrix cell, in inches.
        col_labels: labels for the columns of every matrix that has as many columns.
        xlabel: a label under every matrix's columns, e.g. ``"key (0-2 cached, 3-4 new)"``.

    Returns the Figure.
    """
    if ops and len(ops) != len(mats) - 1:
        raise fail("ops", f"{len(mats) - 1} symbols (one between each pair of matrices)", f"{len(ops)}: {list(ops)}")
    with plt.rc_context(STYLE):
        arrays = [(m[0], _as_2d(f"mats[{i}]", m[1]), m[2] if len(m) > 2 else None) for i, m in enumerate(mats)]
        widths = [a.shape[1] for _, a, _ in arrays]
        rows = max(a.shape[0] for _, a, _ in arrays)
        fig, axes = plt.subplots(
            1,
            len(arrays),
            width_ratios=widths,
            layout="constrained",
            figsize=(cell * sum(widths) + 1.3 * len(arrays), cell * rows + 1.0),
        )
        axes = np.atleast_1d(axes)
        for ax, (title, a, labels) in zip(axes, arrays):
            if labels is None and row_labels is not None and len(row_labels) == a.shape[0]:
                labels = row_labels
            cols = col_labels if col_labels is not None and len(col_labels) == a.shape[1] else None
            _draw(ax, a, title, labels, cols, annotate, fmt=fmt)
            ax.set_xlabel(_label(xlabel))
        _font(fig)
        if ops:
            fig.get_layout_engine().set(wspace=0.06)  # room for the symbols between matrices
            fig.draw_without_rendering()  # settle the layout before reading positions
            to_fig = fig.transFigure.inverted()
            for k, op in enumerate(ops):
                left = axes[k].get_tightbbox().transformed(to_fig).x1
                right = axes[k + 1].get_tightbbox().transformed(to_fig).x0
                y = axes[k].get_position().y0 + axes[k].get_position().height / 2
                fig.text((left + right) / 2, y, op, ha="center", va="center", fontsize=18)
        return fig


def attention_heatmap(
    weights,
    q_labels: Sequence[str] | None = None,
    k_labels: Sequence[str] | None = None,
    title: str = "attention weights",
    ax=None,
):
    """Heatmap of attention ``weights`` of shape ``(T_q, T_k)``: row i is query token i.

    Rows sum to 1 (each query's weights over the keys). Labels name the tokens.
    Returns the Figure.
    """
    with plt.rc_context(STYLE):
        w = _as_2d("weights", weights)
        if ax is None:
            fig, ax = plt.subplots(figsize=(0.6 * w.shape[1] + 1.8, 0.55 * w.shape[0] + 1.2), layout="constrained")
        _draw(ax, w, title, q_labels, k_labels, vmin=0.0, vmax=1.0)
        ax.set_xlabel(tr("key (attended to)"))
        ax.set_ylabel(tr("query (attending)"))
        _font(ax)
        return ax.figure


def heads_grid(weights, labels: Sequence[str] | None = None, ncols: int = 4, title: str = "head"):
    """One attention heatmap per head; ``weights`` has shape ``(n_heads, T_q, T_k)``.

    Returns the Figure.
    """
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu()
    if np.ndim(weights) != 3:
        raise fail("weights", "shape (n_heads, T_q, T_k)", describe(torch.as_tensor(np.asarray(weights))))
    n = len(weights)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    with plt.rc_context(STYLE):
        T_q, T_k = np.shape(weights)[1:]
        fig, axes = plt.subplots(
            nrows,
            ncols,
            figsize=(ncols * (0.4 * T_k + 1.2), nrows * (0.4 * T_q + 1.2)),
            layout="constrained",
            squeeze=False,
        )
        for h, ax in enumerate(axes.flat):
            if h >= n:
                ax.axis("off")
                continue
            _draw(ax, _as_2d("weights", weights[h]), f"{title} {h}", labels, labels, annotate=False, vmin=0.0, vmax=1.0)
        _font(fig)
        return fig


def loss_curve(
    losses: Sequence[float],
    window: int = 20,
    reference: float | None = None,
    reference_label: str = "",
    log: bool = False,
    title: str = "training loss",
    ax=None,
):
    """The loss of every training step (light) and its running mean over ``window`` steps (dark).

    ``mean[i] = (losses[i - window + 1] + ... + losses[i]) / window`` for ``i >= window - 1``
    (fewer steps at the start). Step ``i`` is the loss before the ``i``-th update.

    Args:
        losses: one number per step, e.g. what ``attnlib.train.train`` returns (at least one).
        window: the running mean's width, in steps (1: no smoothing).
        reference: a horizontal dashed line at this loss, e.g. ``log(vocab_size)``, the loss of
            a uniform guess; ``None`` (default): none.
        reference_label: the legend text of that line.
        log: a logarithmic loss axis, to see the small losses at the end (the losses must be > 0).
        title: the axes' title.
        ax: the matplotlib axes to draw on (default: a new figure).

    Returns the Figure.

    >>> fig = loss_curve([2.4, 1.0, 0.5, 0.2], window=2, reference=2.4, reference_label="uniform")
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['loss per step', 'mean of 2 steps', 'uniform']
    """
    if isinstance(losses, torch.Tensor):
        losses = losses.detach().cpu().tolist()
    try:
        values = np.asarray(losses, dtype=float)
    except (TypeError, ValueError):
        raise fail("losses", "a sequence of numbers", describe(losses)) from None
    if values.ndim != 1 or values.size == 0 or not np.isfinite(values).all():
        raise fail(
            "losses",
            "a non-empty 1-D sequence of finite numbers",
            f"shape {values.shape}" + (", with inf or nan" if values.size and not np.isfinite(values).all() else ""),
        )
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise fail("window", "a positive int (steps)", describe(window))
    if log and (values <= 0).any():
        raise fail("losses", "positive numbers (log=True)", f"minimum {values.min()}")
    steps = np.arange(values.size)
    cumsum = np.concatenate([[0.0], np.cumsum(values)])
    lo = np.maximum(steps + 1 - window, 0)  # the first step in each window
    mean = (cumsum[steps + 1] - cumsum[lo]) / (steps + 1 - lo)  # running mean over <= window steps
    with plt.rc_context(STYLE):
        if ax is None:
            fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
        ax.plot(steps, values, color=HIGHLIGHT, alpha=0.3, linewidth=0.8, label=tr("loss per step"))
        ax.plot(
            steps,
            mean,
            color=HIGHLIGHT,
            linewidth=1.8,
            label=tr("mean of {window} steps").format(window=window) if window > 1 else tr("loss"),
        )
        if reference is not None:
            ax.axhline(reference, color="#616161", linestyle="--", linewidth=1.0, label=_label(reference_label))
        if log:
            ax.set_yscale("log")
        ax.set_xlabel(tr("training step"))
        ax.set_ylabel(tr("loss (cross-entropy)"))
        ax.set_title(_label(title))
        ax.legend(frameon=False)
        _font(ax)
        return ax.figure


# The steps of one multi-head self-attention layer, in order: (key, box text, chapter); the box
# texts are English, looked up in the catalog when drawn (attnlib.i18n).
OVERVIEW_STEPS = (
    ("embed", "tokens → X\n(embed)", 1),
    ("project", "Q, K, V\n= X W_Q, X W_K, X W_V", 2),
    ("scores", "scores\nS = Q Kᵀ", 2),
    ("scale", "scale\nS / √d_head", 3),
    ("mask", "mask\n(-∞ where blocked)", 4),
    ("softmax", "softmax\n(rows sum to 1)", 5),
    ("values", "weights @ V", 5),
    ("heads", "n_heads heads\nin parallel", 6),
    ("concat", "concat\nthe heads", 6),
    ("output", "@ W_O\n→ output", 6),
)
HIGHLIGHT = "#1f77b4"


def overview(highlight: str | Sequence[str] = (), title: str | None = None):
    r"""The overview figure: X → Q, K, V → scores → scale → mask → softmax → weights @ V
    → heads → concat → W_O, as boxes and arrows, with ``highlight`` in colour.

    Args:
        highlight: a step's key or a list of keys from ``OVERVIEW_STEPS``
            (``"embed"``, ``"project"``, ``"scores"``, ``"scale"``, ``"mask"``,
            ``"softmax"``, ``"values"``, ``"heads"``, ``"concat"``, ``"output"``);
            ``"all"`` highlights every step.
        title: the figure's title (default: none).

    The steps from ``project`` to ``values`` are one head; the dashed frame around
    them says that ``n_heads`` of them run side by side. Returns the Figure.

    >>> fig = overview("mask")
    >>> [t.get_text() for t in fig.axes[0].texts if t.get_fontweight() == "bold"]
    ['mask\n(-∞ where blocked)']
    """
    keys = [k for k, _, _ in OVERVIEW_STEPS]
    chosen = keys if highlight == "all" else [highlight] if isinstance(highlight, str) else list(highlight)
    unknown = [k for k in chosen if k not in keys]
    if unknown:
        raise fail("highlight", f'"all" or step keys from {keys}', f"{unknown}")
    from matplotlib.patches import FancyBboxPatch

    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(9.6, 3.4), layout="constrained")
        ax.set_xlim(0, 6)
        ax.set_ylim(0, 2.3)
        ax.axis("off")
        # a snake: the first five steps left to right, the last five right to left below
        pos = [(0.6 + 1.2 * i, 1.7) for i in range(5)] + [(0.6 + 1.2 * (4 - i), 0.55) for i in range(5)]
        w, h = 1.0, 0.56
        for (key, text, chapter), (x, y) in zip(OVERVIEW_STEPS, pos):
            on = key in chosen
            ax.add_patch(
                FancyBboxPatch(
                    (x - w / 2, y - h / 2),
                    w,
                    h,
                    boxstyle="round,pad=0.02,rounding_size=0.08",
                    facecolor=HIGHLIGHT if on else "#f2f2f2",
                    edgecolor=HIGHLIGHT if on else "#9e9e9e",
                    linewidth=1.2,
                )
            )
            ax.text(
                x,
                y,
                tr(text),
                ha="center",
                va="center",
                fontsize=8.5,
                color="white" if on else "black",
                fontweight="bold" if on else "normal",
            )
            ax.text(
                x + w / 2 - 0.04,
                y + h / 2 - 0.03,
                tr("ch. {chapter}").format(chapter=chapter),
                ha="right",
                va="top",
                fontsize=6.5,
                color="white" if on else "#757575",
            )
        for (x0, y0), (x1, y1) in zip(pos, pos[1:]):
            if y0 == y1:
                start, end = (x0 + np.sign(x1 - x0) * w / 2, y0), (x1 - np.sign(x1 - x0) * w / 2, y1)
            else:
                start, end = (x0, y0 - h / 2), (x1, y1 + h / 2)
            ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="#424242", lw=1.2))
        # one head: project .. values, an L-shaped dashed frame over both rows
        from matplotlib.patches import Polygon

        frame = [(1.22, 2.04), (5.98, 2.04), (5.98, 0.2), (3.62, 0.2), (3.62, 1.12), (1.22, 1.12)]
        ax.add_patch(Polygon(frame, closed=True, fill=False, linestyle="--", edgecolor="#757575", linewidth=1.0))
        ax.text(
            1.3,
            1.26,
            tr("one head (n_heads of them side by side)"),
            ha="left",
            va="center",
            fontsize=8,
            color="#616161",
            style="italic" if language() == "en" else "normal",
        )  # no slanted hanzi
        if title:
            ax.set_title(_label(title))
        _font(fig)
        return fig


def scaling(
    xs: Sequence[float],
    series: dict,
    var: str = "T",
    ylabel: str = "",
    title: str = "",
    guides: Sequence[float] = (1, 2),
    fit_last: int | None = None,
    ax=None,
):
    r"""Costs measured at growing sizes, on log-log axes, each labelled with its fitted slope.

    A cost that grows like ``c x^p`` is a straight line of slope ``p`` on log-log axes,
    ``log y = log c + p log x``; the legend gives each series' slope, fitted by
    ``attnlib.cost.loglog_slope``. Grey guides of slope 1 and 2 (``∝ T`` dotted,
    ``∝ T²`` dashed: each slope its own line style) pass through the last point of the
    first series, for comparison.

    Args:
        xs: the sizes, e.g. sequence lengths ``[128, 256, ...]``: positive, at least two.
        series: ``{name: ys}``, one positive ``y`` per ``x`` in each, e.g.
            ``{"explicit": seconds, "SDPA": seconds}``.
        var: the size's name, for the x label and the guides' labels.
        ylabel: the y axis' label, e.g. ``"time (ms)"``.
        title: the axes' title.
        guides: the slopes of the dashed guides; ``()`` for none.
        fit_last: fit each slope on the last ``fit_last`` points only (the large sizes,
            where the leading term dominates); ``None`` (default): on all of them.
        ax: the matplotlib axes to draw on (default: a new figure).

    Returns the Figure.

    >>> fig = scaling([1, 2, 4], {"a": [3, 12, 48], "b": [2, 4, 8]}, guides=(2,))
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['a: slope 2.00', 'b: slope 1.00', '$\\propto T^{2}$']
    """
    from .cost import loglog_slope

    try:
        x = np.asarray(xs, dtype=float)
    except (TypeError, ValueError):
        raise fail("xs", "a sequence of positive numbers", describe(xs)) from None
    if x.ndim != 1 or x.size < 2 or not (x > 0).all() or not np.isfinite(x).all():
        raise fail("xs", "at least two positive finite numbers in a 1-D sequence", f"{x.tolist()}")
    if not isinstance(series, dict) or not series:
        raise fail("series", "a non-empty dict {name: ys}", describe(series))
    n_fit = x.size if fit_last is None else fit_last
    if isinstance(n_fit, bool) or not isinstance(n_fit, int) or not 2 <= n_fit <= x.size:
        raise fail("fit_last", f"None or an int from 2 to {x.size} (the number of sizes)", describe(fit_last))
    curves = {}
    for name, ys in series.items():
        if isinstance(ys, torch.Tensor):
            ys = ys.detach().cpu().tolist()
        try:
            y = np.asarray(ys, dtype=float)
        except (TypeError, ValueError):
            raise fail(f"series[{name!r}]", "a sequence of positive numbers", describe(ys)) from None
        if y.shape != x.shape or not (y > 0).all() or not np.isfinite(y).all():
            raise fail(f"series[{name!r}]", f"{x.size} positive finite numbers, one per x", f"{y.tolist()}")
        curves[name] = y
    with plt.rc_context(STYLE):
        if ax is None:
            fig, ax = plt.subplots(figsize=(5.2, 3.8), layout="constrained")
        for name, y in curves.items():
            p = loglog_slope(x[-n_fit:], y[-n_fit:])
            label = tr("{name}: slope {p}").format(name=_label(name), p=f"{p:.2f}")
            ax.plot(x, y, marker="o", linewidth=1.6, label=label)
        x0, y0 = x[-1], next(iter(curves.values()))[-1]  # guides meet the first series' last point
        styles = [":", "--", "-.", (0, (5, 1, 1, 1, 1, 1))]  # one line style per guide, told apart in grey
        for i, p in enumerate(guides):  # under the measurements (zorder 1)
            ax.plot(
                x,
                y0 * (x / x0) ** p,
                linestyle=styles[i % len(styles)],
                color="#9e9e9e",
                linewidth=1.2,
                zorder=1,
                label=f"$\\propto {var}$" if p == 1 else f"$\\propto {var}^{{{p:g}}}$",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()
        ax.set_xlabel(_label(var) if var != "T" else tr("sequence length T"))
        ax.set_ylabel(_label(ylabel))
        ax.set_title(_label(title))
        ax.legend(frameon=False, fontsize=8.5)
        _font(ax)
        return ax.figure


def decoding_steps(
    tokens_cached: Sequence[int],
    step_ms: Sequence[float],
    read_ms: float,
    target: float | None = 1.5,
    title: str = "one new token per step",
    ax=None,
):
    """The measured time of each cached decoding step against the time to read the weights once (chapter 12).

    A cached step multiplies one token's vectors by every weight matrix: two FLOPs for each
    weight it reads, far less arithmetic than the CPU can do while the weights stream in from
    memory. So a step cannot take less time than reading the weights once, ``read_ms``, drawn as
    a horizontal line; how close it comes is the measure of the step. The KV cache it also reads
    grows with the tokens cached, but is small next to the weights for one short sequence.

    Args:
        tokens_cached: the tokens in the KV cache at each step (the x axis), at least one.
        step_ms: the measured time of each step in milliseconds, one per entry of ``tokens_cached``.
        read_ms: the time to read every weight the step uses once (e.g. a ``sum`` of each), in ms.
        target: a dashed line at ``target * read_ms`` (the benchmark's target: 1.5); ``None``: none.
        title: the axes' title.
        ax: the matplotlib axes to draw on (default: a new figure).

    Returns the Figure.

    >>> fig = decoding_steps([8, 9, 10], [31.0, 30.5, 30.8], read_ms=21.0)
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['cached step', 'reading every weight once', '1.5 × the weight read']
    >>> float(fig.axes[0].get_ylim()[0])              # from 0: the ratio is seen at a glance
    0.0
    """
    x, y = _step_times(tokens_cached, step_ms)  # (n_steps,), (n_steps,)
    ensure_number("read_ms", read_ms, "a positive number (milliseconds)", lambda v: 0 < v < math.inf)
    if target is not None:
        ensure_number("target", target, "None or a positive number", lambda v: v > 0)
    with plt.rc_context(STYLE):
        if ax is None:
            fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
        ax.plot(x, y, color=HIGHLIGHT, marker="o", markersize=3, linewidth=1.0, label=tr("cached step"))
        ax.axhline(read_ms, color="#616161", linewidth=1.6, label=tr("reading every weight once"))
        if target is not None:
            ax.axhline(
                target * read_ms,
                color="#9e9e9e",
                linestyle="--",
                linewidth=1.0,
                label=tr("{k} × the weight read").format(k=f"{target:g}"),
            )
        ax.set_ylim(0, max(y.max(), (target or 1) * read_ms) * 1.15)
        ax.set_xlabel(tr("tokens in the KV cache"))
        ax.set_ylabel(tr("time (ms)"))
        ax.set_title(_label(title))
        ax.legend(frameon=False, fontsize=8.5, loc="lower right")
        _font(ax)
        return ax.figure


def _step_times(tokens_cached, step_ms) -> tuple[np.ndarray, np.ndarray]:
    """decoding_steps' x and y as float arrays, one positive finite time per number of cached tokens."""
    try:
        x = np.asarray(tokens_cached, dtype=float)
        y = np.asarray(step_ms.detach().cpu() if isinstance(step_ms, torch.Tensor) else step_ms, dtype=float)
    except (TypeError, ValueError):
        raise fail(
            "tokens_cached, step_ms", "two sequences of numbers", f"{describe(tokens_cached)}, {describe(step_ms)}"
        ) from None
    if (
        x.ndim != 1
        or x.size == 0
        or y.shape != x.shape
        or not np.isfinite(x).all()
        or not np.isfinite(y).all()
        or not (y > 0).all()
    ):
        raise fail(
            "step_ms",
            "one positive finite time per entry of tokens_cached (1-D, at least one)",
            f"shapes {x.shape} and {y.shape}",
        )
    return x, y


def score_growth(
    scales: Sequence[float],
    series: dict,
    n_keys: int | None = None,
    bound: float | None = None,
    bound_label: str = "",
    xlabel: str = "W_Q and W_K multiplied by s",
):
    r"""What a layer's scores and softmax do as its ``W_Q`` and ``W_K`` grow (chapter 14).

    Multiply ``W_Q`` and ``W_K`` by ``s``: ``q`` and ``k`` grow like ``s``, so the scores
    ``q · k / √d_head`` grow like ``s²``, and the softmax of the scores saturates (chapter 3):
    each row puts nearly all its weight on one key. QK-norm rescales each head's ``q`` and
    ``k`` to RMS 1 before the scores, and they no longer depend on ``s``.

    Left, log-log: the largest ``|score|`` against ``s``. Right: the mean over the rows of
    each row's largest weight, between ``1 / n_keys`` (uniform weights) and 1 (one-hot).

    Args:
        scales: the factors ``s``, positive, at least two (the x axis of both panels).
        series: ``{name: (largest_scores, largest_weights)}``: for each ``s``, the largest
            ``|score|`` (positive) and the mean largest weight of a row (in ``(0, 1]``).
        n_keys: the number of keys a row attends to: a dotted line at ``1 / n_keys``, the
            largest weight of uniform weights; ``None`` (default): none.
        bound: a dashed line on the left at this ``|score|``, e.g. ``√d_head``, the most a
            QK-normed head with gains 1 can reach; ``None`` (default): none.
        bound_label: that line's legend text.
        xlabel: the x axes' label.

    Returns the Figure, with its two Axes.

    >>> fig = score_growth([1, 2, 4], {"plain": ([2, 8, 32], [0.4, 0.8, 1.0]),
    ...                                "QK-norm": ([2, 2, 2], [0.4, 0.4, 0.4])}, n_keys=8)
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['plain', 'QK-norm']
    >>> [line.get_label() for line in fig.axes[1].lines]
    ['plain', 'QK-norm', 'one-hot', 'uniform: 1/8']
    """
    x, curves = _growth_series(scales, series, n_keys, bound)  # (n_scales,), {name: (scores, weights)}
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6), layout="constrained")
        for name, (scores, weights) in curves.items():
            left.plot(x, scores, marker="o", linewidth=1.6, label=_label(name))
            right.plot(x, weights, marker="o", linewidth=1.6, label=_label(name))
        if bound is not None:
            left.axhline(bound, color="#9e9e9e", linestyle="--", linewidth=1.0, label=_label(bound_label))
        right.axhline(1.0, color="#616161", linestyle="--", linewidth=1.0, label=tr("one-hot"))
        if n_keys is not None:
            right.axhline(
                1 / n_keys, color="#9e9e9e", linestyle=":", linewidth=1.2, label=tr("uniform: 1/{n}").format(n=n_keys)
            )
        left.set_xscale("log", base=2)
        left.set_yscale("log")
        right.set_xscale("log", base=2)
        right.set_ylim(0, 1.08)
        for ax in (left, right):
            ax.set_xticks(x, [f"{v:g}" for v in x])
            ax.minorticks_off()
            ax.set_xlabel(_label(xlabel))
            ax.legend(frameon=False, fontsize=8.5)
        left.set_ylabel(tr("largest |score|"))
        left.set_title(tr("the scores"))
        right.set_ylabel(tr("largest weight of a row (mean)"))
        right.set_title(tr("the softmax"))
        _font(fig)
        return fig


def _growth_series(scales, series, n_keys, bound) -> tuple[np.ndarray, dict]:
    """``score_growth``'s arguments checked: the scales as an array, each series as two arrays."""
    try:
        x = np.asarray(scales, dtype=float)
    except (TypeError, ValueError):
        raise fail("scales", "a sequence of positive numbers", describe(scales)) from None
    if x.ndim != 1 or x.size < 2 or not (x > 0).all() or not np.isfinite(x).all():
        raise fail("scales", "at least two positive finite numbers in a 1-D sequence", f"{x.tolist()}")
    if not isinstance(series, dict) or not series:
        raise fail("series", "a non-empty dict {name: (largest_scores, largest_weights)}", describe(series))
    curves = {}
    for name, pair in series.items():
        try:
            scores, weights = (
                np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, dtype=float) for v in pair
            )
        except (TypeError, ValueError):
            raise fail(f"series[{name!r}]", "a pair (largest_scores, largest_weights)", describe(pair)) from None
        if scores.shape != x.shape or not (scores > 0).all() or not np.isfinite(scores).all():
            raise fail(
                f"series[{name!r}]", f"{x.size} positive finite largest |score|s, one per s", f"{scores.tolist()}"
            )
        if weights.shape != x.shape or not ((weights > 0) & (weights <= 1)).all():
            raise fail(f"series[{name!r}]", f"{x.size} largest weights in (0, 1], one per s", f"{weights.tolist()}")
        curves[name] = (scores, weights)
    if n_keys is not None:
        ensure_number("n_keys", n_keys, "None or a positive int", lambda n: isinstance(n, int) and n > 0)
    if bound is not None:
        ensure_number("bound", bound, "None or a positive number", lambda v: 0 < v < math.inf)
    return x, curves


from .explore import explore  # noqa: E402, F401  (attnlib.plot.explore: the code is in explore.py)
from .live import live_model  # noqa: E402, F401  (attnlib.plot.live_model: the code is in live.py)
from .player import online_softmax_player  # noqa: E402, F401  (the code is in player.py)
