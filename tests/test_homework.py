"""python -m coursetools.homework: release student notebooks, grade submissions honestly.

The tests marked slow start Jupyter kernels. The full set of chapters is executed once here, as
student versions (graded_released); the sources are graded on SOURCE_SAMPLE. Those two and the
endless loops are background jobs (tests/_background.py): they run while the browser tests run,
and the tests that read their results come last."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _background
import nbformat
import pytest

from attnlib.check import CHECKS
from coursetools import homework

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _solution_lines(nb) -> list[str]:
    """Every non-blank line written between BEGIN and END SOLUTION in a notebook."""
    lines = []
    for cell in nb.cells:
        if cell.cell_type == "code" and homework.BEGIN in cell.source:
            inside = False
            for line in cell.source.splitlines():
                if line.strip().startswith(homework.BEGIN):
                    inside = True
                elif line.strip().startswith(homework.END):
                    inside = False
                elif inside and line.strip():
                    lines.append(line.strip())
    return lines


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it, in a process of its own (see test_the_command_line)."""
    return subprocess.run(
        [sys.executable, "-m", "coursetools.homework", *args], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


def _main(capsys, *args: str) -> tuple[int, str, str]:
    """The same command line, run in this process: what it returns, prints and reports as an error."""
    capsys.readouterr()
    code = homework.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Student versions of every chapter, written by the command line."""
    out = tmp_path_factory.mktemp("student")
    before = {p: _digest(p) for p in CHAPTERS}
    assert homework.main(["release", *map(str, CHAPTERS), "--out", str(out)]) == 0
    assert {p: _digest(p) for p in CHAPTERS} == before, "release modified a source notebook"
    return out


@_background.job(after_book=True)
def graded_released():
    """Every student version, released by the tool and graded as a submission: name -> (results,
    the notebook as it ran).

    The one execution of the full set of chapters in this file: a student version must run to its
    first check in a fresh kernel, and score 0. In the background once the book is built
    (tests/_background.py), two kernels at a time: the longest part of the suite after the book,
    it then uses both cores once the other tests are done."""
    out = _background.temporary_dir("student-")
    homework.release(CHAPTERS, out)

    def grade(path: Path):
        if _background.CANCELLED.is_set():
            return None
        executed: list = []
        results = homework.grade_one(out / path.name, timeout=120, executed=executed)
        return results, executed[0]

    with ThreadPoolExecutor(2) as pool:
        graded = dict(zip((p.name for p in CHAPTERS), pool.map(grade, CHAPTERS)))
    return {name: done for name, done in graded.items() if done is not None}


# ------------------------------------------------------------------ convention


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_follows_the_exercise_convention(path):
    """Every chapter has a coding exercise; each is gated, marked, checked, and registered."""
    nb = nbformat.read(path, as_version=4)
    chapter = "ch" + path.name[:2]
    labels = [
        lbl
        for c in nb.cells
        if c.cell_type == "markdown"
        for lbl in re.findall(r"^\s*:label:\s*(\S+)", c.source, re.M)
        if "{exercise}" in c.source
    ]
    registered = [lbl for lbl in CHECKS if lbl.startswith(chapter + "-")]
    assert registered, f"{path.name}: no checker in attnlib.check for {chapter}"
    assert set(registered) <= set(labels), f"checkers without an exercise in {path.name}"
    for label in registered:
        check = CHECKS[label]
        code = [
            i
            for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and re.search(rf"^def {check.function}\(", c.source, re.M)
        ]
        assert len(code) == 1, f"{label}: expected one cell defining {check.function}"
        i = code[0]
        assert homework.BEGIN in nb.cells[i].source and homework.END in nb.cells[i].source
        assert "{solution-start} " + label in nb.cells[i - 1].source and ":class: dropdown" in nb.cells[i - 1].source
        assert "{solution-end}" in nb.cells[i + 1].source
        assert nb.cells[i + 2].source.strip() == f"check.{check.function}({check.function})"


# ------------------------------------------------------------------ release


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_release_removes_every_solution(path, released):
    source = nbformat.read(path, as_version=4)
    student = nbformat.read(released / path.name, as_version=4)
    body = _solution_lines(source)
    assert body, "the chapter has no solution code to remove"
    text = "\n".join(c.source for c in student.cells)
    for line in body:
        assert line not in text, f"solution line left in the student notebook: {line}"
    assert "{solution-start}" not in text and "{solution-end}" not in text
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    assert code.count("raise NotImplementedError") == len([c for c in source.cells if homework.BEGIN in c.source])
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    # signatures and docstrings stay, so the student knows what to write
    for label, check in CHECKS.items():
        if label.startswith("ch" + path.name[:2] + "-"):
            assert re.search(rf"^def {check.function}\(", text, re.M)


@pytest.mark.slow
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_student_version_runs_to_its_first_check_and_scores_zero(path, graded_released):
    results, nb = graded_released[path.name]
    failed = [
        (i, c)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and any(o.output_type == "error" for o in c.outputs)
        and "raises-exception" not in c.metadata.get("tags", [])
    ]
    assert failed, "no cell failed: the stubs did not raise"
    i, first = failed[0]
    assert first.source.startswith("check."), f"cell {i} failed before any check:\n{first.source}"
    error = next(o for o in first.outputs if o.output_type == "error")
    assert error.ename == "AssertionError" and "not implemented yet" in error.evalue
    for _, cell in failed:  # only check cells fail, every one because of its stub
        assert cell.source.startswith("check."), cell.source
    # graded, every exercise of the chapter scores 0, because it is not implemented yet
    assert results and {r.exercise for r in results} == {
        lbl for lbl in CHECKS if lbl.startswith("ch" + path.name[:2] + "-")
    }
    for r in results:
        assert (r.points, r.result) == (0, "fail") and r.max_points > 0, r
        assert "not implemented yet" in r.message, r.message


@pytest.mark.slow
def test_the_report_in_the_homework_page_is_the_graders(graded_released):
    """book/homework.md shows the report of chapter 1's student version: it is what the grader
    prints for it (`grade` prints homework.report for each submission)."""
    results, _ = graded_released["01_embeddings.ipynb"]
    printed = homework.report(Path("student/01_embeddings.ipynb"), results)
    doc = (ROOT / "book" / "homework.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(student/01_embeddings.ipynb\n.*?score: \d+/\d+)\n```", doc, re.S).group(1)
    assert shown == printed


def test_release_never_overwrites(tmp_path, capsys):
    src = CHAPTERS[0]
    before = _digest(src)
    code, _, err = _main(capsys, "release", str(src), "--out", str(src.parent))
    assert code == 2 and "would overwrite the source notebook" in err and _digest(src) == before
    existing = tmp_path / src.name
    existing.write_text("my work", encoding="utf-8")
    code, _, err = _main(capsys, "release", str(src), "--out", str(tmp_path))
    assert code == 2 and "already exists" in err
    assert existing.read_text(encoding="utf-8") == "my work"
    # nothing is written when one of several destinations is taken
    second = CHAPTERS[1] if len(CHAPTERS) > 1 else CHAPTERS[0]
    code, _, err = _main(capsys, "release", str(second), str(src), "--out", str(tmp_path))
    assert code == 2 and "already exists" in err
    assert not (tmp_path / second.name).exists() or second == src


# ------------------------------------------------------------------ grade

# The chapters whose exercises, together, send every kind of case and answer through the kernel:
# tensors, a float (ch03 unit_variance_scale), ints and a
# torch.dtype argument (ch11 longest_context), a tuple of tensors (ch13 merge_partials), an
# attnlib.GPTConfig (ch18 cache_bytes).
# Every chapter's solution is checked in-process by tests/test_check.py, and every chapter's
# student version goes through the grader above.
SOURCE_SAMPLE = ["03_scaling.ipynb", "11_cost.ipynb", "13_tiled_attention.ipynb", "18_real_model.ipynb"]


def test_the_source_sample_covers_every_kind_of_case_and_answer():
    """SOURCE_SAMPLE covers every type of argument and of answer that any chapter's checker uses."""

    def kinds(label):
        check = CHECKS[label]
        args = {type(a).__name__ for _, case in check.cases() for a in case}
        answers = {type(check.reference(*case)).__name__ for _, case in check.cases()}
        return args | {"->" + a for a in answers}

    every = set().union(*(kinds(label) for label in CHECKS))
    sample = set().union(*(kinds(label) for label in CHECKS if label[2:4] in {p[:2] for p in SOURCE_SAMPLE}))
    assert sample == every, f"not covered by SOURCE_SAMPLE: {every - sample}"


@_background.job(after_book=True, after=("installed_wheel",))
def graded_sources():
    """SOURCE_SAMPLE graded by the command line, in a process of its own, in the background once the
    wheel is installed (tests/test_packaging.py), beside the student versions: (the sources, their
    digests before, the finished process, the JSON report)."""
    sources = [ROOT / "notebooks" / name for name in SOURCE_SAMPLE]
    report = _background.temporary_dir("grade-") / "report.json"
    before = {p: _digest(p) for p in sources}
    proc = _cli("grade", *map(str, sources), "--timeout", "120", "--json", str(report), "--jobs", "1")
    return sources, before, proc, (json.loads(report.read_text()) if report.exists() else None)


@pytest.mark.slow
def test_grading_the_sources_gives_full_marks(graded_sources):
    sources, before, proc, data = graded_sources
    out = proc.stdout
    assert proc.returncode == 0 and data is not None, proc.stderr
    assert [sub["submission"] for sub in data["submissions"]] == list(map(str, sources))  # in the order given
    assert re.findall(r"^(\S+\.ipynb)$", out, re.M) == list(map(str, sources))
    for sub in data["submissions"]:
        assert sub["score"] == sub["max_score"] > 0, sub
        assert all(e["result"] == "pass" for e in sub["exercises"])
    assert (
        out.strip().splitlines()[-1] == f"score: {data['submissions'][-1]['max_score']}/"
        f"{data['submissions'][-1]['max_score']}"
    )
    assert {p: _digest(p) for p in sources} == before, "grading modified a submission"


# Small chapter-1 submissions, one cheat or mistake each (fast: no chapter code to run).
GOOD_ONE_HOT = """
def one_hot_rows(ids, vocab_size):
    return (ids[..., None] == torch.arange(vocab_size)).float()
"""
GOOD_MEAN = """
def mean_embedding(ids, table):
    return table[ids].mean(dim=0)
"""
WRONG_ONE_HOT = """
def one_hot_rows(ids, vocab_size):
    return torch.zeros(*ids.shape, vocab_size)
"""


def _submission(tmp_path: Path, *sources: str, name: str = "01_embeddings.ipynb") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("import torch\nimport attnlib\nfrom attnlib import check")]
    nb.cells += [nbformat.v4.new_code_cell(s.strip()) for s in sources]
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _grade(path: Path, timeout: float = 10) -> dict[str, homework.Result]:
    before = _digest(path)
    results = {r.exercise: r for r in homework.grade_one(path, timeout=timeout)}
    assert _digest(path) == before, "grading modified the submission"
    assert set(results) == {"ch01-one-hot", "ch01-mean-embedding"}
    return results


@pytest.mark.slow
def test_correct_submission_without_check_cells(tmp_path):
    results = _grade(_submission(tmp_path, GOOD_ONE_HOT, GOOD_MEAN))
    assert [r.points for r in results.values()] == [1, 1]


# Long enough for a loaded machine to run the honest cells; each endless loop costs this much.
LOOP_TIMEOUT = 10

# The endless loops sleep, so that the seconds they wait for cost no core: the grader interrupts a
# kernel the same way (SIGINT, a KeyboardInterrupt in the loop) whether the loop sleeps or spins.
STUBBORN = """
def one_hot_rows(ids, vocab_size):
    while True:
        try:
            while True:
                time.sleep(0.01)
        except BaseException:
            pass
"""


@_background.job(after_book=True)
def loops():
    """Two submissions with endless loops, graded at the same time, in the background once the book
    is built (each costs seconds of waiting): one_hot_rows loops and can be interrupted, then a cell
    loops at the top level; or one_hot_rows swallows every interrupt, and its check cell gets the
    kernel stuck."""
    tmp = _background.temporary_dir("loops-")
    loop = "import time\n\ndef one_hot_rows(ids, vocab_size):\n    while True:\n        time.sleep(0.01)"
    # a loop at the top level is interrupted and the kernel goes on; the graded call of one_hot_rows too
    endless = _submission(tmp / "endless", loop, GOOD_MEAN, "while True:\n    time.sleep(0.01)")
    stubborn = _submission(tmp / "stubborn", "import time\n" + STUBBORN, "check.one_hot_rows(one_hot_rows)", GOOD_MEAN)
    with ThreadPoolExecutor(2) as pool:
        return dict(
            zip(("endless", "stubborn"), pool.map(lambda p: _grade(p, timeout=LOOP_TIMEOUT), (endless, stubborn)))
        )


@pytest.mark.slow
def test_endless_loop_costs_that_exercise_only(loops):
    results = loops["endless"]
    assert results["ch01-one-hot"].result == "timeout" and results["ch01-one-hot"].points == 0
    assert f"did not finish within {LOOP_TIMEOUT} s" in results["ch01-one-hot"].message
    assert results["ch01-mean-embedding"].points == 1


@pytest.mark.slow
def test_loop_that_swallows_interrupts_costs_that_exercise_only(loops):
    results = loops["stubborn"]
    assert results["ch01-one-hot"].result == "timeout" and results["ch01-one-hot"].points == 0
    assert results["ch01-mean-embedding"].points == 1


@pytest.mark.slow
def test_exception_costs_that_exercise_only(tmp_path):
    raising = "def one_hot_rows(ids, vocab_size):\n    return ids.one_hot_please()"
    results = _grade(_submission(tmp_path, raising, GOOD_MEAN))
    r = results["ch01-one-hot"]
    assert (r.points, r.result) == (0, "fail")
    assert "your function raised AttributeError" in r.message and "case:" in r.message
    assert results["ch01-mean-embedding"].points == 1


@pytest.mark.slow
def test_syntax_error_costs_that_exercise_only(tmp_path):
    broken = "def one_hot_rows(ids, vocab_size)\n    return ids"
    results = _grade(_submission(tmp_path, broken, GOOD_MEAN))
    assert (results["ch01-one-hot"].points, results["ch01-one-hot"].result) == (0, "missing")
    assert "no function named one_hot_rows" in results["ch01-one-hot"].message
    assert results["ch01-mean-embedding"].points == 1


@pytest.mark.slow
def test_wrong_type_is_explained(tmp_path):
    as_list = "def one_hot_rows(ids, vocab_size):\n    return [[1.0]]"
    r = _grade(_submission(tmp_path, as_list, GOOD_MEAN))["ch01-one-hot"]
    assert r.points == 0 and "expected a torch.Tensor, got list" in r.message


@pytest.mark.slow
def test_deleted_or_faked_checks_do_not_help(tmp_path):
    cheat = """
check.one_hot_rows = lambda fn: print("check.one_hot_rows: all 10 cases passed")
attnlib.check.CHECKS.clear()
attnlib.check.compare = lambda *args, **kwargs: 10
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
check.one_hot_rows(one_hot_rows)
"""
    results = _grade(_submission(tmp_path, WRONG_ONE_HOT, cheat))  # mean_embedding deleted too
    assert results["ch01-one-hot"].points == 0 and "wrong values" in results["ch01-one-hot"].message
    assert results["ch01-mean-embedding"].result == "missing"


@pytest.mark.slow
def test_calling_the_answer_scores_zero_however_it_is_reached(tmp_path):
    """The review's three-line submission (the check registry), and an aliased import, getattr
    and a swallowed error: each exercise scores 0 with a message that says what it asks."""
    registry = """
reach = attnlib.check.CHECKS['ch04-reach'].reference
def combine_masks(lengths, T):
    try:
        return getattr(attnlib, 'causal_' + 'mask')(T) & attnlib.padding_mask(lengths, T)
    except Exception:
        return attnlib.check.CHECKS['ch04-combine-masks'].reference(lengths, T)
"""
    path = _submission(tmp_path, registry, name="04_masking.ipynb")
    before = _digest(path)
    results = {r.exercise: r for r in homework.grade_one(path, timeout=30)}
    assert _digest(path) == before
    assert [(r.points, r.result) for r in results.values()] == [(0, "forbidden"), (0, "forbidden")]
    assert results["ch04-reach"].message == (
        "reach: write reach yourself; attnlib.check.CHECKS['ch04-reach'].reference is what your answer is "
        "checked against"
    )
    assert "asks you to write combine_masks without attnlib.causal_mask" in results["ch04-combine-masks"].message

    aliased = """
from attnlib.softmax import softmax as stable_softmax
def shifted_output(out, weights, shift):
    return out + weights.sum(dim=-1, keepdim=True) * shift
"""
    results = {
        r.exercise: r
        for r in homework.grade_one(_submission(tmp_path, aliased, name="05_softmax_values.ipynb"), timeout=30)
    }
    assert (results["ch05-stable-softmax"].points, results["ch05-stable-softmax"].result) == (0, "forbidden")
    assert "attnlib.softmax is what your answer is checked against" in results["ch05-stable-softmax"].message
    assert results["ch05-shifted-values"].points == 1  # an honest answer beside it still scores


@pytest.mark.slow
def test_chapter_is_found_from_labels_when_renamed(tmp_path):
    path = _submission(tmp_path, GOOD_ONE_HOT, name="my_homework.ipynb")
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("```{exercise} x\n:label: ch01-one-hot\n```"))
    nbformat.write(nb, path)
    results = {r.exercise: r for r in homework.grade_one(path, timeout=10)}
    assert results["ch01-one-hot"].points == 1 and results["ch01-mean-embedding"].result == "missing"


@pytest.mark.parametrize(
    "content, why",
    [
        (b"this is not json", "not a valid notebook"),
        (b'{"cells": 3}', "not a valid notebook"),
        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not a notebook"),
    ],
)
def test_not_a_notebook_gets_a_row_and_exit_1(tmp_path, capsys, content, why):
    """A file that is not a notebook costs that submission only: a row saying why, 0 points for each
    exercise of its chapter, and exit status 1 once everything else is graded."""
    path = tmp_path / "01_embeddings.ipynb"
    path.write_bytes(content)
    code, out, err = _main(capsys, "grade", str(path))
    assert code == 1 and err == ""
    assert f"not graded: {path}: {why}" in out and out.strip().splitlines()[-1].startswith("1 submissions could not")
    assert path.read_bytes() == content


def test_missing_file_exits_2_and_unknown_chapter_gets_a_row(tmp_path, capsys):
    code, _, err = _main(capsys, "grade", str(tmp_path / "nope.ipynb"))  # the instructor's mistake: nothing runs
    assert code == 2 and "cannot read it" in err
    path = _submission(tmp_path, GOOD_ONE_HOT, name="notes.ipynb")
    code, out, _ = _main(capsys, "grade", str(path))
    assert code == 1 and "no graded exercises found" in out


@pytest.mark.slow
def test_jobs_must_be_at_least_one(tmp_path, capsys):
    path = _submission(tmp_path, GOOD_ONE_HOT)
    code, out, err = _main(capsys, "grade", str(path), "--jobs", "0")
    assert code == 2 and out == "" and "--jobs: expected a number of submissions at once, 1 or more; got 0" in err


@pytest.mark.slow
def test_the_command_line(tmp_path):
    """`python -m coursetools.homework`, in a process of its own: its exit codes and its streams."""
    path = tmp_path / "01_embeddings.ipynb"
    path.write_bytes(b"this is not json")
    proc = _cli("grade", str(path))
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr  # no warning either (IPC, not TCP)
    assert "not graded: " in proc.stdout and "not a valid notebook" in proc.stdout
    proc = _cli("release", str(CHAPTERS[0]), "--out", str(tmp_path / "student"))
    assert proc.returncode == 0 and (tmp_path / "student" / CHAPTERS[0].name).exists(), proc.stderr
    assert proc.stdout.strip() == f"wrote {tmp_path / 'student' / CHAPTERS[0].name}"


EXPANDED_ABSORBED = """
import math

def absorbed_attention(q_nope, q_rope, c, k_rope, w_uk, w_uv):
    B, H, T_new, n = q_nope.shape
    T_k, r = c.shape[1], k_rope.shape[-1]
    k_nope = (c @ w_uk.T).unflatten(-1, (H, n)).transpose(1, 2)  # every key expanded: (B, H, T_k, n)
    v = (c @ w_uv.T).unflatten(-1, (H, -1)).transpose(1, 2)  # every value expanded: (B, H, T_k, d_v)
    scores = (q_nope @ k_nope.mT + q_rope @ k_rope[:, None].mT) / math.sqrt(n + r)
    allowed = torch.ones(T_new, T_k, dtype=torch.bool).tril(diagonal=T_k - T_new)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v
"""


@pytest.mark.slow
def test_the_grader_counts_the_multiply_adds_of_the_absorbed_form(tmp_path):
    """Chapter 17's absorbed_attention: form 1 (keys and values expanded) has the right outputs, and the
    grader, like the notebook's check, counts its multiply-adds in the student's kernel and fails it."""
    path = _submission(tmp_path, EXPANDED_ABSORBED, name="17_latent_attention.ipynb")
    results = {r.exercise: r for r in homework.grade_one(path, timeout=30)}
    expanded = results["ch17-absorbed-attention"]
    assert expanded.result == "fail" and expanded.points == 0
    assert "too many multiply-adds" in expanded.message and "diagnosis: you expand keys" in expanded.message
