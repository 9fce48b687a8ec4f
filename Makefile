# pe_plugin: `make test` sets up .venv (if needed) and runs the test suite; `make demo` runs the demo.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup test test-fast demo clean
setup:
	bash scripts/setup_env.sh

test: setup
	$(PY) -m pytest -q tests

test-fast: setup
	$(PY) -m pytest -q -m "not slow" tests

demo: setup
	$(PY) scripts/demo.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
