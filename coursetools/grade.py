"""Grading one submission: run it in a fresh kernel, then grade each exercise of its chapter.

The checker's cases are sent to the kernel, the student's function is called there on each,
and what came back is compared here, in the grader's own process, with attnlib's reference
(``attnlib.check``): whatever the notebook does to its check cells, or to ``check`` itself, it is
graded on what its functions return.

What a submission can do costs that submission only:

- a cell that raises, or a missing function, costs the exercises that need it;
- a cell that runs past ``timeout`` seconds (an endless loop) is interrupted; if the kernel
  is stuck, the notebook is run again in a new kernel without that cell;
- a cell that kills the kernel (a crash, or the memory running out) is skipped the same way,
  and said in ``notes``; a function that kills it while graded costs that exercise;
- with ``submission_timeout``, the whole submission has that many seconds; the exercises
  not graded by then score 0 as ``timeout``.

The kernel imports the grader's own attnlib (``_kernel_env`` puts it first on ``PYTHONPATH``),
whatever else the machine has installed.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import math
import os
import tempfile
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import nbformat
import torch
from traitlets.config import Config

import attnlib
from attnlib.check import Check, compare
from attnlib.check._core import GUARD_SOURCE, forbidden_spec
from attnlib.i18n import speaking, tr

from .chapters import exercises_of, read_notebook

ATTNLIB_ROOT = Path(attnlib.__file__).resolve().parent.parent  # the folder that holds attnlib/

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
    torch.serialization.add_safe_globals([GPTConfig, RopeScaling])  # a case may hold a config (chapters 18, 19)
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
    points: float  # max_points, 0, or in between where the checker gives partial credit
    max_points: int
    result: str  # one of RESULTS, in every language
    message: str  # in the language of ATTNLIB_LANG (or of the submission, see grade_one's lang)


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


def grade_one(
    path: Path,
    timeout: float = 30.0,
    executed: list | None = None,
    submission_timeout: float | None = None,
    notes: list | None = None,
    lang: str | None = None,
) -> list[Result]:
    """Run one submission in a fresh kernel and grade each exercise of its chapter.

    Args:
        path: the submitted notebook (only read).
        timeout: seconds each cell, and each exercise's grading, may run.
        executed: when given, receives the notebook as it ran, every cell with its outputs
            (after a restart, the run in the last kernel).
        submission_timeout: seconds the whole submission may take (None: no limit).
        notes: when given, receives one line per thing that happened to the run as a whole
            (a cell skipped because it killed the kernel or got it stuck, the time limit).
        lang: the language of the messages (``"en"``, ``"zh_CN"``; None: ``ATTNLIB_LANG``).

    Returns:
        One ``Result`` per exercise of the chapter, in the checkers' order.
    """
    with speaking(lang) if lang else contextlib.nullcontext():
        return _grade(path, timeout, executed, submission_timeout, [] if notes is None else notes)


def _grade(path, timeout, executed, submission_timeout, notes) -> list[Result]:
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = read_notebook(path)
    checks = exercises_of(nb, path)
    deadline = None if submission_timeout is None else time.monotonic() + submission_timeout
    results: list[Result] = []
    remaining = list(checks)
    skip: set[int] = set()  # cells that got the kernel stuck or killed it
    with tempfile.TemporaryDirectory(prefix="attnlib-grade-") as tmp:
        while remaining and not _past(deadline):  # a stuck or dead kernel is replaced by a fresh one
            run = nbformat.from_dict(json.loads(json.dumps(nb)))  # a fresh copy for each kernel
            client = NotebookClient(
                run,
                timeout=_left(timeout, None),
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
                config=_kernel_config(Path(tmp)),
            )
            try:
                with client.setup_kernel(env=_kernel_env()):
                    if not _run_cells(client, run, skip, timeout, deadline, notes):
                        continue  # stuck or dead: start again without the cell that did it
                    if executed is not None:  # the submission's cells only, not the grader's probes
                        executed[:] = [nbformat.from_dict(json.loads(json.dumps(run)))]
                        del executed[0].cells[len(nb.cells) :]
                    while remaining and not _past(deadline):
                        check = remaining.pop(0)
                        try:
                            results.append(_grade_exercise(client, check, Path(tmp), _left(timeout, deadline)))
                        except DeadKernelError:
                            results.append(_dead(check))
                            break  # a new kernel for the other exercises
                        if results[-1].result == "timeout" and not _responsive(client):
                            break
            except DeadKernelError:  # the kernel died between two cells, or while shutting down
                continue
    if remaining:
        notes.append(tr("the submission ran past its time limit of {limit} s").format(limit=f"{submission_timeout:g}"))
        results += [
            Result(
                c.exercise,
                c.function,
                0,
                c.points,
                "timeout",
                tr("{function}: not graded: the submission ran past its time limit of {limit} s").format(
                    function=c.function, limit=f"{submission_timeout:g}"
                ),
            )
            for c in remaining
        ]
    order = {c.exercise: i for i, c in enumerate(checks)}
    return sorted(results, key=lambda r: order[r.exercise])


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _left(timeout: float, deadline: float | None) -> float:
    """A cell's time limit: ``timeout``, or less where the submission's own limit comes sooner."""
    left = timeout if deadline is None else min(timeout, deadline - time.monotonic())
    return max(1, math.ceil(left))  # whole seconds: nbclient's timeout is an int


def _dead(check: Check) -> Result:
    return Result(
        check.exercise,
        check.function,
        0,
        check.points,
        "error",
        tr("{function}: the kernel died while it ran (a crash, or the memory ran out)").format(function=check.function),
    )


def _kernel_config(tmp: Path) -> Config:
    """Talk to the kernel through Unix sockets in the scratch folder, where the system has them:
    over TCP, ipykernel warns "Kernel is running over TCP without encryption" for every submission."""
    if os.name != "posix":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": str(tmp / "kernel")}})


def _kernel_env() -> dict:
    """The grader's environment, with its attnlib first on ``PYTHONPATH`` (the kernel grades with
    the same attnlib as the grader, whatever else is installed) and without ``ATTNLIB_LANG``: a
    submission's language is its own (the Chinese student versions set it in their first cell)."""
    env = {name: value for name, value in os.environ.items() if name != "ATTNLIB_LANG"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ATTNLIB_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _run_cells(client, nb, skip: set[int], timeout: float, deadline: float | None, notes: list) -> bool:
    """Run the notebook's code cells in order; False if one left the kernel stuck or killed it (it
    joins ``skip``, and ``notes`` says so), or the submission's time ran out."""
    from nbclient.exceptions import DeadKernelError

    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index in skip:
            continue
        if _past(deadline):
            return False
        client.timeout = _left(timeout, deadline)
        started = time.monotonic()
        try:
            client.execute_cell(cell, index)
        except DeadKernelError:
            skip.add(index)
            notes.append(
                tr("cell {index} killed the kernel (a crash, or the memory ran out): graded without it").format(
                    index=index
                )
            )
            return False
        if time.monotonic() - started >= client.timeout and not _responsive(client):
            skip.add(index)
            notes.append(tr("cell {index} got the kernel stuck: graded without it").format(index=index))
            return False
    client.timeout = _left(timeout, None)
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
    cost_path = None  # a checker that also counts the answer's multiply-adds (chapter 17's forms)
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
        if not check.partial:
            return result(0, "fail", str(e))
        passed = _cases_passed(check, recorded["results"], cases)
        return result(
            round(check.points * passed / len(cases), 2),
            "fail",
            f"{e}\n" + tr("partial credit: {passed} of {n} cases passed").format(passed=passed, n=len(cases)),
        )
    return result(check.points, "pass", tr("all {n} cases passed").format(n=n))


def _cases_passed(check: Check, recorded: list[dict], cases) -> int:
    """How many of the cases the student's function passed, each compared on its own (partial credit)."""
    passed = 0
    for record, case in zip(recorded, cases):
        try:
            compare(check.function, _replay([record]), [case], check.reference, check.hint, check.atol, check.rtol)
            passed += 1
        except AssertionError:
            pass
    return passed


def report(path: Path, results: list[Result]) -> str:
    """The table printed for one submission, ending with ``score: X/Y``.

    In the language of ATTNLIB_LANG; the points, and the results in ``--json``
    (``Result.result``: one of RESULTS), are the same in every language.
    """
    rows = [(tr("exercise"), tr("points"), tr("result"), tr("message"))]
    rows += [(r.exercise, f"{_num(r.points)}/{r.max_points}", tr(r.result), _first_line(r.message)) for r in results]
    widths = [max(_width(row[i]) for row in rows) for i in range(3)]
    lines = [f"{path}"]
    for i, row in enumerate(rows):
        lines.append("  ".join(cell + " " * (w - _width(cell)) for cell, w in zip(row[:3], widths)) + "  " + row[3])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * _width(row[3]))
    score, total = sum(r.points for r in results), sum(r.max_points for r in results)
    lines.append(tr("score: {score}/{total}").format(score=_num(score), total=total))
    return "\n".join(lines)


def _num(x: float) -> str:
    """Points as a person writes them: 1, 0.5, 2.25."""
    return f"{round(x, 2):g}"


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
