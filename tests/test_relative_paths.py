"""Cell outputs name files relative to the repository (`attnlib/embedding.py`), never by the
absolute path of the machine that executed them: book/execute.py rewrites what it stores in the
notebooks, and book/_ext/relative_paths.py what a book build executes itself."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from relative_paths import relative_doctree, relative_output, relative_paths  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ESC = "\x1b"


# ------------------------------------------------------------------ the rewriting


def test_paths_inside_the_repository_become_relative():
    line = f"{ESC}[36mFile {ESC}[39m{ESC}[32m/work/main/attnlib/embedding.py:38{ESC}[39m, in one_hot"
    assert (
        relative_paths(line, "/work/main")
        == f"{ESC}[36mFile {ESC}[39m{ESC}[32mattnlib/embedding.py:38{ESC}[39m, in one_hot"
    )
    assert relative_paths("/work/main/a /work/main/b/c.py", "/work/main/") == "a b/c.py"  # a trailing / on root
    assert relative_paths("ran in /work/main, then", "/work/main") == "ran in ., then"  # root itself


def test_paths_outside_the_repository_are_left_alone():
    text = "/work/main2/attnlib/x.py /work/mainline /usr/lib/python3.11/os.py work/main/attnlib"
    assert relative_paths(text, "/work/main") == text
    with pytest.raises(TypeError, match="expected text as str, received list"):
        relative_paths(["/work/main/x"], "/work/main")


def test_a_symlinked_root_is_rewritten_in_both_spellings(tmp_path):
    real = tmp_path / "real"
    (real / "attnlib").mkdir(parents=True)
    link = tmp_path / "link"
    os.symlink(real, link)
    text = f"{link}/attnlib/a.py and {real.resolve()}/attnlib/b.py"
    assert relative_paths(text, link) == "attnlib/a.py and attnlib/b.py"


def test_every_text_of_an_output_is_rewritten_and_images_are_not():
    root = "/work/main"
    error = relative_output(
        {"output_type": "error", "ename": "AttnlibError", "evalue": "bad ids: /work/main/notebooks/x",
         "traceback": ["head", f"File {ESC}[32m/work/main/attnlib/_checks.py:128{ESC}[39m"]},
        root,
    )  # fmt: skip
    assert error["evalue"] == "bad ids: notebooks/x"
    assert error["traceback"] == ["head", f"File {ESC}[32mattnlib/_checks.py:128{ESC}[39m"]
    stream = relative_output({"output_type": "stream", "name": "stderr", "text": ["/work/main/a.py:1\n", "ok\n"]}, root)
    assert stream["text"] == ["a.py:1\n", "ok\n"]
    png = "iVBORw0KGgo/work/main/AAAA"  # base64 may hold the same characters: never rewritten
    shown = relative_output(
        {"output_type": "display_data", "metadata": {},
         "data": {"text/plain": "/work/main/x", "text/html": "<b>/work/main/y</b>", "image/png": png,
                  "application/json": {"path": "/work/main/z"}}},
        root,
    )  # fmt: skip
    assert shown["data"] == {"text/plain": "x", "text/html": "<b>y</b>", "image/png": png,
                             "application/json": {"path": "/work/main/z"}}  # fmt: skip


# ------------------------------------------------------------------ the Sphinx extension


def test_doctree_text_and_literal_blocks_are_rewritten():
    from docutils import nodes

    path = f"{ROOT}/attnlib/embedding.py:38"
    block = nodes.literal_block(f"File {path}, in one_hot", f"File {path}, in one_hot", language="ipythontb")
    para = nodes.paragraph("", "", nodes.Text(f"see {path}"))
    raw = nodes.raw(f"<pre>{path}</pre>", f"<pre>{path}</pre>", format="html")
    doc = nodes.container("", block, para, raw)
    assert relative_doctree(doc, [ROOT]) == 5  # two rawsources, three texts
    assert block.astext() == block.rawsource == "File attnlib/embedding.py:38, in one_hot"  # still highlighted
    assert para.astext() == "see attnlib/embedding.py:38"
    assert raw.astext() == raw.rawsource == "<pre>attnlib/embedding.py:38</pre>"
    assert relative_doctree(doc, [ROOT]) == 0  # nothing left to rewrite


@pytest.mark.slow
def test_sphinx_build_with_the_extension_writes_relative_paths(tmp_path):
    """A tiny Sphinx project with the extension: a highlighted traceback block and a paragraph
    that name a file of this repository by its absolute path come out relative, highlighted."""
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\nextensions = ['relative_paths']\n"
    )
    (src / "index.rst").write_text(
        "Title\n=====\n\n"
        f"A file: {ROOT}/attnlib/scores.py.\n\n"
        ".. code-block:: python\n\n"
        f"   open('{ROOT}/attnlib/embedding.py')  # line 38\n"
    )
    app = Sphinx(str(src), str(src), str(tmp_path / "html"), str(tmp_path / "doctrees"), "html",
                 status=None, warning=None, freshenv=True)  # fmt: skip
    app.build()
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert str(ROOT) not in html
    assert "A file: attnlib/scores.py." in html
    assert '<div class="highlight' in html and "attnlib/embedding.py" in html


# ------------------------------------------------------------------ the committed notebooks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_committed_output_names_a_machine_path(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            text = json.dumps(output, ensure_ascii=False)
            for bad in (str(ROOT), "/work/", "/home/", "/Users/"):
                assert bad not in text, (
                    f"cell {i}: an output names {bad!r}: run book/execute.py {path.relative_to(ROOT)}"
                )


@pytest.mark.slow
def test_execute_stores_a_traceback_with_relative_paths(tmp_path):
    """book/execute.py on a one-cell notebook whose cell raises inside attnlib (tagged
    raises-exception, as chapters 1 and 2's error cells): the live traceback names attnlib's file by
    its absolute path, the stored one relative to the repository."""
    import attnlib

    if not Path(attnlib.__file__).resolve().is_relative_to(ROOT):
        pytest.skip("attnlib is not imported from this repository (an installed copy)")
    sys.path.insert(0, str(ROOT / "book"))
    try:
        from execute import execute
    finally:
        sys.path.remove(str(ROOT / "book"))
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("import torch, attnlib\nattnlib.one_hot(torch.tensor([5]), 3)")
    cell.metadata["tags"] = ["raises-exception"]
    nb.cells = [cell]
    path = tmp_path / "99_error.ipynb"
    nbformat.write(nb, path)
    execute(path, timeout=120)
    (error,) = nbformat.read(path, as_version=4).cells[0].outputs
    traceback = "\n".join(error["traceback"])
    assert error["output_type"] == "error" and "attnlib/embedding.py" in traceback
    assert str(ROOT) not in traceback and str(ROOT.resolve()) not in traceback
