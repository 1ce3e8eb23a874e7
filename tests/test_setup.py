"""The README's set-up, as a learner meets it: the Makefile checks the Python it is given, makes
.venv/ again when another Python made it, and starts JupyterLab as root too.

Each test runs the real Makefile in a temporary directory with an empty requirements.txt, so pip
has nothing to install; an older Python is played by the course's own Python with
``sys.version_info`` set to 3.10.13 (no second Python needs to be installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))  # the Python that made .venv/
VERSION = ".".join(map(str, sys.version_info[:3]))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "requirements.txt").write_text("# nothing to install: the test is about .venv/ itself\n")
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def _python_310(path: Path) -> Path:
    """An executable that runs ``-c CODE`` as Python 3.10.13 would report itself."""
    path.write_text(
        f"#!{BASE_PYTHON}\n"
        "import sys\n"
        'sys.version = "3.10.13 (a test stand-in)"\n'
        'sys.version_info = (3, 10, 13, "final", 0)\n'
        "exec(sys.argv[2])\n"
    )
    path.chmod(0o755)
    return path


def _make(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV")}
    return subprocess.run(["make", "-C", str(project), *args], capture_output=True, text=True, env=env, timeout=300)


def test_an_older_python_is_refused_before_anything_is_made(tmp_path):
    project = _project(tmp_path)
    old = _python_310(tmp_path / "python3.10")
    run = _make(project, f"PYTHON={old}", "check")
    assert run.returncode != 0
    assert "needs Python 3.11 or newer" in run.stdout and "is 3.10.13" in run.stdout, run.stdout + run.stderr
    assert "make PYTHON=python3.12 check" in run.stdout
    assert not (project / ".venv").exists()


def test_a_python_that_is_not_there_is_named(tmp_path):
    run = _make(_project(tmp_path), "PYTHON=python3.99-not-here", "check")
    assert run.returncode != 0 and "PYTHON=python3.99-not-here is not a Python that runs here" in run.stdout


@pytest.mark.slow
def test_a_venv_made_by_another_python_is_made_again(tmp_path):
    """A .venv/ left by a failed set-up with another Python (its stamp never written) is replaced,
    not reused: `python -m venv` over it would keep the other interpreter."""
    project = _project(tmp_path)
    (project / ".venv" / "bin").mkdir(parents=True)
    _python_310(project / ".venv" / "bin" / "python")
    (project / ".venv" / "left-over").write_text("from the failed set-up")
    run = _make(project, f"PYTHON={BASE_PYTHON}", f".venv/.installed-{VERSION}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f".venv/ was made by Python 3.10.13 and PYTHON is {VERSION}: making .venv/ again" in run.stdout
    assert not (project / ".venv" / "left-over").exists()
    made = subprocess.run([project / ".venv" / "bin" / "python", "--version"], capture_output=True, text=True)
    assert made.stdout.split() == ["Python", VERSION]
    again = _make(project, f"PYTHON={BASE_PYTHON}", f".venv/.installed-{VERSION}")  # made once: nothing to do
    assert again.returncode == 0 and "is up to date" in again.stdout, again.stdout


def test_make_lab_passes_allow_root_exactly_when_run_as_root(tmp_path):
    project = _project(tmp_path)
    (project / ".venv" / "bin").mkdir(parents=True)
    run = _make(project, "-n", "-W", f".venv/.installed-{VERSION}", f"PYTHON={BASE_PYTHON}", "lab")
    lab = [line for line in run.stdout.splitlines() if "jupyter lab" in line]
    assert len(lab) == 1, run.stdout + run.stderr
    assert lab[0].endswith("--allow-root") == (os.geteuid() == 0), lab[0]
