"""Homework: release student notebooks and grade submissions.

    python -m coursetools.homework release notebooks/*.ipynb --out student/
    python -m coursetools.homework release notebooks/*.ipynb --out student-zh/ --lang zh_CN
    python -m coursetools.homework grade submissions/*.ipynb [--timeout 30] [--json report.json] [--jobs 2]

**release** writes a student version of each chapter: the code between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` is replaced by
``raise NotImplementedError(...)`` (the signature and docstring stay), the rest
of each gated solution (``solution-start`` ... ``solution-end``) is removed,
and outputs and execution counts are cleared. Sources are only read; an
existing output file is never overwritten. ``--lang zh_CN`` releases the Chinese
edition: the markdown comes from the book's catalogs (``coursetools.translate``),
the code is the same, so grading does not depend on the language, and a first code
cell sets ``ATTNLIB_LANG=zh_CN`` so that the checkers answer in Chinese.

**grade** runs each submission top to bottom in a fresh kernel, every cell
with a time limit and errors allowed, then grades every coding exercise of the
chapter itself: it sends the checker's cases to the kernel, calls the student's
function there, and compares the results here, in the grader's own process,
with attnlib's reference (``attnlib.check``). Whatever the notebook does to its
check cells, or to ``check`` itself, it is graded on what its functions return.
A syntax error, an exception, an endless loop or a missing function costs that
exercise only, and so does calling the answer: while the student's function runs,
a call of what the exercise asks the learner to write (attnlib's own version, or
any checker's reference) scores 0 with a message that says so
(``attnlib.check.forbidding``). The submission file is only read. The report is in
the language of ``ATTNLIB_LANG`` (``attnlib.i18n``); the points and results are not.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import re
import sys
import tempfile
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import torch

from attnlib.check import CHECKS, Check, compare
from attnlib.check._core import GUARD_SOURCE, forbidden_spec
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
    "with your code, then run the check cell below it.",
    "zh_CN": "学生版。每个练习里，把 `raise NotImplementedError(...)` 换成你自己的代码，然后运行它下面的检查单元格。",
}


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


# ------------------------------------------------------------------ grade

# Runs inside the student's kernel: call the function on the cases, save what came back.
# The student's function runs under the guard of attnlib.check.forbidding, its source and the
# exercise's spec sent along (not taken from the kernel's attnlib.check, which the notebook may
# have changed): calling the answer is recorded and costs the exercise.
_RUN_CASES = """
def __attnlib_run_cases(name, spec, cases_path, results_path, cost_path):
    import sys
    import torch
    from attnlib.model import GPTConfig
    from attnlib.rope_scaling import RopeScaling
    torch.serialization.add_safe_globals([GPTConfig, RopeScaling])  # a case may hold a config (chapters 17, 18)
    guard = {{}}
    exec({guard!r}, guard)
    codes = guard["_resolve"](spec)
    fn = globals().get(name)
    if not callable(fn):
        torch.save({{"missing": True}}, results_path)
        return
    results = []
    for args in torch.load(cases_path, weights_only=True):
        forbidden = []
        sys.setprofile(guard["_watching"](codes, forbidden, RuntimeError))
        try:
            got = fn(*args)
        except Exception as e:  # not KeyboardInterrupt: the grader's interrupt must stop the loop
            got = e
        finally:
            sys.setprofile(None)
        if forbidden:
            results.append({{"forbidden": forbidden[0]}})
            break
        if isinstance(got, Exception):
            results.append({{"error": type(got).__name__, "message": str(got)}})
            continue
        if isinstance(got, torch.Tensor):
            got = got.detach().cpu()
        elif isinstance(got, tuple):
            got = tuple(g.detach().cpu() if isinstance(g, torch.Tensor) else g for g in got)
        elif not isinstance(got, (int, float, bool, str, type(None))):
            got = {{"type": type(got).__name__}}
        results.append({{"value": got}})
    flops = None
    if cost_path is not None and results and all("value" in r for r in results):
        from torch.utils.flop_counter import FlopCounterMode
        try:
            with FlopCounterMode(display=False) as counter:
                fn(*torch.load(cost_path, weights_only=True))
            flops = counter.get_total_flops()
        except Exception:
            flops = None
    torch.save({{"missing": False, "results": results, "flops": flops}}, results_path)
__attnlib_run_cases({name!r}, {spec!r}, {cases!r}, {results!r}, {cost!r})
del __attnlib_run_cases
"""


@dataclass
class Result:
    exercise: str
    function: str
    points: int
    max_points: int
    result: str  # one of RESULTS, in every language
    message: str  # in the language of ATTNLIB_LANG


RESULTS = ("pass", "fail", "error", "timeout", "missing", "forbidden")


def _replay(recorded: list[dict]):
    """A stand-in for the student's function that returns, in order, what it returned in the kernel."""
    it = iter(recorded)

    def fn(*args):
        r = next(it)
        if "error" in r:
            exc = getattr(builtins, r["error"], None)
            if not (isinstance(exc, type) and issubclass(exc, BaseException)):
                exc = type(r["error"], (Exception,), {})
            raise exc(r["message"])
        value = r["value"]
        if isinstance(value, dict) and "type" in value:
            return type(value["type"], (), {})()  # an object of the same type name
        return value

    return fn


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def grade_one(path: Path, timeout: float = 30.0, executed: list | None = None) -> list[Result]:
    """Run one submission in a fresh kernel and grade each exercise of its chapter.

    ``executed``, when given, receives the notebook as it ran, every cell with its outputs (after
    an endless loop, the run in the last kernel): the cells that raised, for whoever needs them.
    """
    from nbclient import NotebookClient

    nb = read_notebook(path)
    checks = exercises_of(nb, path)
    results: list[Result] = []
    remaining = list(checks)
    skip: set[int] = set()  # cells that ran past the time limit and left the kernel stuck
    with tempfile.TemporaryDirectory(prefix="attnlib-grade-") as tmp:
        while remaining:  # a kernel stuck in an endless loop is replaced by a fresh one
            run = nbformat.from_dict(json.loads(json.dumps(nb)))  # a fresh copy for each kernel
            client = NotebookClient(
                run,
                timeout=timeout,
                kernel_name="python3",
                allow_errors=True,
                interrupt_on_timeout=True,
                record_timing=False,
                error_on_timeout={
                    "ename": "CellTimeoutError",
                    "traceback": [],
                    "evalue": tr("cell ran past {timeout} s").format(timeout=f"{timeout:g}"),
                },
                resources={"metadata": {"path": tmp}},  # the kernel works in a scratch folder
            )
            with client.setup_kernel(env=_kernel_env()):
                if not _run_cells(client, run, skip, timeout):
                    continue  # stuck: start again without the cell that got it stuck
                if executed is not None:  # the submission's cells only, not the grader's probes
                    executed[:] = [nbformat.from_dict(json.loads(json.dumps(run)))]
                    del executed[0].cells[len(nb.cells) :]
                while remaining:
                    results.append(_grade_exercise(client, remaining.pop(0), Path(tmp), timeout))
                    if results[-1].result == "timeout" and not _responsive(client):
                        break
    return results


def _kernel_env() -> dict:
    """The grader's environment without ``ATTNLIB_LANG``: a submission's language is its own (the
    Chinese student versions set it in their first cell), whatever the grader's shell says."""
    return {name: value for name, value in os.environ.items() if name != "ATTNLIB_LANG"}


def _run_cells(client, nb, skip: set[int], timeout: float) -> bool:
    """Run the notebook's code cells in order; False if one left the kernel stuck (it joins skip)."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index in skip:
            continue
        started = time.monotonic()
        client.execute_cell(cell, index)
        if time.monotonic() - started >= timeout and not _responsive(client):
            skip.add(index)
            return False
    return True


def _responsive(client) -> bool:
    """Whether the kernel answers a trivial cell within a few seconds (after an interrupt)."""
    cell = nbformat.v4.new_code_cell("1")
    client.nb.cells.append(cell)
    saved, client.timeout = client.timeout, 5
    try:
        started = time.monotonic()
        client.execute_cell(cell, len(client.nb.cells) - 1)
        return time.monotonic() - started < 5 and bool(cell.outputs)
    finally:
        client.timeout = saved


def _grade_exercise(client, check: Check, tmp: Path, timeout: float) -> Result:
    cases = check.cases()
    cases_path, results_path = tmp / f"{check.exercise}.cases.pt", tmp / f"{check.exercise}.results.pt"
    torch.save([args for _, args in cases], cases_path)
    cost_path = None  # a checker that also counts the answer's multiply-adds (chapter 16's forms)
    if hasattr(check, "cost_case"):
        cost_path = tmp / f"{check.exercise}.cost.pt"
        torch.save(check.cost_case(), cost_path)
    cell = nbformat.v4.new_code_cell(
        _RUN_CASES.format(
            name=check.function,
            spec=forbidden_spec(check.exercise),
            guard=GUARD_SOURCE,
            cases=str(cases_path),
            results=str(results_path),
            cost=None if cost_path is None else str(cost_path),
        )
    )
    client.nb.cells.append(cell)  # nbclient stores outputs into the notebook's cell list
    started = time.monotonic()
    client.execute_cell(cell, len(client.nb.cells) - 1)
    elapsed = time.monotonic() - started

    def result(points: int, kind: str, message: str) -> Result:
        return Result(check.exercise, check.function, points, check.points, kind, message)

    if not results_path.exists():
        if elapsed >= timeout:
            return result(
                0,
                "timeout",
                tr("{function}: did not finish within {timeout} s (an endless loop?)").format(
                    function=check.function, timeout=f"{timeout:g}"
                ),
            )
        errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
        return result(
            0,
            "error",
            tr("{function}: could not be run ({why})").format(
                function=check.function, why=errors[0] if errors else tr("no results came back")
            ),
        )
    recorded = torch.load(results_path, weights_only=True)
    if recorded["missing"]:
        return result(
            0,
            "missing",
            tr("no function named {function} was defined (did its cell raise an error?)").format(
                function=check.function
            ),
        )
    forbidden = [r["forbidden"] for r in recorded["results"] if "forbidden" in r]
    if forbidden:
        return result(0, "forbidden", tr("{name}: {problem}").format(name=check.function, problem=forbidden[0]))
    try:
        n = compare(
            check.function,
            _replay(recorded["results"]),
            cases,
            check.reference,
            check.hint,
            check.atol,
            check.rtol,
            diagnoses=check.diagnoses,
            hold_hint=False,  # the report shows the diagnosis and the hint at once
        )
        if hasattr(check, "judge_cost"):  # the right outputs, computed the way the exercise asks
            if recorded.get("flops") is None:
                raise AssertionError(
                    tr("{function}: could not be run ({why})").format(
                        function=check.function, why=tr("its multiply-adds could not be counted")
                    )
                )
            check.judge_cost(recorded["flops"], hold_hint=False)
    except AssertionError as e:
        return result(0, "fail", str(e))
    return result(check.points, "pass", tr("all {n} cases passed").format(n=n))


def report(path: Path, results: list[Result]) -> str:
    """The table printed for one submission, ending with ``score: X/Y``.

    In the language of ATTNLIB_LANG; the points, and the results in ``--json``
    (``Result.result``: one of RESULTS), are the same in every language.
    """
    rows = [(tr("exercise"), tr("points"), tr("result"), tr("message"))]
    rows += [(r.exercise, f"{r.points}/{r.max_points}", tr(r.result), _first_line(r.message)) for r in results]
    widths = [max(_width(row[i]) for row in rows) for i in range(3)]
    lines = [f"{path}"]
    for i, row in enumerate(rows):
        lines.append("  ".join(cell + " " * (w - _width(cell)) for cell, w in zip(row[:3], widths)) + "  " + row[3])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * _width(row[3]))
    score, total = sum(r.points for r in results), sum(r.max_points for r in results)
    lines.append(tr("score: {score}/{total}").format(score=score, total=total))
    return "\n".join(lines)


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


# ------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
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
    p_gr = sub.add_parser("grade", help="grade submitted notebooks")
    p_gr.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION")
    p_gr.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds each cell may run (default 30)")
    p_gr.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON")
    p_gr.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="grade N submissions at once, each in its own kernel (default 1)",
    )
    args = parser.parse_args(argv)

    try:
        if args.command == "release":
            for dest in release(args.sources, args.out, args.lang):
                print(tr("wrote {dest}").format(dest=dest))
            return 0
        if args.jobs < 1:
            raise HomeworkError(
                tr("--jobs: expected a number of submissions at once, 1 or more; got {jobs}").format(jobs=args.jobs)
            )
        for path in args.submissions:  # every file must be a chapter notebook before any runs
            exercises_of(read_notebook(path), path)
        if args.json and any(args.json.resolve() == p.resolve() for p in args.submissions):
            raise HomeworkError(tr("{path}: is a submission; the report would overwrite it").format(path=args.json))
    except HomeworkError as e:
        print(tr("error: {message}").format(message=e), file=sys.stderr)
        return 2

    reports = []
    with ThreadPoolExecutor(args.jobs) as pool:  # kernels are processes: threads only wait on them
        graded = pool.map(lambda path: grade_one(path, timeout=args.timeout), args.submissions)
        for path, results in zip(args.submissions, graded):  # reported in the order given
            print(report(path, results), flush=True)
            reports.append(
                {
                    "submission": str(path),
                    "exercises": [asdict(r) for r in results],
                    "score": sum(r.points for r in results),
                    "max_score": sum(r.max_points for r in results),
                }
            )
    if args.json:
        args.json.write_text(
            json.dumps({"submissions": reports}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
