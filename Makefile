# Each public target is the whole set-up on a fresh machine: it creates .venv if missing.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
# the stamp names the torch spec, so `make test TORCH=...` reinstalls when it changes
STAMP := $(VENV)/.installed-$(subst =,_,$(subst <,_,$(subst >,_,$(TORCH))))

.PHONY: demo test bench lint clean vsix test-extension screenshots bench-extension
EXT := vscode-extension

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]" --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tensor_dap demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests
	PYTHON=$(abspath $(PY)) $(EXT)/scripts/test.sh

bench: $(STAMP)
	$(PY) benchmarks/bench_summary.py
	$(PY) benchmarks/bench_launch.py
	$(PY) benchmarks/bench_debugger.py
	$(PY) benchmarks/bench_checks.py
	$(PY) benchmarks/bench_guard.py
	-PYTHON=$(abspath $(PY)) $(EXT)/scripts/bench.sh
	$(PY) benchmarks/bench_monitor.py
	$(PY) benchmarks/bench_batch_origin.py

lint: $(STAMP)
	$(PY) -m ruff check tensor_dap pydevd_plugins tests benchmarks

# The VS Code extension: tensor-dap.vsix, its tests (unit + end to end in code-server), screenshots, benchmark.
vsix:
	$(EXT)/scripts/vsix.sh

test-extension: $(STAMP)
	PYTHON=$(abspath $(PY)) $(EXT)/scripts/test.sh

screenshots: $(STAMP)
	PYTHON=$(abspath $(PY)) $(EXT)/scripts/e2e.sh --screenshots $(abspath $(EXT)/media/screenshots)

bench-extension: $(STAMP)
	PYTHON=$(abspath $(PY)) $(EXT)/scripts/bench.sh

clean:
	rm -rf $(VENV) build *.egg-info
	rm -rf $(EXT)/node_modules $(EXT)/dist $(EXT)/out $(EXT)/tensor-dap.vsix
