# Two entry points for a fresh clone: `make demo` and `make test`. Each sets up .venv once (idempotent).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0   # the CPU build; must come before anything that pulls torch
	$(PY) -m pip install -q -e '.[train,test,dataflow]'
	# lm-eval's Janitor is the reference the decontamination tests compare with; its own dependencies (datasets,
	# evaluate, a newer cloudpickle and dill) are not ours, and the Janitor needs none of them
	$(PY) -m pip install -q --no-deps lm-eval==0.4.13
	# MosaicML streaming's StreamingDataset is the reader that proves `convert --format mds`; it pins numpy<2.2 and
	# transformers<5 and pulls torchvision with a CUDA torch, none of which it needs to read MDS shards
	$(PY) -m pip install -q --no-deps mosaicml-streaming==0.13.0
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bertprep demo

# Two test processes (pytest-xdist), a test file each at a time, so a file's module fixtures are made once: the
# suite is mostly single-threaded, and the CI machine has 2 cores (issue 39: 6.5 min instead of 11 on them).
test: $(STAMP)
	$(PY) -m pytest -q -ra -n 2 --dist loadfile

clean:
	rm -rf demo_out .pytest_cache
