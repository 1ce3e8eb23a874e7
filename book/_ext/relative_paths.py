"""Repository-relative paths in the book's cell outputs: ``attnlib/embedding.py``, not
``/work/main/attnlib/embedding.py``.

A traceback names every file it passes through by its absolute path, so the intentional error
cells of chapters 1 and 2 would show the path of the machine that executed them. Two places
write such outputs, and both go through :func:`relative_paths`:

- ``book/execute.py`` rewrites the outputs it stores in the notebooks (the English edition
  shows them as stored);
- this Sphinx extension rewrites the outputs of a build that executes the notebooks itself
  (the Chinese edition always does, with ``ATTNLIB_LANG=zh_CN``; the English one when a
  notebook lacks outputs): every text node of the resolved doctree, and the literal blocks'
  source, which Sphinx highlights (tracebacks, printed text).

It is listed in ``_config.yml`` under ``sphinx: local_extensions:`` as
``relative_paths: book/_ext``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository: book/_ext/ -> book/ -> root


def _prefixes(root: Path | str) -> list[str]:
    """The spellings of ``root`` a path may start with (as given, and with symlinks resolved), longest first."""
    spellings = {os.path.abspath(root), os.path.realpath(root)}
    return sorted((s.rstrip("/") for s in spellings if s.rstrip("/")), key=len, reverse=True)


def relative_paths(text: str, root: Path | str = ROOT) -> str:
    """``text`` with every absolute path inside ``root`` written relative to ``root``.

    ``/work/main/attnlib/embedding.py:38`` becomes ``attnlib/embedding.py:38`` and ``root``
    alone becomes ``.``; ``/work/main2/x`` (a sibling that only starts with the same
    characters) and paths outside ``root`` are left as they are.

    Example:
        >>> relative_paths("File /work/main/attnlib/embedding.py:38, in one_hot", "/work/main")
        'File attnlib/embedding.py:38, in one_hot'
        >>> relative_paths("cwd /work/main, not /work/main2/x", "/work/main")
        'cwd ., not /work/main2/x'
    """
    if not isinstance(text, str):
        raise TypeError(f"relative_paths: expected text as str, received {type(text).__name__}")
    for prefix in _prefixes(root):
        if prefix in text:
            # the prefix, then "/" (a path inside root) or the end of a path (root itself)
            text = re.sub(
                re.escape(prefix) + r"(?:/|(?![\w.\-/]))", lambda m: "" if m.group().endswith("/") else ".", text
            )
    return text


_BINARY = ("image/", "application/pdf")  # base64 data: never a path


def relative_output(output: dict, root: Path | str = ROOT) -> dict:
    """One notebook output (an nbformat dict, changed in place and returned) with relative paths in
    every text it holds: a stream's text, an error's name, value and traceback, and every textual
    ``data`` of a display or a result (``text/plain``, ``text/html``, glued values)."""
    if output.get("output_type") == "stream":
        output["text"] = _relative_text(output.get("text", ""), root)
    elif output.get("output_type") == "error":
        output["ename"] = relative_paths(output.get("ename", ""), root)
        output["evalue"] = relative_paths(output.get("evalue", ""), root)
        output["traceback"] = [relative_paths(line, root) for line in output.get("traceback", [])]
    for mime, value in output.get("data", {}).items():
        if not mime.startswith(_BINARY):
            output["data"][mime] = _relative_text(value, root)
    return output


def _relative_text(value, root):
    """A notebook text field: a str, or (as stored on disk) a list of lines; JSON data is left as it is."""
    if isinstance(value, str):
        return relative_paths(value, root)
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return [relative_paths(line, root) for line in value]
    return value


# ------------------------------------------------------------------------------------- Sphinx


def relative_doctree(doctree, roots: list[Path | str]) -> int:
    """Rewrite the paths in ``roots`` in every text node of ``doctree`` and in its literal blocks'
    source (Sphinx highlights a literal block from its ``rawsource``; a block whose text and
    rawsource differ would not be highlighted). Returns how many nodes changed."""
    from docutils import nodes

    def rewrite(text: str) -> str:
        for root in roots:
            text = relative_paths(text, root)
        return text

    changed = 0
    for block in list(doctree.findall(nodes.literal_block)) + list(doctree.findall(nodes.raw)):
        if isinstance(block.rawsource, str) and any(p in block.rawsource for r in roots for p in _prefixes(r)):
            block.rawsource = rewrite(block.rawsource)
            changed += 1
    for text in list(doctree.findall(nodes.Text)):
        new = rewrite(str(text))
        if new != str(text):
            text.parent.replace(text, nodes.Text(new))
            changed += 1
    return changed


def _doctree_resolved(app, doctree, docname) -> None:
    relative_doctree(doctree, [ROOT, app.srcdir])


def setup(app):
    app.connect("doctree-resolved", _doctree_resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
