"""The titles and labels a caller gives a figure or a view, in the reader's language.

``attnlib.plot`` (the figures) and ``attnlib.views`` (the interactive views) translate the words
they are given in the same way; both import this module, which imports neither of them.
"""

from __future__ import annotations

import re

from .i18n import language, tr


def tr_label(text):
    """A title or label passed to a plot function or a view, in the language of ATTNLIB_LANG.

    The catalog's translation of the whole text, or of the text with each number as ``{}``
    (then filled in again, in order; other braces, as in ``$\\mathrm{pos}$``, stay as they
    are); otherwise the text itself, and anything that is not a string.

    >>> import os
    >>> tr_label("length 5"), tr_label(3)
    ('length 5', 3)
    >>> os.environ["ATTNLIB_LANG"] = "zh_CN"
    >>> tr_label("length 5"), tr_label("no such label 5")
    ('长度 5', 'no such label 5')
    >>> del os.environ["ATTNLIB_LANG"]
    """
    if not isinstance(text, str) or language() == "en":
        return text
    whole = tr(text)
    if whole != text or "{}" in text:
        return whole
    numbers = re.findall(r"\d+(?:\.\d+)?", text)
    pattern = re.sub(r"\d+(?:\.\d+)?", "{}", text)  # "length 5" -> "length {}"
    translation = tr(pattern)
    parts = translation.split("{}")
    if not numbers or translation == pattern or len(parts) != len(numbers) + 1:
        return text
    return parts[0] + "".join(n + part for n, part in zip(numbers, parts[1:]))


def tr_labels(texts):
    """``tr_label`` of each text of a list; ``None`` stays ``None``."""
    return None if texts is None else [tr_label(t) for t in texts]
