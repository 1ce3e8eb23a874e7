"""Shared fixtures: the repository root, one book build per test session and attnlib's wheel
installed in a fresh environment, both prepared beside the other tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# ------------------------------------------------------------------ the book, built beside the tests
#
# Building both editions takes minutes, most of it the Chinese edition executing every chapter
# (with ATTNLIB_LANG=zh_CN, for its figures; the English edition shows the outputs stored in the
# notebooks, which nbval checks in the same run). When a selected test needs the book, the build
# starts as soon as the tests are collected, in a process of its own, and those tests run last:
# the build uses the second core while the other tests run.

_BOOK: dict = {}


def _uses(items, fixture: str) -> list:
    return [item for item in items if fixture in getattr(item, "fixturenames", ())]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if config.option.collectonly:
        return
    book = _uses(items, "book_build")
    if book:
        chosen = set(map(id, book))
        items[:] = [item for item in items if id(item) not in chosen] + book
        _start_book_build()
    if _uses(items, "installed_wheel"):
        _start_wheel_install()


def _start_book_build() -> None:
    if "proc" in _BOOK:
        return
    log = ROOT / "_build" / "book-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _BOOK["log"] = log
    _BOOK["proc"] = subprocess.Popen(
        [sys.executable, str(ROOT / "book" / "editions.py"), "build"],
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a process group: stopping it stops the two jupyter-book builds it starts
    )


def pytest_sessionfinish(session, exitstatus):
    _WHEEL["cancel"] = True  # a session stopped early needs no wheel any more
    proc = _BOOK.get("proc")
    if proc is not None and proc.poll() is None:  # stopped early (-x, Ctrl-C): do not leave it running
        for sig in (signal.SIGTERM, signal.SIGKILL):  # jupyter-book can outlive a SIGTERM
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(5)
        proc.wait(timeout=60)
    if "work" in _WHEEL:
        _WHEEL["thread"].join(timeout=600)
        shutil.rmtree(_WHEEL["work"], ignore_errors=True)


# ------------------------------------------------------------------ the wheel, installed beside the tests
#
# tests/test_packaging.py installs attnlib's wheel into a fresh environment (a minute of pip). A
# thread prepares it when that test is selected: after the book build, when there is one, so that
# it takes the core the build leaves free.

_WHEEL: dict = {}


def _start_wheel_install() -> None:
    if "thread" in _WHEEL:
        return
    import _wheel

    _WHEEL["work"] = Path(tempfile.mkdtemp(prefix="attnlib-wheel-"))

    def install():
        try:
            if "proc" in _BOOK:
                _BOOK["proc"].wait()
            if not _WHEEL.get("cancel"):
                _WHEEL["installed"] = _wheel.build_and_install(_WHEEL["work"])
        except BaseException as e:  # reported by the fixture, in the test that needs it
            _WHEEL["error"] = e

    _WHEEL["thread"] = threading.Thread(target=install, daemon=True)
    _WHEEL["thread"].start()


@pytest.fixture(scope="session")
def installed_wheel():
    """attnlib's wheel installed into a fresh virtual environment (tests/_wheel.py)."""
    _start_wheel_install()
    _WHEEL["thread"].join(timeout=1800)
    if "error" in _WHEEL:
        error = _WHEEL["error"]
        detail = getattr(error, "stderr", None) or ""
        raise AssertionError(f"building or installing the wheel failed: {error!r}\n{detail}") from error
    return _WHEEL["installed"]


@pytest.fixture(scope="session")
def book_build() -> subprocess.CompletedProcess:
    """The book built exactly as `make book` does (book/editions.py): English into _build/html,
    Chinese into _build/html/zh; started when the tests were collected, waited for here.

    -W turns every warning (and every notebook execution error) into a failure,
    -n reports every broken cross-reference, --keep-going reports all of them.
    The HTML is removed first and --all writes every page again, so nothing is left
    over from an earlier build (executed notebooks still come from the caches,
    _build/.jupyter_cache for book/intro.md and, executed with ATTNLIB_LANG=zh_CN for the
    Chinese edition, _build/.jupyter_cache_zh, when their code is unchanged).
    The build's output is in _build/book-build.log.
    """
    _start_book_build()  # when the fixture is asked for outside the collection hook's reach
    proc = _BOOK["proc"]
    proc.wait(timeout=2400)
    out = _BOOK["log"].read_text(encoding="utf-8", errors="replace")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
