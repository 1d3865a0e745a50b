# snapstore: `make demo` and `make test` work on a fresh machine with python3, make and PyPI.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: all setup demo test test-fast lint bench bench-quick torture clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,bench,agents]' --config-settings editable_mode=compat
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash examples/demo.sh

test: $(STAMP) lint
	$(PY) -m pytest -q -n 2 --dist loadfile

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check snapstore tests benchmarks
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m benchmarks.run --out docs/benchmarks.md

bench-quick: $(STAMP)
	$(PY) -m benchmarks.run --quick

torture: $(STAMP)
	$(PY) -m tests.torture

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
