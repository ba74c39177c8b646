# `make test` and `make run` each create .venv on first use and install the pinned set.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test run bench clean screenshots results

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

run: $(STAMP)
	$(PY) -m streamlit run app/main.py

bench: $(STAMP)
	$(PY) -m bench

# docs/results.md: the comparison on the demo test split, then where the spikes fall (bench/localisation.py).
results: $(STAMP)
	$(VENV)/bin/trace-core evaluate assets/datasets/demo_test.csv --group-by family --embedder --out docs/results.md
	printf '\n' >> docs/results.md
	$(PY) -m bench.localisation --section >> docs/results.md

# README screenshots: the browser end-to-end tests save one per page into docs/screenshots.
screenshots: $(STAMP)
	TRACE_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/e2e

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
