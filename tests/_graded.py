"""Every chapter's student version, released and graded as a submission (tests/test_homework.py).

It runs every chapter in a kernel, most of a minute of one core, so tests/conftest.py starts it in
a background thread as soon as the tests are collected."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def release_and_grade(out: Path, jobs: int = 1, stop=None) -> dict:
    """``{chapter file name: (results, the notebook as it ran)}`` for the student version of every
    chapter, released into ``out`` and graded ``jobs`` at a time (each in its own kernel). Once
    ``stop`` (a threading.Event) is set, the chapters not yet begun are left out."""
    from coursetools import homework

    homework.release(CHAPTERS, out)

    def grade(path):
        if stop is not None and stop.is_set():
            return path.name, None
        executed: list = []
        results = homework.grade_one(out / path.name, timeout=120, executed=executed)
        return path.name, (results, executed[0])

    with ThreadPoolExecutor(jobs) as pool:
        return {name: graded for name, graded in pool.map(grade, CHAPTERS) if graded is not None}
