"""The course in nbgrader and Otter-Grader (coursetools/exports.py): the exported notebooks, and the tools' own runs.

The fast tests read the exports of chapters 1, 4 and 5 (six coding exercises, five written ones).
The slow ones install nbgrader and Otter-Grader, pinned in tests/grading-tools-requirements.txt, into
_build/grading-tools (once; the course's .venv is not changed) and grade the exports with them, in a
background job (tests/_background.py): nbgrader's generate_assignment, autograde and export, and
otter assign then otter run."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _background
import nbformat
import pytest
import yaml

from attnlib.check import CHECKS
from coursetools import exports
from coursetools.chapters import BEGIN, END, SOLUTION_END, SOLUTION_START, written_exercises

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "notebooks" / name for name in ("01_embeddings.ipynb", "04_masking.ipynb", "05_softmax_values.ipynb")]
TOOLS = ROOT / "_build" / "grading-tools"
TOOLS_REQUIREMENTS = ROOT / "tests" / "grading-tools-requirements.txt"


def _chapter(src: Path) -> str:
    return "ch" + src.name[:2]


def _coding(src: Path) -> list[str]:
    return [label for label in CHECKS if label.startswith(_chapter(src) + "-")]


def _written(src: Path) -> list[str]:
    return written_exercises(nbformat.read(src, as_version=4))


def _gated(src: Path) -> dict[str, list]:
    """The cells of each gated solution of the source, by label, read here with the course's own markers."""
    gated, label = {}, None
    for cell in nbformat.read(src, as_version=4).cells:
        start = SOLUTION_START.search(cell.source) if cell.cell_type == "markdown" else None
        if start or label:
            label = start.group(1) if start else label
            gated.setdefault(label, []).append(cell)
            if cell.cell_type == "markdown" and SOLUTION_END.search(cell.source):
                label = None
    return gated


def _prose_lines(cells) -> list[str]:
    """The lines of text in gated cells, without the directive lines."""
    return [
        line.strip()
        for cell in cells
        for line in cell.source.splitlines()
        if len(line.strip()) > 20 and "{solution-" not in line and not line.strip().startswith(("```", ":"))
    ]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The two exports of the three chapters, written by the command line."""
    out = tmp_path_factory.mktemp("exports")
    for tool in ("nbgrader", "otter"):
        assert exports.main([f"export-{tool}", *map(str, SOURCES), "--out", str(out / tool)]) == 0
    return out


# ------------------------------------------------------------------ nbgrader's notebooks


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_nbgrader_source_has_nbgrader_cells(src, exported):
    nb = nbformat.read(exported / "nbgrader" / "source" / _chapter(src) / src.name, as_version=4)
    meta = [c.metadata.get("nbgrader") for c in nb.cells]
    assert all(m and m["schema_version"] == 3 for m in meta), "a cell without nbgrader's metadata"
    ids = [m["grade_id"] for m in meta]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[\w-]+", i) for i in ids), ids
    tests = {m["grade_id"]: c for c, m in zip(nb.cells, meta) if m["grade"] and c.cell_type == "code"}
    assert set(tests) == set(_coding(src))
    for label, cell in tests.items():
        check = CHECKS[label]
        m = cell.metadata.nbgrader
        assert (m["locked"], m["solution"], m["points"]) == (True, False, check.points)
        # hardened: attnlib's modules set aside, the checker imported afresh and called
        assert 'sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] == "attnlib"' in cell.source
        assert f'from attnlib.check import CHECKS as _CHECKS\n\n    _CHECKS["{label}"]({check.function})' in cell.source
    solutions = [c for c, m in zip(nb.cells, meta) if m["solution"] and c.cell_type == "code"]
    assert len(solutions) == len(tests)
    for cell in solutions:
        assert BEGIN in cell.source and END in cell.source and not cell.metadata.nbgrader["grade"]
    answers = {m["grade_id"]: c for c, m in zip(nb.cells, meta) if m["grade"] and c.cell_type == "markdown"}
    assert set(answers) == set(_written(src)) and answers
    gated = _gated(src)
    for label, cell in answers.items():
        m = cell.metadata.nbgrader
        assert (m["solution"], m["points"], m["locked"]) == (True, 1, False)
        model = cell.source.partition(BEGIN)[2].partition(END)[0]
        assert _prose_lines(gated[label]) and all(line in model for line in _prose_lines(gated[label]))
        assert cell.metadata.get("attnlib_answer") == label  # the course's grader finds it too
    # every other cell is read-only; the check cells, the gated prose and code of coding exercises are gone
    others = [m for m in meta if not m["grade"] and not m["solution"]]
    assert all(m["locked"] for m in others) and len(others) + len(tests) + len(solutions) + len(answers) == len(meta)
    text = "\n".join(c.source for c in nb.cells)
    assert "{solution-start}" not in text and "{solution-end}" not in text
    for label in _coding(src):
        assert f"check.{CHECKS[label].function}({CHECKS[label].function})" not in text
        prose = [c for c in gated[label] if c.cell_type == "markdown" or BEGIN not in c.source]
        assert all(line not in text for line in _prose_lines(prose)), label
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")


def test_nbgrader_config(exported):
    from traitlets.config import Config

    config = Config()
    exec((exported / "nbgrader" / "nbgrader_config.py").read_text(encoding="utf-8"), {"get_config": lambda: config})
    assert config.Execute.timeout == 30
    assert "add_missing_cells" not in config.get("CourseDirectory", {})  # nbgrader's default, False


# ------------------------------------------------------------------ Otter's master notebooks


def _config(cell) -> dict:
    return yaml.safe_load(cell.source.partition("\n")[2])


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_otter_master_has_question_blocks(src, exported):
    nb = nbformat.read(exported / "otter" / _chapter(src) / src.name, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "raw" and first.source.startswith("# ASSIGNMENT CONFIG\n")
    config = _config(first)
    assert config["requirements"] == "requirements.txt" and config["name"] == _chapter(src)
    assert config["tests"] == {"files": False, "ok_format": False}
    assert config["export_cell"]["pdf"] is False and config["generate"]["pdf"] is False
    raw = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "raw"]
    questions = {}
    for i, source in raw:
        if source.startswith("# BEGIN QUESTION"):
            questions[_config(nb.cells[i])["name"]] = i
    assert set(questions) == set(_coding(src)) | set(_written(src))
    for label in _coding(src):
        i, fn = questions[label], CHECKS[label].function
        assert _config(nb.cells[i]) == {"name": label, "points": CHECKS[label].points}
        kinds = [c.source if c.cell_type == "raw" else c.cell_type for c in nb.cells[i + 2 : i + 9]]
        assert kinds == [
            *("# BEGIN SOLUTION", "code", "# END SOLUTION"),
            *("# BEGIN TESTS", "code", "# END TESTS", "# END QUESTION"),
        ]
        solution, test = nb.cells[i + 3].source, nb.cells[i + 6].source
        assert "# BEGIN SOLUTION NO PROMPT" in solution and "# END SOLUTION" in solution
        assert "###" not in solution and f'raise NotImplementedError("{fn}: ' in solution
        assert test.startswith(f"def test_{fn}({fn}):") and f'_CHECKS["{label}"]({fn})' in test
        assert 'if name.split(".")[0] == "attnlib"' in test
    for label in _written(src):
        i = questions[label]
        assert _config(nb.cells[i]) == {"name": label, "points": 1, "manual": True}
        kinds = [c.source if c.cell_type == "raw" else c.cell_type for c in nb.cells[i + 2 : i + 6]]
        assert kinds == ["# BEGIN SOLUTION", "markdown", "# END SOLUTION", "# END QUESTION"]
        assert all(line in nb.cells[i + 3].source for line in _prose_lines(_gated(src)[label]))
    text = "\n".join(c.source for c in nb.cells)
    assert "{solution-start}" not in text and not re.search(r"^check\.\w+\(\w+\)$", text, re.M)


def test_otter_requirements_pin_the_course(exported):
    pins = dict(re.findall(r"^([\w.-]+)==(\S+)", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M))
    lines = (exported / "otter" / "ch05" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    for name in ("torch", "numpy", "matplotlib", "tqdm"):
        assert f"{name}=={pins[name]}" in lines
    assert not any(line.startswith("transformers") for line in lines)  # chapter 5 does not import it
    assert any(re.fullmatch(r"attnlib @ git\+https://\S+", line) for line in lines)


# ------------------------------------------------------------------ the hardened test, in a process of its own

HARDENED = r"""
import json, sys
sys.path.insert(0, {tests!r})
from _solutions import solution_of
import attnlib.check
from coursetools import exports

label, fn = {label!r}, attnlib.check.CHECKS[{label!r}].function
wrong = lambda *args: args[0]
attnlib.check.Check.__call__ = lambda self, f: None  # a notebook that makes every check pass
attnlib.check.CHECKS[label](wrong)  # the patch works: the naive check passes
seen = {{}}
for name, source in (("nbgrader", exports.nbgrader_test(label)), ("otter", exports.otter_test(label) + f"\ntest_{{fn}}({{fn}})")):
    for answer, f in (("wrong", wrong), ("right", solution_of(label))):
        try:
            exec(source, {{fn: f}})
            seen[name + " " + answer] = "pass"
        except AssertionError:
            seen[name + " " + answer] = "fail"
seen["patch kept"] = attnlib.check.Check.__call__(None, wrong) is None and sys.modules["attnlib.check"] is attnlib.check
print(json.dumps(seen))
"""


@pytest.mark.parametrize("label", ["ch01-one-hot", "ch05-stable-softmax"])
def test_hardened_tests_ignore_a_patched_check(label):
    script = HARDENED.format(tests=str(ROOT / "tests"), label=label)
    env = {k: v for k, v in os.environ.items() if k != "ATTNLIB_LANG"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "nbgrader wrong": "fail",
        "nbgrader right": "pass",
        "otter wrong": "fail",
        "otter right": "pass",
        "patch kept": True,  # the notebook's own modules are back after the test
    }


# ------------------------------------------------------------------ the command line


def test_exports_never_overwrite(tmp_path, capsys):
    src = str(SOURCES[2])
    assert exports.main(["export-otter", src, "--out", str(tmp_path)]) == 0
    master = tmp_path / "ch05" / SOURCES[2].name
    before = master.read_bytes()
    capsys.readouterr()
    assert exports.main(["export-otter", src, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists; it is not overwritten" in err and master.read_bytes() == before
    # an instructor's nbgrader_config.py is kept; a chapter already in source/ is refused
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text("c = get_config()  # mine\n", encoding="utf-8")
    assert exports.main(["export-nbgrader", src, "--out", str(course)]) == 0
    assert (course / "nbgrader_config.py").read_text(encoding="utf-8") == "c = get_config()  # mine\n"
    assert "nbgrader_config.py: already exists; kept as it is" in capsys.readouterr().out
    assert exports.main(["export-nbgrader", str(SOURCES[0]), src, "--out", str(course)]) == 2
    assert "already exists" in capsys.readouterr().err and not (course / "source" / "ch01").exists()


def test_bad_arguments_exit_2(tmp_path, capsys):
    src = str(SOURCES[0])
    for args, said in [
        (
            [src, "--out", str(tmp_path), "--lang", "fr"],
            "--lang: expected one of ['zh_CN'] (or none for English), received 'fr'",
        ),
        ([str(tmp_path / "nope.ipynb"), "--out", str(tmp_path)], "expected a chapter notebook named NN_topic.ipynb"),
        ([str(tmp_path / "01_missing.ipynb"), "--out", str(tmp_path)], "cannot read it"),
        ([src, src, "--out", str(tmp_path)], "both are chapter ch01; give one notebook per chapter"),
    ]:
        capsys.readouterr()
        assert exports.main(["export-nbgrader", *args]) == 2, args
        assert said in capsys.readouterr().err
    # a chapter whose check cell was deleted: the export cannot place its test
    nb = nbformat.read(SOURCES[0], as_version=4)
    nb.cells = [c for c in nb.cells if c.source.strip() != "check.one_hot_rows(one_hot_rows)"]
    (tmp_path / "edited").mkdir()
    nbformat.write(nb, tmp_path / "edited" / SOURCES[0].name)
    capsys.readouterr()
    assert exports.main(["export-otter", str(tmp_path / "edited" / SOURCES[0].name), "--out", str(tmp_path / "o")]) == 2
    assert "expected a cell `check.one_hot_rows(one_hot_rows)` for exercise ch01-one-hot" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "edited")
    with pytest.raises(SystemExit) as exit_:
        exports.main(["export-otter", src])  # no --out
    assert exit_.value.code == 2 and "--out" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_chinese_export(tmp_path):
    src = SOURCES[2]
    assert exports.main(["export-nbgrader", str(src), "--out", str(tmp_path), "--lang", "zh_CN"]) == 0
    nb = nbformat.read(tmp_path / "source" / "ch05" / src.name, as_version=4)
    assert "ATTNLIB_LANG" in next(c.source for c in nb.cells if c.cell_type == "code")
    answers = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.nbgrader["grade"]]
    assert len(answers) == len(_written(src)) and all(re.search(r"[\u4e00-\u9fff]", c.source) for c in answers)
    tests = [c for c in nb.cells if c.cell_type == "code" and c.metadata.nbgrader["grade"]]
    assert [t.source for t in tests] == [exports.nbgrader_test(label) for label in _coding(src)]  # same code


# ------------------------------------------------------------------ the tools themselves (slow)


def _tools_env() -> dict:
    """Install the pinned tools into _build/grading-tools once (again when the pins change); the
    environment that runs them with the course's Python."""
    stamp = TOOLS / "installed-from.sha256"
    digest = hashlib.sha256(TOOLS_REQUIREMENTS.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        shutil.rmtree(TOOLS, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps"]
        done = subprocess.run(
            [*pip, "--target", str(TOOLS), "-r", str(TOOLS_REQUIREMENTS)], capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, f"installing {TOOLS_REQUIREMENTS.name} failed:\n{done.stderr[-3000:]}"
        stamp.write_text(digest)
    env = {k: v for k, v in os.environ.items() if k != "ATTNLIB_LANG"}
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS), str(ROOT)])
    env["PATH"] = os.pathsep.join([str(TOOLS / "bin"), env["PATH"]])  # nbgrader runs `alembic` from PATH
    return env


def _run(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` with the course's Python and the tools (``-m nbgrader ...``), which must succeed."""
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


PATCH = """import attnlib.check
attnlib.check.Check.__call__ = lambda self, fn: None  # every check passes"""
NAIVE = "print('naive checks passed:', {calls})"


def _cheat(release: Path, dest: Path, src: Path) -> None:
    """The student version with a wrong answer to every coding exercise (its first argument back), a
    cell that patches attnlib.check after the imports, and at the end the course's own check calls,
    which the patch makes pass."""
    nb = nbformat.read(release, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "raise NotImplementedError()" in cell.source:
            first = re.search(r"def \w+\((\w+)", cell.source).group(1)
            cell.source = cell.source.replace("raise NotImplementedError()", f"return {first}  # wrong")
    at = next(i for i, c in enumerate(nb.cells) if "from attnlib import check" in c.source) + 1
    nb.cells.insert(at, nbformat.v4.new_code_cell(PATCH))
    calls = ", ".join(f"check.{CHECKS[lbl].function}({CHECKS[lbl].function})" for lbl in _coding(src))
    nb.cells.append(nbformat.v4.new_code_cell(NAIVE.format(calls=calls)))
    dest.parent.mkdir(parents=True)
    nbformat.write(nb, dest)


SCORES = """import json
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gb:
    print(json.dumps({s.id: {a.name: {g.name: g.score for n in a.notebooks for g in n.grades}
                             for a in s.submissions} for s in gb.students}))"""


def _nbgrader(env: dict, work: Path) -> dict:
    course = work / "nbgrader"
    exports.export("nbgrader", SOURCES, course)
    for src in SOURCES:
        ch = _chapter(src)
        _run(env, course, "-m", "nbgrader", "generate_assignment", ch)
        release = course / "release" / ch / src.name
        for student, notebook in (("solution", course / "source" / ch / src.name), ("student", release)):
            (course / "submitted" / student / ch).mkdir(parents=True)
            shutil.copy(notebook, course / "submitted" / student / ch / src.name)
        _cheat(release, course / "submitted" / "cheat" / ch / src.name, src)
        _run(env, course, "-m", "nbgrader", "autograde", ch, "--create")
    _run(env, course, "-m", "nbgrader", "export")
    with open(course / "grades.csv", encoding="utf-8") as f:
        totals = {
            (r["student_id"], r["assignment"]): (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(f)
        }
    scores = json.loads(_run(env, course, "-c", SCORES).stdout)
    naive = {
        src.name: [
            "".join(o.get("text", "") for o in c.outputs)
            for c in nbformat.read(course / "autograded" / "cheat" / _chapter(src) / src.name, as_version=4).cells
            if c.cell_type == "code" and c.source.startswith("print('naive checks passed:'")
        ]
        for src in SOURCES
    }
    return {"totals": totals, "scores": scores, "naive": naive}


def _otter(env: dict, work: Path) -> dict:
    out = work / "otter"
    exports.export("otter", SOURCES, out)
    results = {}
    for src in SOURCES:
        ch = out / _chapter(src)
        _run(env, ch, "-m", "otter", "assign", src.name, "dist")  # runs the tests against the solutions too
        (zip_,) = (ch / "dist" / "autograder").glob("*.zip")
        graded = [("solution", ch / "dist" / "autograder" / src.name)]
        if src == SOURCES[-1]:
            graded.append(("student", ch / "dist" / "student" / src.name))
        for who, notebook in graded:
            (ch / who).mkdir()  # otter run needs its output directory to exist
            _run(env, ch, "-m", "otter", "run", "-a", str(zip_), "-o", who, str(notebook))
            tests = json.loads((ch / who / "results.json").read_text(encoding="utf-8"))["tests"]
            results[(who, src.name)] = {t["name"]: (t["score"], t["max_score"]) for t in tests if "max_score" in t}
    return results


@_background.job(after_book=True, after=("graded_sources",))
def graded_by_the_tools():
    """nbgrader and Otter-Grader grading the exports of SOURCES, side by side (each keeps about one core
    busy): their results, and the seconds each took."""
    import time

    env = _tools_env()
    work = _background.temporary_dir("tools-")

    def timed(run):
        start = time.monotonic()
        return run(env, work), round(time.monotonic() - start)

    with ThreadPoolExecutor(2) as pool:
        nbgrader, otter = pool.map(timed, (_nbgrader, _otter))
    return {"nbgrader": nbgrader, "otter": otter}


@pytest.mark.slow
def test_nbgrader_gives_the_solutions_full_marks_and_the_students_zero(graded_by_the_tools):
    (done, seconds), totals = graded_by_the_tools["nbgrader"], graded_by_the_tools["nbgrader"][0]["totals"]
    print(f"nbgrader: {seconds} s")
    for src in SOURCES:
        ch, coding, written = _chapter(src), _coding(src), _written(src)
        auto = sum(CHECKS[label].points for label in coding)
        assert totals[("solution", ch)] == (auto, auto + len(written))  # written answers wait for a TA
        assert totals[("student", ch)] == (0, auto + len(written))
        scores = done["scores"]
        assert {label: scores["solution"][ch][label] for label in coding} == {lbl: CHECKS[lbl].points for lbl in coding}
        assert all(scores["solution"][ch][label] == 0 for label in written)  # not marked yet


@pytest.mark.slow
def test_nbgrader_is_not_fooled_by_a_patched_check(graded_by_the_tools):
    done, _ = graded_by_the_tools["nbgrader"]
    for src in SOURCES:
        ch = _chapter(src)
        calls = " ".join(["None"] * len(_coding(src)))  # each patched check returned None: passed
        assert done["naive"][src.name] == [f"naive checks passed: {calls}\n"], "the patch did not work"
        assert done["totals"][("cheat", ch)][0] == 0
        assert all(done["scores"]["cheat"][ch][label] == 0 for label in _coding(src))


@pytest.mark.slow
def test_otter_assign_then_run_gives_the_solutions_full_marks(graded_by_the_tools):
    results, seconds = graded_by_the_tools["otter"]
    print(f"otter: {seconds} s")
    for src in SOURCES:
        coding = _coding(src)
        expected = {label: (CHECKS[label].points, CHECKS[label].points) for label in coding}
        assert results[("solution", src.name)] == expected  # manual questions are graded by hand, elsewhere
    student = results[("student", SOURCES[-1].name)]
    assert student == {label: (0, CHECKS[label].points) for label in _coding(SOURCES[-1])}
