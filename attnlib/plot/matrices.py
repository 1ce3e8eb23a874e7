"""Matrices as heatmaps, their shapes in their titles: ``show_matrix``, ``show_matrices``,
``attention_heatmap`` and ``heads_grid``.

Signed matrices use a diverging colour map centred on 0 (blue < 0 < red); non-negative ones
(one-hot rows, attention weights) a sequential one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .._figure_text import tr_label, tr_labels
from .._validate import describe, fail
from ..i18n import tr
from .style import DIVERGING, SEQUENTIAL, STYLE, _font


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
    title, row_labels, col_labels = tr_label(title), tr_labels(row_labels), tr_labels(col_labels)
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
            ax.set_xlabel(tr_label(xlabel))
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
