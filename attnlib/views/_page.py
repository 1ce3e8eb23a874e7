"""What the three views share: their data as JSON in the page, and their script and style files.

Each view's script and style are package files beside this module (``explore.js``,
``explore.css``, ...), read with ``importlib.resources`` (so from a wheel or a zip as well as from
the checkout) and put inline in the page: no network, no CDN. A file may begin with a ``/* ... */``
note for its reader, which the page does not receive; a style file is sent as one line, its
comments left out and its lines joined (write one rule per line, as the files do).
"""

from __future__ import annotations

import json
import re
from importlib import resources


def script_json(data) -> str:
    """``data`` as JSON safe inside a <script> element (no "</script>", no "<!--"); NaN and inf,
    which ``JSON.parse`` refuses, raise ``ValueError``."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _read(name: str) -> str:
    """The package file ``attnlib/views/<name>``, without its leading ``/* ... */`` note and its final newline."""
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    if text.startswith("/*"):
        text = text[text.index("*/\n") + 3 :]  # the note for the file's reader
    return text.removesuffix("\n")


def script(name: str) -> str:
    """A view's script, ``attnlib/views/<name>`` (e.g. ``"explore.js"``), as the page receives it."""
    return _read(name)


def style(name: str) -> str:
    """A view's style, ``attnlib/views/<name>`` (e.g. ``"explore.css"``), as one line: its comments
    left out, each line stripped, the lines joined."""
    text = re.sub(r"/\*.*?\*/", "", _read(name), flags=re.DOTALL)
    return "".join(line.strip() for line in text.splitlines())
