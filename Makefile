# pe_plugin: `make test` sets up .venv (if needed) and runs the test suite, `make test-fast` the same without the tests
# marked slow; `make demo` runs the demo (docs/demo.md);
# `make length` trains every encoding on short sentences and scores them on longer ones (length_out/, docs/length.md).
VENV ?= .venv
PY := $(VENV)/bin/python
# test processes (pytest-xdist); each test file runs in one of them, so its module fixtures are built once;
# one torch thread each. Three on two cores: while one waits (a SLURM job, a tool's subprocess, a training held
# stopped until a time limit) the others use its core (an idle 2-core machine: 747 s with three, 816 s with two,
# docs/dev/timings.md)
WORKERS ?= 3
TEST_THREADS ?= 1

.PHONY: setup test test-fast demo length clean
setup:
	bash scripts/setup_env.sh

test: setup
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n $(WORKERS) --dist loadfile tests

test-fast: setup
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n $(WORKERS) --dist loadfile -m "not slow" tests

demo: setup
	$(PY) scripts/demo.py

length: setup
	$(PY) scripts/length_experiment.py --out length_out

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
