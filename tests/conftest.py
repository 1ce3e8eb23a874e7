"""Shared fixtures: the repository root and one book build per test session."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def book_build() -> subprocess.CompletedProcess:
    """Build the book exactly as `make book` does, once per session: English into
    _build/html, Chinese into _build/html/zh (book/editions.py).

    -W turns every warning (and every notebook execution error) into a failure,
    -n reports every broken cross-reference, --keep-going reports all of them.
    The HTML is removed first and --all writes every page again, so nothing is left
    over from an earlier build (executed notebooks still come from the caches,
    _build/.jupyter_cache and, executed with ATTNLIB_LANG=zh_CN for the Chinese
    edition, _build/.jupyter_cache_zh, when their code is unchanged).
    """
    return subprocess.run(
        [sys.executable, str(ROOT / "book" / "editions.py"), "build"],
        cwd=ROOT, capture_output=True, text=True, timeout=2400,
    )
