"""attnlib in English or in Chinese: one switch, the environment variable ``ATTNLIB_LANG``.

    ATTNLIB_LANG=zh_CN     checker feedback, grader reports and figure labels in Chinese
    unset, empty or en     English (the default)

It is read each time a message or a figure is made, so a notebook can set it in any cell
before the check or the figure (the Chinese notebooks do it in their first code cell)::

    import os
    os.environ["ATTNLIB_LANG"] = "zh_CN"

The Chinese text comes from a gettext catalog inside the package,
``attnlib/locales/zh_CN/LC_MESSAGES/attnlib.po``: each ``msgid`` is an English message
exactly as the code writes it (with its ``{placeholders}``), each ``msgstr`` its
translation. A message without a translation is shown in English. The code marks the
messages it looks up as ``tr("...")``; the checkers' hints and the labels that notebooks
pass to ``attnlib.plot`` are looked up as they are.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from ._validate import fail

LANGUAGES = ("en", "zh_CN")
LOCALES = Path(__file__).resolve().parent / "locales"


def language() -> str:
    """The language ``ATTNLIB_LANG`` asks for: ``"en"`` (unset or empty) or ``"zh_CN"``."""
    lang = os.environ.get("ATTNLIB_LANG", "").strip() or "en"
    if lang not in LANGUAGES:
        raise fail("ATTNLIB_LANG", f"one of {', '.join(LANGUAGES)} (or unset: English)", repr(lang))
    return lang


def tr(message: str, lang: str | None = None) -> str:
    """``message`` in ``lang`` (default: ``ATTNLIB_LANG``): its translation, or itself.

    >>> tr("wrong shape", lang="en")
    'wrong shape'
    """
    lang = lang or language()
    return message if lang == "en" else catalog(lang).get(message, message)


@functools.lru_cache(maxsize=None)
def catalog(lang: str) -> dict[str, str]:
    """``{msgid: msgstr}`` of the ``lang`` catalog; empty, fuzzy and obsolete entries left out.

    A small reader of the .po format (attnlib needs no gettext tooling at run time):
    an entry is ``msgid "..."`` then ``msgstr "..."``, each string possibly continued on
    the lines below it, with C escapes (``\\n``, ``\\"``, ``\\\\``).
    """
    path = LOCALES / lang / "LC_MESSAGES" / "attnlib.po"
    entries: dict[str, str] = {}
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        fields, key, fuzzy = {}, None, False
        for line in block.splitlines():
            if line.startswith("#,") and "fuzzy" in line:
                fuzzy = True
            elif line.startswith(("msgid ", "msgstr ")):
                key, _, line = line.partition(" ")
                fields[key] = _unquote(line)
            elif line.startswith('"') and key:
                fields[key] += _unquote(line)
            elif not line.startswith("#"):            # msgctxt, plurals: not used by attnlib
                key = None
        if fields.get("msgid") and fields.get("msgstr") and not fuzzy:
            entries[fields["msgid"]] = fields["msgstr"]
    return entries


def _unquote(text: str) -> str:
    """One quoted .po string, ``"a\\"b\\n"`` -> ``a"b`` and a line break."""
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), text.strip()[1:-1])
