"""A class graded in one run (issue 39): every submission gets a row, the right score and a reason.

The 30 submissions are small notebooks of the exercises of chapters 1 and 5 (and 4 for one student),
built here the way students change their student versions: correct, wrong, empty, an endless
loop, an exception, test cells deleted or edited, ``attnlib.check`` monkeypatched, invalid JSON, a
kernel killed mid-run, huge output, a renamed file, calling the answer, a written answer, a function
that kills the kernel while graded, a submission over its time limit, a Chinese submission. The
expected scores are those the review's instructor gave by hand (../shared/notes/review-instructor.md).
The grader runs them in real kernels, two at a time; then its CSV, feedback pages, resuming and the
merging of marks are checked.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

from attnlib.check import CHECKS
from coursetools import gradebook, homework
from coursetools.chapters import ANSWER, written_answers, written_exercises

ROOT = Path(__file__).resolve().parent.parent
CH01 = nbformat.read(ROOT / "notebooks" / "01_embeddings.ipynb", as_version=4)
CH04 = nbformat.read(ROOT / "notebooks" / "04_masking.ipynb", as_version=4)


def _solution(nb, name: str) -> str:
    """The chapter's solution of the function ``name``, its markers removed."""
    cell = next(
        c for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source and homework.BEGIN in c.source
    )
    return "\n".join(line for line in cell.source.splitlines() if "### " not in line)


def _exercise_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "markdown" and "{exercise}" in c.source]


IMPORTS = "import torch\nimport attnlib\nfrom attnlib import check"
WRONG_ONE_HOT = (
    "def one_hot_rows(ids, vocab_size):\n    return torch.zeros(*ids.shape, vocab_size)  # forgot the ones\n"
)
LOOP_MEAN = "def mean_embedding(ids, table):\n    while True:\n        pass\n"


def _notebook(*cells: str | nbformat.NotebookNode, nb=CH01, student=False) -> nbformat.NotebookNode:
    """A submission: the chapter's exercise cells (with answer cells, as released), then ``cells``
    (strings are code cells)."""
    out = nbformat.v4.new_notebook()
    released = homework.student_version(nb) if student else nb
    prose = [
        c for c in released.cells if c.cell_type == "markdown" and ("{exercise}" in c.source or ANSWER in c.metadata)
    ]
    out.cells = [nbformat.v4.new_code_cell(IMPORTS)]
    out.cells += [c if not isinstance(c, str) else nbformat.v4.new_code_cell(c) for c in cells]
    out.cells += prose
    return out


def _correct() -> list[str]:
    return [_solution(CH01, "one_hot_rows"), _solution(CH01, "mean_embedding")]


def _stubbed(nb=CH01) -> list[str]:
    student = homework.student_version(nb)
    return [c.source for c in student.cells if c.cell_type == "code" and "NotImplementedError" in c.source]


def _with_answer(text: str) -> nbformat.NotebookNode:
    nb = _notebook(*_correct(), student=True)
    for cell in nb.cells:
        if cell.metadata.get(ANSWER) == "ch01-gradient-rows":
            cell.source += text
    return nb


# student -> (files {name: notebook or raw text}, expected points per exercise)
CLASS = {
    "s01-correct": (
        {
            "01_embeddings.ipynb": _notebook(
                *_correct(), "check.one_hot_rows(one_hot_rows)", "check.mean_embedding(mean_embedding)"
            )
        },
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1},
    ),
    "s02-empty": (
        {"01_embeddings.ipynb": _notebook(*_stubbed(), student=True)},
        {"ch01-one-hot": 0, "ch01-mean-embedding": 0},
    ),
    "s03-wrong": (
        {"01_embeddings.ipynb": _notebook(WRONG_ONE_HOT, _solution(CH01, "mean_embedding"))},
        {"ch01-one-hot": 0, "ch01-mean-embedding": 1},
    ),
    "s04-loop": (
        {"01_embeddings.ipynb": _notebook(_solution(CH01, "one_hot_rows"), LOOP_MEAN)},
        {"ch01-one-hot": 1, "ch01-mean-embedding": 0},
    ),
    "s05-raises": (
        {"01_embeddings.ipynb": _notebook("undefined_name + 1", *_correct(), "raise TypeError('mine')")},
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1},
    ),
    "s06-tests-deleted": (
        {"01_embeddings.ipynb": _notebook(*_correct())},
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1},
    ),
    "s07-test-edited": (
        {"01_embeddings.ipynb": _notebook(WRONG_ONE_HOT, "print('check.one_hot_rows: all 10 cases passed')")},
        {"ch01-one-hot": 0, "ch01-mean-embedding": 0},
    ),
    "s08-monkeypatch": (
        {
            "01_embeddings.ipynb": _notebook(
                WRONG_ONE_HOT,
                "import attnlib.check as c\nfor _k in list(c.CHECKS):\n    c.CHECKS[_k].run = lambda fn: 1\n"
                "c.compare = lambda *a, **k: 1\ncheck.one_hot_rows(one_hot_rows)",
            )
        },
        {"ch01-one-hot": 0, "ch01-mean-embedding": 0},
    ),
    "s09-invalid": (
        {"01_embeddings.ipynb": '{"cells": [ this is not json'},
        {"ch01-one-hot": 0, "ch01-mean-embedding": 0},
    ),
    "s10-segfault": (
        {"01_embeddings.ipynb": _notebook(*_correct(), "import ctypes\nctypes.string_at(0)")},
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1},
    ),
    "s11-huge-output": (
        {"01_embeddings.ipynb": _notebook(*_correct(), "for i in range(200_000):\n    print(i)")},
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1},
    ),
    "s12-renamed": (
        {"01_embeddings-Copy1.ipynb": _notebook(*_correct())},
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1},
    ),
    "s13-calls-answer": (
        {
            "01_embeddings.ipynb": _notebook(
                "def one_hot_rows(ids, vocab_size):\n    return attnlib.one_hot(ids, vocab_size)",
                _solution(CH01, "mean_embedding"),
            )
        },
        {"ch01-one-hot": 0, "ch01-mean-embedding": 1},
    ),
    "s14-written": (
        {"01_embeddings.ipynb": _with_answer("The two rows of G for *is* add up in row 2 of the table's gradient.")},
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1},
    ),
    "s15-dies-when-graded": (
        {
            "01_embeddings.ipynb": _notebook(
                "def one_hot_rows(ids, vocab_size):\n    import ctypes\n    ctypes.string_at(0)",
                _solution(CH01, "mean_embedding"),
            )
        },
        {"ch01-one-hot": 0, "ch01-mean-embedding": 1},
    ),
    "s16-two-chapters": (
        {
            "01_embeddings.ipynb": _notebook(*_correct()),
            "04_masking.ipynb": _notebook(_solution(CH04, "reach"), *_stubbed(CH04)[1:], nb=CH04, student=True),
        },
        {"ch01-one-hot": 1, "ch01-mean-embedding": 1, "ch04-reach": 1, "ch04-combine-masks": 0},
    ),
    "s17-chinese": (
        {"01_embeddings.ipynb": _notebook('import os\nos.environ["ATTNLIB_LANG"] = "zh_CN"', WRONG_ONE_HOT)},
        {"ch01-one-hot": 0, "ch01-mean-embedding": 0},
    ),
}
# Chapter 5 for twelve of them (30 submissions in all): stable_softmax gives partial credit, so the
# expected points of a partly right answer are counted here, case by case, in this process.
CH05 = nbformat.read(ROOT / "notebooks" / "05_softmax_values.ipynb", as_version=4)
IMPORTS_05 = IMPORTS + "\nimport math"
NAIVE = "def stable_softmax(x):\n    e = torch.exp(x)\n    return e / e.sum(-1, keepdim=True)"
NAN_ROWS = (
    "def stable_softmax(x):\n    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True)"
)
SHIFT_WRONG = "def shifted_output(out, weights, shift):\n    return out + shift  # forgets rows without keys"


def _partial(source: str, label: str) -> float:
    """The points a partly right stable_softmax earns: its share of the cases it passes."""
    import math

    import torch

    check = CHECKS[label]
    namespace = {"torch": torch, "math": math}
    exec(source, namespace)
    fn, cases = namespace[check.function], check.cases()
    passed = 0
    for _, args in cases:
        got, want = fn(*args), check.reference(*args)
        passed += bool(got.dtype == want.dtype and torch.allclose(got, want, atol=check.atol, rtol=check.rtol))
    return round(check.points * passed / len(cases), 2)


def _ch05(*cells: str) -> nbformat.NotebookNode:
    nb = _notebook(*cells, nb=CH05)
    nb.cells[0].source = IMPORTS_05
    return nb


SOFTMAX, SHIFTED = _solution(CH05, "stable_softmax"), _solution(CH05, "shifted_output")
CH05_WORK = {  # student -> (cells, expected points)
    "s01-correct": ((SOFTMAX, SHIFTED), {"ch05-stable-softmax": 1, "ch05-shifted-values": 1}),
    "s02-empty": (tuple(_stubbed(CH05)), {"ch05-stable-softmax": 0, "ch05-shifted-values": 0}),
    "s03-wrong": (
        (NAIVE, SHIFTED),
        {"ch05-stable-softmax": _partial(NAIVE, "ch05-stable-softmax"), "ch05-shifted-values": 1},
    ),
    "s04-loop": (
        (SOFTMAX, LOOP_MEAN.replace("mean_embedding(ids, table)", "shifted_output(out, weights, shift)")),
        {"ch05-stable-softmax": 1, "ch05-shifted-values": 0},
    ),
    "s05-raises": (("1 / 0", SOFTMAX, SHIFTED), {"ch05-stable-softmax": 1, "ch05-shifted-values": 1}),
    "s06-tests-deleted": (
        (NAN_ROWS, SHIFT_WRONG),
        {"ch05-stable-softmax": _partial(NAN_ROWS, "ch05-stable-softmax"), "ch05-shifted-values": 0},
    ),
    "s07-test-edited": ((SOFTMAX,), {"ch05-stable-softmax": 1, "ch05-shifted-values": 0}),
    "s10-segfault": (
        (SOFTMAX, SHIFTED, "import ctypes\nctypes.string_at(0)"),
        {"ch05-stable-softmax": 1, "ch05-shifted-values": 1},
    ),
    "s11-huge-output": (
        (SOFTMAX, "print('x' * 5_000_000)", SHIFTED),
        {"ch05-stable-softmax": 1, "ch05-shifted-values": 1},
    ),
    "s13-calls-answer": (
        ("def stable_softmax(x):\n    return attnlib.softmax(x)", SHIFTED),
        {"ch05-stable-softmax": 0, "ch05-shifted-values": 1},
    ),
    "s14-written": ((SOFTMAX, SHIFTED), {"ch05-stable-softmax": 1, "ch05-shifted-values": 1}),
    "s17-chinese": (
        ('import os\nos.environ["ATTNLIB_LANG"] = "zh_CN"', NAIVE, SHIFTED),
        {"ch05-stable-softmax": _partial(NAIVE, "ch05-stable-softmax"), "ch05-shifted-values": 1},
    ),
}
for _student, (_cells, _points) in CH05_WORK.items():
    CLASS[_student][0]["05_softmax_values.ipynb"] = _ch05(*_cells)
    CLASS[_student][1].update(_points)
assert sum(len(files) for files, _ in CLASS.values()) == 30  # the review's class: 30 submissions

REASONS = {  # what the row of a submission must say
    "s02-empty": {"ch01-one-hot": "not implemented yet"},
    "s04-loop": {"ch01-mean-embedding": "did not finish within"},
    "s08-monkeypatch": {"ch01-one-hot": "wrong values"},
    "s09-invalid": {"ch01-one-hot": "not a valid notebook"},
    "s13-calls-answer": {"ch01-one-hot": "attnlib.one_hot"},
    "s15-dies-when-graded": {"ch01-one-hot": "the kernel died"},
    "s17-chinese": {"ch01-one-hot": "值"},
}


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """The class on disk, graded once by the command line: (folder, gradebook, CSV, feedback, output)."""
    root = tmp_path_factory.mktemp("class")
    subs = root / "submissions"
    for student, (files, _) in CLASS.items():
        (subs / student).mkdir(parents=True)
        for name, nb in files.items():
            text = nb if isinstance(nb, str) else nbformat.writes(nb)
            (subs / student / name).write_text(text, encoding="utf-8")
    out = root / "out"
    args = ["grade", str(subs), "--timeout", "6", "--jobs", "2", "--json", str(out / "gradebook.json")]
    args += ["--csv", str(out / "grades.csv"), "--feedback", str(out / "feedback")]
    out.mkdir()
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "coursetools.homework", *args], capture_output=True, text=True, cwd=ROOT, timeout=900
    )
    book = json.loads((out / "gradebook.json").read_text(encoding="utf-8"))
    return subs, out, book, run


def test_chapter_4_labels_are_those_expected():
    assert {lbl for lbl in CHECKS if lbl.startswith("ch04-")} == {"ch04-reach", "ch04-combine-masks"}


@pytest.mark.slow  # the class, in real kernels: about a minute on two cores
def test_every_submission_gets_a_row_with_the_right_score(classroom):
    subs, out, book, run = classroom
    assert run.returncode == 1, run.stderr  # one submission could not be graded: said, after the others
    assert "could not be graded" in run.stdout and "s09-invalid" in run.stdout.splitlines()[-1]
    records = {(r["student"], r["chapter"]): r for r in book["submissions"]}
    assert len(book["submissions"]) == sum(len(files) for files, _ in CLASS.values())
    for student, (_, expected) in CLASS.items():
        got = {}
        for (who, _), rec in records.items():
            if who == student:
                got |= {e["exercise"]: e["points"] for e in rec["exercises"]}
        assert got == expected, student
    for student, reasons in REASONS.items():
        exercises = [e for r in book["submissions"] if r["student"] == student for e in r["exercises"]]
        for label, words in reasons.items():
            message = next(e["message"] for e in exercises if e["exercise"] == label)
            assert words in message, (student, message)


@pytest.mark.slow  # the class, in real kernels: about a minute on two cores
def test_what_happened_to_a_run_is_said(classroom):
    _, _, book, run = classroom
    rec = {r["student"]: r for r in book["submissions"]}
    assert rec["s09-invalid"]["status"] == "not graded" and "not a valid notebook" in rec["s09-invalid"]["reason"]
    assert any("killed the kernel" in note for note in rec["s10-segfault"]["notes"])
    assert rec["s10-segfault"]["status"] == "graded"
    assert rec["s17-chinese"]["lang"] == "zh_CN" and rec["s01-correct"]["lang"] == "en"
    assert book["attnlib"]["path"] == str(ROOT / "attnlib") and book["attnlib"]["version"]
    assert "Traceback" not in run.stderr and "TCP without encryption" not in run.stderr


@pytest.mark.slow  # the class, in real kernels: about a minute on two cores
def test_written_answers_are_collected_for_marking(classroom):
    _, out, book, _ = classroom
    rec = {(r["student"], r["chapter"]): r for r in book["submissions"]}
    assert rec["s14-written", "ch01"]["written"] == {
        "ch01-gradient-rows": "The two rows of G for *is* add up in row 2 of the table's gradient."
    }
    assert rec["s02-empty", "ch01"]["written"] == {"ch01-gradient-rows": ""}
    rows = {r["student"]: r for r in csv.DictReader(open(out / "grades.csv", encoding="utf-8"))}
    assert set(rows) == set(CLASS)
    assert rows["s14-written"]["ch01-gradient-rows (written)"] == ""  # empty until marked
    assert rows["s16-two-chapters"]["total"] == "3" and rows["s16-two-chapters"]["ch04-reach"] == "1"
    for student, (_, expected) in CLASS.items():  # the total: the points expected, the written ones unmarked
        assert float(rows[student]["total"]) == pytest.approx(sum(expected.values())), student
    written = len(written_exercises(CH01)) + len(written_exercises(CH05))
    assert rows["s01-correct"]["total"] == "4" and rows["s01-correct"]["max"] == str(4 + written)
    assert rows["s03-wrong"]["ch05-stable-softmax"] == f"{CH05_WORK['s03-wrong'][1]['ch05-stable-softmax']:g}"
    assert "not a valid notebook" in rows["s09-invalid"]["comments"]


@pytest.mark.slow  # the class, in real kernels: about a minute on two cores
def test_feedback_pages_in_each_students_language(classroom):
    _, out, book, _ = classroom
    pages = sorted(p.stem for p in (out / "feedback").glob("*.html"))
    assert pages == sorted(CLASS)
    english = (out / "feedback" / "s03-wrong.html").read_text(encoding="utf-8")
    assert '<html lang="en">' in english and "one_hot_rows" in english and "wrong values" in english
    chinese = (out / "feedback" / "s17-chinese.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in chinese and "总分" in chinese
    written = (out / "feedback" / "s14-written.html").read_text(encoding="utf-8")
    assert "add up in row 2" in written and "awaiting marking" in written


@pytest.mark.slow  # the class, in real kernels: about a minute on two cores
def test_a_second_run_grades_only_what_is_missing_or_changed(classroom, tmp_path):
    subs, out, book, _ = classroom
    state = tmp_path / "gradebook.json"
    kept = [r for r in book["submissions"] if r["student"] not in ("s01-correct", "s03-wrong")]
    state.write_text(json.dumps({**book, "submissions": kept}), encoding="utf-8")  # as if the run stopped there
    printed = []
    again = gradebook.grade_class([subs], timeout=6, jobs=2, json_path=state, echo=printed.append)
    graded = [text.splitlines()[0] for text in printed if "already graded" not in text]
    assert sorted(graded) == sorted(
        str(p) for p in subs.glob("*/*.ipynb") if p.parent.name in ("s01-correct", "s03-wrong", "s09-invalid")
    )
    assert len(again["submissions"]) == len(book["submissions"])
    before = {r["submission"]: r for r in kept}
    for rec in again["submissions"]:
        if rec["submission"] in before and rec["status"] == "graded":
            assert rec == before[rec["submission"]]  # kept as it was, not graded again
    assert {r["student"]: r for r in again["submissions"]}["s01-correct"]["exercises"][0]["points"] == 1


@pytest.mark.slow  # the class, in real kernels: about a minute on two cores
def test_marks_of_written_exercises_merge_back(classroom, tmp_path, capsys):
    _, out, book, _ = classroom
    state = tmp_path / "gradebook.json"
    state.write_text(json.dumps(book), encoding="utf-8")
    rows = list(csv.DictReader(open(out / "grades.csv", encoding="utf-8")))
    for row in rows:
        if row["student"] == "s14-written":
            row["ch01-gradient-rows (written)"] = "0.5"
    marked = tmp_path / "marked.csv"
    with open(marked, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert homework.main(["marks", str(marked), "--json", str(state), "--csv", str(tmp_path / "final.csv")]) == 0
    final = {r["student"]: r for r in csv.DictReader(open(tmp_path / "final.csv", encoding="utf-8"))}
    assert final["s14-written"]["ch01-gradient-rows (written)"] == "0.5" and final["s14-written"]["total"] == "4.5"
    merged = json.loads(state.read_text(encoding="utf-8"))
    marks = {(r["student"], r["chapter"]): r["marks"] for r in merged["submissions"]}
    assert marks["s14-written", "ch01"] == {"ch01-gradient-rows": 0.5} and marks["s14-written", "ch05"] == {}
    # a mark out of range is refused with the line and the column, and nothing is merged
    rows[0]["ch01-gradient-rows (written)"] = "7"
    with open(marked, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert homework.main(["marks", str(marked), "--json", str(state)]) == 2
    assert re.search(
        r"line 2, ch01-gradient-rows \(written\): expected a mark from 0 to 1, received '7'", capsys.readouterr().err
    )
    assert json.loads(state.read_text(encoding="utf-8")) == merged
    # the marked CSV is the teaching assistant's: the tool never writes over it
    assert homework.main(["marks", str(marked), "--json", str(state), "--csv", str(marked)]) == 2


# --- one submission's limits and partial credit ----------------------------------------------------


@pytest.mark.slow
def test_a_submission_over_its_time_limit_scores_timeout(tmp_path):
    """Every cell is quick enough for --timeout, but the whole runs past --submission-timeout."""
    nb = _notebook(*_correct(), *["import time\ntime.sleep(3)"] * 6)
    path = tmp_path / "01_embeddings.ipynb"
    nbformat.write(nb, path)
    notes = []
    results = homework.grade_one(path, timeout=10, submission_timeout=8, notes=notes)
    assert [(r.exercise, r.points, r.result) for r in results] == [
        ("ch01-one-hot", 0, "timeout"),
        ("ch01-mean-embedding", 0, "timeout"),
    ]
    assert "time limit of 8 s" in results[0].message and notes == ["the submission ran past its time limit of 8 s"]


NAIVE_SOFTMAX = "def stable_softmax(x):\n    return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)"


@pytest.mark.slow
def test_partial_credit_counts_the_cases_passed(tmp_path):
    """ch05-stable-softmax gives partial credit: a softmax without the max shift passes the cases
    whose exponentials neither overflow nor meet an all -inf row, and earns that fraction."""
    import torch

    check = CHECKS["ch05-stable-softmax"]
    assert check.partial
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(IMPORTS), nbformat.v4.new_code_cell(NAIVE_SOFTMAX)]
    path = tmp_path / "05_softmax_values.ipynb"
    nbformat.write(nb, path)
    result = next(r for r in homework.grade_one(path, timeout=20) if r.exercise == "ch05-stable-softmax")
    namespace = {"torch": torch}
    exec(NAIVE_SOFTMAX, namespace)
    cases = check.cases()
    passed = sum(
        torch.allclose(
            namespace["stable_softmax"](*args),
            check.reference(*args),
            atol=check.atol,
            rtol=check.rtol,
            equal_nan=False,
        )
        for _, args in cases
    )
    assert 0 < passed < len(cases)
    assert result.result == "fail" and result.points == round(passed / len(cases), 2)
    assert f"partial credit: {passed} of {len(cases)} cases passed" in result.message
    assert homework.report(path, [result]).splitlines()[-1] == f"score: {round(passed / len(cases), 2):g}/1"


# --- the instructor's arguments, checked before anything runs --------------------------------------


def test_student_ids_from_folders_or_from_a_pattern(tmp_path):
    assert gradebook.student_of(Path("submissions/ana/05_softmax_values.ipynb")) == "ana"
    canvas = r"(?P<student>[^/_]+)_[^/]*\.ipynb$"
    assert gradebook.student_of(Path("export/smith_1234_05_softmax_values.ipynb"), canvas) == "smith"
    with pytest.raises(homework.HomeworkError, match="finds no student id"):
        gradebook.student_of(Path("export/smith.ipynb"), canvas)
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("smith_1_01_embeddings.ipynb", "jones_2_01_embeddings.ipynb"):
        nbformat.write(_notebook(*_correct()), flat / name)
    with pytest.raises(homework.HomeworkError, match="two submissions of one chapter for student flat"):
        gradebook.grade_class([flat], json_path=tmp_path / "g.json")  # the folder is no id here
    assert not (tmp_path / "g.json").exists()


def test_a_csv_edited_by_hand_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "s" / "ana").mkdir(parents=True)
    (tmp_path / "s" / "ana" / "01_embeddings.ipynb").write_text("not json", encoding="utf-8")
    grades = tmp_path / "grades.csv"
    grades.write_text("student,ch01-gradient-rows (written)\nana,1\n", encoding="utf-8")
    code = homework.main(["grade", str(tmp_path / "s"), "--json", str(tmp_path / "g.json"), "--csv", str(grades)])
    assert code == 2 and "is not overwritten" in capsys.readouterr().err
    assert grades.read_text(encoding="utf-8") == "student,ch01-gradient-rows (written)\nana,1\n"


def test_release_gives_each_written_exercise_an_answer_cell():
    for lang in (None, "zh_CN"):
        student = homework.student_version(CH01, lang)
        answers = [c for c in student.cells if ANSWER in c.metadata]
        assert [c.metadata[ANSWER] for c in answers] == ["ch01-gradient-rows"]
        index = student.cells.index(answers[0])
        assert ":label: ch01-gradient-rows" in student.cells[index - 1].source  # right after the exercise
        assert (lang == "zh_CN") == ("你的答案" in answers[0].source)
    assert written_answers(student) == {"ch01-gradient-rows": ""}
    assert written_exercises(CH01) == ["ch01-gradient-rows"]
