"""The torch APIs the course uses, checked statically against a torch wheel (the floor, torch 2.5.0).

Installing the floor is not possible everywhere (PyPI's Linux wheels of torch bring several GB of CUDA
packages), so tests/test_floors.py reads the course's sources and the floor's sources instead:

- :func:`uses` finds, with ``ast``, every torch module, function and class that attnlib/, coursetools/
  and the chapters' code cells reach from an import of torch, and the keywords passed to each call.
- :func:`index` reads a torch wheel (a zip, never imported) and says, for each of those names, whether
  it exists in that version and which parameters it accepts.
- Run as a script, it writes both into tests/torch_floor.json, so the test needs no network::

      python tests/torch_api.py [--wheel PATH]   # downloads torch 2.5.0's macOS wheel when no PATH

What it cannot see: tensor methods and attributes (``x.masked_fill(...)``, ``x.shape``), since the
type of ``x`` is not known statically, and anything reached through a variable (``m = nn.Linear(...);
m.weight``). Those are left out; the chapters' nbval runs exercise them on the pinned torch.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR_JSON = ROOT / "tests" / "torch_floor.json"
FLOOR_VERSION = "2.5.0"  # the wheel the script downloads; tests/test_floors.py checks it matches the floor


# ---------------------------------------------------------------------------------- what the course uses


@dataclass
class Use:
    """Where a torch name is used, and where each keyword is passed to it (the keyword's line): lists of
    ``file:line``, or ``notebook cell N:line`` (N counts every cell from 0)."""

    where: list[str] = field(default_factory=list)
    keywords: dict[str, list[str]] = field(default_factory=dict)


def _sources(root: Path) -> Iterable[list[tuple[str, str]]]:
    """Each source as [(code, location prefix)]: a .py file is one piece, a notebook one piece per code
    cell (aliases imported in one cell hold in the next)."""
    for folder in ("attnlib", "coursetools"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            yield [(path.read_text(encoding="utf-8"), rel)]
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        rel = path.relative_to(root).as_posix()
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        pieces = []
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                code = "".join(cell["source"])
                # IPython magics and shell escapes are not Python: `pass` in their place keeps the
                # line numbers and a block that holds only a magic (the Colab install cell)
                code = "\n".join(_no_magic(line) for line in code.split("\n"))
                pieces.append((code, f"{rel} cell {i}"))
        yield pieces


def _no_magic(line: str) -> str:
    stripped = line.lstrip()
    return line[: len(line) - len(stripped)] + "pass" if stripped.startswith(("%", "!")) else line


def _imports(node: ast.AST, aliases: dict[str, str]) -> list[str]:
    """Record the torch aliases an import statement binds; return the torch modules/names it names."""
    named = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] == "torch":
                named.append(a.name)
                if a.asname:  # import torch.nn.functional as F
                    aliases[a.asname] = a.name
                else:  # import torch.nn binds torch
                    aliases["torch"] = "torch"
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "torch":
        for a in node.names:
            if a.name != "*":
                named.append(f"{node.module}.{a.name}")
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return named


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``F.softmax`` -> ``torch.nn.functional.softmax`` when the chain starts at a torch alias."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def uses(root: Path = ROOT) -> dict[str, Use]:
    """Every torch name the course's code reaches from an import of torch, with where it is used and
    the keyword arguments passed to it (when called). Only whole attribute chains count: for
    ``torch.nn.functional.softmax(x)`` the name is ``torch.nn.functional.softmax``, not its prefixes,
    except that ``from torch.a import b`` also counts the module ``torch.a``."""
    found: dict[str, Use] = {}

    def add(name: str, where: str) -> Use:
        use = found.setdefault(name, Use())
        if where not in use.where:
            use.where.append(where)
        return use

    for pieces in _sources(root):
        aliases: dict[str, str] = {}  # one namespace per file or notebook, in order of the code
        for code, prefix in pieces:
            tree = ast.parse(code, filename=prefix)
            inner = set()  # Attribute nodes inside a longer chain: only the whole chain is a use
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    inner.add(id(node.value))
            # source order, so that an alias counts from its import on
            for node in sorted(
                (n for n in ast.walk(tree) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset)
            ):
                where = f"{prefix}:{node.lineno}"
                for name in _imports(node, aliases):
                    add(name, where)
                    if isinstance(node, ast.ImportFrom):
                        add(name.rsplit(".", 1)[0], where)
                if isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
                    if id(node) not in inner and (name := _dotted(node, aliases)):
                        add(name, where)
                if isinstance(node, ast.Call) and (name := _dotted(node.func, aliases)):
                    use = add(name, where)
                    for kw in node.keywords:
                        if kw.arg:  # **options passes names we cannot know
                            passed = use.keywords.setdefault(kw.arg, [])
                            if f"{prefix}:{kw.lineno}" not in passed:  # the keyword's own line
                                passed.append(f"{prefix}:{kw.lineno}")
    return dict(sorted(found.items()))


# -------------------------------------------------------------------------------- what a wheel provides
#
# The rule, conservative (it may call a name missing that torch builds at run time, never the reverse
# unless a name is defined somewhere else in torch than where it is used):
#
# - a module torch.a.b exists when its file, torch/a/b.py or torch/a/b/__init__.py, is in the wheel, or
#   its stub torch/a/b.pyi (the compiled torch._C modules have only stubs);
# - a name torch.a.b.f exists when f is bound at the top level of that module's .py or .pyi (a def, a
#   class, an assignment, an import, or a string of __all__), counting the statements inside top-level
#   if/try blocks (torch/__init__.py binds torch.* under `if TYPE_CHECKING:`), or is bound, by the same
#   rule, in a module that one star-imports (`from torch._C._VariableFunctions import *`);
# - a deeper name, torch.a.b.C.m, exists when C is found that way as a class (or `C = K()`, an
#   instance of a class K of that module) whose body binds m, or whose __getattr__ names "m";
# - its parameters are the union of the parameter names of every def named f found on the way: its
#   overloads, the def that a `from X import f as g` leads to, for a class its __init__, and for a C
#   function given a docstring in Python (`f = _add_docstr(torch._C._linalg.linalg_f, "f(A, *, out=None)
#   -> Tensor ...")`) the signature that starts its docstring. A keyword that is not among them is not
#   accepted, unless one of the defs takes **kwargs.


def _defines(stmt: ast.stmt, name: str, found: Found, classes: list, init: bool = False) -> bool:
    """Whether ``stmt`` is a def or a class named ``name``. If so, ``found`` exists and takes the def's
    parameters (a class's ``__init__``'s, with ``init``), and a class joins ``classes``."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
        found.exists = True
        found.merge(stmt)
        return True
    if isinstance(stmt, ast.ClassDef) and stmt.name == name:
        found.exists = True
        classes.append(stmt)
        for method in stmt.body if init else ():
            if isinstance(method, ast.FunctionDef) and method.name == "__init__":
                found.merge(method)
        return True
    return False


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements of a module body, including those inside top-level if/try/with blocks."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If | ast.Try | ast.With):
            blocks = [stmt.body, getattr(stmt, "orelse", []), getattr(stmt, "finalbody", [])]
            blocks += [h.body for h in getattr(stmt, "handlers", [])]
            for block in blocks:
                yield from _top_level(block)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[set[str], bool]:
    a = fn.args
    names = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs} - {"self", "cls"}
    return names, a.kwarg is not None  # *args takes no keyword: left out


@dataclass
class Found:
    exists: bool = False
    params: set[str] = field(default_factory=set)
    kwargs: bool = False  # one of its defs takes **kwargs

    def merge(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        names, kwargs = _params(fn)
        self.params |= names
        self.kwargs |= kwargs


class Wheel:
    """The Python sources and stubs of a torch wheel, parsed on demand."""

    def __init__(self, path: Path):
        self.zip = zipfile.ZipFile(path)
        self.files = set(self.zip.namelist())
        self._trees: dict[str, list[ast.Module]] = {}

    def module_files(self, module: str) -> list[str]:
        base = module.replace(".", "/")
        return [
            f for f in (f"{base}.py", f"{base}/__init__.py", f"{base}.pyi", f"{base}/__init__.pyi") if f in self.files
        ]

    def is_package(self, module: str) -> bool:
        return any(f.endswith(("__init__.py", "__init__.pyi")) for f in self.module_files(module))

    def trees(self, module: str) -> list[ast.Module]:
        if module not in self._trees:
            self._trees[module] = [ast.parse(self.zip.read(f)) for f in self.module_files(module)]
        return self._trees[module]

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        """The module an import names, resolving ``from .linear import Linear`` inside ``module``."""
        if not node.level:
            return node.module or ""
        package = module if self.is_package(module) else module.rsplit(".", 1)[0]
        package = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
        return f"{package}.{node.module}" if node.module else package

    def lookup(self, module: str, name: str, found: Found, seen: set | None = None) -> list[ast.ClassDef]:
        """Add to ``found`` what binds ``name`` in ``module`` (see the rule above); return its classes."""
        seen = set() if seen is None else seen
        if (module, name) in seen:
            return []
        seen.add((module, name))
        classes = []
        for tree in self.trees(module):
            for stmt in _top_level(tree.body):
                if _defines(stmt, name, found, classes, init=True):
                    continue
                if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    for target in targets:
                        for t in ast.walk(target):
                            if isinstance(t, ast.Name) and t.id == "__all__" and _in_all(stmt.value, name):
                                found.exists = True
                            if isinstance(t, ast.Name) and t.id == name:
                                found.exists = True
                                classes += self._assigned(module, name, stmt.value, found, seen)
                elif isinstance(stmt, ast.Import):
                    for a in stmt.names:
                        if (a.asname or a.name.split(".")[0]) == name:
                            found.exists = True
                elif isinstance(stmt, ast.ImportFrom):
                    source = self._absolute(module, stmt)
                    for a in stmt.names:
                        if a.name == "*" and source.startswith("torch"):
                            classes += self.lookup(source, name, found, seen)
                        elif (a.asname or a.name) == name:
                            found.exists = True
                            if self.module_files(f"{source}.{a.name}"):
                                continue  # a submodule, not a function
                            classes += self.lookup(source, a.name, found, seen)
        return classes

    def _assigned(self, module: str, name: str, value: ast.AST | None, found: Found, seen: set) -> list[ast.ClassDef]:
        """What ``name = value`` tells: ``svd = _add_docstr(_linalg.linalg_svd, "linalg.svd(A, ...) -> ...")``
        (a C function with a Python docstring) takes the parameters of the docstring's signature;
        ``matmul = cuBLASModule()`` is an instance of that class, whose attributes are looked up."""
        if not isinstance(value, ast.Call):
            return []
        if isinstance(value.func, ast.Name) and value.func.id == "_add_docstr" and len(value.args) == 2:
            doc = value.args[1]
            if isinstance(doc, ast.Constant) and isinstance(doc.value, str):
                signature = re.match(rf"(?:[\w.]*\.)?{name}\((.*?)\)\s*->", doc.value.lstrip(), re.DOTALL)
                if signature:
                    try:
                        found.merge(ast.parse(f"def _({' '.join(signature.group(1).split())}): pass").body[0])
                    except SyntaxError:
                        pass  # no parameters learned: a keyword passed is then reported
            return []
        if isinstance(value.func, ast.Name):
            return self.lookup(module, value.func.id, Found(), seen)
        return []

    def find(self, dotted: str) -> Found:
        """Whether ``dotted`` (``torch.nn.functional.softmax``) exists in this wheel, and its parameters."""
        parts = dotted.split(".")
        cut = max(i for i in range(1, len(parts) + 1) if i == 1 or self.module_files(".".join(parts[:i])))
        module, rest = ".".join(parts[:cut]), parts[cut:]
        found = Found()
        if not rest:
            found.exists = bool(self.module_files(module))
            return found
        classes = self.lookup(module, rest[0], found)
        for attr in rest[1:]:  # torch.a.C.m: m bound in the body of class C
            inner, found = classes, Found()
            classes = []
            for cls in inner:
                for stmt in cls.body:
                    if _defines(stmt, attr, found, classes):
                        continue
                    if isinstance(stmt, ast.Assign | ast.AnnAssign):
                        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                        if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                            found.exists = True
                    elif isinstance(stmt, ast.FunctionDef) and stmt.name == "__getattr__":
                        # cuBLASModule.__getattr__: `if name == "allow_tf32": ...` answers that attribute
                        found.exists |= any(isinstance(c, ast.Constant) and c.value == attr for c in ast.walk(stmt))
        return found


def _in_all(value: ast.AST | None, name: str) -> bool:
    return value is not None and any(isinstance(c, ast.Constant) and c.value == name for c in ast.walk(value))


def version_of(wheel_path: Path) -> str:
    """The torch version a wheel holds, from its file name (``torch-2.5.0-cp311-...whl``)."""
    return re.match(r"torch-([^-+]+)", Path(wheel_path).name).group(1)


def index(wheel_path: Path, names: Iterable[str]) -> dict[str, dict]:
    """For each name: ``{"exists": bool, "params": [sorted names], "kwargs": bool}`` in that wheel."""
    wheel = Wheel(Path(wheel_path))
    out = {}
    for name in sorted(names):
        found = wheel.find(name)
        out[name] = {"exists": found.exists, "params": sorted(found.params), "kwargs": found.kwargs}
    return out


def problems(used: dict[str, Use], provided: dict[str, dict]) -> list[str]:
    """What the course uses that ``provided`` (an :func:`index`) lacks, each with where it is used."""
    out = []
    for name, use in used.items():
        entry = provided.get(name)
        if entry is None:
            out.append(f"{name} (used at {', '.join(use.where)}) is not in the index")
        elif not entry["exists"]:
            out.append(f"{name} does not exist; used at {', '.join(use.where)}")
        elif not entry["kwargs"]:
            for kw, where in use.keywords.items():
                if kw not in entry["params"]:
                    accepted = ", ".join(entry["params"]) or "none found"
                    out.append(f"{name} does not accept {kw}= (accepts: {accepted}); passed at {', '.join(where)}")
    return out


# ---------------------------------------------------------------------------------------------- script


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(version: str, folder: Path) -> Path:
    """torch's macOS arm64 wheel for Python 3.11: ~60 MB, the same Python sources and stubs as Linux's."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps", "--only-binary=:all:"]
        + ["--platform", "macosx_11_0_arm64", "--python-version", "3.11", "-d", str(folder)],
        check=True,
    )
    return next(folder.glob(f"torch-{version}-*.whl"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help=f"a torch wheel (default: download torch {FLOOR_VERSION})")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or download(FLOOR_VERSION, Path(tmp))
        used = uses(ROOT)
        data = {
            "wheel": wheel.name,
            "sha256": sha256(wheel),
            "version": version_of(wheel),
            "names": index(wheel, used),
        }
    # one line a name, so that a diff shows which names changed
    head = json.dumps({k: v for k, v in data.items() if k != "names"}, indent=1)[:-2]
    names = ",\n".join(f"  {json.dumps(n)}: {json.dumps(e)}" for n, e in data["names"].items())
    FLOOR_JSON.write_text(f'{head},\n "names": {{\n{names}\n }}\n}}\n', encoding="utf-8")
    print(f"{FLOOR_JSON.relative_to(ROOT)}: {len(used)} torch names checked against {data['wheel']}")
    for line in problems(used, data["names"]):
        print("  " + line)


if __name__ == "__main__":
    main()
