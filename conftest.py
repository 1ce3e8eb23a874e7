"""pytest configuration shared by tests/ and the nbval run over notebooks/."""

import os

# Headless machines often set MPLBACKEND=Agg, and ipykernel then keeps Agg: plt.show()
# draws nothing unless a notebook asks for the inline backend itself (every chapter's
# first cell runs `%matplotlib inline`). The suite runs the notebooks and builds the book
# under Agg, so a chapter that forgets it loses its figures and fails here.
os.environ["MPLBACKEND"] = "Agg"
# The course's outputs and messages are compared in English: a shell that asks attnlib for
# Chinese (ATTNLIB_LANG=zh_CN) must not change them. Tests of the Chinese set it themselves.
os.environ.pop("ATTNLIB_LANG", None)
# The suite runs two things at once: the tests, and the book build's kernels beside them
# (tests/conftest.py). With each asking PyTorch for every core, their threads fight over
# the cores and both crawl; one thread each, in this process, its kernels and subprocesses.
os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collectstart(collector):
    # nbval: do not compare stderr. Warnings there carry per-run paths
    # (/tmp/ipykernel_<pid>/...) and library versions; stdout and results are compared.
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
