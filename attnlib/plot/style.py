"""One look for every figure, and every word a figure shows in the reader's language.

``STYLE`` (matplotlib's rcParams), the colour maps (``SEQUENTIAL``, ``DIVERGING``) and
``HIGHLIGHT``, the fonts with Chinese characters (``CHINESE_FONTS``), and ``localize``, which
translates the words of a figure a notebook draws with matplotlib itself. The titles and labels
passed to the plot functions are translated by ``attnlib._figure_text.tr_label``.
"""

from __future__ import annotations

import logging
import re
import sys
import warnings

import matplotlib
from matplotlib import font_manager
from matplotlib.text import Text

from .._figure_text import tr_label
from ..i18n import language, tr

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
HIGHLIGHT = "#1f77b4"  # the colour of what a figure points at: a step of the overview, a measured line
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
    fonts = _chinese_fonts()
    installed = {f.name for f in font_manager.fontManager.ttflist}
    font = next((f for f in fonts if f in installed), None)
    if font is None:
        warnings.warn(
            tr(
                "ATTNLIB_LANG=zh_CN: matplotlib finds no font with Chinese characters, so the "
                "Chinese text of the figures shows as empty boxes. Install one, e.g. "
                "`apt-get install fonts-noto-cjk` on Debian, Ubuntu or Colab (macOS and Windows "
                "have one already), then delete matplotlib's font cache ({cache}) and restart "
                "Python. The fonts looked for: {fonts}."
            ).format(cache=matplotlib.get_cachedir(), fonts=", ".join(fonts)),
            stacklevel=3,
        )
        return
    # some of these fonts come in one weight: matplotlib would log a line for every bold title
    logging.getLogger("matplotlib.font_manager").addFilter(_one_weight)
    for text in artist.findobj(Text):
        if re.search("[\u3400-\u9fff\uff00-\uffef]", text.get_text()):  # the rest keeps matplotlib's fonts
            text.set_fontfamily([font, "sans-serif"])


def _chinese_fonts() -> tuple[str, ...]:
    """CHINESE_FONTS as ``attnlib.plot`` holds it: a reader may set ``plot.CHINESE_FONTS`` to the fonts
    of their machine, which every figure then uses (read from the package, which this module does not
    import: it is the package's attribute, set from this module's CHINESE_FONTS when it loads)."""
    return getattr(sys.modules.get(__package__), "CHINESE_FONTS", CHINESE_FONTS)


def _one_weight(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("findfont: Failed to find font weight")


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
    >>> import matplotlib.pyplot as plt
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
            text.set_text(tr_label(text.get_text()))
    for ax in fig.axes:  # what a legend made after this call will show
        for artist in ax.get_children() + list(ax.containers):
            label = artist.get_label()
            if isinstance(label, str) and label and not label.startswith("_"):
                artist.set_label(tr_label(label))
    _font(fig)
    return fig
