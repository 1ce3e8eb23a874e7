"""The torch floor is true: one number in pyproject.toml, attnlib/_floors.py and tests/torch_floor.json,
every torch API the course uses exists in that torch with the keywords passed to it (checked statically
against torch 2.5.0's sources, tests/torch_api.py), and `import attnlib` refuses an older torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tokenize
import tomllib
import zipfile
from pathlib import Path
from token import NAME, OP

import pytest
import torch_api

from attnlib._floors import TORCH_FLOOR

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "run `python tests/torch_api.py` (it downloads torch 2.5.0's wheel) and commit tests/torch_floor.json"
SDPA = "torch.nn.functional.scaled_dot_product_attention"
FLEX = "torch.nn.attention.flex_attention"


@pytest.fixture(scope="module")
def used() -> dict[str, torch_api.Use]:
    return torch_api.uses(ROOT)


def _floor_data() -> dict:
    return json.loads(torch_api.FLOOR_JSON.read_text(encoding="utf-8"))


def test_the_floor_is_one_number():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    declared = [m.groups() for d in deps if (m := re.fullmatch(r"torch\s*>=\s*(\d+)\.(\d+)", d.strip()))]
    assert len(declared) == 1, f"pyproject.toml should declare torch as `torch>=X.Y`; its dependencies: {deps}"
    pyproject = tuple(int(part) for part in declared[0])
    data = _floor_data()
    checked = tuple(int(part) for part in data["version"].split(".")[:2])
    assert pyproject == TORCH_FLOOR == checked, (
        f"the torch floor differs: pyproject.toml torch>={'.'.join(map(str, pyproject))}, attnlib/_floors.py "
        f"TORCH_FLOOR = {TORCH_FLOOR}, tests/torch_floor.json checked against torch {data['version']}. Make them one "
        f"number; for a new floor set torch_api.FLOOR_VERSION and {REGENERATE}"
    )
    assert data["wheel"].startswith(f"torch-{data['version']}-") and len(data["sha256"]) == 64, data["wheel"]


def test_every_torch_api_the_course_uses_exists_in_the_floor(used):
    names = _floor_data()["names"]
    unknown = [f"{name} (at {', '.join(use.where[:3])})" for name, use in used.items() if name not in names]
    assert not unknown, "torch APIs used but not checked against the floor: " + "; ".join(unknown) + f". {REGENERATE}"
    problems = torch_api.problems(used, names)
    assert not problems, (
        f"the course uses torch APIs that torch {_floor_data()['version']} lacks:\n  " + "\n  ".join(problems) + "\n"
        "Use what the floor has, or raise the floor in pyproject.toml, attnlib/_floors.py and "
        "torch_api.FLOOR_VERSION, then " + REGENERATE
    )


def test_the_scanner_finds_the_known_uses(used):
    """The reasons for the floor are found, at every line that a plain text search finds them: the
    check cannot pass by finding nothing."""
    gqa = used[SDPA].keywords["enable_gqa"]
    for rel in ("attnlib/multihead.py", "attnlib/generation.py"):
        with open(ROOT / rel, "rb") as f:  # the keyword in code (a name token then `=`), not in a docstring
            tokens = [(t.string, t.start[0]) for t in tokenize.tokenize(f.readline) if t.type in (NAME, OP)]
        expected = [f"{rel}:{n}" for (a, n), (b, _) in zip(tokens, tokens[1:]) if (a, b) == ("enable_gqa", "=")]
        assert expected and [w for w in gqa if w.startswith(f"{rel}:")] == expected, (gqa, expected)
    assert any(w.startswith("notebooks/16_local_attention.ipynb cell ") for w in used[FLEX].where), used.get(FLEX)
    assert f"{FLEX}.flex_attention" in used and f"{FLEX}.create_block_mask" in used


def test_uses_resolves_aliases_and_leaves_out_tensor_methods(tmp_path):
    (tmp_path / "attnlib").mkdir()
    (tmp_path / "coursetools").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "attnlib" / "a.py").write_text(
        "import torch.nn.functional as F\n"
        "from torch.nn import functional as G, Linear as L\n"
        "def f(x):\n"
        "    y = F.softmax(x, dim=-1).masked_fill(x > 0, 0.0)\n"  # a tensor method: not resolvable
        "    return G.pad(y, pad=(1, 1)), L(2, 3, bias=False), x.sum(dim=0)\n"
    )
    cells = [
        {"cell_type": "markdown", "source": ["import torch.nope\n"]},
        {"cell_type": "code", "source": ["%pip install x\n", "import torch\n"]},
        {"cell_type": "code", "source": ["if True:\n", "    !ls\n", "torch.randn(2, generator=None)\n"]},
    ]
    (tmp_path / "notebooks" / "01_x.ipynb").write_text(json.dumps({"cells": cells}))
    found = {name: (use.where, use.keywords) for name, use in torch_api.uses(tmp_path).items()}
    assert found == {
        "torch": (["notebooks/01_x.ipynb cell 1:2"], {}),
        "torch.nn": (["attnlib/a.py:2"], {}),
        "torch.nn.Linear": (["attnlib/a.py:2", "attnlib/a.py:5"], {"bias": ["attnlib/a.py:5"]}),
        "torch.nn.functional": (["attnlib/a.py:1", "attnlib/a.py:2"], {}),
        "torch.nn.functional.pad": (["attnlib/a.py:5"], {"pad": ["attnlib/a.py:5"]}),
        "torch.nn.functional.softmax": (["attnlib/a.py:4"], {"dim": ["attnlib/a.py:4"]}),
        "torch.randn": (["notebooks/01_x.ipynb cell 2:3"], {"generator": ["notebooks/01_x.ipynb cell 2:3"]}),
    }


def _fake_torch_24(path: Path) -> Path:
    """A torch 2.4-like wheel: torch 2.4.0's stub of scaled_dot_product_attention (no enable_gqa), and
    torch/nn/attention/ without flex_attention.py."""
    wheel = path / "torch-2.4.0-cp311-none-macosx_11_0_arm64.whl"
    files = {
        "torch/__init__.py": "from torch._C._VariableFunctions import *\n",
        "torch/_C/__init__.pyi": "",
        "torch/_C/_nn.pyi": "def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, "
        "attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0, is_causal: bool = False, "
        "scale: Optional[float] = None) -> Tensor: ...\n",
        "torch/nn/__init__.py": "",
        "torch/nn/functional.py": "scaled_dot_product_attention = _add_docstr(torch._C._nn.x, 'no signature')\n",
        "torch/nn/functional.pyi": "from torch._C._nn import scaled_dot_product_attention as "
        "scaled_dot_product_attention\n",
        "torch/nn/attention/__init__.py": "class SDPBackend: ...\n",
        "torch/nn/attention/bias.py": "def causal_lower_right(*size): ...\n",
    }
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def test_the_check_catches_an_older_floor(tmp_path, used):
    reasons = {name: used[name] for name in (SDPA, FLEX, f"{FLEX}.flex_attention")}
    old = torch_api.problems(reasons, torch_api.index(_fake_torch_24(tmp_path), reasons))
    assert len(old) == 3, old
    assert old[0].startswith(f"{SDPA} does not accept enable_gqa=") and "attnlib/multihead.py:" in old[0], old
    assert old[1].startswith(f"{FLEX} does not exist; used at notebooks/16_local_attention.ipynb cell "), old
    assert old[2].startswith(f"{FLEX}.flex_attention does not exist"), old
    # the real torch 2.5.0, as indexed in tests/torch_floor.json, has both
    names = _floor_data()["names"]
    assert torch_api.problems(reasons, names) == [], names[SDPA]
    assert "enable_gqa" in names[SDPA]["params"] and names[FLEX]["exists"]


def _import_attnlib(version: str | None) -> str:
    code = (
        "import torch\n"
        + (f"torch.__version__ = {version!r}\n" if version else "")
        + "try:\n    import attnlib\nexcept ImportError as e:\n    print('ImportError:', e)\nelse:\n    print('imported')\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout


def test_import_attnlib_refuses_an_older_torch():
    out = _import_attnlib("2.4.1")
    assert out.startswith("ImportError: attnlib needs torch 2.5 or newer; this environment has torch 2.4.1."), out
    assert _import_attnlib(None) == "imported\n"
