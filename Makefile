# Two entry points for a fresh clone: `make demo` and `make test`. Each sets up .venv once (idempotent).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0   # the CPU build; must come before anything that pulls torch
	$(PY) -m pip install -q -e '.[train,test,dataflow]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bertprep demo

test: $(STAMP)
	$(PY) -m pytest -q -ra

clean:
	rm -rf demo_out .pytest_cache
