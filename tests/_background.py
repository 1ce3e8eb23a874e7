"""Work that some tests wait for, done in a thread of the test process while other tests run.

On the course's 2-core machine most of `make test` is waiting for other programs: Jupyter kernels
(nbval, the homework grader), the book build, Chromium, pip. Each of them uses about one core. The
book build starts when the tests are collected (tests/conftest.py) and runs beside the tests in
order; a job here is the same idea for work that a few tests need and the rest do not: grading the
student versions of every chapter, grading the sources, the endless-loop submissions, installing
the wheel.

A test module declares a job with ``@job(...)`` in place of ``@pytest.fixture``: the decorated
function is the work, and the fixture of the same name returns its result (or raises its error).
When a selected test uses the fixture, tests/conftest.py starts the job as soon as the tests are
collected and moves the tests that use it to the end of the run, so that by the time they run
the work is done. A job can wait for the book build (``after_book``: it then runs on the core the
build leaves free; ``needs_book``: the same, for work on the built book, which starts the build
whenever the job is needed) and for other jobs (``after``), so that two jobs that each keep a core
busy do not run at once. A job's ``items`` are the selected tests that use it (set by
tests/conftest.py; None when the fixture was asked for outside the collection hook's reach): a job
whose work is per test (the browser's checks of the built book, tests/test_browser.py) does the
selected tests' work only.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

JOBS: dict[str, Job] = {}
CANCELLED = threading.Event()  # set when the session ends: jobs not yet started never start
# set once the tests that change ATTNLIB_LANG have run (tests/conftest.py runs them first): a job's
# work reads the language in its own thread, from os.environ, which those tests change for a moment
LANGUAGE_SETTLED = threading.Event()
_TEMPORARY: list[Path] = []


def temporary_dir(prefix: str) -> Path:
    """A new directory for a job's files, removed when the test session ends (tests/conftest.py)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _TEMPORARY.append(path)
    return path


SESSION_START = time.monotonic()


def finish(timeout: float = 600) -> None:
    """At the end of the session: start no more jobs, wait for the running ones, remove their files.
    When each job ran, in seconds from the start of the session, is in _build/test-jobs.log: where
    the suite's time goes."""
    CANCELLED.set()
    LANGUAGE_SETTLED.set()  # a run stopped early (-x) releases the jobs still waiting, which then stop
    lines = []
    for job in JOBS.values():
        if job.thread is not None:
            job.thread.join(timeout=timeout)
            start, end = (job.times.get(k, math.nan) - SESSION_START for k in ("started", "ended"))
            lines.append(f"{job.name:20} {start:7.1f} s to {end:7.1f} s ({end - start:5.1f} s)")
    if lines:
        log = Path(__file__).resolve().parent.parent / "_build" / "test-jobs.log"
        log.parent.mkdir(exist_ok=True)
        log.write_text("\n".join(lines) + "\n")
    for path in _TEMPORARY:
        shutil.rmtree(path, ignore_errors=True)


class Job:
    def __init__(self, name: str, work: Callable, after: tuple[str, ...], after_book: bool, needs_book: bool):
        self.name, self.work, self.after = name, work, after
        self.after_book, self.needs_book = after_book or needs_book, needs_book
        self.thread: threading.Thread | None = None
        self.outcome: dict = {}
        self.items: list[pytest.Item] | None = None
        self.times: dict[str, float] = {}  # when the work started and ended (time.monotonic)

    def start(self, wait_for_book: Callable[[], int | None]) -> None:
        if self.thread is not None:
            return

        def run():
            try:
                if self.after_book:
                    wait_for_book()
                LANGUAGE_SETTLED.wait()
                for name in self.after:  # the jobs of this session among them
                    if name in JOBS and JOBS[name].thread is not None:
                        JOBS[name].thread.join()
                if CANCELLED.is_set():
                    raise RuntimeError("the test session ended before this job started")
                self.times["started"] = time.monotonic()
                self.outcome["result"] = self.work()
            except BaseException as e:  # reported by the fixture, in the tests that need the result
                self.outcome["error"] = e
            finally:
                self.times["ended"] = time.monotonic()

        self.thread = threading.Thread(target=run, name=f"job {self.name}", daemon=True)
        self.thread.start()

    def result(self, timeout: float = 1800):
        self.thread.join(timeout=timeout)
        if self.thread.is_alive():
            raise AssertionError(f"the background job {self.name} did not finish within {timeout:g} s")
        if "error" in self.outcome:
            error = self.outcome["error"]
            if isinstance(error, (AssertionError, pytest.skip.Exception, pytest.fail.Exception)):
                raise error  # a failed check, or the job's own pytest.skip / pytest.fail
            detail = getattr(error, "stderr", None) or ""
            raise AssertionError(f"the background job {self.name} failed: {error!r}\n{detail}") from error
        return self.outcome["result"]


def job(*, after: tuple[str, ...] = (), after_book: bool = False, needs_book: bool = False):
    """Declare ``work`` as a background job and a session fixture of the same name that returns its result.

    ``after_book``: start once this session's book build (if any) has ended. ``needs_book``: the work
    uses the built book, so selecting a test that uses the job starts the build too."""

    def declare(work: Callable):
        JOBS[work.__name__] = Job(work.__name__, work, tuple(after), after_book, needs_book)

        def result_fixture():
            JOBS[work.__name__].start(_WAIT_FOR_BOOK[0])  # asked for outside the collection hook's reach
            return JOBS[work.__name__].result()

        result_fixture.__doc__ = work.__doc__
        return pytest.fixture(scope="session", name=work.__name__)(result_fixture)

    return declare


def book_returncode() -> int | None:
    """Wait for the book build of this session; its exit status (0: built), or None without a build."""
    return _WAIT_FOR_BOOK[0]()


# tests/conftest.py sets this to a function that waits for the book build and returns its exit
# status (None without one)
_WAIT_FOR_BOOK: list[Callable[[], int | None]] = [lambda: None]
