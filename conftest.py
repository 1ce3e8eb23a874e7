"""pytest configuration shared by tests/ and the nbval run over notebooks/."""


def pytest_collectstart(collector):
    # nbval: do not compare stderr. Warnings there carry per-run paths
    # (/tmp/ipykernel_<pid>/...) and library versions; stdout and results are compared.
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
