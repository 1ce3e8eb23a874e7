"""Grading a class: many submissions, one gradebook, a CSV for the LMS, a feedback page per student.

    python -m coursetools.homework grade submissions/ --json gradebook.json --csv grades.csv --feedback feedback/

**Layout.** Each student's notebooks in a folder named by the student's id,
``submissions/<student id>/<NN_topic>.ipynb`` (the default ``--id-pattern`` takes the folder's
name), or flat as an LMS exports them, with a pattern that finds the id in the file name, e.g.
``--id-pattern "(?P<student>[^/_]+)_[^/]*\\.ipynb$"`` for Canvas' ``smith_1234_05_softmax_values.ipynb``.
A folder given on the command line is searched for notebooks.

**One bad submission costs that submission only**: a file that is not a notebook, or of no
chapter, gets a row with the reason; a cell that kills the kernel or gets it stuck is skipped
(``coursetools.grade``); ``--submission-timeout`` bounds each submission's time.

**The gradebook** (``--json``) is written again as each submission finishes, so a run that
stops loses nothing; run the same command again and the submissions already graded (the same
file, unchanged: its SHA-256) are skipped (``--regrade`` grades them again).

**Written exercises**: ``release`` gives each an answer cell; the grader collects the answers
into the gradebook, the CSV (a column per written exercise, empty until marked) and the
feedback pages. Marks come back with ``python -m coursetools.homework marks marked.csv --json
gradebook.json``, from the CSV with its written columns filled in.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import html
import importlib.metadata
import json
import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

from attnlib.check import CHECKS
from attnlib.i18n import speaking, tr

from .chapters import HomeworkError, exercises_of, read_notebook, written_answers, written_exercises
from .grade import ATTNLIB_ROOT, Result, _num, grade_one, report

DEFAULT_ID = r"(?P<student>[^/]+)/[^/]+\.ipynb$"  # submissions/<student id>/<notebook>.ipynb
LANG_CELL = re.compile(r"""os\.environ\[["']ATTNLIB_LANG["']\]\s*=\s*["'](\w+)["']""")


def find_submissions(paths: list[Path]) -> list[Path]:
    """The notebooks to grade: each file given, and every ``.ipynb`` under each folder given
    (sorted; Jupyter's ``.ipynb_checkpoints`` copies left out)."""
    found = []
    for path in paths:
        if not path.exists():
            raise HomeworkError(tr("{path}: cannot read it ({why})").format(path=path, why="No such file or directory"))
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        else:
            found.append(path)
    return found


def student_of(path: Path, pattern: str = DEFAULT_ID) -> str:
    """The student id in a submission's path: the group ``student`` of ``pattern``, searched in
    the path with ``/`` between its parts."""
    m = re.search(pattern, Path(path).as_posix())
    if not m or not m.groupdict().get("student"):
        raise HomeworkError(
            tr("{path}: --id-pattern {pattern} finds no student id in it (expected a named group 'student')").format(
                path=path, pattern=pattern
            )
        )
    return m.group("student")


def _chapter_of_path(path: Path) -> str | None:
    m = re.search(r"(?:^|[^0-9])(\d\d)_[a-z]", Path(path).name)
    return f"ch{m.group(1)}" if m else None


def language_of(nb) -> str:
    """The submission's language: the one its first code cells give ``ATTNLIB_LANG`` (the Chinese
    student versions do), else English."""
    for cell in nb.cells:
        if cell.cell_type == "code" and (m := LANG_CELL.search(cell.source)) and m.group(1) in ("en", "zh_CN"):
            return m.group(1)
    return "en"


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def grade_submission(path: Path, student: str, timeout: float, submission_timeout: float | None) -> dict:
    """One submission's gradebook record; never raises for what the submission contains."""
    record = {
        "submission": str(path),
        "student": student,
        "sha256": sha256(path) if Path(path).is_file() else None,
        "chapter": _chapter_of_path(path),
        "lang": "en",
        "status": "graded",
        "reason": "",
        "notes": [],
        "exercises": [],
        "written": {},
        "marks": {},
        "graded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    try:
        nb = read_notebook(path)
        checks = exercises_of(nb, path)
    except HomeworkError as e:  # not a notebook, or of no chapter: 0 for each exercise of the file name's chapter
        exercises = [
            asdict(Result(c.exercise, c.function, 0, c.points, "error", str(e)))
            for label, c in CHECKS.items()
            if label.split("-")[0] == record["chapter"]
        ]
        return record | {"status": "not graded", "reason": str(e), "exercises": exercises} | _auto_score(exercises)
    record["chapter"] = checks[0].exercise.split("-")[0]
    record["lang"] = language_of(nb)
    answers = written_answers(nb)
    record["written"] = {label: answers.get(label, "") for label in written_exercises(nb)}
    try:
        results = grade_one(path, timeout, None, submission_timeout, record["notes"], lang=record["lang"])
    except Exception as e:  # the grader's own failure on this file: recorded, the run goes on
        with speaking(record["lang"]):
            reason = tr("the grader failed on it: {error}").format(error=f"{type(e).__name__}: {e}")
        return record | {"status": "not graded", "reason": reason} | _auto_score([])
    record["exercises"] = [asdict(r) for r in results]
    return record | _auto_score(record["exercises"])


def _auto_score(exercises: list[dict]) -> dict:
    """The points of the coding exercises, graded here (the written ones are marked by hand)."""
    return {
        "score": round(sum(e["points"] for e in exercises), 2),
        "max_score": sum(e["max_points"] for e in exercises),
    }


def score(record: dict) -> tuple[float, int]:
    """``(points, out of)`` of a record: the coding exercises and the written ones (marked or not)."""
    points = sum(e["points"] for e in record["exercises"]) + sum(v for v in record["marks"].values() if v is not None)
    return round(points, 2), sum(e["max_points"] for e in record["exercises"]) + len(record["written"])


# ------------------------------------------------------------------ the gradebook file


def load_gradebook(path: Path | None) -> dict:
    if path is None or not path.exists():
        return {"attnlib": _attnlib_info(), "submissions": []}
    try:
        book = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(book.get("submissions"), list)
    except (ValueError, AssertionError, AttributeError):
        raise HomeworkError(
            tr("{path}: not a gradebook written by this tool (expected JSON with a list 'submissions')").format(
                path=path
            )
        ) from None
    return book


def save_gradebook(path: Path | None, book: dict) -> None:
    """Write the gradebook atomically: a run killed while writing leaves the previous one whole."""
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(book, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _attnlib_info() -> dict:
    """Which attnlib graded: its version, folder and, in a git checkout, its commit."""
    try:
        version = importlib.metadata.version("attnlib")
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(ATTNLIB_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"version": version, "path": str(ATTNLIB_ROOT / "attnlib"), "commit": commit or None}


# ------------------------------------------------------------------ a class


def grade_class(
    paths: list[Path],
    *,
    timeout: float = 30.0,
    submission_timeout: float | None = None,
    jobs: int = 1,
    json_path: Path | None = None,
    csv_path: Path | None = None,
    feedback_dir: Path | None = None,
    id_pattern: str = DEFAULT_ID,
    regrade: bool = False,
    echo=print,
) -> dict:
    """Grade every submission under ``paths``; the gradebook, written as each one finishes.

    Returns the gradebook (``{"attnlib": {...}, "submissions": [record, ...]}``). Raises
    ``HomeworkError`` only for the instructor's arguments (an id pattern that finds no id, two
    submissions of one chapter for one student, a CSV edited since it was written), before
    anything runs.
    """
    submissions = find_submissions(paths)
    if not submissions:
        raise HomeworkError(tr("no notebooks found in {paths}").format(paths=", ".join(map(str, paths))))
    students = {path: student_of(path, id_pattern) for path in submissions}
    _check_one_per_chapter(students)
    book = load_gradebook(json_path)
    _check_csv_unchanged(csv_path, book)
    book["attnlib"] = _attnlib_info()
    kept = {rec["submission"]: rec for rec in book["submissions"]}
    # the gradebook's order: the submissions given, then those of earlier runs (a dict: ordered, and quick to search)
    given = dict.fromkeys(str(p) for p in submissions)
    pending = [p for p in submissions if regrade or _stale(kept.get(str(p)), p)]
    for path in submissions:
        if path not in pending:
            echo(tr("{path}: already graded, skipped (--regrade grades it again)").format(path=path))
    lock = threading.Lock()
    with ThreadPoolExecutor(jobs) as pool:  # kernels are processes: threads only wait on them
        futures = {pool.submit(grade_submission, p, students[p], timeout, submission_timeout): p for p in pending}
        for future in as_completed(futures):
            record = future.result()
            with lock:
                kept[record["submission"]] = record
                book["submissions"] = [kept[key] for key in given if key in kept]
                book["submissions"] += [r for key, r in kept.items() if key not in given]
                save_gradebook(json_path, book)
            echo(_printed(record))
    if csv_path is not None:
        book["csv_sha256"] = write_csv(csv_path, book)
        save_gradebook(json_path, book)
    if feedback_dir is not None:
        write_feedback(feedback_dir, book)
    return book


def _stale(record: dict | None, path: Path) -> bool:
    """Whether a submission needs grading: never graded (or not gradable last time), or changed
    since (its SHA-256)."""
    return (
        record is None
        or record.get("status") != "graded"
        or not Path(path).is_file()
        or record.get("sha256") != sha256(path)
    )


def _check_one_per_chapter(students: dict) -> None:
    seen = {}
    for path, student in students.items():
        key = (student, _chapter_of_path(path) or Path(path).name)
        if key in seen:
            raise HomeworkError(
                tr(
                    "{a} and {b}: two submissions of one chapter for student {student} "
                    "(give each student a folder, or an --id-pattern that finds the id in the file name)"
                ).format(a=seen[key], b=path, student=student)
            )
        seen[key] = path


def _printed(record: dict) -> str:
    if record["status"] != "graded":
        return f"{record['submission']}\n" + tr("not graded: {reason}").format(reason=record["reason"])
    text = report(Path(record["submission"]), [Result(**e) for e in record["exercises"]])
    return "\n".join([text, *(f"  {note}" for note in record["notes"])])


# ------------------------------------------------------------------ CSV and feedback


def columns(book: dict) -> tuple[list[str], list[str]]:
    """The coding and the written exercises of every graded chapter, in order."""
    coded, written = [], []
    for rec in book["submissions"]:
        coded += [e["exercise"] for e in rec["exercises"] if e["exercise"] not in coded]
        written += [label for label in rec["written"] if label not in written]
    return sorted(coded), sorted(written)


def write_csv(path: Path, book: dict) -> str:
    """One row per student: id, a column per exercise (points), per written exercise (the mark,
    empty until marked), the total, the maximum and the reasons of any submission not graded.
    Returns the file's SHA-256 (kept in the gradebook: an edited CSV is never overwritten)."""
    coded, written = columns(book)
    rows: dict[str, dict] = {}
    for rec in book["submissions"]:
        row = rows.setdefault(rec["student"], {"student": rec["student"], "total": 0.0, "max": 0, "comments": []})
        for e in rec["exercises"]:
            row[e["exercise"]] = _num(e["points"])
        for label in rec["written"]:
            mark = rec["marks"].get(label)
            row[f"{label} (written)"] = "" if mark is None else _num(mark)
        points, out_of = score(rec)
        row["total"] += points
        row["max"] += out_of
        if rec["status"] != "graded":
            row["comments"].append(rec["reason"])
    header = ["student", *coded, *(f"{label} (written)" for label in written), "total", "max", "comments"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, header)
        out.writeheader()
        for student in sorted(rows):
            row = rows[student]
            out.writerow(row | {"total": _num(row["total"]), "comments": "; ".join(row["comments"])})
    return sha256(path)


def _check_csv_unchanged(path: Path | None, book: dict) -> None:
    if path is not None and path.exists() and sha256(path) != book.get("csv_sha256"):
        raise HomeworkError(
            tr(
                "{path}: exists and was not written by this gradebook as it is now (edited, e.g. marks "
                "typed in?): it is not overwritten. Merge marks with `marks`, or choose another --csv"
            ).format(path=path)
        )


FEEDBACK_STYLE = (
    "body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "table{border-collapse:collapse}td,th{border:1px solid #999;padding:.3rem .6rem;vertical-align:top;text-align:left}"
    "pre{white-space:pre-wrap;margin:0}.pass{color:#1a7f37}.fail,.error,.timeout,.missing,.forbidden{color:#b3261e}"
)


def write_feedback(folder: Path, book: dict) -> list[Path]:
    """One HTML page per student, ``folder/<student id>.html``, in the student's language: each
    submission's exercises with points, result and the checker's whole message, the written
    answers and their marks. Pages are made by the tool: a second run replaces them."""
    folder.mkdir(parents=True, exist_ok=True)
    by_student: dict[str, list[dict]] = {}
    for rec in book["submissions"]:
        by_student.setdefault(rec["student"], []).append(rec)
    written = []
    for student, records in sorted(by_student.items()):
        lang = records[0]["lang"]
        with speaking(lang):
            page = _feedback_page(student, records, lang)
        path = folder / f"{re.sub(r'[^A-Za-z0-9_.@-]', '_', student)}.html"
        path.write_text(page, encoding="utf-8")
        written.append(path)
    return written


def _feedback_page(student: str, records: list[dict], lang: str) -> str:
    e = html.escape
    parts = [
        f'<!DOCTYPE html><html lang="{"zh-CN" if lang == "zh_CN" else "en"}"><head><meta charset="utf-8">',
        f"<title>{e(tr('Feedback for {student}').format(student=student))}</title>",
        f"<style>{FEEDBACK_STYLE}</style></head><body>",
        f"<h1>{e(tr('Feedback for {student}').format(student=student))}</h1>",
    ]
    for rec in records:
        points, out_of = score(rec)
        parts.append(f"<h2>{e(Path(rec['submission']).name)}</h2>")
        if rec["status"] != "graded":
            parts.append(f"<p>{e(tr('not graded: {reason}').format(reason=rec['reason']))}</p>")
            continue
        parts.append(f"<p>{e(tr('score: {score}/{total}').format(score=_num(points), total=out_of))}</p>")
        parts += [f"<p>{e(note)}</p>" for note in rec["notes"]]
        parts.append(
            f"<table><tr><th>{e(tr('exercise'))}</th><th>{e(tr('points'))}</th>"
            f"<th>{e(tr('result'))}</th><th>{e(tr('message'))}</th></tr>"
        )
        for x in rec["exercises"]:
            parts.append(
                f"<tr><td>{e(x['exercise'])}</td><td>{_num(x['points'])}/{x['max_points']}</td>"
                f'<td class="{e(x["result"])}">{e(tr(x["result"]))}</td><td><pre>{e(x["message"])}</pre></td></tr>'
            )
        for label, answer in rec["written"].items():
            mark = rec["marks"].get(label)
            shown = tr("awaiting marking") if mark is None else f"{_num(mark)}/1"
            parts.append(
                f"<tr><td>{e(label)}</td><td>{e(shown)}</td><td>{e(tr('written'))}</td>"
                f"<td><pre>{e(answer) or e(tr('(no answer)'))}</pre></td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


# ------------------------------------------------------------------ marks of written exercises


def merge_marks(marks_csv: Path, json_path: Path) -> int:
    """Read the marks of written exercises from a CSV (``write_csv``'s, its written columns filled
    in: a number from 0 to 1, or empty) into the gradebook. Returns how many marks were merged."""
    if not json_path.exists():
        raise HomeworkError(tr("{path}: no such gradebook (run grade with --json first)").format(path=json_path))
    book = load_gradebook(json_path)
    records = {}
    for rec in book["submissions"]:
        for label in rec["written"]:
            records[(rec["student"], label)] = rec
    merged = 0
    with open(marks_csv, newline="", encoding="utf-8") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            for column, value in row.items():
                m = re.fullmatch(r"(\S+) \(written\)", column or "")
                if not m or not (value or "").strip():
                    continue
                rec = records.get((row.get("student"), m.group(1)))
                if rec is None:
                    raise HomeworkError(
                        tr(
                            "{path}, line {line}: no written exercise {label} for student {student} in the gradebook"
                        ).format(path=marks_csv, line=line, label=m.group(1), student=row.get("student"))
                    )
                try:
                    mark = float(value)
                    assert 0 <= mark <= 1
                except (ValueError, AssertionError):
                    raise HomeworkError(
                        tr("{path}, line {line}, {column}: expected a mark from 0 to 1, received {value}").format(
                            path=marks_csv, line=line, column=column, value=repr(value)
                        )
                    ) from None
                rec["marks"][m.group(1)] = mark
                merged += 1
    book.pop("csv_sha256", None)  # the CSV on disk no longer shows the gradebook: write it anew
    save_gradebook(json_path, book)
    return merged
