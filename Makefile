# Two commands: `make demo` (the main job) and `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# The suite runs on this many processes (pytest-xdist); tests that start Ray nodes of their
# own share one of them (`--dist loadgroup`, group `ray-start`).
TEST_WORKERS ?= 2

.PHONY: demo test lint docs install clean system-deps bench-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@ $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m nas_cli.demo

# System packages for the storage and browser tests (PostgreSQL, Chromium): installed when
# missing and this user may (root/sudo with apt-get); otherwise those tests skip with a reason.
system-deps:
	bash .ci/system-deps.sh

test: $(TEST_STAMP) system-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(MKDOCS) build --strict --quiet --site-dir $(SITE)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The documentation site (docs/, mkdocs.yml) into site/: its reference pages are rendered from
# the code as it builds, and --strict fails on a broken link or a key the docs do not describe.
SITE := site
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs

docs: $(TEST_STAMP)
	$(MKDOCS) build --strict --site-dir $(SITE)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The benchmarks' own environment: Syne Tune (benchmarks/search.py, arm (e)), Ax and the
# NAS-Bench-Graph tables (benchmarks/tabular.py, sampler_speed.py): a separate venv, so
# `make test` never needs them.
BENCH_VENV := .venv-bench

bench-env: $(BENCH_VENV)/.installed

$(BENCH_VENV)/.installed: benchmarks/requirements-syne.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet -r benchmarks/requirements-syne.txt
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info $(SITE)
