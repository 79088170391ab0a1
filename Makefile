# waitmeter — build, test and demo. Run as root (the probes need CAP_BPF and CAP_PERFMON).
#   make demo    build, start a bundled workload, attach, show the table
#   make test    unit tests, then integration tests on the real kernel
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:/usr/local/go/bin:$(PATH)

CARGO   ?= cargo
AGENT   := agent/target/release/waitmeter
# the tests' own Python environment (pytest from PyPI), whatever python3 the machine has
VENV    := .venv
PYTHON  := $(VENV)/bin/python
# helm for the chart's tests, built from source with Go (no binary downloads here)
TOOLS   := $(CURDIR)/.tools/bin
HELM    := $(TOOLS)/helm
HELM_VERSION := v3.22.0
export HELM
APT_PKGS := build-essential pkg-config clang-19 libelf-dev zlib1g-dev bpftool prometheus libcap2-bin util-linux python3-venv openssl

.PHONY: all setup build test unit integration docs mixin demo bench clean

all: build

# Idempotent: installs only what is missing.
setup:
	@missing=$$(for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "setup: installing $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "setup: no cargo: install Rust with rustup (https://rustup.rs), then rerun"; exit 1; }
	@$(MAKE) --no-print-directory $(VENV)/.ok $(HELM)
	@echo "setup: ok"

$(VENV)/.ok: tests/requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q -r tests/requirements.txt
	touch $@

$(HELM):
	@command -v go >/dev/null || { echo "setup: no Go toolchain to build helm: install Go >= 1.24 (https://go.dev/dl), then rerun"; exit 1; }
	@echo "setup: building helm $(HELM_VERSION) with go install (a few minutes, once)"
	GOBIN=$(TOOLS) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

build:
	cd agent && $(CARGO) build --release --locked

unit:
	cd agent && $(CARGO) test --release --locked --workspace

integration: build $(VENV)/.ok
	$(PYTHON) -m pytest -rs tests/

test: unit integration

# Regenerate docs/metrics.md from the metric catalogue (a unit test fails when stale).
docs: build
	$(AGENT) metrics-doc > docs/metrics.md

# Regenerate the mixin (dashboards/*.json, rules) and the chart's copies from dashboards/mixin.py.
mixin: $(VENV)/.ok
	$(PYTHON) dashboards/mixin.py

demo: setup build
	@bash tests/demo.sh $(AGENT)

# Overhead and accuracy benchmarks (never part of make test; prints, does not fail on timings).
bench: setup build
	@bash bench/setup.sh
	$(PYTHON) bench/bench.py $(BENCH_ARGS)

clean:
	cd agent && $(CARGO) clean
	rm -rf tests/.build
