# The course's tasks. Every target sets up .venv/ from requirements.txt first (once,
# and again when requirements.txt or pyproject.toml change).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help book test lab benchmark clean

help:
	@echo "make book       build the book into _build/html (open _build/html/index.html)"
	@echo "make test       run the whole test suite (unit, doctests, nbval strict, book build)"
	@echo "make lab        open the notebooks in JupyterLab"
	@echo "make benchmark  run every benchmark in benchmarks/ (timings and memory, not tests)"
	@echo "make clean      remove .venv/ and _build/"

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt
	touch $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "The book is in _build/html/index.html"

test: $(STAMP)
	$(BIN)/python -m pytest

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

benchmark: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) _build
