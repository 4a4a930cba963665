# Two commands set everything up: `make run` (the main job) and `make test` (the tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test stress figures gallery lint clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

run: $(BIN)/.installed  ## set up, then run the small default experiment
	$(BIN)/python -m dynamics.run

test: $(BIN)/.installed  ## set up, then lint and run the test suite
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

stress: $(BIN)/.installed  ## the slow tests and the long stress runs (random-moment interrupts, big fuzz budgets)
	$(BIN)/python -m pytest -m "slow or stress" --reruns 1 --only-rerun "crashed"

figures: $(BIN)/.installed  ## regenerate every preset's figure
	$(BIN)/python -m figures

gallery: $(BIN)/.installed  ## regenerate the figures and the README gallery (docs/*.png)
	$(BIN)/python -m figures --gallery docs

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs figures-out .pytest_cache
