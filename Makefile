# `make test` and `make run` each create .venv on first use and install the pinned set.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test run bench clean

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
	@if [ -f app/main.py ]; then \
		$(PY) -m streamlit run app/main.py; \
	else \
		echo "The dashboard is not yet available in this version: the library (trace_core) and its tests are."; \
		echo "Run 'make test' to check the install, or use trace_core from Python."; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
