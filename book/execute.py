"""Re-execute chapter notebooks in place, top to bottom in a fresh kernel (``make notebooks``).

    python book/execute.py                       # every notebooks/NN_*.ipynb
    python book/execute.py notebooks/09_positions.ipynb ...

Each notebook runs in a new kernel started in ``notebooks/`` under ``MPLBACKEND=Agg``
(as nbval and the book build run it), with no per-cell timing recorded: the file
written back differs from the committed one only where an output changed. The
Colab install cell (the first code cell, tagged ``remove-cell``) is written from
``_config.yml``'s repository URL first, so that URL lives in one place. A cell that
raises stops the run with the error, and the notebook on disk is left as it was.
Every stored output names files relative to the repository (``attnlib/embedding.py``, not
the executing machine's absolute path: ``book/_ext/relative_paths.py``, which the book build
also applies to the outputs of the notebooks it executes).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

sys.path.insert(0, str(ROOT / "book" / "_ext"))
from relative_paths import relative_output  # noqa: E402  (one rewriting for the notebooks and the book)


def repository_url() -> str:
    """The repository URL from ``_config.yml`` (``repository: url:``), the one place it is written."""
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    return cfg["repository"]["url"]


def colab_cell_source(url: str | None = None) -> str:
    """The source of every chapter's first code cell: installs attnlib in Colab, nothing elsewhere.

    It runs pip itself, not ``%pip``: the magic does not raise when pip fails (a clone that fails
    installs nothing), and the chapter would stop later at an import with no word about why."""
    url = url or repository_url()
    return (
        "# In Colab only: install attnlib, the course's library, with what the chapters import besides\n"
        "# (myst-nb for `glue`, transformers for Part III). `make lab` has installed them on your machine.\n"
        "import sys\n"
        'if "google.colab" in sys.modules:\n'
        "    import subprocess\n"
        f'    spec = "attnlib[notebooks] @ git+{url}"\n'
        '    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], capture_output=True, text=True)\n'
        "    if pip.returncode != 0:\n"
        '        raise RuntimeError(f"pip could not install {spec}, so this chapter cannot run. pip said:\\n"\n'
        '                           f"{pip.stderr.strip()[-1500:]}\\nCheck that the address after git+ opens in a "\n'
        '                           "browser (it is the course\'s repository), then run this cell again.")'
    )


def is_colab_cell(cell) -> bool:
    return cell.cell_type == "code" and "google.colab" in cell.source and "remove-cell" in cell.metadata.get("tags", [])


def execute(path: Path, timeout: int = 600) -> None:
    """Execute ``path`` in a fresh kernel and write it back (only if every cell ran)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if is_colab_cell(cell):
            cell.source = colab_cell_source()
    os.environ["MPLBACKEND"] = "Agg"
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # volatile: timestamps that change on every run
        if cell.cell_type == "code":
            cell.outputs = [relative_output(o, ROOT) for o in _coalesced(cell.outputs)]
    nbformat.write(nb, path)


def _coalesced(outputs: list) -> list:
    """Consecutive stream outputs of one stream joined, as nbval compares them: how a print was
    split into messages depends on timing, and would otherwise show in the diff."""
    out = []
    for o in outputs:
        if o.output_type == "stream" and out and out[-1].output_type == "stream" and out[-1].name == o.name:
            out[-1].text += o.text
        else:
            out.append(o)
    return out


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        print(f"executing {path}", flush=True)
        execute(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
