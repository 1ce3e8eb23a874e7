"""`import attnlib` pays for torch and the library, not for the figures or the checkers."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_attnlib_leaves_plot_and_check_until_used():
    code = (
        "import sys, attnlib\n"
        "heavy = [m for m in ('matplotlib.pyplot', 'attnlib.plot', 'attnlib.check', 'torch._dynamo') "
        "if m in sys.modules]\n"
        "print(heavy)\n"
        "from attnlib import check, plot\n"
        "assert attnlib.check is check and attnlib.plot is plot and check.CHECKS\n"
        "print('matplotlib.pyplot' in sys.modules, 'torch._dynamo' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the checkers import what a check needs when it runs: torch._dynamo (seconds) only then
    assert run.stdout.split("\n")[:2] == ["[]", "True False"], run.stdout


TOOLS = ("coursetools", "nbformat", "nbclient", "polib", "ipykernel", "jupyter_client")


def test_attnlib_never_imports_the_tools():
    """attnlib is the learner's library: the instructor's and author's tools (coursetools) and
    their dependencies are not imported anywhere in it, at the top of a module or inside a function."""
    found = []
    for path in sorted((ROOT / "attnlib").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in TOOLS]
    assert not found, found
    code = f"import sys, attnlib\nfrom attnlib import check, plot\nprint([m for m in {TOOLS!r} if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", run.stdout
