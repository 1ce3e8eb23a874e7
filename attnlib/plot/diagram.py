"""The overview figure: one multi-head self-attention layer, tokens to output, as boxes and
arrows, with one chapter's steps highlighted (every chapter opens with it)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch, Polygon

from .._figure_text import tr_label
from .._validate import fail
from ..i18n import language, tr
from .style import HIGHLIGHT, STYLE, _font

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
            ax.set_title(tr_label(title))
        _font(fig)
        return fig
