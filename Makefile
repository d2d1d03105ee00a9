# kueuelog — every target installs what it needs, caching downloads outside the clone.
SHELL := /bin/bash
PY ?= python3
export KUEUELOG_CACHE ?= $(HOME)/.cache/kueuelog
export PIP_CACHE_DIR ?= $(KUEUELOG_CACHE)/pip
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: install run run-clusters test unit lint conformance integration bench bench-kube kafka cluster browser clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

run: install
	$(BIN)/kueuelog demo

CLUSTERS ?= 3
run-clusters: install  # MultiKueue: a manager and $(CLUSTERS) simulated worker clusters
	$(BIN)/kueuelog demo --clusters $(CLUSTERS)

lint: install
	$(BIN)/ruff check events services tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: install
	$(BIN)/pytest -q -m "not integration" tests

conformance: install
	@out=$$($(BIN)/python ../shared/conformance/run.py); echo "$$out"; \
	  echo "$$out" | tail -n1 | grep -Eq '^[0-9]+ passed, 0 failed$$'

integration: install browser
	$(BIN)/pytest -q -m integration tests

# Debian's chromium for the web view's browser tests (apt-get, unattended, when /usr/bin/chromium
# is missing; fails loudly when it cannot). Playwright drives it; `playwright install` is never run.
browser: install
	$(BIN)/python -m tests.infra.browser install

test: install lint browser
	$(BIN)/pytest -q tests
	@$(MAKE) --no-print-directory conformance

bench: install
	$(BIN)/python -m bench

# Kueue's baseline through a real kube-apiserver (bench/kube.py): separate, the full size takes many
# minutes; BENCH_KUBE_ARGS=--quick for a couple of minutes.
bench-kube: install
	$(BIN)/python -m bench kube $(BENCH_KUBE_ARGS)

kafka: install
	$(BIN)/python -m tests.infra.kafka run

cluster: install
	$(BIN)/python -m tests.infra.kube run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .artifacts
