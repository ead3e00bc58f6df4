# The two commands of the README: `make repro` and `make test`. Both create .venv when it is missing.
SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BOOTSTRAP_PYTHON ?= python3

export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := false
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup repro test test-all lint diff clean

# Re-install when the dependency list changes. torch goes first and alone so that pip takes the pinned
# wheel (the local CPU build here) instead of letting a dependency pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	@test -x $(PYTHON) || $(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet torch==2.13.0
	$(PYTHON) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

repro: setup
	dvc repro

test: setup
	python -m pytest -n 2 --dist loadfile

test-all: setup
	python -m pytest -m ''

# The workspace against a git revision or an experiment: `make diff` (HEAD), `make diff REV=main`,
# `make diff REV=<exp name>` -> reports/diff.md (headline changes, dvc params diff, dvc metrics diff).
REV ?= HEAD
diff: setup
	guardpolicy diff --rev $(REV) --out reports/diff.md
	@cat reports/diff.md

lint: setup
	ruff check .
	ruff format --check .

clean:
	rm -rf $(VENV)
