# The course's tasks. Every target sets up .venv/ from requirements.txt first (once,
# and again when requirements.txt or pyproject.toml change).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help book catalogs notebooks notebooks-zh check lint format test lab benchmark clean

help:
	@echo "make book       build the book, English into _build/html and Chinese into _build/html/zh"
	@echo "make catalogs   after changing English text: update the Chinese catalogs in locales/"
	@echo "make notebooks  re-execute every chapter notebook in place, in a fresh kernel, top to bottom"
	@echo "make notebooks-zh  Chinese notebooks in notebooks/zh/, from the catalogs (for make lab)"
	@echo "make check      the quick tests while editing: unit tests, doctests, repository checks (under a minute)"
	@echo "make lint       ruff: lint the code and the notebooks, check the code's format (make format fixes it)"
	@echo "make test       the whole test suite, as CI runs it (adds nbval strict, the homework tools, the book, the browser)"
	@echo "make lab        open the notebooks in JupyterLab"
	@echo "make benchmark  run every benchmark in benchmarks/ (timings and memory, not tests)"
	@echo "make clean      remove .venv/ and _build/"

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt
	touch $(STAMP)

book: $(STAMP)
	$(BIN)/python book/editions.py build

catalogs: $(STAMP)
	$(BIN)/python book/editions.py catalogs

notebooks: $(STAMP)
	$(BIN)/python book/execute.py

notebooks-zh: $(STAMP)
	$(BIN)/python book/editions.py notebooks

check: $(STAMP)
	$(BIN)/python -m pytest tests attnlib -m "not slow"

LINTED := attnlib coursetools tests benchmarks book conftest.py

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED) notebooks
	$(BIN)/ruff format --check $(LINTED)

format: $(STAMP)
	$(BIN)/ruff check --fix $(LINTED) notebooks
	$(BIN)/ruff format $(LINTED)

# axe-core, the browser test's accessibility checker, exactly as tests/axe/package-lock.json pins it
# (Debian's nodejs and npm; without npm that check is skipped, except under CI=true)
AXE := tests/axe/node_modules/axe-core/axe.min.js

$(AXE): tests/axe/package-lock.json
	@if command -v npm >/dev/null 2>&1; then cd tests/axe && npm ci --ignore-scripts --no-audit --no-fund; \
	else echo "npm not found: the browser test's axe-core check will be skipped (CONTRIBUTING.md)"; fi

test: $(STAMP) $(AXE)
	$(BIN)/python -m pytest

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

benchmark: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) _build
