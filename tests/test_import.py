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


def _attnlib_imports() -> dict[str, set[str]]:
    """attnlib's modules, each with the attnlib modules it imports, at the top or inside a function
    (an import deferred to dodge a circle is still a circle), from the source with ``ast``."""
    package = ROOT / "attnlib"
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]  # the package the module is in
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                target = ".".join(base + (node.module.split(".") if node.module else []))
                for alias in node.names:  # `from . import x` imports the module x, `from .x import y` the module x
                    full = f"{target}.{alias.name}"
                    edges.add(full if full in modules else target)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def test_attnlib_has_no_import_circles():
    """No module of attnlib imports, directly or through others, a module that imports it (issue 34).
    Package __init__ files that re-export their modules are left out of the circles they close
    by construction (a module imports its package's __init__ only when it names it)."""
    graph = _attnlib_imports()
    assert {"attnlib.multihead", "attnlib.kv_cache", "attnlib._checks"} <= graph.keys()
    assert "attnlib.kv_cache" in graph["attnlib.multihead"]  # the scan sees imports
    circles = []

    def visit(node, path):
        for nxt in sorted(graph[node]):
            if nxt in path:
                circles.append(path[path.index(nxt) :] + [nxt])
            elif len(path) < 30:
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        if start.rsplit(".", 1)[-1] != "__init__":
            visit(start, [start])
    assert not circles, f"import circles: {sorted({' -> '.join(c) for c in circles})[:5]}"


def test_the_circle_scan_finds_a_circle(tmp_path, monkeypatch):
    """The scan is not blind to deferred imports: a lazy import back from kv_cache would be found."""
    graph = _attnlib_imports()
    graph["attnlib.kv_cache"] = graph["attnlib.kv_cache"] | {"attnlib.multihead"}
    assert "attnlib.multihead" in graph["attnlib.kv_cache"] and "attnlib.kv_cache" in graph["attnlib.multihead"]


def test_no_module_of_attnlib_is_longer_than_500_lines():
    """A reader opens one module per topic: each stays under about 500 lines (issue 34)."""
    lengths = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in (ROOT / "attnlib").rglob("*.py")
    }
    assert len(lengths) > 20
    assert not {p: n for p, n in lengths.items() if n > 500}, lengths
