# Two entry points a new user needs: `make serve` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: serve test bench clean

$(BIN)/agentledger: pyproject.toml
	@test -n "$(PYTHON)" || { echo "python3.11 not found: set PYTHON=/path/to/python3.11" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

serve: $(BIN)/agentledger
	$(BIN)/agentledger serve

test: $(BIN)/agentledger
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(BIN)/agentledger
	$(BIN)/python bench/catchup.py
	$(BIN)/python bench/queries.py

clean:
	rm -rf $(VENV) build src/*.egg-info
