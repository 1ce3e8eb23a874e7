"""An attention explorer for the notebooks and the book: point at a query, see where it looks.

``explore(weights, tokens)`` returns an :class:`Explorer`; a notebook shows it as HTML
(``_repr_html_``). The view:

* the query tokens in a column on the left, the key tokens on the right, and a line from
  each query to each key whose opacity and width are the weight;
* hovering (or focusing) a query shows only its row, with the weights as numbers (2 decimals)
  beside the keys and in a table, one line per head; clicking it (or Enter) pins the row,
  clicking it again unpins and hides it (on a touch screen: a tap, and the hint says "tap");
  Tab reaches the queries, the arrow keys move between them, Escape unpins;
* a head selector (each head its colour, from the colour-blind-safe Okabe-Ito palette, and
  "all heads" overlaid), a layer selector and a slider over training steps, each shown only
  when there is more than one to choose from;
* keys that a ``mask`` forbids are greyed, hatched, struck through and labelled "masked" in
  the table: a masked key is not a key whose weight happens to be 0.00.

The HTML is self-contained (its style, script and data inline: no network, no CDN; the style and
the script are ``explore.css`` and ``explore.js``, beside this module) and deterministic (the same
inputs give the same bytes; its element id is a hash of them), so a notebook's saved output
compares equal under nbval. The weights are stored in the page as JSON, rounded to 4 decimals
and written as integers in ten-thousandths (``0.4213`` -> ``4213``).
Size budget: at most 60 kB for 2 layers x 12 heads x 16 queries x 16 keys (one step); the
page grows by about 5 bytes per stored weight.

Until its script runs the view is still, and says so: JupyterLab runs the script of a saved
output only in a notebook it trusts (one it has executed), so a notebook opened from a clone shows
the still view until its cells run; the book's pages and a cell just run show the live one.

Colour is never the only cue: the numbers are shown as text, the pinned query is bold and
the masked keys are labelled. The words the view shows go through ``attnlib.i18n.tr`` (the
reader's ``ATTNLIB_LANG``) and carry their English text in a ``data-i18n`` attribute.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Sequence

import numpy as np
import torch

from .._figure_text import tr_label
from .._validate import describe, fail
from ..i18n import language, tr
from ._page import script, script_json, style

__all__ = ["OKABE_ITO", "Explorer", "explore"]

# Okabe & Ito's colour-blind-safe palette, the darker colours first (yellow last: it is pale on white).
OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
ROW_PX = 24  # the height of one token's row, in CSS pixels
LINES_PX = 140  # the width of the lines between the two columns
SCALE = 10_000  # weights stored as integers in ten-thousandths: 4 decimals

# The words the view shows (English msgids, looked up with tr).
WORDS = ("queries", "keys", "layer", "head", "all heads", "step", "masked", "weights of")
HINT = "Hover or focus a query to see its weights; click it or press Enter to pin it."
# The hint on a touch screen (CSS media "(hover: none) and (pointer: coarse)"), chosen by the page's script.
HINT_TOUCH = "Tap a query to see its weights and pin it; tap it again to unpin it."
# What the page says until its script runs: JupyterLab runs the scripts of a saved output only in a
# notebook it trusts (one it executed itself), so a notebook opened from a clone shows this until the cell runs.
STILL = "A still view: run this cell to point at the queries (JupyterLab runs a saved output's script only in a trusted notebook)."

# The view's style and script, package files beside this module (attnlib/views/_page.py reads them). The
# script defines attnx(id), which starts the view with that element id (chapter 10's live model calls it too).
STYLE = style("explore.css")
SCRIPT = script("explore.js").replace("__ROW__", str(ROW_PX)).replace("__W__", str(LINES_PX))


class Explorer:
    """The explorer of one set of attention weights; shown in a notebook by ``_repr_html_``.

    Attributes (as validated by :func:`explore`):

    * ``weights``: ``np.ndarray`` of shape ``(n_steps, n_layers, n_heads, T_q, T_k)``;
    * ``tokens`` (``T_k`` str), ``queries`` (``T_q`` str);
    * ``heads``, ``layers``, ``steps``: their labels (str);
    * ``mask``: ``None`` or a bool ``np.ndarray`` ``(T_q, T_k)``, or ``(n_steps, T_q, T_k)`` (one per
      step), True where a query may attend;
    * ``title``: ``None`` or str.
    """

    def __init__(self, weights, tokens, queries, heads, layers, steps, mask, title):
        self.weights, self.tokens, self.queries = weights, tokens, queries
        self.heads, self.layers, self.steps = heads, layers, steps
        self.mask, self.title = mask, title

    def __repr__(self) -> str:
        n_steps, n_layers, n_heads, t_q, t_k = self.weights.shape
        return (
            f"Explorer({n_steps} step(s) x {n_layers} layer(s) x {n_heads} head(s), "
            f"{t_q} queries x {t_k} keys{', masked' if self.mask is not None else ''})"
        )

    def data(self) -> dict:
        """What the page's script reads: the weights in ten-thousandths ``[step][layer][head][query][key]``,
        the mask (``[query][key]``, or ``[step][query][key]``, 1 = may attend, or None), the heads' colours,
        step labels and words."""
        stored = np.clip(np.rint(self.weights * SCALE), 0, SCALE).astype(np.int64)
        return {
            "scale": SCALE,
            "w": stored.tolist(),
            "mask": None if self.mask is None else self.mask.astype(np.int64).tolist(),
            "colors": [OKABE_ITO[h % len(OKABE_ITO)] for h in range(len(self.heads))],
            "heads": self.heads,
            "steps": self.steps,
            "text": {"masked": tr("masked"), "hint": tr(HINT), "hintTouch": tr(HINT_TOUCH)},
            "hint": HINT,  # the English keys of the hints, for data-i18n
            "hintTouch": HINT_TOUCH,
        }

    def _repr_html_(self) -> str:
        return render(self)


def explore(weights, tokens, *, queries=None, heads=None, layers=None, steps=None, mask=None, title=None) -> Explorer:
    """An interactive view of attention weights (see the module's docstring), for a notebook.

    * ``weights``: a tensor ``(T_q, T_k)`` (one head), ``(n_heads, T_q, T_k)``,
      ``(n_layers, n_heads, T_q, T_k)``, or a list of ``(n_heads, T_q, T_k)`` per layer;
      with ``steps``, a list over training steps of any of those (all of one shape).
      Values in [0, 1] (softmax weights); numpy arrays are accepted too.
    * ``tokens``: the key tokens, ``T_k`` strings.
    * ``queries``: the query tokens, ``T_q`` strings; default ``tokens`` when ``T_q == T_k``,
      else the last ``T_q`` tokens (the queries of a decoding step are the newest tokens).
    * ``heads``, ``layers``, ``steps``: labels (default ``0 .. n-1``; ``steps`` is required
      to give a list over steps).
    * ``mask``: a bool tensor broadcastable to ``(T_q, T_k)``, True where a query may attend
      (the course's convention); the weights where it is False must be 0. With ``steps``, it may
      be ``(n_steps, T_q, T_k)``, one mask per step: e.g. a decoding step whose later queries and
      keys do not exist yet (chapter 12).
    * ``title``: a heading above the view.

    >>> import torch
    >>> w = torch.softmax(torch.randn(2, 3, 3), dim=-1)
    >>> explore(w, ["the", "cat", "sat"])
    Explorer(1 step(s) x 1 layer(s) x 2 head(s), 3 queries x 3 keys)
    """
    if steps is None:
        stacked = _layers("weights", weights)[None]
        steps = ["0"]
    else:
        steps = _names("steps", steps)
        if not isinstance(weights, (list, tuple)) or len(weights) != len(steps):
            got = f"a list of {len(weights)}" if isinstance(weights, (list, tuple)) else describe(weights)
            raise fail("weights", f"a list of {len(steps)} (one per step, as steps has)", got)
        parts = [_layers(f"weights[{s}]", w) for s, w in enumerate(weights)]
        _same_shape("weights", parts, "every step's weights of one shape")
        stacked = np.stack(parts)
    n_steps, n_layers, n_heads, t_q, t_k = stacked.shape
    if min(stacked.shape) == 0:
        raise fail("weights", "at least one head, one query and one key", f"shape {stacked.shape[1:]}")
    finite = stacked[np.isfinite(stacked)]
    if finite.size < stacked.size or finite.min() < 0 or finite.max() > 1 + 1e-6:
        values = f"values from {finite.min():.4g} to {finite.max():.4g}" if finite.size else "no finite value"
        raise fail(
            "weights",
            "attention weights: finite numbers in [0, 1]",
            values + (", and NaN or inf" if finite.size < stacked.size else ""),
        )

    tokens = _tokens("tokens", tokens, t_k, "T_k")
    if queries is None:
        if t_q > t_k:
            raise fail("queries", f"{t_q} query tokens (T_q = {t_q} > T_k = {t_k}: they are not keys)", "None")
        queries = tokens[t_k - t_q :]
    else:
        queries = _tokens("queries", queries, t_q, "T_q")
    heads = _names("heads", heads, n_heads)
    layers = _names("layers", layers, n_layers)
    if mask is not None:
        mask = _mask(mask, n_steps, t_q, t_k)
        leak = np.where(mask if mask.ndim == 2 else mask[:, None, None], 0.0, stacked).max()
        if leak > 1e-6:
            raise fail(
                "mask",
                "True where a query may attend (weights where the mask is False are 0)",
                f"a weight of {leak:.4g} where the mask is False (is your mask True where masked?)",
            )
    if title is not None and not isinstance(title, str):
        raise fail("title", "None or a str", describe(title))
    if title is not None:
        title = tr_label(title)  # translated as plot's titles are
    return Explorer(stacked, tokens, queries, heads, layers, steps, mask, title)


# Checks ------------------------------------------------------------------------------------------

LAYERS = "a tensor (T_q, T_k), (n_heads, T_q, T_k) or (n_layers, n_heads, T_q, T_k), or a list of layers"


def _array(name: str, x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor) or not (x.is_floating_point() or x.dtype == torch.float64):
        raise fail(name, "a floating-point tensor", describe(x))
    return x.detach().to("cpu", torch.float64).numpy()


def _layers(name: str, w) -> np.ndarray:
    """``w`` as ``(n_layers, n_heads, T_q, T_k)``."""
    if isinstance(w, (list, tuple)):
        if not w:
            raise fail(name, "a list of layers, each (n_heads, T_q, T_k)", "an empty list")
        parts = []
        for i, layer in enumerate(w):
            a = _array(f"{name}[{i}]", layer)
            if a.ndim not in (2, 3):
                raise fail(f"{name}[{i}]", "a layer's weights (n_heads, T_q, T_k) or (T_q, T_k)", describe(layer))
            parts.append(a if a.ndim == 3 else a[None])
        _same_shape(name, parts, "layers of one shape (n_heads, T_q, T_k)")
        return np.stack(parts)
    a = _array(name, w)
    if a.ndim not in (2, 3, 4):
        raise fail(name, LAYERS, describe(w))
    return a.reshape((1,) * (4 - a.ndim) + a.shape)


def _same_shape(name: str, parts: list[np.ndarray], expected: str) -> None:
    shapes = [p.shape for p in parts]
    if len(set(shapes)) > 1:
        raise fail(name, expected, "shapes " + ", ".join(str(s) for s in shapes))


def _tokens(name: str, tokens, n: int, size: str) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise fail(name, f"a list of {n} str ({size} = {n})", describe(tokens))
    if len(tokens) != n or not all(isinstance(t, str) for t in tokens):
        kinds = sorted({type(t).__name__ for t in tokens})
        raise fail(name, f"a list of {n} str ({size} = {n})", f"{len(tokens)} items of type {', '.join(kinds)}")
    return list(tokens)


def _names(name: str, labels, n: int | None = None) -> list[str]:
    """Labels of heads, layers or steps: ``n`` str or int (default ``0 .. n-1``)."""
    if labels is None:
        return [str(i) for i in range(n)]
    ok = not isinstance(labels, str) and isinstance(labels, Sequence) and len(labels) > 0
    ok = ok and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in labels)
    want = f"a list of {n} labels (str or int)" if n is not None else "a non-empty list of labels (str or int)"
    if not ok or (n is not None and len(labels) != n):
        raise fail(name, want, describe(labels))
    return [str(x) for x in labels]


def _mask(mask, n_steps: int, t_q: int, t_k: int) -> np.ndarray:
    """The mask as (T_q, T_k), or (n_steps, T_q, T_k) when it has one per step."""
    want = f"a bool tensor broadcastable to (T_q, T_k) = ({t_q}, {t_k})"
    want += f", or (n_steps, T_q, T_k) = ({n_steps}, {t_q}, {t_k}), True where a query may attend"
    if isinstance(mask, np.ndarray):
        mask = torch.from_numpy(mask)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise fail("mask", want, describe(mask))
    per_step = mask.dim() == 3 and n_steps > 1
    try:
        return torch.broadcast_to(mask.cpu(), (n_steps, t_q, t_k) if per_step else (t_q, t_k)).numpy().copy()
    except RuntimeError:
        raise fail("mask", want, describe(mask)) from None


# The page ------------------------------------------------------------------------------------------


def _word(word: str) -> str:
    """A word of the view, translated, with its English msgid in ``data-i18n``."""
    return f'<span data-i18n="{html.escape(word)}">{html.escape(tr(word))}</span>'


def _select(cls: str, label: str, options: list[tuple[int, str]], value: int, words=()) -> str:
    """A <select>: its label, and its options ``(value, text)``; the texts in ``words`` are the view's
    own words (translated, with ``data-i18n``), the others labels the caller gave."""
    items = "".join(
        f'<option value="{v}"{" selected" if v == value else ""}'
        + (f' data-i18n="{html.escape(text)}">{html.escape(tr(text))}' if text in words else f">{html.escape(text)}")
        + "</option>"
        for v, text in options
    )
    return f'<label>{_word(label)} <select class="{cls}">{items}</select></label>'


def render(ex: Explorer) -> str:
    """The explorer's HTML: one <div> holding its style, its markup, its data and its script."""
    data = script_json(ex.data())
    n_steps, n_layers, n_heads, t_q, t_k = ex.weights.shape
    seed = "\n".join([data, script_json([ex.tokens, ex.queries, ex.heads, ex.layers, ex.title]), language()])
    uid = "attnx-" + hashlib.sha256(seed.encode()).hexdigest()[:12]
    esc = html.escape

    controls = []
    if n_layers > 1:
        controls.append(_select("attnx-layer", "layer", list(enumerate(ex.layers)), 0))
    if n_heads > 1:
        options = [(-1, "all heads")] + list(enumerate(ex.heads))
        controls.append(_select("attnx-head", "head", options, -1, words=("all heads",)))
    if n_steps > 1:
        controls.append(
            f'<label>{_word("step")} <input type="range" class="attnx-step" min="0" max="{n_steps - 1}" '
            f'step="1" value="{n_steps - 1}"> <output class="attnx-step-label">{esc(ex.steps[-1])}</output></label>'
        )
    queries = "".join(
        f'<button type="button" class="attnx-q" data-q="{i}" tabindex="{0 if i == 0 else -1}" '
        f'aria-pressed="false" title="{esc(q)}">{esc(q)}</button>'
        for i, q in enumerate(ex.queries)
    )
    keys = "".join(
        f'<div class="attnx-k" data-k="{j}" title="{esc(k)}"><span class="attnx-v"></span> {esc(k)}</div>'
        for j, k in enumerate(ex.tokens)
    )
    height = max(t_q, t_k) * ROW_PX
    header = "".join(f'<th scope="col">{esc(k)}</th>' for k in ex.tokens)
    title = f'<div class="attnx-title">{esc(ex.title)}</div>' if ex.title else ""
    return (
        f'<div class="attnx" id="{uid}"><style>{STYLE}</style>{title}'
        f'<div class="attnx-controls">{"".join(controls)}</div>'
        f'<div class="attnx-view"><div class="attnx-col attnx-queries" role="group" aria-label="{esc(tr("queries"))}">'
        f'<div class="attnx-head-row">{_word("queries")}</div>{queries}</div>'
        f'<svg class="attnx-lines" width="{LINES_PX}" height="{height + ROW_PX}" aria-hidden="true">'
        f'<g transform="translate(0,{ROW_PX})"></g></svg>'
        f'<div class="attnx-col attnx-keys"><div class="attnx-head-row">{_word("keys")}</div>{keys}</div></div>'
        # the table scrolls sideways in its own box on a phone: a keyboard reaches that box (tabindex, named region)
        f'<div class="attnx-scroll" tabindex="0" role="region" aria-label="{esc(tr("weights of"))}">'
        f'<table class="attnx-table"><caption>{_word("weights of")} <b class="attnx-which">–</b></caption>'
        f'<thead><tr><th scope="col">{_word("head")}</th>{header}</tr></thead>'
        f'<tbody aria-live="polite"></tbody></table></div>'
        f'<p class="attnx-hint" data-i18n="{esc(STILL)}">{esc(tr(STILL))}</p>'
        f'<script type="application/json" class="attnx-data">{data}</script>'
        f'<script>{SCRIPT}\nattnx("{uid}");</script></div>'
    )
