"""Chapter 13's online softmax, one tile at a time, as a player: step forward and back, watch m, ℓ and o.

``online_softmax_player(scores, values, block_size=b)`` returns an :class:`OnlineSoftmaxPlayer`;
a notebook shows it as HTML (``_repr_html_``). It reads one query's row of scores
``s`` (``T_k`` numbers) in tiles of ``b`` keys, as ``attnlib.online_softmax`` and
``attnlib.tiled_attention`` do (the last tile is shorter when ``b`` does not divide ``T_k``),
and keeps the chapter's three running quantities:

    m_new = max(m, max_j s_j)                                # over the tile's keys j
    ℓ_new = exp(m - m_new) * ℓ + sum_j exp(s_j - m_new)
    o_new = exp(m - m_new) * o + sum_j exp(s_j - m_new) v_j  # (d_v,): with values only

starting from ``m = -inf``, ``ℓ = 0``, ``o = 0``. Step ``k`` (0 .. ``n_tiles``) shows the state
after ``k`` tiles: the tile just read (highlighted, and labelled "read in this step"), the
running maximum ``m`` (old -> new), the rescale factor ``exp(m_old - m_new)`` (with a note
when a new maximum arrived and the old sums were rescaled), the running sum ``ℓ`` written as
its update ``factor x ℓ_old + tile's sum``, the unnormalised output ``o`` and the weights so
far, ``exp(s_j - m) / ℓ`` over the keys read. After the last tile the page shows the final
row ``exp(s - m) / ℓ`` next to ``torch.softmax(s)`` computed in Python (and ``o / ℓ`` next
to ``softmax(s) @ V``), and marks them equal when they agree within 1e-6.

The page computes the online softmax itself, in JavaScript, from the scores (an independent
implementation: the tests compare it with PyTorch); Python only supplies the reference row.
Controls: Back and Forward buttons, a slider over the steps, and the arrow keys (Home: the
start, End: the end) while the player has the focus.

For the tests the page exposes its current state with full precision (JavaScript's
shortest round-trip form of each float64) on the element ``.osp-state``: ``data-step``,
``data-m``, ``data-l``, ``data-factor`` (``-Infinity`` and ``NaN`` spelled so), ``data-w``
(JSON, the weights so far, ``null`` for keys not read yet), ``data-o`` (JSON, or ``null``
without values), and on ``.osp-final``: ``data-final`` (the row ``exp(s - m) / ℓ``),
``data-out`` (``o / ℓ``), ``data-max-diff`` (the largest difference from Python's rows) and
``data-equal`` (whether it is at most 1e-6); ``.osp-note`` has ``data-rescaled`` (whether the
step's tile brought a new maximum).

The HTML is self-contained (style, script and data inline: no network; the style and the script
are ``player.css`` and ``player.js``, beside this module) and deterministic:
the scores and values are stored as the float64 numbers given (shortest round-trip form)
and Python's reference row rounded to 8 decimals, so the same inputs give the same bytes on
every machine (the element id is a hash of them). A player is for reading by eye: at most
``MAX_KEYS`` = 64 keys and ``MAX_DV`` = 8 value components. Size budget: at most 36 kB at that
size with float32 inputs in full precision (about 28 kB with inputs of 2 decimals); a page of
8 keys is about 13 kB, most of it the style and the script.

Colour is never the only cue: the tile read in this step is bold and framed, and each tile
is labelled "read", "read in this step" or "not read yet"; a new maximum is said in words;
equality is a word and a mark. The words go through ``attnlib.i18n.tr`` (``ATTNLIB_LANG``)
and carry their English text in a ``data-i18n`` attribute.
"""

from __future__ import annotations

import hashlib
import html
import math

import numpy as np
import torch

from .._figure_text import tr_label
from .._validate import describe, ensure_block_size, fail
from ..i18n import language, tr
from ._page import script, script_json, style

__all__ = ["MAX_DV", "MAX_KEYS", "OnlineSoftmaxPlayer", "online_softmax_player"]

MAX_KEYS = 64  # the most keys a player shows (one row of a table, read by eye)
MAX_DV = 8  # the most value components
DECIMALS = 8  # Python's reference row is stored rounded to 8 decimals: the same bytes on every CPU
TOLERANCE = 1e-6  # the page marks its final row equal to Python's within this

# The words of the page (English msgids, looked up with tr); "{}" is filled in by the page.
WORDS = (
    "Back",
    "Forward",
    "step",
    "key",
    "score",
    "weight so far",
    "running maximum m",
    "rescale factor",
    "running sum ℓ",
    "output o, not yet divided by ℓ",
    "final row",
    "this page",
)
# The names of the player and of its sideways-scrolling boxes, for screen readers (aria-label).
NAMES = ("online softmax, tile by tile", "scores by tile", "running state")
HINT = "Step through the tiles with Back and Forward, the slider or the arrow keys (Home: start, End: end)."

# The page's style and script, package files beside this module (attnlib/views/_page.py reads them). The
# script computes the online softmax after k tiles from the scores, for the step k the reader picks.
STYLE = style("player.css")
SCRIPT = script("player.js")


def _words() -> dict[str, str]:
    """The words the script writes, by the name it knows them by, in the reader's language."""
    return {
        "step": tr("step {} of {}"),
        "tile": tr("tile {}"),
        "read": tr("read"),
        "now": tr("read in this step"),
        "unread": tr("not read yet"),
        "start": tr("nothing read yet: m = −∞, ℓ = 0"),
        "first": tr("first tile: m was −∞, nothing to rescale"),
        "grew": tr("new maximum: the old sums are multiplied by the factor"),
        "same": tr("no new maximum: the factor is 1"),
        "equal": tr("equal"),
        "different": tr("different"),
        "diff": tr("largest difference"),
    }


class OnlineSoftmaxPlayer:
    """The online softmax of one row of scores, tile by tile; shown in a notebook by ``_repr_html_``.

    Attributes (as validated by :func:`online_softmax_player`):

    * ``scores``: ``np.ndarray`` float64 ``(T_k,)``;
    * ``values``: ``None`` or ``np.ndarray`` float64 ``(T_k, d_v)``;
    * ``block_size``: int, the keys per tile (the last tile may be shorter);
    * ``title``: ``None`` or str.
    """

    def __init__(self, scores: np.ndarray, values: np.ndarray | None, block_size: int, title: str | None):
        self.scores, self.values, self.block_size, self.title = scores, values, block_size, title

    @property
    def n_tiles(self) -> int:
        """``ceil(T_k / block_size)``: the steps after the start."""
        return math.ceil(self.scores.size / self.block_size)

    def __repr__(self) -> str:
        d_v = "" if self.values is None else f", values d_v={self.values.shape[1]}"
        return f"OnlineSoftmaxPlayer(T_k={self.scores.size}, block_size={self.block_size}, {self.n_tiles} tiles{d_v})"

    def data(self) -> dict:
        """What the page's script reads: the scores, the values (or None), the block size, Python's
        ``softmax(s)`` and ``softmax(s) @ V`` (rounded to ``DECIMALS``) and the script's words."""
        s = torch.from_numpy(self.scores)
        weights = torch.softmax(s, dim=-1)  # (T_k,) float64: the reference, computed by PyTorch
        out = None if self.values is None else weights @ torch.from_numpy(self.values)  # (T_k,) @ (T_k, d_v) -> (d_v,)
        return {
            "s": self.scores.tolist(),
            "v": None if self.values is None else self.values.tolist(),
            "b": self.block_size,
            "softmax": [round(w, DECIMALS) for w in weights.tolist()],
            "out": None if out is None else [round(x, DECIMALS) for x in out.tolist()],
            "tol": TOLERANCE,
            "text": _words(),
        }

    def _repr_html_(self) -> str:
        return render(self)


def online_softmax_player(scores, values=None, *, block_size: int, title: str | None = None) -> OnlineSoftmaxPlayer:
    """A step-by-step view of the online softmax of one row of scores (see the module's docstring).

    Reads ``s`` in tiles of ``block_size`` keys and shows, after each tile, ``m``, ``ℓ``, the
    factor ``exp(m_old - m_new)`` and (with ``values``) ``o``; at the end ``exp(s - m) / ℓ``
    next to ``softmax(s)``.

    * ``scores``: one query's scores, a floating-point tensor (or numpy array) ``(T_k,)``,
      finite, ``1 <= T_k <= 64``.
    * ``values``: ``None`` or the value rows, a floating-point tensor ``(T_k, d_v)``,
      finite, ``d_v <= 8``; then the page also carries the output ``o`` along.
    * ``block_size``: the keys per tile, a positive int (need not divide ``T_k``; the last
      tile is then shorter).
    * ``title``: ``None`` or a heading above the player (translated as plot's titles are).

    >>> import torch
    >>> s = torch.tensor([2.0, 1.0, 4.0, 3.0, 7.0, 0.0, 5.0, 6.0])
    >>> online_softmax_player(s, block_size=3)
    OnlineSoftmaxPlayer(T_k=8, block_size=3, 3 tiles)
    >>> online_softmax_player(s, torch.zeros(8, 2), block_size=2)
    OnlineSoftmaxPlayer(T_k=8, block_size=2, 4 tiles, values d_v=2)
    """
    s = _array("scores", scores, f"a floating-point tensor (T_k,) of one query's scores, 1 <= T_k <= {MAX_KEYS}")
    if s.ndim != 1 or not 1 <= s.size <= MAX_KEYS:
        raise fail(
            "scores", f"a floating-point tensor (T_k,) of one query's scores, 1 <= T_k <= {MAX_KEYS}", describe(scores)
        )
    _finite("scores", s)
    v = None
    if values is not None:
        want = f"None or a floating-point tensor (T_k, d_v) = ({s.size}, d_v) with 1 <= d_v <= {MAX_DV}"
        v = _array("values", values, want)
        if v.ndim != 2 or v.shape[0] != s.size or not 1 <= v.shape[1] <= MAX_DV:
            raise fail("values", want, describe(values))
        _finite("values", v)
    b = ensure_block_size(block_size)
    if title is not None and not isinstance(title, str):
        raise fail("title", "None or a str", describe(title))
    if title is not None:
        title = tr_label(title)  # translated as plot's titles are
    return OnlineSoftmaxPlayer(s, v, b, title)


def _array(name: str, x, expected: str) -> np.ndarray:
    """``x`` as a float64 numpy array; a floating-point tensor or numpy array is required."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise fail(name, expected, describe(x))
    return x.detach().to("cpu", torch.float64).numpy().copy()


def _finite(name: str, a: np.ndarray) -> None:
    if not np.isfinite(a).all():
        bad = a[~np.isfinite(a)]
        raise fail(
            name, "finite numbers (a player reads real scores; no -inf, inf or NaN)", f"{bad.tolist()[:3]} among them"
        )


# The page ------------------------------------------------------------------------------------------


def _word(word: str, cls: str = "") -> str:
    """A word of the page, translated, with its English msgid in ``data-i18n``."""
    c = f' class="{cls}"' if cls else ""
    return f'<span{c} data-i18n="{html.escape(word)}">{html.escape(tr(word))}</span>'


def render(p: OnlineSoftmaxPlayer) -> str:
    """The player's HTML: one <div> holding its style, its markup, its data and its script."""
    d = p.data()
    data = script_json(d)
    uid = "osp-" + hashlib.sha256("\n".join([data, script_json(p.title), language()]).encode()).hexdigest()[:12]
    esc = html.escape
    t_k, b, n = p.scores.size, p.block_size, p.n_tiles
    tiles = [(t, t * b, min(t * b + b, t_k)) for t in range(n)]

    head = "".join(
        f'<th scope="colgroup" colspan="{stop - start}" class="osp-tile" data-tile="{t}">'
        f'{esc(tr("tile {}").replace("{}", str(t + 1)))}<br><span class="osp-status">{esc(tr("not read yet"))}</span></th>'
        for t, start, stop in tiles
    )
    cells = lambda texts: "".join(f"<td>{text}</td>" for text in texts)  # key j's cell: the j-th <td> of a row
    rows = [
        f'<tr><th scope="row">{_word("key")}</th>' + cells(range(t_k)) + "</tr>",
        f'<tr><th scope="row">{_word("score")} s<sub>j</sub></th>' + cells(f"{x:.2f}" for x in p.scores) + "</tr>",
    ]
    if p.values is not None:
        for c in range(p.values.shape[1]):
            rows.append(
                f'<tr><th scope="row">v<sub>j</sub>[{c}]</th>' + cells(f"{x:.2f}" for x in p.values[:, c]) + "</tr>"
            )
    rows.append(
        f'<tr class="osp-wrow"><th scope="row">{_word("weight so far")}<br>e<sup>s<sub>j</sub> − m</sup> / ℓ</th>'
        + cells("—" for _ in range(t_k))
        + "</tr>"
    )
    state = [
        ("running maximum m", "osp-m", ""),
        ("rescale factor", "osp-factor", " e<sup>m<sub>old</sub> − m<sub>new</sub></sup>"),
        ("running sum ℓ", "osp-l", ""),
    ]
    if p.values is not None:
        state.append(("output o, not yet divided by ℓ", "osp-o", ""))
    state_rows = "".join(
        f'<tr><th scope="row">{_word(word)}{formula}</th><td class="{cls}"></td></tr>' for word, cls, formula in state
    )
    final_rows = "".join(
        f"<tr><th>{j}</th><td></td><td>{w:.4f}</td><td></td></tr>"  # key j: the page's, Python's, the mark
        for j, w in enumerate(d["softmax"])
    )
    out_rows = ""
    if p.values is not None:
        out_rows = (
            f'<tr class="osp-out-row"><th scope="row">out = o / ℓ</th><td class="osp-out"></td>'
            f'<td>[{", ".join(f"{x:.4f}" for x in d["out"])}]</td><td class="osp-mark-out"></td></tr>'
        )
    reference = "softmax(s) @ V" if p.values is not None else ""
    title = f'<div class="osp-title">{esc(p.title)}</div>' if p.title else ""

    def scroll(name: str) -> str:
        return f'<div class="osp-scroll" tabindex="0" role="region" aria-label="{esc(tr(name))}">'

    return (
        f'<div class="osp" id="{uid}" tabindex="0" role="group" aria-label="{esc(tr(NAMES[0]))}"><style>{STYLE}</style>{title}'
        f'<div class="osp-controls"><button type="button" class="osp-back">◀ {_word("Back")}</button>'
        f'<input type="range" class="osp-slider" min="0" max="{n}" step="1" value="0" aria-label="{esc(tr("step"))}">'
        f'<button type="button" class="osp-forward">{_word("Forward")} ▶</button>'
        f'<output class="osp-step" aria-live="polite">{esc(tr("step {} of {}").replace("{}", "0", 1).replace("{}", str(n), 1))}</output></div>'
        # tables wider than a phone scroll sideways in boxes of their own, which a keyboard reaches (tabindex)
        f'{scroll(NAMES[1])}<table class="osp-row"><thead><tr><td></td>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        f'<div class="osp-state" data-step="0">{scroll(NAMES[2])}<table>{state_rows}</table></div>'
        f'<p class="osp-note" aria-live="polite"></p></div>'
        f'<div class="osp-final" hidden>{scroll("final row")}<table><caption>{_word("final row")}</caption>'
        f'<thead><tr><th scope="col">{_word("key")}</th><th scope="col">{_word("this page")}<br>e<sup>s − m</sup> / ℓ</th>'
        f'<th scope="col">Python<br>torch.softmax(s){" / " + reference if reference else ""}</th><td></td></tr></thead>'
        f'<tbody class="osp-fk">{final_rows}</tbody><tbody>{out_rows}</tbody></table></div><p class="osp-verdict"></p></div>'
        f'<p class="osp-hint" data-i18n="{esc(HINT)}">{esc(tr(HINT))}</p>'
        f'<script type="application/json" class="osp-data">{data}</script>'
        f"<script>{SCRIPT.replace('__ID__', uid)}</script></div>"
    )
