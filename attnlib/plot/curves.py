"""Measurements as lines: a training loss step by step (``loss_curve``, chapter 10), costs at
growing sizes on log-log axes (``scaling``, chapter 11), the time of each cached decoding step
(``decoding_steps``, chapter 12), and the scores and softmax of a layer whose ``W_Q``, ``W_K``
grow (``score_growth``, chapter 15)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .._figure_text import tr_label
from .._validate import describe, ensure_number, fail
from ..cost import loglog_slope
from ..i18n import tr
from .style import HIGHLIGHT, STYLE, _font


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
            ax.axhline(reference, color="#616161", linestyle="--", linewidth=1.0, label=tr_label(reference_label))
        if log:
            ax.set_yscale("log")
        ax.set_xlabel(tr("training step"))
        ax.set_ylabel(tr("loss (cross-entropy)"))
        ax.set_title(tr_label(title))
        ax.legend(frameon=False)
        _font(ax)
        return ax.figure


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
            label = tr("{name}: slope {p}").format(name=tr_label(name), p=f"{p:.2f}")
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
        ax.set_xlabel(tr_label(var) if var != "T" else tr("sequence length T"))
        ax.set_ylabel(tr_label(ylabel))
        ax.set_title(tr_label(title))
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
        ax.set_title(tr_label(title))
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
    r"""What a layer's scores and softmax do as its ``W_Q`` and ``W_K`` grow (chapter 15).

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
            left.plot(x, scores, marker="o", linewidth=1.6, label=tr_label(name))
            right.plot(x, weights, marker="o", linewidth=1.6, label=tr_label(name))
        if bound is not None:
            left.axhline(bound, color="#9e9e9e", linestyle="--", linewidth=1.0, label=tr_label(bound_label))
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
            ax.set_xlabel(tr_label(xlabel))
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
