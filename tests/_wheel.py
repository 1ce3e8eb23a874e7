"""attnlib's wheel, built from a copy of what it is built from and installed into a fresh virtual
environment with the course's pinned versions (tests/test_packaging.py). Installing takes half a
minute, so it is prepared as a background job (tests/_background.py) once the book is built."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Installed:
    python: Path  # the fresh environment's interpreter
    wheel: Path
    names: list[str]  # the files in the wheel
    constraints: Path  # requirements.txt's exact pins, for pip -c
    env: dict  # the environment to run it in: no PYTHONPATH, no VIRTUAL_ENV


def requirements_pins() -> list[str]:
    """requirements.txt's exact pins (``name==version``), to install the same versions as the course."""
    pins = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if re.match(r"^[A-Za-z0-9_.\-\[\]]+==\S+$", line):
            pins.append(line)
    return pins


def build_wheel(work: Path, python: Path | str = sys.executable, isolated: bool = False, env=None) -> Path:
    """attnlib's wheel, built in ``work`` from a copy holding only its sources (nothing else of the
    checkout helps, and setuptools writes its build/ into the copy). ``isolated``: let pip fetch the
    build backend (a ``python`` without setuptools); else the running environment's is used."""
    src = work / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("attnlib", "coursetools"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    dist = work / "dist"
    isolation = [] if isolated else ["--no-build-isolation"]
    subprocess.run(
        [str(python), "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(dist), str(src)],
        check=True,
        cwd=work,
        capture_output=True,
        env=env,
    )
    (wheel,) = dist.glob("attnlib-*.whl")
    return wheel


def build_and_install(work: Path) -> Installed:
    """Build the wheel, then install it into a new virtual environment, dependencies resolved by pip
    from the wheel's metadata and held to the course's pins."""
    wheel = build_wheel(work)
    env_dir = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(requirements_pins()) + "\n")
    # no ATTNLIB_LANG: a test that sets it (monkeypatch, in the main thread) must not reach this job's runs
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNLIB_LANG")}
    python = env_dir / "bin" / "python"
    subprocess.run(  # --no-compile: no .pyc for every file of every package (torch's alone take seconds)
        [str(python), "-m", "pip", "install", "-q", "--no-compile", "-c", str(constraints), str(wheel)],
        check=True,
        cwd=work,
        env=env,
        capture_output=True,
    )
    return Installed(python, wheel, zipfile.ZipFile(wheel).namelist(), constraints, env)
