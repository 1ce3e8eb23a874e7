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
messages it looks up as ``tr("...")``; the checkers' hints, the labels that notebooks
pass to ``attnlib.plot`` and the words of the figures they hand to ``plot.localize`` are
looked up as they are.

The label of a checker's case ("case: a batch (B, T) = (2, 3) [5 of 10]") is looked up by
``tr_case`` among the entries with ``msgctxt "case"``: whole, or, for a label the checker
formats from random values, as a template whose ``{placeholders}`` stand for those values
(``"random, B={B}, T={T}"`` translates ``"random, B=2, T=4"``).

A program that writes for several readers at once (the grader, one student in English and
the next in Chinese, each in a thread of its own) sets the language of the current thread
with ``with speaking("zh_CN"): ...``; inside, it takes the place of ``ATTNLIB_LANG``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
from pathlib import Path

from ._validate import fail

LANGUAGES = ("en", "zh_CN")
LOCALES = Path(__file__).resolve().parent / "locales"
CASE = "case"  # the msgctxt of the checkers' case labels


_SPEAKING: contextvars.ContextVar[str | None] = contextvars.ContextVar("attnlib_speaking", default=None)


def language() -> str:
    """The language asked for: ``speaking``'s inside its block, else ``ATTNLIB_LANG``'s:
    ``"en"`` (unset or empty) or ``"zh_CN"``."""
    if _SPEAKING.get() is not None:
        return _SPEAKING.get()
    lang = os.environ.get("ATTNLIB_LANG", "").strip() or "en"
    if lang not in LANGUAGES:
        raise fail("ATTNLIB_LANG", f"one of {', '.join(LANGUAGES)} (or unset: English)", repr(lang))
    return lang


@contextlib.contextmanager
def speaking(lang: str):
    """Messages in ``lang`` inside the block, in this thread (and its context) only.

    >>> with speaking("zh_CN"):
    ...     tr("score: {score}/{total}")
    '总分：{score}/{total}'
    """
    if lang not in LANGUAGES:
        raise fail("lang", f"one of {', '.join(LANGUAGES)}", repr(lang))
    token = _SPEAKING.set(lang)
    try:
        yield
    finally:
        _SPEAKING.reset(token)


def tr(message: str, lang: str | None = None) -> str:
    """``message`` in ``lang`` (default: ``ATTNLIB_LANG``): its translation, or itself.

    >>> tr("wrong shape", lang="en")
    'wrong shape'
    """
    lang = lang or language()
    return message if lang == "en" else catalog(lang).get(message, message)


def tr_case(label: str, lang: str | None = None) -> str:
    """The label of a checker's case in ``lang`` (default: ``ATTNLIB_LANG``), from the entries
    with ``msgctxt "case"``: the translation of the whole label, or of the template that
    matches it, each ``{placeholder}`` filled with the text it stands for in the label (the
    template with the most text of its own, when several match); otherwise the label itself.

    >>> tr_case("random, B=2, T=4", lang="en")
    'random, B=2, T=4'
    >>> tr_case("random, B=2, T=4", lang="zh_CN")                # the template "random, B={B}, T={T}"
    '随机输入，B=2，T=4'
    """
    lang = lang or language()
    if lang == "en":
        return label
    entries = catalog(lang, CASE)
    if label in entries:
        return entries[label]
    for template, pattern in _templates(lang):
        found = pattern.fullmatch(label)
        if found:
            return re.sub(r"\{(\w+)\}", lambda m: found.group(m.group(1)), entries[template])
    return label


@functools.cache
def _templates(lang: str) -> list[tuple[str, re.Pattern]]:
    """The case labels with ``{placeholders}`` as regular expressions, the most literal text first."""
    templates = []
    for msgid in catalog(lang, CASE):
        parts = re.split(r"\{(\w+)\}", msgid)  # literal, name, literal, name, ..., literal
        if len(parts) == 1:
            continue
        regex, names = "", set()
        for i, part in enumerate(parts):
            if i % 2 == 0:
                regex += re.escape(part)
            else:
                regex += f"(?P={part})" if part in names else f"(?P<{part}>.+?)"
                names.add(part)
        templates.append((sum(len(p) for p in parts[::2]), msgid, re.compile(regex, re.S)))
    return [(msgid, pattern) for _, msgid, pattern in sorted(templates, key=lambda t: -t[0])]


def catalog(lang: str, context: str | None = None) -> dict[str, str]:
    """``{msgid: msgstr}`` of the ``lang`` catalog's entries with ``msgctxt context`` (default:
    those without one); empty, fuzzy and obsolete entries left out."""
    return _catalog(lang).get(context, {})


@functools.cache
def _catalog(lang: str) -> dict[str | None, dict[str, str]]:
    """``{msgctxt: {msgid: msgstr}}`` of the ``lang`` catalog (``None``: no msgctxt).

    A small reader of the .po format (attnlib needs no gettext tooling at run time):
    an entry is an optional ``msgctxt "..."``, ``msgid "..."`` then ``msgstr "..."``, each
    string possibly continued on the lines below it, with C escapes (``\\n``, ``\\"``, ``\\\\``).
    """
    path = LOCALES / lang / "LC_MESSAGES" / "attnlib.po"
    entries: dict[str | None, dict[str, str]] = {}
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        fields, key, fuzzy = {}, None, False
        for line in block.splitlines():
            if line.startswith("#,") and "fuzzy" in line:
                fuzzy = True
            elif line.startswith(("msgctxt ", "msgid ", "msgstr ")):
                key, _, line = line.partition(" ")
                fields[key] = _unquote(line)
            elif line.startswith('"') and key:
                fields[key] += _unquote(line)
            elif not line.startswith("#"):  # plurals: not used by attnlib
                key = None
        if fields.get("msgid") and fields.get("msgstr") and not fuzzy:
            entries.setdefault(fields.get("msgctxt"), {})[fields["msgid"]] = fields["msgstr"]
    return entries


def _unquote(text: str) -> str:
    """One quoted .po string, ``"a\\"b\\n"`` -> ``a"b`` and a line break."""
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), text.strip()[1:-1])
