"""Homework: release student notebooks, grade submissions, merge the marks of written answers.

    python -m coursetools.homework release notebooks/*.ipynb --out student/
    python -m coursetools.homework release notebooks/*.ipynb --out student-zh/ --lang zh_CN
    python -m coursetools.homework grade submissions/ [--timeout 30] [--submission-timeout 600] [--jobs 2]
        [--json gradebook.json] [--csv grades.csv] [--feedback feedback/] [--id-pattern REGEX] [--regrade]
    python -m coursetools.homework marks marked.csv --json gradebook.json [--csv grades.csv]
    python -m coursetools.homework export-nbgrader notebooks/*.ipynb --out nbgrader-course/
    python -m coursetools.homework export-otter notebooks/*.ipynb --out otter/

**release** writes a student version of each chapter: the code between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` is replaced by
``raise NotImplementedError(...)`` (the signature and docstring stay), the rest
of each gated solution (``solution-start`` ... ``solution-end``) is removed, each
written exercise gets an answer cell, and outputs and execution counts are cleared.
Sources are only read; an existing output file is never overwritten. ``--lang zh_CN``
releases the Chinese edition: the markdown comes from the book's catalogs
(``coursetools.translate``), the code is the same, so grading does not depend on the
language, and a first code cell sets ``ATTNLIB_LANG=zh_CN`` so that the checkers answer
in Chinese.

**grade** runs each submission top to bottom in a fresh kernel, every cell
with a time limit and errors allowed, then grades every coding exercise of the
chapter itself (``coursetools.grade``): it sends the checker's cases to the kernel,
calls the student's function there, and compares the results here, in the grader's
own process, with attnlib's reference (``attnlib.check``). Whatever the notebook does to
its check cells, or to ``check`` itself, it is graded on what its functions return.
A syntax error, an exception, an endless loop or a missing function costs that
exercise only, and so does calling the answer: while the student's function runs,
a call of what the exercise asks the learner to write (attnlib's own version, or
any checker's reference) scores 0 with a message that says so
(``attnlib.check.forbidding``). A bad file, a dead kernel or a submission out of time
costs that submission only, and the gradebook is written as each one finishes
(``coursetools.gradebook``: layout, student ids, CSV, feedback pages, resuming).
The submission files are only read. Messages are in each submission's language
(the Chinese student versions set it); the printed table's headings in that of
``ATTNLIB_LANG`` (``attnlib.i18n``); the points and results are the same in every language.

**marks** reads the marks of written exercises from the CSV, filled in by hand, into
the gradebook.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat

from attnlib.check import CHECKS
from attnlib.i18n import tr

from .chapters import (  # noqa: F401  re-exported: the names other code and tests use
    ANSWER,
    ANSWER_PROMPT_MARK,
    BEGIN,
    END,
    EXERCISE,
    LABEL,
    SOLUTION_END,
    SOLUTION_START,
    HomeworkError,
    exercises_of,
    read_notebook,
)
from .grade import RESULTS, Result, grade_one, report  # noqa: F401  re-exported

# ------------------------------------------------------------------ release


def _stub(source: str, label: str | None) -> str:
    """Replace each BEGIN/END SOLUTION block by a NotImplementedError at the same indentation."""
    out, skipping = [], False
    name = re.search(r"^\s*def\s+(\w+)", source, re.M)
    what = f"{name.group(1)}: " if name else ""
    for line in source.splitlines():
        if line.strip().startswith(BEGIN):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# YOUR CODE HERE{f' (exercise {label})' if label else ''}")
            out.append(f'{indent}raise NotImplementedError("{what}replace this line with your code")')
            skipping = True
        elif line.strip().startswith(END):
            if not skipping:
                raise HomeworkError(
                    tr("'{end}' without '{begin}' in:\n{source}").format(end=END, begin=BEGIN, source=source)
                )
            skipping = False
        elif not skipping:
            out.append(line)
    if skipping:
        raise HomeworkError(tr("'{begin}' without '{end}' in:\n{source}").format(end=END, begin=BEGIN, source=source))
    return "\n".join(out)


STUDENT_NOTE = {
    None: "Student version. In each exercise, replace `raise NotImplementedError(...)` "
    "with your code, then run the check cell below it. Write the answer to a written "
    "exercise in the cell marked ✍ below it.",
    "zh_CN": "学生版。每个练习里，把 `raise NotImplementedError(...)` 换成你自己的代码，然后运行它下面的检查单元格。"
    "文字练习的答案写在它下面标有 ✍ 的单元格里。",
}


def answer_cell(label: str, lang: str | None = None) -> nbformat.NotebookNode:
    """The markdown cell where a student writes the answer of written exercise ``label``; the
    grader finds it by its metadata (``coursetools.chapters.written_answers``)."""
    prompt = tr("Your answer to exercise {label} (write it below this line):", lang or "en").format(label=label)
    return nbformat.v4.new_markdown_cell(f"{ANSWER_PROMPT_MARK} {prompt}**\n\n", metadata={ANSWER: label})


def student_version(nb: nbformat.NotebookNode, lang: str | None = None) -> nbformat.NotebookNode:
    """The student notebook: solutions stubbed or removed, outputs cleared (``nb`` is not changed)."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))  # a deep copy
    cells, label = [], None  # label: the gated solution we are inside, if any
    for cell in nb.cells:
        start = SOLUTION_START.search(cell.source) if cell.cell_type == "markdown" else None
        if start:
            label = start.group(1)
            continue
        if cell.cell_type == "markdown" and SOLUTION_END.search(cell.source):
            label = None
            continue
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
            if BEGIN in cell.source:
                cell.source = _stub(cell.source, label)
            elif label is not None:
                continue  # solution code with no part for the student: removed
        elif label is not None:
            continue  # solution prose: removed
        cells.append(cell)
        if cell.cell_type == "markdown" and EXERCISE.search(cell.source):
            cells += [answer_cell(lbl, lang) for lbl in LABEL.findall(cell.source) if lbl not in CHECKS]
    if label is not None:
        raise HomeworkError(tr("solution {label} has no solution-end").format(label=label))
    note = nbformat.v4.new_markdown_cell("```{note}\n" + STUDENT_NOTE[lang] + "\n```")
    nb.cells = cells[:1] + [note] + cells[1:]
    return nb


def _translated(nb: nbformat.NotebookNode, src: Path, lang: str) -> nbformat.NotebookNode:
    """The chapter ``src`` with its markdown from the ``lang`` catalog of the book, and a first
    code cell that sets ``ATTNLIB_LANG``: the checkers answer in ``lang`` too."""
    from .translate import load_catalog, translate_notebook, with_language_cell

    try:
        catalog = load_catalog(f"notebooks/{Path(src).stem}", lang)
    except FileNotFoundError as e:
        raise HomeworkError(f"{src}: {e}") from None
    translated, missing = translate_notebook(nb, catalog)
    if missing:
        raise HomeworkError(
            tr(
                "{src}: the {lang} catalog does not match this notebook ({n} messages not "
                "found, e.g. {example}): run `make catalogs`"
            ).format(src=src, lang=lang, n=len(missing), example=repr(sorted(missing)[0][:60]))
        )
    return with_language_cell(translated, lang)


def release(sources: list[Path], out_dir: Path, lang: str | None = None) -> list[Path]:
    """Write the student version of each source into ``out_dir``; never overwrite a file.

    Every source is read and every destination checked before anything is written,
    so a bad argument leaves ``out_dir`` as it was. ``lang="zh_CN"`` writes the
    Chinese edition (markdown from the book's catalogs, the same code).
    """
    if lang not in STUDENT_NOTE:
        raise HomeworkError(
            tr("--lang: expected one of {langs} (or none for English), received {lang}").format(
                langs=sorted(k for k in STUDENT_NOTE if k), lang=repr(lang)
            )
        )
    students = {}
    for src in sources:
        dest = out_dir / Path(src).name
        if dest.resolve() == Path(src).resolve():
            raise HomeworkError(
                tr("{dest}: would overwrite the source notebook; choose another --out").format(dest=dest)
            )
        if dest.exists() or dest in students:
            raise HomeworkError(
                tr("{dest}: already exists; it is not overwritten (remove it, or choose another --out)").format(
                    dest=dest
                )
            )
        nb = read_notebook(src)
        if lang:
            nb = _translated(nb, src, lang)
        students[dest] = nbformat.writes(student_version(nb, lang))
    out_dir.mkdir(parents=True, exist_ok=True)
    for dest, text in students.items():
        with open(dest, "x", encoding="utf-8") as f:  # "x": fail rather than overwrite
            f.write(text)
    return list(students)


# ------------------------------------------------------------------ command line


EXPORTS = ("export-nbgrader", "export-otter")  # coursetools/exports.py: the course in nbgrader and Otter


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in EXPORTS:
        from .exports import main as export_main

        return export_main(argv)
    parser = argparse.ArgumentParser(prog="python -m coursetools.homework", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_rel = sub.add_parser("release", help="write student versions of chapter notebooks")
    p_rel.add_argument("sources", nargs="+", type=Path, metavar="SRC")
    p_rel.add_argument("--out", required=True, type=Path, metavar="DIR")
    p_rel.add_argument(
        "--lang",
        default=None,
        metavar="LANG",
        help="zh_CN: the Chinese edition (markdown from locales/); default English",
    )
    p_gr = sub.add_parser("grade", help="grade submitted notebooks (files, or folders of them)")
    p_gr.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION")
    p_gr.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds each cell may run (default 30)")
    p_gr.add_argument(
        "--submission-timeout", type=float, default=None, metavar="S", help="seconds each submission may take in all"
    )
    p_gr.add_argument("--json", type=Path, metavar="FILE", help="the gradebook: written as each submission finishes")
    p_gr.add_argument("--csv", type=Path, metavar="FILE", help="one row per student, for an LMS")
    p_gr.add_argument("--feedback", type=Path, metavar="DIR", help="one HTML page per student")
    p_gr.add_argument(
        "--id-pattern",
        default=None,
        metavar="REGEX",
        help="finds the student id in a path: its group (?P<student>...); default: the notebook's folder",
    )
    p_gr.add_argument("--regrade", action="store_true", help="grade again what the gradebook already has")
    p_gr.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="grade N submissions at once, each in its own kernel (default 1; the number of cores is a good choice)",
    )
    p_mk = sub.add_parser("marks", help="merge the marks of written exercises from a CSV into the gradebook")
    p_mk.add_argument("marks", type=Path, metavar="MARKED_CSV")
    p_mk.add_argument("--json", type=Path, required=True, metavar="FILE", help="the gradebook")
    p_mk.add_argument("--csv", type=Path, metavar="FILE", help="then write the CSV again, with the totals")
    args = parser.parse_args(argv)

    from . import gradebook

    try:
        if args.command == "release":
            for dest in release(args.sources, args.out, args.lang):
                print(tr("wrote {dest}").format(dest=dest))
            return 0
        if args.command == "marks":
            if args.csv is not None and args.csv.resolve() == args.marks.resolve():
                raise HomeworkError(tr("{path}: is the marked CSV; choose another --csv").format(path=args.csv))
            n = gradebook.merge_marks(args.marks, args.json)
            print(tr("merged {n} marks into {path}").format(n=n, path=args.json))
            if args.csv is not None:
                book = gradebook.load_gradebook(args.json)
                book["csv_sha256"] = gradebook.write_csv(args.csv, book)
                gradebook.save_gradebook(args.json, book)
                print(tr("wrote {dest}").format(dest=args.csv))
            return 0
        if args.jobs < 1:
            raise HomeworkError(
                tr("--jobs: expected a number of submissions at once, 1 or more; got {jobs}").format(jobs=args.jobs)
            )
        submissions = gradebook.find_submissions(args.submissions)
        for out in (args.json, args.csv):
            if out is not None and any(out.resolve() == p.resolve() for p in submissions):
                raise HomeworkError(tr("{path}: is a submission; the report would overwrite it").format(path=out))
        book = gradebook.grade_class(
            args.submissions,
            timeout=args.timeout,
            submission_timeout=args.submission_timeout,
            jobs=args.jobs,
            json_path=args.json,
            csv_path=args.csv,
            feedback_dir=args.feedback,
            id_pattern=args.id_pattern or gradebook.DEFAULT_ID,
            regrade=args.regrade,
            echo=lambda text: print(text, flush=True),
        )
    except HomeworkError as e:
        print(tr("error: {message}").format(message=e), file=sys.stderr)
        return 2
    not_graded = [r["submission"] for r in book["submissions"] if r["status"] != "graded"]
    if not_graded:
        print(tr("{n} submissions could not be graded: {paths}").format(n=len(not_graded), paths=", ".join(not_graded)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
