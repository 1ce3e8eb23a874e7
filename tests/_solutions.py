"""The solution a chapter's notebook gives for its coding exercise, for the checkers' tests."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def notebook_solution(notebook: str, function: str, forbidden: tuple[str, ...] = ("attnlib",)):
    """Run the cell of ``notebooks/<notebook>`` that defines ``function`` and return the function.

    ``forbidden``: names the solution must not use (it is written from plain tensors). A
    solution allowed to use attnlib (``forbidden`` without it) finds it in its namespace.
    """
    nb = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    source = next(s for s in cells if s.lstrip().startswith(f"def {function}("))
    used = [name for name in forbidden if name in source]
    assert not used, f"the solution is written from plain tensors, without {used}"
    assert "### BEGIN SOLUTION" in source and "### END SOLUTION" in source
    import attnlib

    namespace = {"torch": torch, "math": math, "attnlib": attnlib}
    exec(compile(source, f"{notebook}:{function}", "exec"), namespace)
    return namespace[function]


def solution_of(exercise: str):
    """The notebook's own solution of a coding exercise (``ch04-reach``), found by the chapter number."""
    from attnlib.check import CHECKS

    chapter = exercise[2:4]
    (notebook,) = [p.name for p in (ROOT / "notebooks").glob(f"{chapter}_*.ipynb")]
    return notebook_solution(notebook, CHECKS[exercise].function, forbidden=())


def fails(checker, wrong, match: str = "", diagnosis: str | None = None) -> str:
    """A student's first failed check of ``wrong`` (tests/conftest.py starts every test as a first attempt):
    the message matches ``match``; with ``diagnosis`` (a part of its text) it says that diagnosis and holds the
    hint back, and a
    second failure gives both; without, it gives the hint at once. Returns the first message."""
    import pytest

    with pytest.raises(AssertionError, match=rf"(?s){match}") as first:
        checker(wrong)
    message = str(first.value)
    if diagnosis is None:
        assert "diagnosis:" not in message and "hint:" in message, message
    else:
        said = message.partition("diagnosis: ")[2]
        assert diagnosis in said.partition("\n")[0] and "hint:" not in message, message
        with pytest.raises(AssertionError, match=r"(?s)diagnosis:.*hint:"):
            checker(wrong)
    return message
