# Set-up and entry points. `make demo` and `make test` each set up what they need first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint benchmarks

$(STAMP): pyproject.toml constraints/newest.txt
	bash scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/hf-norms demo

lint: $(STAMP)
	$(BIN)/ruff check hf_norms tests tests_transformers benchmarks conversions
	$(BIN)/ruff format --check hf_norms tests tests_transformers benchmarks conversions

test: $(STAMP) lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

benchmarks: $(STAMP)
	$(BIN)/python -m benchmarks.run_all
