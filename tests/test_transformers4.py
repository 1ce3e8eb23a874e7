"""Part III under transformers 4.x, Colab's line, as well as under the course's pinned 5.x.

Colab keeps transformers 4.57 (tests/colab-requirements.txt), whose configs spell RoPE differently
(``rope_theta``, ``rope_scaling``) and whose layers take other arguments. A background job installs
that transformers, with the huggingface-hub and tokenizers it needs, into a folder of its own and puts
it first on ``PYTHONPATH``; everything else (torch, attnlib, nbval) is the course's environment. It
then runs, in one pytest there, every chapter that imports transformers (Part III) under nbval
strict (the same committed outputs) and every test that imports it. The full Colab-like check (Python 3.12, Colab's torch,
numpy and matplotlib, every chapter) is `make colab-check`, tests/colab_like.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import _background
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("transformers", "huggingface-hub", "tokenizers")
USES = re.compile(r"^\s*(import transformers|from transformers|\S.*importorskip\(\"transformers\"\))", re.M)


def part3() -> list[str]:
    """The chapters whose code imports transformers, and the tests that import it: what must run under 4.x."""
    notebooks = [p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) if USES.search(_code(p))]
    tests = [p for p in sorted((ROOT / "tests").glob("test_*.py")) if p.name != Path(__file__).name]
    tests = [p for p in tests if USES.search(p.read_text(encoding="utf-8"))]
    return [str(p.relative_to(ROOT)) for p in notebooks + tests]


def _code(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def colab_pins() -> list[str]:
    """tests/colab-requirements.txt's pins of transformers and what it needs."""
    lines = (ROOT / "tests" / "colab-requirements.txt").read_text().splitlines()
    pins = [line.split("#")[0].strip() for line in lines if line.split("==")[0].strip() in PACKAGES]
    assert len(pins) == len(PACKAGES), f"tests/colab-requirements.txt should pin {PACKAGES}: {pins}"
    return pins


@_background.job(after_book=True)
def transformers4() -> dict:
    """Install Colab's transformers beside the course's environment (seconds: pure Python but for
    tokenizers' wheel), then run Part III's notebooks and tests with it first on the path."""
    work = _background.temporary_dir("transformers4-")
    site = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--target",
            str(site),
            *colab_pins(),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    version = subprocess.run(
        [sys.executable, "-c", "import transformers; print(transformers.__version__, transformers.__file__)"],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    report = work / "junit.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}", *part3()],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    return {"version": version, "run": run, "cases": list(ET.parse(report).getroot().iter("testcase"))}


@pytest.mark.slow
def test_part3_runs_under_colabs_transformers_4(transformers4):
    """Chapters 15-17 give their committed outputs, and attnlib equals transformers' models, under
    transformers 4.57 too: no test failed or was skipped for want of something (but a GPU, or a model
    that 4.x does not have)."""
    version = transformers4["version"]
    pinned = next(pin for pin in colab_pins() if pin.startswith("transformers=="))
    assert version.returncode == 0 and version.stdout.split()[0] == pinned.split("==")[1], (
        version.stdout + version.stderr
    )
    assert "transformers4-" in version.stdout, version.stdout  # the installed 4.x, not the course's 5.x
    run = transformers4["run"]
    cases = list(transformers4["cases"])
    failed = [c.get("classname", "") + "::" + c.get("name", "") for c in cases if c.find("failure") is not None
              or c.find("error") is not None]  # fmt: skip
    assert run.returncode == 0 and not failed, f"{failed}\n{run.stdout[-6000:]}"
    skipped = [(c.get("name"), c.find("skipped").get("message", "")) for c in cases if c.find("skipped") is not None]
    # only the tests that need a GPU, and those of a model that 4.x does not have (DeepSeek-V3.2: transformers 5)
    assert all("CUDA" in why or re.search(r"transformers 4\.\d+\.\d+ has no \w+", why) for _, why in skipped), skipped
    chapters = {c.get("classname") for c in cases if c.get("classname", "").endswith(".ipynb")}
    assert chapters == {path.replace("/", ".") for path in part3() if path.endswith(".ipynb")}, chapters
    assert sum(c.get("classname", "").endswith(".ipynb") for c in cases) > 60  # every code cell of those chapters


def test_part3_is_found():
    """What the job runs: Part III's chapters, from chapter 15 on, and the tests against transformers."""
    found = part3()
    assert found[:3] == [
        f"notebooks/{n}.ipynb" for n in ("15_modern_attention", "16_local_attention", "17_latent_attention")
    ]
    assert {"tests/test_hf.py", "tests/test_latent.py", "tests/test_windows.py", "tests/test_check_ch17.py"} <= set(
        found
    )
    assert not any(path.startswith("notebooks/0") for path in found), found
