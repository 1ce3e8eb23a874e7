# The course's tasks. Every target sets up .venv/ from requirements.txt and requirements-nodeps.txt first
# (once, and again when one of them or pyproject.toml changes, or when PYTHON is another Python).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# the version of PYTHON, and of the Python that made .venv/ (empty where there is none)
PY_WANT := $(shell $(PYTHON) -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)
PY_HAVE := $(shell $(BIN)/python -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)
# the stamp names the Python: a .venv/ made by another one, or left half-made, is made again
STAMP  := $(VENV)/.installed-$(PY_WANT)
# JupyterLab refuses to start as root (Docker images, cloud machines) unless told it may
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: help book catalogs notebooks notebooks-zh check lint format test lab benchmark colab-check clean

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
	@echo "make colab-check  every chapter in a Python 3.12 environment with Google Colab's versions (downloads ~3 GB)"
	@echo "make clean      remove .venv/ and _build/"

# Installed after requirements.txt with --no-deps, its hash checked: chapter 18's checkpoint, whose declared
# dependencies are not needed (requirements-nodeps.txt says why). A copy of this Makefile without that file
# (tests/test_setup.py's) installs nothing more.
NODEPS := $(wildcard requirements-nodeps.txt)

$(STAMP): requirements.txt pyproject.toml $(NODEPS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "The course needs Python 3.11 or newer (the versions in requirements.txt do);"; \
	  echo "PYTHON=$(PYTHON) is $(or $(PY_WANT),not a Python that runs here). Name another: make PYTHON=python3.12 $(or $(MAKECMDGOALS),help)"; \
	  exit 1; }
	@if [ -e $(VENV) ] && [ "$(PY_HAVE)" != "$(PY_WANT)" ]; then \
	  echo "$(VENV)/ was made by Python $(or $(PY_HAVE),that does not run) and PYTHON is $(PY_WANT): making $(VENV)/ again"; \
	  rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt
	$(if $(NODEPS),$(BIN)/python -m pip install --no-deps --require-hashes -r $(NODEPS))
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
	$(BIN)/jupyter lab notebooks/ $(ROOT_FLAG)

benchmark: $(STAMP)
	$(BIN)/python -m pip install --no-deps -r benchmarks/requirements.txt
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The Colab-like check (tests/colab_like.py): a Python 3.12 environment in _build/colab-like/ with
# Colab's versions (tests/colab-requirements.txt), attnlib[notebooks] installed as Colab's cell does,
# every chapter run there under nbval. It needs no .venv/; COLAB_PYTHON names a Python 3.12.
COLAB_PYTHON ?= python3.12

colab-check:
	$(PYTHON) tests/colab_like.py --python $(COLAB_PYTHON)

clean:
	rm -rf $(VENV) _build
