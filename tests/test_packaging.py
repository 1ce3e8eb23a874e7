"""attnlib installs the way learners install it: a built wheel, not the editable checkout.

The Colab cell of every chapter runs ``pip install "attnlib @ git+<repository>"``, which
builds a wheel from ``pyproject.toml`` and installs it with its declared dependencies. The
course's own environment installs attnlib editable (``-e .``), which finds every module in
the source tree whatever ``pyproject.toml`` says, so only a real wheel, installed into a
fresh virtual environment outside the repository, shows a missing subpackage or dependency.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import _background
import _wheel
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

# A learner's first steps: import attnlib, use a chapter's checker on their own function
# (then, with the "tools" extra, the instructor's grader's command line). Runs in the fresh environment, outside the repository.
LEARNER = """
import sys, torch, attnlib
from attnlib import check
assert "site-packages" in attnlib.__file__, attnlib.__file__     # the installed copy, not the checkout

def stable_softmax(x):                                              # a learner's answer to chapter 5
    m = x.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    s = e.sum(dim=-1, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)

check.stable_softmax(stable_softmax)
print(len(check.CHECKS), "checkers")
try:                                                                # a wrong answer: the feedback
    check.stable_softmax(lambda x: torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True))
except AssertionError as e:
    print(e)
"""


# The three interactive views, rendered by an attnlib: their scripts and styles are package files
# (attnlib/views/*.js, *.css) that the wheel must carry. Prints where attnlib.plot is and each page.
VIEWS = """
import json, torch
from attnlib import plot
from attnlib.model import GPT, GPTConfig

torch.manual_seed(0)
model = GPT(GPTConfig(vocab_size=11, context_length=13, d_model=32, n_layers=1, n_heads=4))
s = torch.tensor([2.0, 1.0, 4.0, 3.0, 7.0, 0.0, 5.0, 6.0])
views = {
    "explore": plot.explore(torch.softmax(s.reshape(2, 4), dim=-1), ["the", "cat", "sat", "on"], title="scores"),
    "live_model": plot.live_model(model, list("0123456789|"), prompt_length=7, new_tokens=6, example="493039|"),
    "online_softmax_player": plot.online_softmax_player(s, s.reshape(8, 1), block_size=3),
}
print(json.dumps({"plot": plot.__file__, **{name: view._repr_html_() for name, view in views.items()}}))
"""


TOOLS = ("nbformat", "nbclient", "polib")  # the "tools" extra's dependencies that attnlib alone does not install


@_background.job(after_book=True)
def installed_wheel() -> dict:
    """attnlib's wheel installed into a fresh virtual environment (tests/_wheel.py) and used there
    as a learner and an instructor would, in the background once the book is built (half a
    minute of pip, then seconds of imports): the installed wheel, and each run's finished process."""
    installed = _wheel.build_and_install(_background.temporary_dir("attnlib-wheel-"))
    python, env, work = installed.python, installed.env, _background.temporary_dir("attnlib-learner-")

    def run(*args, **more_env):
        return subprocess.run([str(python), *args], cwd=work, env={**env, **more_env}, capture_output=True, text=True)

    runs = {
        "installed": installed,
        "learner": run("-c", LEARNER, MPLBACKEND="Agg"),
        # ATTNLIB_LANG=zh_CN: the same checker answers in Chinese, from the catalog inside the wheel
        "learner_zh": run("-c", LEARNER, MPLBACKEND="Agg", ATTNLIB_LANG="zh_CN"),
        # attnlib alone installs none of the tools' dependencies; the "tools" extra adds them for the grader
        "bare": run("-c", f"import importlib.util as u; print([m for m in {TOOLS!r} if u.find_spec(m)])"),
        "views": run("-c", VIEWS),
    }
    runs["tools"] = run(
        "-m", "pip", "install", "-q", "--no-compile", "-c", str(installed.constraints), f"{installed.wheel}[tools]"
    )
    runs["cli"] = run("-m", "coursetools.homework", "--help")
    return runs


@pytest.mark.slow
def test_the_built_wheel_installs_into_a_fresh_environment_and_works(installed_wheel):
    """The wheel (tests/_wheel.py: built from its sources alone, installed into a fresh environment
    with the course's pins, and used there, in the background while other tests run) holds every
    module and works, in English and in Chinese; its "tools" extra adds the grader."""
    for module in (
        "attnlib/__init__.py",
        "attnlib/check/__init__.py",
        "attnlib/check/ch01.py",
        "attnlib/check/ch13.py",
        "attnlib/i18n.py",
        "attnlib/locales/zh_CN/LC_MESSAGES/attnlib.po",
        "attnlib/plot/__init__.py",
        "attnlib/views/explore.py",
        "coursetools/homework.py",
        "coursetools/translate.py",
    ):
        assert module in installed_wheel["installed"].names, f"{module} is missing from the wheel"

    run = installed_wheel["learner"]
    assert run.returncode == 0, run.stderr
    assert "check.stable_softmax: all" in run.stdout and "cases passed" in run.stdout
    assert "stable_softmax: wrong values" in run.stdout and "diagnosis: exp overflowed" in run.stdout
    zh = installed_wheel["learner_zh"]
    assert zh.returncode == 0, zh.stderr
    assert "check.stable_softmax：全部" in zh.stdout and "个用例通过" in zh.stdout, zh.stdout
    assert "stable_softmax：值不对" in zh.stdout and "诊断：exp 溢出成了 inf" in zh.stdout, zh.stdout
    bare = installed_wheel["bare"]
    assert bare.returncode == 0 and bare.stdout.strip() == "[]", (bare.stdout, bare.stderr)
    tools = installed_wheel["tools"]
    assert tools.returncode == 0, tools.stderr
    cli = installed_wheel["cli"]
    assert cli.returncode == 0 and "release" in cli.stdout and "grade" in cli.stdout, cli.stderr


@pytest.mark.slow
def test_the_wheel_renders_the_views_from_its_own_script_and_style_files(installed_wheel):
    """Every script and style file of the interactive views (attnlib/views/*.js, *.css) is in the wheel,
    and each view, rendered by the installed copy from those files, is byte for byte the page the
    checkout renders."""
    shipped = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "attnlib" / "views").glob("*.[jc]s*"))
    assert {"attnlib/views/explore.js", "attnlib/views/live.css", "attnlib/views/player.js"} <= set(shipped)
    missing = [name for name in shipped if name not in installed_wheel["installed"].names]
    assert not missing, f"{missing} missing from the wheel: list them in pyproject.toml's package-data"
    run = installed_wheel["views"]
    assert run.returncode == 0, run.stderr
    wheel = json.loads(run.stdout)
    assert "site-packages" in wheel.pop("plot"), "the views were not rendered by the installed copy"
    env = {k: v for k, v in os.environ.items() if k != "ATTNLIB_LANG"}  # English, as the wheel's run
    here = subprocess.run([sys.executable, "-c", VIEWS], cwd=ROOT, env=env, capture_output=True, text=True)
    assert here.returncode == 0, here.stderr
    checkout = json.loads(here.stdout)
    assert "site-packages" not in checkout.pop("plot")  # the checkout's own attnlib
    assert sorted(wheel) == ["explore", "live_model", "online_softmax_player"]
    for name, page in wheel.items():
        assert page == checkout[name], f"plot.{name}: the installed wheel renders another page than the checkout"
    for view, stem in (("explore", "explore"), ("live_model", "live"), ("online_softmax_player", "player")):
        for kind in ("js", "css"):  # the longest line of each file, read here as text, is in the page
            lines = (ROOT / "attnlib" / "views" / f"{stem}.{kind}").read_text().split("*/\n", 1)[1].splitlines()
            line = max((t for t in lines if "__" not in t and not t.startswith("/*")), key=len)
            assert line in wheel[view], f"{stem}.{kind}: {line!r} is not in plot.{view}'s page"


def _execute():
    """book/execute.py, which writes every chapter's Colab cell."""
    sys.path.insert(0, str(ROOT / "book"))
    try:
        import execute
    finally:
        sys.path.remove(str(ROOT / "book"))
    return execute


def _colab_cell(url: str) -> str:
    """A chapter's Colab cell for ``url``, as a script that runs it as Colab would (google.colab imported)."""
    colab = 'import sys, types\nsys.modules["google.colab"] = types.ModuleType("google.colab")\n'
    return colab + _execute().colab_cell_source(url) + '\nprint("the cell ran")\n'


def test_the_colab_cell_stops_with_what_to_do_when_the_install_fails(tmp_path):
    """A repository that cannot be cloned: the cell raises at once, with pip's error and what to
    check, rather than going on (``%pip`` would not raise, and the chapter would stop later at an
    import of a module it never installed)."""
    script = tmp_path / "cell.py"
    script.write_text(_colab_cell(f"file://localhost{tmp_path}/no-such-repository.git"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PIP_NO_INDEX": "1"}
    run = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode != 0 and "the cell ran" not in run.stdout
    assert "RuntimeError: pip could not install attnlib[notebooks] @ git+file://" in run.stderr, run.stderr
    assert "so this chapter cannot run" in run.stderr and "then run this cell again" in run.stderr
    assert "no-such-repository" in run.stderr.split("pip said:", 1)[1]  # pip's own error, naming what failed


@pytest.mark.slow
def test_the_colab_cell_installs_attnlib_and_its_notebooks_extra_from_a_real_repository(tmp_path):
    """The cell against a real git repository (a clone of this one's last commit, served by git as
    GitHub would): pip clones it, builds attnlib and installs it, with the "notebooks" extra that
    brings what the chapters import. Into a fresh environment, without the dependencies (PIP_NO_DEPS:
    no network needed for them), which the installed metadata names."""
    repository = tmp_path / "course.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(repository)], check=True)
    subprocess.run(["git", "-C", str(repository), "config", "uploadpack.allowFilter", "true"], check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    script = tmp_path / "cell.py"
    script.write_text(_colab_cell(f"file://localhost{repository}"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {"PIP_NO_DEPS": "1"}
    run = subprocess.run([venv / "bin" / "python", script], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and "the cell ran" in run.stdout, run.stderr
    (metadata,) = venv.glob("lib/python*/site-packages/attnlib-*.dist-info/METADATA")
    requires = [line for line in metadata.read_text().splitlines() if line.startswith("Requires-Dist:")]
    for needed in ("myst-nb", "transformers"):
        assert any(needed in line and 'extra == "notebooks"' in line for line in requires), requires
    (package,) = venv.glob("lib/python*/site-packages/attnlib")
    assert (package / "check" / "ch17.py").is_file() and (package / "_floors.py").is_file()


def test_colab_cells_install_from_the_repository_url_in_config():
    """The repository URL is written once, in _config.yml (repository: url:); every chapter's
    Colab cell is the one book/execute.py writes from it (`make notebooks` rewrites them)."""
    colab_cell_source, is_colab_cell = _execute().colab_cell_source, _execute().is_colab_cell
    import nbformat

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert url.startswith("https://") and f"git+{url}" in colab_cell_source()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = [c for c in nb.cells if is_colab_cell(c)]
        assert len(cells) == 1, f"{path.name}: expected one Colab install cell, found {len(cells)}"
        assert cells[0].source == colab_cell_source(url), f"{path.name}: run `make notebooks` (or book/execute.py)"
    readme = (ROOT / "README.md").read_text()
    assert url not in readme, "the README should refer to _config.yml, not repeat the URL"
