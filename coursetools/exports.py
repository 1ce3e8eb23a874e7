"""The course in the tools instructors already run: an nbgrader course and Otter-Grader master notebooks.

    python -m coursetools.homework export-nbgrader notebooks/*.ipynb --out nbgrader-course/ [--lang zh_CN]
    python -m coursetools.homework export-otter notebooks/*.ipynb --out otter/ [--lang zh_CN]

Both read the chapters as ``release`` does (``coursetools.chapters``) and write new notebooks; the
sources are only read and an existing file is never overwritten. The grading engine stays the
course's checkers: each coding exercise is graded by ``attnlib.check.CHECKS[label]``, called from a
**hardened** test that takes every ``attnlib`` module out of ``sys.modules`` and imports the
checker afresh from its files, so a notebook that monkeypatches ``attnlib.check`` (to make every
check pass) does not change its grade. The student's own ``attnlib`` modules are put back after
the test, so the cells after it run as before.

**export-nbgrader** writes an nbgrader course directory: ``nbgrader_config.py`` (``Execute.timeout
= 30``, as the course's grader; ``add_missing_cells`` left at its default, False, since with True
nbgrader fails on a submission that deleted an exercise) and ``source/chNN/NN_topic.ipynb``. In
each chapter the solution cell is an nbgrader solution cell (its ``### BEGIN SOLUTION`` block
becomes nbgrader's stub), the ``check.fn(fn)`` cell is a locked autograder test cell worth the
checker's ``points``, each written exercise gets a manually graded answer cell holding the model
answer (the student sees "YOUR ANSWER HERE"), and every other cell is read-only. nbgrader cannot
delete a cell, so the gated solutions' prose and extra code are left out here.

**export-otter** writes ``chNN/NN_topic.ipynb``, an Otter Assign master notebook (format v1:
``# ASSIGNMENT CONFIG``, then per exercise a question block with its solution and an
exception-based test; written exercises are ``manual`` questions), and ``chNN/requirements.txt``,
the grading environment pinned as the repository's ``requirements.txt`` pins it. Exception-based
tests, not Otter's OK format: OK tests compare printed text, and a Chinese kernel prints Chinese.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from attnlib.check import CHECKS
from attnlib.i18n import tr

from .chapters import BEGIN, END, EXERCISE, LABEL, SOLUTION_END, SOLUTION_START, HomeworkError, read_notebook
from .homework import STUDENT_NOTE, _translated, answer_cell

ROOT = Path(__file__).resolve().parent.parent  # the repository, when run from a checkout
CHECK_CALL = re.compile(r"check\.(\w+)\((\w+)\)")  # the cell that checks an exercise: check.fn(fn)
START_FENCE = re.compile(  # the opening of a gated solution: its fence, options and closing fence
    r"^[ \t]*([`:]{3,})[ \t]*\{solution-start\}[^\n]*\n(?:[ \t]*:[\w-]+:[^\n]*\n)*[ \t]*\1[ \t]*(?:\n|$)", re.M
)
END_FENCE = re.compile(r"^[ \t]*([`:]{3,})[ \t]*\{solution-end\}[^\n]*\n?[ \t]*\1[ \t]*$", re.M)

# ------------------------------------------------------------------ the hardened test


def _fresh_check(label: str, function: str, indent: str = "") -> str:
    """Code that calls ``CHECKS[label](function)`` from an ``attnlib.check`` imported afresh.

    A notebook's own ``attnlib`` modules (patched or not) are set aside first and put back after,
    so that the cells after the test see the modules they had."""
    lines = [
        "import sys",
        "",
        "# attnlib imported afresh from its files: a notebook that patched attnlib.check cannot pass",
        '_own = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] == "attnlib"}',
        "try:",
        "    from attnlib.check import CHECKS as _CHECKS",
        "",
        f"    _CHECKS[{json.dumps(label)}]({function})",
        "finally:",
        "    sys.modules.update(_own)  # the notebook's own modules again, for the cells that follow",
        "    del _own",
    ]
    return "\n".join(indent + line if line else "" for line in lines)


def nbgrader_test(label: str) -> str:
    """The source of the autograder test cell of coding exercise ``label`` (a cell of its own)."""
    check = CHECKS[label]
    head = f"# Autograder test of exercise {label}, worth {check.points}: the course's checker\n"
    return head + _fresh_check(label, check.function)


def otter_test(label: str) -> str:
    """The exception-based Otter test of coding exercise ``label``: one function, which Otter calls
    with the student's function (the argument of that name in the notebook's namespace)."""
    fn = CHECKS[label].function
    doc = f'    """Exercise {label}: the course\'s checker, imported afresh."""\n'
    return f"def test_{fn}({fn}):\n{doc}{_fresh_check(label, fn, '    ')}"


# ------------------------------------------------------------------ reading a chapter


def _model_answer(cells: list) -> str:
    """The model answer of a written exercise: the prose of its gated solutions without their
    fences, and their code as fenced blocks (shown, not run)."""
    pieces = []
    for cell in cells:
        if cell.cell_type == "markdown":
            text = END_FENCE.sub("", START_FENCE.sub("", cell.source))
        else:
            text = f"```python\n{cell.source.strip()}\n```"
        if text.strip():
            pieces.append(text.strip())
    return "\n\n".join(pieces)


def chapter_parts(nb: nbformat.NotebookNode, src: Path) -> tuple[list[tuple[str, str | None, object]], dict]:
    """The chapter as the exports see it: ``(parts, model answers)``.

    Each part is ``(kind, label, cell)``, in order: ``cell`` (kept as is), ``exercise`` (an
    ``{exercise}`` cell, label: its first label), ``solution`` (the code cell of a coding
    exercise's ``### BEGIN SOLUTION``), ``check`` (its ``check.fn(fn)`` cell). The gated prose and
    extra code of coding exercises are left out; those of written exercises become the model
    answers, ``{label: markdown}``.
    """
    labels = {c.function: label for label, c in CHECKS.items() if label.startswith(_chapter(src) + "-")}
    parts, gated, label = [], {}, None
    for cell in nb.cells:
        start = SOLUTION_START.search(cell.source) if cell.cell_type == "markdown" else None
        if start or label is not None:
            label = start.group(1) if start else label
            if cell.cell_type == "code" and BEGIN in cell.source:
                parts.append(("solution", label, cell))
            elif label not in CHECKS:  # a written exercise: its model answer
                gated.setdefault(label, []).append(cell)
            if cell.cell_type == "markdown" and SOLUTION_END.search(cell.source):
                label = None
            continue
        call = CHECK_CALL.fullmatch(cell.source.strip()) if cell.cell_type == "code" else None
        if call and call.group(1) == call.group(2) and call.group(1) in labels:
            parts.append(("check", labels[call.group(1)], cell))
        elif cell.cell_type == "markdown" and EXERCISE.search(cell.source) and LABEL.search(cell.source):
            parts.append(("exercise", LABEL.search(cell.source).group(1), cell))
        else:
            parts.append(("cell", None, cell))
    if label is not None:
        raise HomeworkError(tr("solution {label} has no solution-end").format(label=label))
    missing = sorted(set(labels.values()) - {lbl for kind, lbl, _ in parts if kind == "check"})
    if missing:
        raise HomeworkError(
            tr("{src}: expected a cell `check.{function}({function})` for exercise {label}, found none").format(
                src=src, function=CHECKS[missing[0]].function, label=missing[0]
            )
        )
    return parts, {lbl: _model_answer(cells) for lbl, cells in gated.items()}


def _chapter(src: Path) -> str:
    """``notebooks/05_softmax_values.ipynb`` -> ``ch05``."""
    m = re.match(r"(\d\d)_\w+\.ipynb$", Path(src).name)
    if not m:
        raise HomeworkError(
            tr("{path}: expected a chapter notebook named NN_topic.ipynb (such as 05_softmax_values.ipynb)").format(
                path=src
            )
        )
    return f"ch{m.group(1)}"


def _plain(cell) -> nbformat.NotebookNode:
    """A copy of ``cell`` without outputs, execution count or execution metadata."""
    cell = nbformat.from_dict(json.loads(json.dumps(cell)))
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
    return cell


# ------------------------------------------------------------------ nbgrader


def _nbgrader(cell, grade_id: str, *, solution=False, grade=False, locked=False, points=None):
    """``cell`` with nbgrader's metadata (schema 3)."""
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution}
    if grade:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta
    return cell


def to_nbgrader(nb: nbformat.NotebookNode, src: Path, lang: str | None = None) -> nbformat.NotebookNode:
    """The nbgrader source notebook of a chapter (``nb`` is not changed)."""
    parts, models = chapter_parts(nb, src)
    chapter, cells = _chapter(src), []
    for kind, label, cell in parts:
        cell = _plain(cell)
        if kind == "solution":
            cells.append(_nbgrader(cell, f"{label}-solution", solution=True))
        elif kind == "check":
            test = nbformat.v4.new_code_cell(nbgrader_test(label))
            cells.append(_nbgrader(test, label, grade=True, locked=True, points=CHECKS[label].points))
        else:
            cells.append(_nbgrader(cell, f"{chapter}-cell-{len(cells):03d}", locked=True))  # read-only
        if kind == "exercise" and label not in CHECKS:
            # the course's answer cell (its grader reads it too), with the model answer as nbgrader's solution
            answer = answer_cell(label, lang)
            answer.source += f"{BEGIN}\n{models.get(label, '')}\n{END}"
            cells.append(_nbgrader(answer, label, grade=True, solution=True, points=1))
    out = nbformat.from_dict(json.loads(json.dumps(nb)))
    out.cells = cells
    return out


NBGRADER_CONFIG = '''"""nbgrader's settings for the course (written by python -m coursetools.homework export-nbgrader)."""

c = get_config()  # noqa: F821  (nbgrader provides it)

# seconds each cell may run, as the course's grader (--timeout 30): an endless loop costs that cell
c.Execute.timeout = 30
# c.CourseDirectory.add_missing_cells is left at its default, False: with True, a submission whose
# student deleted an exercise's cells fails to grade (KeyError) instead of scoring 0 on that exercise
'''

# ------------------------------------------------------------------ Otter-Grader


PLAIN = re.compile(r"[a-z][\w.-]*")  # a string YAML reads as itself, unquoted


def _yaml(config: dict, indent: str = "") -> str:
    """``config`` (nested dicts of names, numbers, booleans and strings) as YAML, which Otter reads:
    a plain writer, so that the tools need no YAML library."""
    lines = []
    for key, value in config.items():
        if isinstance(value, dict):
            lines += [f"{indent}{key}:", _yaml(value, indent + "  ")]
        else:
            plain = isinstance(value, str) and PLAIN.fullmatch(value)
            lines.append(f"{indent}{key}: {value if plain else json.dumps(value)}")  # JSON's scalars are YAML's
    return "\n".join(lines)


def _raw(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_raw_cell(text)


def _otter_solution(source: str, function: str) -> str:
    """The course's solution block in Otter's markers: ``# BEGIN SOLUTION NO PROMPT`` (one ``#``:
    Otter's pattern does not match ``### BEGIN SOLUTION``), and a prompt that raises
    NotImplementedError in the student's version (Otter's default prompt, ``...``, returns None)."""
    out = []
    for line in source.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        if line.strip().startswith(BEGIN):
            out.append(f"{indent}# BEGIN SOLUTION NO PROMPT")
        elif line.strip().startswith(END):
            out += [
                f"{indent}# END SOLUTION",
                f'{indent}""" # BEGIN PROMPT',
                f"{indent}# YOUR CODE HERE",
                f'{indent}raise NotImplementedError("{function}: replace this line with your code")',
                f'{indent}""" # END PROMPT',
            ]
        else:
            out.append(line)
    return "\n".join(out)


def _question(label: str, points: int, manual: bool = False) -> nbformat.NotebookNode:
    config = {"name": label, "points": points} | ({"manual": True} if manual else {})
    return _raw("# BEGIN QUESTION\n" + _yaml(config))


def to_otter(nb: nbformat.NotebookNode, src: Path, lang: str | None = None) -> nbformat.NotebookNode:
    """The Otter Assign master notebook of a chapter (``nb`` is not changed)."""
    parts, models = chapter_parts(nb, src)
    config = {
        "name": _chapter(src),
        "requirements": "requirements.txt",
        "python_version": "3.11",
        "init_cell": True,
        "check_all_cell": False,
        "export_cell": {"pdf": False, "run_tests": False},  # no PDF: nothing to install for LaTeX or a browser
        "generate": {"pdf": False, "show_stdout": True},  # the checker's message reaches the student
        "tests": {"files": False, "ok_format": False},  # exception-based tests, in the notebook's metadata
        "run_tests": True,  # otter assign runs the tests against the solutions
    }
    cells, open_question = [_raw("# ASSIGNMENT CONFIG\n" + _yaml(config))], None
    for kind, label, cell in parts:
        cell = _plain(cell)
        if kind == "exercise" and label in CHECKS:
            if open_question is not None:
                raise HomeworkError(
                    tr("{src}: exercise {label} starts before the check of exercise {other}").format(
                        src=src, label=label, other=open_question
                    )
                )
            cells += [_question(label, CHECKS[label].points), cell]
            open_question = label
        elif kind == "exercise":  # a written exercise: a manually graded question with its model answer
            answer = nbformat.v4.new_markdown_cell(models.get(label, ""))
            cells += [_question(label, 1, manual=True), cell, _raw("# BEGIN SOLUTION"), answer]
            cells += [_raw("# END SOLUTION"), _raw("# END QUESTION")]
        elif kind == "solution":
            cell.source = _otter_solution(cell.source, CHECKS[label].function)
            cells += [_raw("# BEGIN SOLUTION"), cell, _raw("# END SOLUTION")]
        elif kind == "check":
            test = nbformat.v4.new_code_cell(otter_test(label))
            cells += [_raw("# BEGIN TESTS"), test, _raw("# END TESTS"), _raw("# END QUESTION")]
            open_question = None
        else:
            cells.append(cell)
    out = nbformat.from_dict(json.loads(json.dumps(nb)))
    out.cells = cells
    return out


GRADING_PACKAGES = ("torch", "numpy", "matplotlib", "tqdm")  # attnlib's dependencies, pinned as the course pins them
PART_III_PACKAGES = ("transformers", "gguf", "accelerate")  # what a chapter that imports transformers needs too


def otter_requirements(nb: nbformat.NotebookNode) -> str:
    """The grading environment's requirements.txt: PyTorch's CPU build, attnlib's dependencies at
    the course's pins (the repository's requirements.txt, else the versions installed here),
    myst-nb (the chapters' ``glue``) and attnlib from the course's repository, at this commit."""
    pins = {}
    course = ROOT / "requirements.txt"
    if course.exists():
        pins = dict(re.findall(r"^([\w.-]+)==(\S+)", course.read_text(encoding="utf-8"), re.M))
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    part_iii = re.search(r"^\s*(?:import|from)\s+transformers\b", code, re.M)
    names = GRADING_PACKAGES + (PART_III_PACKAGES if part_iii else ()) + ("myst-nb",)
    lines = [
        "# The grading environment of the course's chapters (python -m coursetools.homework export-otter).",
        "# PyTorch's CPU build: the public index's torch is the CUDA build, several GB.",
        "--extra-index-url https://download.pytorch.org/whl/cpu",
    ]
    for name in names:
        version = pins.get(name) or importlib.metadata.version(name).split("+")[0]
        lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n" + f"attnlib @ {_attnlib_source()}\n"


def _attnlib_source() -> str:
    """``git+<the course's repository>@<this commit>``: the checkers that grade are the exported ones."""
    config = ROOT / "_config.yml"
    url = "https://github.com/attention-course/self-attention-course"
    if config.exists():
        found = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", config.read_text(encoding="utf-8"), re.M)
        url = found.group(1) if found else url
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"git+{url}"
    return f"git+{url}@{commit}"


# ------------------------------------------------------------------ writing


def export(tool: str, sources: list[Path], out_dir: Path, lang: str | None = None) -> list[Path]:
    """Write the ``tool`` export ("nbgrader" or "otter") of each source into ``out_dir``; return the
    files written. Every source is read and every destination checked before anything is
    written, and no file is overwritten (an existing ``nbgrader_config.py`` is kept as it is)."""
    if lang not in STUDENT_NOTE:
        raise HomeworkError(
            tr("--lang: expected one of {langs} (or none for English), received {lang}").format(
                langs=sorted(k for k in STUDENT_NOTE if k), lang=repr(lang)
            )
        )
    files: dict[Path, str] = {}
    chapters: dict[str, Path] = {}
    for src in sources:
        chapter = _chapter(src)
        if chapter in chapters:
            raise HomeworkError(
                tr("{src} and {other}: both are chapter {chapter}; give one notebook per chapter").format(
                    src=src, other=chapters[chapter], chapter=chapter
                )
            )
        chapters[chapter] = src
        nb = read_notebook(src)
        if lang:
            nb = _translated(nb, src, lang)
        if tool == "nbgrader":
            files[out_dir / "source" / chapter / Path(src).name] = nbformat.writes(to_nbgrader(nb, src, lang))
        else:
            files[out_dir / chapter / Path(src).name] = nbformat.writes(to_otter(nb, src, lang))
            files[out_dir / chapter / "requirements.txt"] = otter_requirements(nb)
    for dest in files:
        if any(dest.resolve() == Path(src).resolve() for src in sources):
            raise HomeworkError(
                tr("{dest}: would overwrite the source notebook; choose another --out").format(dest=dest)
            )
        if dest.exists():
            raise HomeworkError(
                tr("{dest}: already exists; it is not overwritten (remove it, or choose another --out)").format(
                    dest=dest
                )
            )
    if tool == "nbgrader" and not (out_dir / "nbgrader_config.py").exists():
        files = {out_dir / "nbgrader_config.py": NBGRADER_CONFIG, **files}
    for dest, text in files.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "x", encoding="utf-8") as f:  # "x": fail rather than overwrite
            f.write(text)
    return list(files)


def main(argv: list[str]) -> int:
    """``python -m coursetools.homework export-nbgrader|export-otter SRC... --out DIR [--lang zh_CN]``:
    0 when written, 2 (with a message on stderr) when an argument or a source is wrong."""
    command, tool = argv[0], argv[0].removeprefix("export-")
    where = {"nbgrader": "an nbgrader course directory (source/chNN/)", "otter": "Otter-Grader master notebooks"}
    parser = argparse.ArgumentParser(
        prog=f"python -m coursetools.homework {command}", description=f"write {where[tool]}"
    )
    parser.add_argument("sources", nargs="+", type=Path, metavar="SRC", help="chapter notebooks, NN_topic.ipynb")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR")
    parser.add_argument("--lang", default=None, metavar="LANG", help="zh_CN: the Chinese edition; default English")
    args = parser.parse_args(argv[1:])  # a wrong argument: argparse's message, and exit status 2
    config = args.out / "nbgrader_config.py"
    kept = tool == "nbgrader" and config.exists()
    try:
        written = export(tool, args.sources, args.out, args.lang)
    except HomeworkError as e:
        print(tr("error: {message}").format(message=e), file=sys.stderr)
        return 2
    if kept:
        print(tr("{path}: already exists; kept as it is").format(path=config))
    for dest in written:
        print(tr("wrote {dest}").format(dest=dest))
    return 0
