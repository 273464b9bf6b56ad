# grpolens — `make demo` on a fresh clone sets everything up and runs the main job on sample runs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export GRPOLENS_HOME ?= $(CURDIR)/warehouse
# The demo's folders, once `make demo` has written them (a configured folder that does not exist fails a refresh).
export GRPOLENS_WANDB_DIRS ?= $(wildcard $(GRPOLENS_HOME)/demo_runs)
export GRPOLENS_TRAINER_LOGS ?= $(wildcard $(GRPOLENS_HOME)/demo_trainer_logs)
export GRPOLENS_EVENT_FILES ?= $(wildcard $(GRPOLENS_HOME)/demo_events)

.PHONY: setup demo lint format test test-fast ui bench manifest clean

setup: $(VENV)/.installed dbt_project/target/manifest.json

$(VENV)/.installed: pyproject.toml pipeline/_items.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Dagster loads dbt assets from the manifest; `dagster asset materialize` does not parse the project itself.
dbt_project/target/manifest.json: $(VENV)/.installed $(shell find dbt_project/models dbt_project/seeds dbt_project/macros dbt_project/tests -type f 2>/dev/null) dbt_project/dbt_project.yml
	cd dbt_project && ../$(BIN)/dbt parse --quiet --profiles-dir .

manifest: dbt_project/target/manifest.json

demo: setup
	$(BIN)/grpolens demo

# The same tools as .pre-commit-config.yaml: ruff (lint + format check) and mypy on the Python, sqlfluff on the
# dbt models and the SQL checks and questions. `make format` applies ruff's fixes and formatting.
lint: setup
	$(BIN)/ruff check pipeline tests benchmarks
	$(BIN)/ruff format --check pipeline tests benchmarks
	$(BIN)/mypy
	$(BIN)/sqlfluff lint dbt_project/models dbt_project/macros sql
	cd sql/checks && $(CURDIR)/$(BIN)/sqlfluff lint .  # its own templater (DuckDB $$parameters): sql/checks/.sqlfluff

format: setup
	$(BIN)/ruff check --fix pipeline tests benchmarks
	$(BIN)/ruff format pipeline tests benchmarks

test: setup
	$(BIN)/pytest

# Everything but the tests marked slow (the browser, kill-and-rebuild equivalence): a quick loop while developing.
test-fast: setup
	$(BIN)/pytest -m 'not slow'

ui: setup
	$(BIN)/grpolens ui

bench: setup
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf dbt_project/target dbt_project/logs .pytest_cache
