"""Reading a chapter notebook or a submission: its exercises, coded and written.

Shared by ``coursetools.homework`` (release), ``coursetools.grade`` (one submission) and
``coursetools.gradebook`` (a class). A coding exercise has a checker in ``attnlib.check.CHECKS``
under its label (``ch01-one-hot``); a **written** exercise is an ``{exercise}`` directive whose
label has no checker: its answer is prose, collected for manual marking.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from attnlib.check import CHECKS, Check
from attnlib.i18n import tr

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"

SOLUTION_START = re.compile(r"^\s*[`:]{3,}\s*\{solution-start\}\s*(\S+)", re.M)
SOLUTION_END = re.compile(r"^\s*[`:]{3,}\s*\{solution-end\}", re.M)
LABEL = re.compile(r"^\s*:label:\s*(\S+)", re.M)


class HomeworkError(Exception):
    """A file that cannot be released or graded (not a notebook, unknown chapter, ...)."""


# ------------------------------------------------------------------ reading


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read and validate a notebook; raise HomeworkError with one clear line if it is not one."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as e:
        raise HomeworkError(tr("{path}: cannot read it ({why})").format(path=path, why=e.strerror)) from None
    except UnicodeDecodeError:
        raise HomeworkError(
            tr("{path}: not a notebook (expected a .ipynb JSON file, found binary data)").format(path=path)
        ) from None
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # json errors, nbformat validation errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HomeworkError(
            tr("{path}: not a valid notebook (expected a .ipynb JSON file: {why})").format(path=path, why=first)
        ) from None
    return nb


def _chapter_of(label: str) -> str:
    return label.split("-", 1)[0]  # "ch01-one-hot" -> "ch01"


def exercises_of(nb: nbformat.NotebookNode, path: Path) -> list[Check]:
    """The graded exercises of a submission: every check of its chapter.

    The chapter comes from the file name (``01_embeddings.ipynb`` -> ch01) and
    from the exercise labels in the notebook, so deleting an exercise's cells
    does not remove it from the grade.
    """
    chapters = set()
    m = re.match(r"(\d\d)_", Path(path).name)
    if m:
        chapters.add(f"ch{m.group(1)}")
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            chapters.update(_chapter_of(lbl) for lbl in LABEL.findall(cell.source) if lbl in CHECKS)
    checks = [c for label, c in CHECKS.items() if _chapter_of(label) in chapters]
    if not checks:
        raise HomeworkError(
            tr(
                "{path}: no graded exercises found (expected a chapter notebook named "
                "NN_topic.ipynb, or exercise labels such as {label})"
            ).format(path=path, label=next(iter(CHECKS)))
        )
    return checks


EXERCISE = re.compile(r"^\s*[`:]{3,}\s*\{exercise\}", re.M)
ANSWER = "attnlib_answer"  # the metadata key of a written exercise's answer cell: its label
ANSWER_PROMPT_MARK = "**✍"  # the first line of an answer cell, the prompt, starts with it


def written_exercises(nb: nbformat.NotebookNode) -> list[str]:
    """The labels of the written exercises of a notebook, in order: ``{exercise}`` directives whose
    label has no checker."""
    return [
        label
        for cell in nb.cells
        if cell.cell_type == "markdown" and EXERCISE.search(cell.source)
        for label in LABEL.findall(cell.source)
        if label not in CHECKS
    ]


def written_answers(nb: nbformat.NotebookNode) -> dict[str, str]:
    """What a student wrote in the answer cell of each written exercise: ``{label: text}``.

    Answer cells are the markdown cells that ``release`` puts after each written exercise, marked
    with ``metadata.attnlib_answer = label``; the prompt line it writes is left out. An answer cell
    the student deleted gives no entry."""
    answers = {}
    for cell in nb.cells:
        label = cell.get("metadata", {}).get(ANSWER)
        if cell.cell_type == "markdown" and isinstance(label, str):
            text = "\n".join(line for line in cell.source.splitlines() if not line.startswith(ANSWER_PROMPT_MARK))
            answers[label] = text.strip()
    return answers
