# The README's two commands: `make tour` (set up, then the main job on an embedded default) and
# `make test` (set up, then the whole test suite). Both build .venv from pyproject.toml on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: tour test setup notes clean

tour: $(STAMP)
	$(BIN)/iotrace tour

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

setup: $(STAMP)

# Rebuild every published note in notes/ (numbers, tables and figures), keeping the human annotations.
notes: $(STAMP)
	$(BIN)/iotrace notes rebuild

# torch first, pinned to the CPU wheel these machines carry; the project's own range (>=2.4,<2.15) then
# installs nothing more, and a GPU user's torch satisfies it too.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis .benchmarks
