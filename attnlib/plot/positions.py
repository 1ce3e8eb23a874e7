"""RoPE over long contexts (chapter 19): the wavelength of each rotated pair against context lengths
(``rope_wavelengths``), the change of each pair's frequency under a scaling (``rope_scalings``), and a
model's accuracy against the sequence length (``accuracy_by_length``)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from .._figure_text import tr_label
from .._validate import describe, fail
from ..i18n import tr
from .style import STYLE, _font


def _positive(name: str, values, n: int | None = None) -> np.ndarray:
    """``values`` as a 1-D float array of positive finite numbers (``n`` of them, when given)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().tolist()
    try:
        a = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise fail(name, "a sequence of positive numbers", describe(values)) from None
    want = "positive finite numbers in a 1-D sequence" if n is None else f"{n} positive finite numbers, one per x"
    if a.ndim != 1 or a.size == 0 or (n is not None and a.size != n) or not (np.isfinite(a) & (a > 0)).all():
        raise fail(name, want, f"{a.tolist()}")
    return a


def _series(series, what: str) -> dict:
    if not isinstance(series, dict) or not series:
        raise fail("series", f"a non-empty dict {{name: {what}}}", describe(series))
    return series


def rope_wavelengths(series: dict, title: str = ""):
    r"""The wavelength of each RoPE pair, ``λ_i = 2π / θ_i`` tokens (log scale), against the pair ``i``, with each
    model's context length as a dashed line of its colour: the pairs below the line turn at least once
    within the context, those above never complete a turn.

    Args:
        series: ``{name: (wavelengths, context)}``: the ``d/2`` wavelengths of one model's pairs (positive),
            and its context length in tokens.
        title: the axes' title.

    Returns the Figure.

    >>> w = [2 * math.pi * 10000 ** (2 * i / 8) for i in range(4)]
    >>> fig = rope_wavelengths({"toy": (w, 100)})
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['toy', 'toy: context 100']
    """
    curves = {}
    for name, pair in _series(series, "(wavelengths, context)").items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise fail(f"series[{name!r}]", "a pair (wavelengths, context)", describe(pair))
        wavelengths = _positive(f"series[{name!r}] wavelengths", pair[0])
        context = float(_positive(f"series[{name!r}] context", [pair[1]])[0])
        curves[name] = (wavelengths, context)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 3.8), layout="constrained")
        for name, (wavelengths, context) in curves.items():
            (line,) = ax.plot(np.arange(wavelengths.size), wavelengths, linewidth=1.8, label=tr_label(name))
            label = tr("{name}: context {T}").format(name=tr_label(name), T=f"{context:,.0f}")
            ax.axhline(context, color=line.get_color(), linestyle="--", linewidth=1.1, label=label)
        ax.set_yscale("log")
        ax.set_xlabel(tr("pair i"))
        ax.set_ylabel(tr("wavelength 2π/θ_i (tokens)"))
        ax.set_title(tr_label(title))
        ax.legend(frameon=False, fontsize=8.5)
        _font(ax)
        return fig


def rope_scalings(theta, series: dict, original_length: float | None = None, title: str = ""):
    r"""What each scaling does to each pair: ``θ'_i / θ_i`` against the pair's wavelength ``2π / θ_i``, log-log.

    Position interpolation is a flat line at ``1/s``; the band methods (YaRN, Llama 3's) keep the short
    wavelengths (ratio 1) and divide the long ones by ``s``.

    Args:
        theta: the default frequencies ``θ_i`` ``(d/2,)``, positive.
        series: ``{name: theta_scaled}``, ``d/2`` positive frequencies each.
        original_length: a dashed vertical line at this wavelength, e.g. the training length ``L0``;
            None: none.
        title: the axes' title.

    Returns the Figure.

    >>> fig = rope_scalings([1.0, 0.1, 0.01], {"linear, s = 4": [0.25, 0.025, 0.0025]}, original_length=32)
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['linear, s = 4', 'training length 32']
    """
    theta = _positive("theta", theta)
    curves = {
        name: _positive(f"series[{name!r}]", v, theta.size) / theta for name, v in _series(series, "theta'").items()
    }
    if original_length is not None:
        original_length = float(_positive("original_length", [original_length])[0])
    wavelengths = 2 * math.pi / theta
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 3.8), layout="constrained")
        styles = ["-", "--", "-.", ":", (0, (5, 1, 1, 1))]  # told apart by style too, not only by colour
        for k, (name, ratio) in enumerate(curves.items()):
            ax.plot(wavelengths, ratio, marker="o", markersize=3, linestyle=styles[k % 5], label=tr_label(name))
        if original_length is not None:
            label = tr("training length {L}").format(L=f"{original_length:,.0f}")
            ax.axvline(original_length, color="#9e9e9e", linestyle="--", linewidth=1.1, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(tr("wavelength 2π/θ_i of the pair, default RoPE (tokens)"))
        ax.set_ylabel(tr("θ'_i / θ_i"))
        ax.set_title(tr_label(title))
        ax.legend(frameon=False, fontsize=8.5)
        _font(ax)
        return fig


def accuracy_by_length(lengths, series: dict, train_length: float | None = None, title: str = ""):
    r"""A model's accuracy against the sequence length (log2 axis), one line per variant, with a dashed line
    at the length it was trained on.

    Args:
        lengths: the sequence lengths tested, positive, at least two.
        series: ``{name: accuracies}``, one number in ``[0, 1]`` per length.
        train_length: the training length; None: no line.
        title: the axes' title.

    Returns the Figure.

    >>> fig = accuracy_by_length([32, 64, 128], {"default": [1.0, 0.9, 0.5]}, train_length=32)
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['default', 'training length 32']
    """
    x = _positive("lengths", lengths)
    if x.size < 2:
        raise fail("lengths", "at least two positive lengths", f"{x.tolist()}")
    curves = {}
    for name, ys in _series(series, "accuracies").items():
        if isinstance(ys, torch.Tensor):
            ys = ys.detach().cpu().double().tolist()
        try:
            y = np.asarray(ys, dtype=float)
        except (TypeError, ValueError):
            raise fail(f"series[{name!r}]", "a sequence of accuracies", describe(ys)) from None
        if y.shape != x.shape or not ((y >= 0) & (y <= 1)).all():
            raise fail(f"series[{name!r}]", f"{x.size} accuracies in [0, 1], one per length", f"{y.tolist()}")
        curves[name] = y
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 3.8), layout="constrained")
        markers = "osD^v<>"
        for k, (name, y) in enumerate(curves.items()):
            ax.plot(x, y, marker=markers[k % len(markers)], linewidth=1.6, label=tr_label(name))
        if train_length is not None:
            train_length = float(_positive("train_length", [train_length])[0])
            label = tr("training length {L}").format(L=f"{train_length:,.0f}")
            ax.axvline(train_length, color="#9e9e9e", linestyle="--", linewidth=1.1, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlabel(tr("sequence length T"))
        ax.set_ylabel(tr("accuracy"))
        ax.set_title(tr_label(title))
        ax.legend(frameon=False, fontsize=8.5)
        _font(ax)
        return fig
