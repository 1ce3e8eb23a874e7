"""Figures in one style for every chapter.

* ``show_matrix``: one matrix as a heatmap, its shape in the title.
* ``show_matrices``: several matrices side by side, e.g. ``one_hot @ table = rows``.
* ``attention_heatmap``: attention weights with token labels on both axes.
* ``heads_grid``: one attention heatmap per head.
* ``overview``: the whole computation, tokens to output, with one chapter's steps highlighted.
* ``loss_curve``: a training loss, step by step, with its running mean.
* ``scaling``: costs measured at growing sizes, log-log, with fitted slopes (chapter 11).
* ``score_growth``: the scores and the softmax of a layer whose ``W_Q``, ``W_K`` grow (chapter 15).
* ``rope_wavelengths``, ``rope_scalings``, ``accuracy_by_length``: RoPE over long contexts (chapter 19).
* ``localize``: a figure drawn with matplotlib itself, its words in the reader's language.
* ``explore``, ``live_model``, ``online_softmax_player``: the interactive views (``attnlib.views``).

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

The code is in one module per topic, all reached as ``attnlib.plot.<name>``: ``style.py`` (the
style, the fonts, ``localize``), ``matrices.py`` (the heatmaps), ``diagram.py`` (``overview``),
``curves.py`` (``loss_curve``, ``scaling``, ``decoding_steps``, ``score_growth``), ``positions.py``
(``rope_wavelengths``, ``rope_scalings``, ``accuracy_by_length``); the views are
``attnlib/views/``.
"""

from ..views.explore import explore
from ..views.live import live_model
from ..views.player import online_softmax_player
from .curves import decoding_steps, loss_curve, scaling, score_growth
from .diagram import OVERVIEW_STEPS, overview
from .matrices import attention_heatmap, heads_grid, show_matrices, show_matrix
from .positions import accuracy_by_length, rope_scalings, rope_wavelengths
from .style import CHINESE_FONTS, DIVERGING, HIGHLIGHT, SEQUENTIAL, STYLE, localize

__all__ = [
    "STYLE",
    "SEQUENTIAL",
    "DIVERGING",
    "HIGHLIGHT",
    "CHINESE_FONTS",
    "OVERVIEW_STEPS",
    "show_matrix",
    "show_matrices",
    "attention_heatmap",
    "heads_grid",
    "overview",
    "loss_curve",
    "scaling",
    "decoding_steps",
    "score_growth",
    "rope_wavelengths",
    "rope_scalings",
    "accuracy_by_length",
    "localize",
    "explore",
    "live_model",
    "online_softmax_player",
]
