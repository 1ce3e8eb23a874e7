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


def pytest_collectstart(collector):
    # nbval: do not compare stderr. Warnings there carry per-run paths
    # (/tmp/ipykernel_<pid>/...) and library versions; stdout and results are compared.
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
