"""Chinese notebooks from the English ones and the book's message catalogs.

The book's Chinese edition is built by Sphinx from gettext catalogs
(``locales/zh_CN/LC_MESSAGES/notebooks/04_masking.po``): one message per
paragraph, heading, list item, table cell or figure caption. A learner who works
in JupyterLab wants the same text in the notebook itself, so this module applies
the same catalogs to a notebook's markdown cells and figure captions and alt text. Code cells
and their outputs are copied untouched: every number is the one of the English
notebook.

A message is replaced where its English text stands as a whole block of a
markdown cell (a paragraph, a heading, a list item, a table cell, a directive's
title), with the line breaks of the cell in place of the message's spaces.
:func:`translate_notebook` reports the messages it could not place, and the
tests require that there are none. A translated notebook written to a file starts with
:func:`language_cell`, which sets ``ATTNLIB_LANG`` (``attnlib.i18n``): the checkers'
feedback and the figures' words are then in the same language as the text.

    python -m coursetools.translate notebooks/04_masking.ipynb out/04_masking.ipynb   # zh_CN
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import nbformat

from attnlib.i18n import tr

__all__ = [
    "catalog_path",
    "language_cell",
    "load_catalog",
    "translate_markdown",
    "translate_notebook",
    "translate_notebook_file",
    "with_language_cell",
]

ROOT = Path(__file__).resolve().parent.parent
LOCALES = ROOT / "locales"

# what may stand before a block's text on its first line, and after it on its last
_PREFIX = re.compile(
    r"(?:[ \t]*(?:#{1,6}[ \t]+|[-*+][ \t]+|\d+[.)][ \t]+|>[ \t]?|`{3,}\{[a-z-]+\}[ \t]+|\|[ \t]*))*[ \t]*$"
)
_SUFFIX = re.compile(r"^[ \t]*(?:\|.*)?$")


def catalog_path(docname: str, lang: str = "zh_CN") -> Path:
    """The catalog of one page: ``notebooks/04_masking`` -> ``locales/zh_CN/LC_MESSAGES/notebooks/04_masking.po``."""
    return LOCALES / lang / "LC_MESSAGES" / f"{docname}.po"


def load_catalog(docname: str, lang: str = "zh_CN") -> dict[str, str]:
    """``{English message: translation}`` for one page; untranslated and fuzzy messages are left out."""
    import polib  # the book's tooling, in requirements.txt

    path = catalog_path(docname, lang)
    if not path.exists():
        raise FileNotFoundError(
            tr("no {lang} catalog for {docname}: expected {path} (run `make catalogs`, then translate it)").format(
                lang=lang, docname=docname, path=path
            )
        )
    return {
        e.msgid: e.msgstr for e in polib.pofile(str(path)) if e.msgstr and not e.obsolete and "fuzzy" not in e.flags
    }


def _pattern(msgid: str) -> re.Pattern:
    """The message as it may stand in a cell: any run of whitespace may be a line break and indent."""
    words = [re.escape(w) for w in msgid.split()]
    return re.compile(r"[ \t]*\n?[ \t]*".join(words).replace(r"\ ", " "))


def translate_markdown(source: str, catalog: dict[str, str]) -> tuple[str, set[str]]:
    """Replace every message of ``catalog`` that stands as a whole block in ``source``.

    Returns the translated text and the set of messages that were placed. Longer
    messages go first, so a short one ("Summary") never lands inside a longer one.
    """
    placed = set()
    for msgid in sorted(catalog, key=len, reverse=True):
        if not msgid.strip():
            continue
        pattern = _pattern(msgid)
        pos, out = 0, []
        for m in pattern.finditer(source):
            line_start = source.rfind("\n", 0, m.start()) + 1
            line_end = source.find("\n", m.end())
            line_end = len(source) if line_end < 0 else line_end
            before = source[line_start : m.start()]
            in_table = before.rstrip(" \t").endswith("|")  # a table cell: | ... | text | ...
            if not ((_PREFIX.fullmatch(before) or in_table) and _SUFFIX.match(source[m.end() : line_end])):
                continue
            out += [source[pos : m.start()], catalog[msgid]]
            pos = m.end()
            placed.add(msgid)
        if out:
            source = "".join(out) + source[pos:]
    return source, placed


def translate_notebook(nb, catalog: dict[str, str]) -> tuple[object, set[str]]:
    """A translated copy of ``nb``: markdown cells and figure captions; code and outputs as they were.

    Returns ``(translated notebook, messages of the catalog that were not placed)``.
    """
    nb = copy.deepcopy(nb)
    placed: set[str] = set()
    for cell in nb.cells:
        mystnb = cell.get("metadata", {}).get("mystnb", {})
        figure, image = mystnb.get("figure", {}), mystnb.get("image", {})
        caption = " ".join(figure.get("caption", "").split())
        if caption in catalog:
            figure["caption"] = catalog[caption]
            placed.add(caption)
        if image.get("alt") in catalog:  # the figure's alt text
            placed.add(image["alt"])
            image["alt"] = catalog[image["alt"]]
        if cell.cell_type == "markdown":
            cell.source, done = translate_markdown(cell.source, catalog)
            placed |= done
    return nb, set(catalog) - placed


LANGUAGE_TAG = "course-language"  # the tag of the cell that language_cell makes


def language_cell(lang: str) -> nbformat.NotebookNode:
    """A code cell that makes attnlib speak ``lang``: its checkers' feedback and its figures' words."""
    source = (
        tr(
            "# attnlib's checker feedback and figure labels in this notebook's language "
            "(ATTNLIB_LANG, see attnlib/i18n.py)",
            lang,
        )
        + f'\nimport os\nos.environ["ATTNLIB_LANG"] = "{lang}"'
    )
    return nbformat.v4.new_code_cell(source, metadata={"tags": [LANGUAGE_TAG]})


def with_language_cell(nb, lang: str):
    """``nb`` with :func:`language_cell` as its first code cell (``nb`` is changed and returned)."""
    first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first, language_cell(lang))
    return nb


def translate_notebook_file(src: Path, dest: Path, lang: str = "zh_CN") -> set[str]:
    """Translate the chapter ``src`` (``notebooks/NN_x.ipynb``) into ``dest``; returns the unplaced messages.

    ``dest`` must not be the source notebook, and an existing file is replaced only
    when it is an earlier translation (its metadata says ``course_translation``): a
    learner's own work is never overwritten.
    """
    src, dest = Path(src), Path(dest)
    if dest.resolve() == src.resolve():
        raise ValueError(tr("dest: expected a new file, received the source notebook itself ({src})").format(src=src))
    if dest.exists():
        try:
            mark = nbformat.read(dest, as_version=4).metadata.get("course_translation", {})
        except Exception:  # not a notebook at all: certainly not ours
            mark = {}
        if mark.get("source") != src.name:
            raise FileExistsError(
                tr(
                    "{dest} exists and is not a translation made by this tool: move it away "
                    "first (it is never overwritten)"
                ).format(dest=dest)
            )
    nb = nbformat.read(src, as_version=4)
    translated, missing = translate_notebook(nb, load_catalog(f"notebooks/{src.stem}", lang))
    with_language_cell(translated, lang)
    translated.metadata["course_translation"] = {"source": src.name, "language": lang}
    translated.metadata.setdefault("language_info", {})
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(translated, dest)
    return missing


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    missing = translate_notebook_file(Path(sys.argv[1]), Path(sys.argv[2]))
    for m in sorted(missing):
        print(tr("not placed: {message}").format(message=m[:80]), file=sys.stderr)
    sys.exit(1 if missing else 0)
