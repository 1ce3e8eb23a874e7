"""The repository's own rules: notebooks committed executed, every page in the book."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BOOK_PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "book").glob("*.ipynb"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _src(cell: dict) -> str:
    s = cell["source"]
    return s if isinstance(s, str) else "".join(s)


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found in notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executed_top_to_bottom(path):
    """nbval silently passes cells that were never run: check the execution counts.

    Every code cell must have been run, in order, in one fresh kernel: counts
    1, 2, ..., N, and every execute_result carries its cell's count.
    """
    cells = _code_cells(_load(path))
    counts = [c.get("execution_count") for c in cells]
    never_run = [i for i, n in enumerate(counts) if n is None]
    assert not never_run, f"{path.name}: code cells {never_run} were never executed"
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(cells)}: "
        "restart the kernel and run all cells, then save"
    )
    for cell in cells:
        for out in cell.get("outputs", []):
            if out["output_type"] == "execute_result":
                assert out["execution_count"] == cell["execution_count"], _src(cell)[:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_outputs_stored(path):
    """A cell that prints, shows a figure or runs a check must have stored its output."""
    cells = _code_cells(_load(path))
    assert any(c.get("outputs") for c in cells), f"{path.name} has no stored outputs at all"
    shows = re.compile(r"^\s*(print\(|plt\.show\(\)|check\.)", re.M)
    for cell in cells:
        if shows.search(_src(cell)):
            assert cell.get("outputs"), f"{path.name}: no stored output for cell:\n{_src(cell)[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_name_and_kernel(path):
    assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), "chapters are notebooks/NN_topic.ipynb"
    nb = _load(path)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and _src(first).startswith("# "), "a chapter starts with its title"


def _toc_files() -> list[str]:
    """Every `file:` and `root:` entry of _toc.yml (a tiny reader: no YAML library needed)."""
    text = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    return re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)\s*$", text, re.M)


def test_toc_lists_every_notebook_and_page():
    listed = set(_toc_files())
    for path in NOTEBOOKS + BOOK_PAGES:
        entry = path.relative_to(ROOT).with_suffix("").as_posix()
        assert entry in listed, f"{entry} is not in _toc.yml, so it would not be in the book"


def test_toc_entries_exist():
    for entry in _toc_files():
        matches = list(ROOT.glob(entry + ".*"))
        assert any(p.suffix in (".md", ".ipynb") for p in matches), f"_toc.yml lists {entry}, which does not exist"


def test_requirements_pinned_exactly():
    lines = [l.split("#")[0].strip() for l in (ROOT / "requirements.txt").read_text().splitlines()]
    reqs = [l for l in lines if l and not l.startswith("-e")]
    assert "torch==2.13.0" in reqs, "torch must be pinned to exactly 2.13.0 (a range pulls CUDA wheels)"
    loose = [r for r in reqs if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.\-+]+", r)]
    assert not loose, f"not pinned exactly: {loose}"
    assert "-e ." in lines, "requirements.txt must install attnlib itself (-e .)"


def test_attnlib_docstring_lists_every_public_name():
    import attnlib

    doc = attnlib.__doc__
    missing = [name for name in attnlib.__all__ if name not in doc]
    assert not missing, f"attnlib/__init__.py's docstring does not mention {missing}"


def test_workflow_runs_per_branch_tests_every_python_and_writes_pages_only_to_deploy():
    """.github/workflows/book.yml: one concurrency group per branch or pull request (a push to one
    never cancels another's run), the test job without Pages write permission, a matrix over the
    Python versions the README promises, and the deploy job alone allowed to write to Pages."""
    import yaml

    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text(encoding="utf-8"))
    assert "github.ref" in flow["concurrency"]["group"] and "pull_request" in flow["concurrency"]["group"]
    assert flow["permissions"] == {"contents": "read"}
    test = flow["jobs"]["test-and-build"]
    assert "permissions" not in test
    floor = re.search(r'requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert test["strategy"]["matrix"]["python"][0] == floor
    assert flow["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}


def test_the_python_floor_is_one_number():
    """pyproject.toml's requires-python is what the Makefile checks and what every set-up page says
    (the course's pins need it: numpy 2.4, matplotlib 3.11 and transformers 5 have no 3.10 release)."""
    floor = re.search(r'requires-python = ">=3\.(\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"sys.version_info < (3, {floor})" in (ROOT / "Makefile").read_text()
    for page in ("README.md", "book/setup.md", "CONTRIBUTING.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert re.search(rf"Python 3\.{floor} or (newer|later)", text), f"{page} should say Python 3.{floor} or newer"
        assert not re.search(r"Python 3\.(\d+)\+", text) or f"Python 3.{floor}+" in text, page


def test_licence_matches_pyproject():
    """LICENSE holds the licence pyproject.toml declares for the code; the README states the book's."""
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    declared = re.search(r'license = \{ text = "(\w+)" \}', (ROOT / "pyproject.toml").read_text()).group(1)
    assert declared == "MIT" and text.startswith("MIT License")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in readme and "LICENSE" in readme


def _named_paths(text: str) -> list[str]:
    """Repository paths a page names in backticks: `book/execute.py`, `locales/zh_CN/terminology.md`."""
    names = re.findall(
        r"`([A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)+/?|[A-Za-z0-9_\-]+\.(?:py|md|yml|toml|txt|cfg))`", text
    )
    return [
        n
        for n in names
        if not n.startswith(("http", "_build", ".venv", "student", "submissions"))
        and "NN" not in n
        and not n.startswith("notebooks/zh")
    ]


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md", "book/homework.md"])
def test_pages_name_only_paths_and_make_targets_that_exist(page):
    """What a contributor reads stays true: every file or folder named exists, every `make X` is a target."""
    text = (ROOT / page).read_text(encoding="utf-8")
    missing = [
        p
        for p in _named_paths(text)
        if not ((ROOT / p).exists() if "/" in p else any(ROOT.glob(f"*/{p}")) or (ROOT / p).exists())
    ]
    assert not missing, f"{page} names paths that do not exist: {missing}"
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", text))
    assert named <= targets, f"{page} names make targets that do not exist: {sorted(named - targets)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_carries_no_volatile_metadata(path):
    """A notebook re-executed by `make notebooks` (book/execute.py) differs from the committed one
    only where an output changed: no per-cell timestamps, no widget state, streams joined."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}, sorted(nb["metadata"])
    for i, cell in enumerate(nb["cells"]):
        extra = set(cell.get("metadata", {})) - {"mystnb", "tags"}
        assert not extra, f"cell {i} carries volatile metadata {sorted(extra)}: run book/execute.py"
        outputs = cell.get("outputs", [])
        for a, b in zip(outputs, outputs[1:]):
            assert not (a["output_type"] == b["output_type"] == "stream" and a["name"] == b["name"]), (
                f"cell {i}: one stream split in two outputs: run book/execute.py"
            )


# The figures stay in the notebooks (embedded PNG): a chapter opened on GitHub, in Colab or offline
# shows them, and re-executing draws the same bytes, so a diff shows only a figure that changed.
# These limits keep each notebook small enough to view on GitHub and to review; CONTRIBUTING.md
# says what to do when one is reached.
NOTEBOOK_LIMIT, FIGURE_LIMIT = 500_000, 150_000  # bytes of the .ipynb file, of one figure's base64


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_and_its_figures_stay_small(path):
    size = path.stat().st_size
    assert size <= NOTEBOOK_LIMIT, f"{path.name}: {size:,} bytes, more than {NOTEBOOK_LIMIT:,}"
    for i, cell in enumerate(_load(path)["cells"]):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png", "")
            assert len(png) <= FIGURE_LIMIT, f"{path.name} cell {i}: a figure of {len(png):,} bytes"


def test_ruff_is_clean():
    """`make lint`: the code and the notebooks pass ruff's checks and the code its format
    (pyproject.toml [tool.ruff]); `make format` fixes what it can."""
    import shutil
    import subprocess
    import sys

    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    linted = re.search(r"^LINTED := (.+)$", make, re.M).group(1).split()
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed (requirements.txt pins it)"
    for args in (["check", *linted, "notebooks"], ["format", "--check", *linted]):
        run = subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True)
        assert run.returncode == 0, f"ruff {' '.join(args[:2])}:\n{run.stdout}{run.stderr}"


def test_readme_lists_every_family_from_hf_loads():
    """The README's table of the models from_hf loads names every class it accepts, and no other."""
    from attnlib._hf_checks import HF_FAMILIES

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The models `from_hf` loads", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| ") and "`" in line][
        1:
    ]  # not the header
    listed = {name for row in rows for name in re.findall(r"`(\w+)`", row[2])}  # the class column
    assert listed == set(HF_FAMILIES.values()), (
        f"README lists {sorted(listed)}, from_hf takes {sorted(HF_FAMILIES.values())}"
    )
