"""Shared fixtures: the repository root and one book build per test session, started when the
tests are collected and run beside them; the background jobs of tests/_background.py start then too."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import _background
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _first_check_attempt():
    """Every test starts as a student's first attempt: a checker's first failure shows its diagnosis
    (where one fits) and holds the hint back (attnlib/check/_core.py), whatever ran before."""
    from attnlib.check import _core

    _core._failed.clear()
    yield


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
    """Tests that need the book run after the rest, and tests that need a background job
    (tests/_background.py) after those; the book build (when a test or a job needs it) and the
    jobs start now."""
    if config.option.collectonly:
        return
    book = _uses(items, "book_build")
    jobs = [name for name in _background.JOBS if _uses(items, name)]
    waiting = book + [item for name in jobs for item in _uses(items, name) if item not in book]
    chosen = set(map(id, waiting))
    rest = [item for item in items if id(item) not in chosen]
    # The tests that set ATTNLIB_LANG (os.environ, shared by every thread) run first, and the jobs
    # start after them: a job's grader, reading the language in its thread, never sees their Chinese.
    language = [item for item in rest if _sets_language(item)]
    items[:] = language + [item for item in rest if item not in language] + list(dict.fromkeys(waiting))
    _LANGUAGE_LEFT.update(item.nodeid for item in language)
    if not _LANGUAGE_LEFT:
        _background.LANGUAGE_SETTLED.set()
    if book or any(_background.JOBS[name].needs_book for name in jobs):
        _start_book_build()
    for name in jobs:
        _background.JOBS[name].items = _uses(items, name)
        _background.JOBS[name].start(_wait_for_book)


_LANGUAGE_LEFT: set[str] = set()


def _sets_language(item) -> bool:
    path = getattr(item, "path", None)
    return path is not None and path.suffix == ".py" and 'setenv("ATTNLIB_LANG"' in _source(path)


@functools.cache
def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def pytest_runtest_logfinish(nodeid, location):
    if nodeid in _LANGUAGE_LEFT:
        _LANGUAGE_LEFT.discard(nodeid)
        if not _LANGUAGE_LEFT:
            _background.LANGUAGE_SETTLED.set()


def _wait_for_book() -> int | None:
    if "proc" in _BOOK:
        return _BOOK["proc"].wait()
    return None


_background._WAIT_FOR_BOOK[0] = _wait_for_book


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
    proc = _BOOK.get("proc")
    if proc is not None and proc.poll() is None:  # stopped early (-x, Ctrl-C): do not leave it running
        for sig in (signal.SIGTERM, signal.SIGKILL):  # jupyter-book can outlive a SIGTERM
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(5)
        proc.wait(timeout=60)
    _background.finish()


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
