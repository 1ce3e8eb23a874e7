"""The interactive views a notebook shows as HTML: each a Python object whose ``_repr_html_`` is one
self-contained, deterministic <div> (its style, script and data inline; no network).

* ``explore.py``, ``plot.explore``: point at a query, see where it looks (every chapter);
* ``live.py``, ``plot.live_model``: type a prompt, and chapter 10's trained GPT runs in the page;
* ``player.py``, ``plot.online_softmax_player``: step through chapter 13's online softmax, tile by tile.

Each view's script and style are package files beside its module (``explore.js``,
``explore.css``, ``live.js``, ...), read by ``_page.py``. The notebooks reach the views through
``attnlib.plot`` (``plot.explore(...)``), which imports them from their modules; this package
imports nothing of ``attnlib.plot``, and both translate the titles they are given with
``attnlib._figure_text``. (Nothing is re-exported here: ``attnlib.views.explore`` stays the module.)
"""
