# waitmeter — build, test and demo. Run as root (the probes need CAP_BPF and CAP_PERFMON).
#   make demo    build, start a bundled workload, attach, show the table
#   make test    lint (fmt, clippy), unit tests, integration tests on the real kernel, bounded fuzzing,
#                the kernel-sensitive tests on Debian's 5.10, 6.1 and 6.12 kernels in virtual machines
# Each works alone on a fresh Debian 12 machine: every target depends on the set-up it needs
# (setup-build: compilers and libraries; setup: also the test tools). `make -n test` shows it.
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
# Debian packages: to build the agent; to test it (bpftool, Prometheus/promtool, capsh, unshare, openssl, venv, groff,
# Java and Maven for the QuickFIX/J workload of tests/test_verdicts.py, nginx for the serving workloads, the C library's
# separate debug file for its internal frames, xz to pack a MiniDebugInfo in tests/test_stacks.py, Chromium to open
# the HTML report as a person would (tests/test_html.py), the shared libbpf
# the bench's small BPF loaders use, which tests/test_bench_loaders.py runs, PostgreSQL for the
# database a FastAPI handler calls synchronously in tests/test_stall_verdicts.py)
BUILD_PKGS := build-essential pkg-config clang-19 libelf-dev zlib1g-dev
TEST_PKGS  := chromium bpftool prometheus libcap2-bin util-linux python3-venv openssl maven openjdk-17-jdk-headless groff-base systemd nginx libc6-dbg xz-utils libbpf1 postgresql bpftrace
# $(call apt,PACKAGES): install those not installed yet
apt = @missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "setup: installing $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# the Express server of the serving workloads (tests/workloads/serving), and the trace viewer the
# timeline's tests import --trace files in (tests/viewers: speedscope): their node_modules from
# the committed package-lock.json (npm ci), once each
SERVING_NODE := tests/workloads/serving/node
VIEWERS := tests/viewers

# interpreters the machine's pyenv does not have (tests/pythons/build.sh)
PYTHONS := $(CURDIR)/.pythons

# cargo-fuzz for the fuzz targets in agent/fuzz (built from crates.io, once)
CARGO_FUZZ := $(TOOLS)/cargo-fuzz
CARGO_FUZZ_VERSION := 0.13.2
FUZZ_SECONDS ?= 20

.PHONY: all setup setup-build serving-node build test lint unit integration fuzz kernels docs mixin demo bench bench-cost clean static wheel image release

all: build

# What building the agent needs (idempotent: installs only what is missing).
setup-build:
	$(call apt,$(BUILD_PKGS))
	@command -v $(CARGO) >/dev/null || { echo "setup: no cargo: install Rust with rustup (https://rustup.rs), then rerun"; exit 1; }

# Everything make test needs: the build, the test venv, helm, cargo-fuzz.
setup: setup-build
	$(call apt,$(TEST_PKGS))
	@$(MAKE) --no-print-directory $(VENV)/.ok $(HELM) $(CARGO_FUZZ) $(PYTHONS)/.ok $(SERVING_NODE)/node_modules/.ok $(VIEWERS)/node_modules/.ok
	@echo "setup: ok"

serving-node: $(SERVING_NODE)/node_modules/.ok

%/node_modules/.ok: %/package.json %/package-lock.json
	@command -v npm >/dev/null || { echo "setup: no npm for $*: install Node.js >= 18 with npm (Debian: nodejs npm), then rerun"; exit 1; }
	cd $* && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(VENV)/.ok: tests/requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q -r tests/requirements.txt
	touch $@

# CPython 3.14, 3.15, 3.14t and a stripped 3.14 for the GIL tests, built from
# the upstream tarballs in Debian's archive pool (about 12 minutes, once)
$(PYTHONS)/.ok: tests/pythons/build.sh
	bash tests/pythons/build.sh $(PYTHONS)
	touch $@

$(HELM):
	@command -v go >/dev/null || { echo "setup: no Go toolchain to build helm: install Go >= 1.24 (https://go.dev/dl), then rerun"; exit 1; }
	@echo "setup: building helm $(HELM_VERSION) with go install (a few minutes, once)"
	GOBIN=$(TOOLS) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(CARGO_FUZZ):
	@echo "setup: building cargo-fuzz $(CARGO_FUZZ_VERSION) (a minute or two, once)"
	$(CARGO) install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked --root $(CURDIR)/.tools --quiet

build: setup-build
	cd agent && $(CARGO) build --release --locked

# WAITMETER_NO_SKIP=1: a test that needs root, BTF, an interpreter or Go fails here instead of
# skipping (plain `cargo test` as a user skips them with a line on stderr); so it needs the set-up
# (the interpreters make setup builds)
unit: setup
	cd agent && WAITMETER_NO_SKIP=1 $(CARGO) test --release --locked --workspace

# The tree stays formatted (agent/rustfmt.toml) and clippy-clean.
lint: setup-build
	@command -v rustup >/dev/null && rustup component add rustfmt clippy >/dev/null 2>&1 || true
	cd agent && $(CARGO) fmt --all --check
	cd agent && $(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings

integration: setup build release
	$(PYTHON) -m pytest -rs --durations=25 tests/

# Bounded fuzzing of the parsers of hostile input (ELF, exposition, HTTP heads, debug offsets, line tables, perf maps, symbol names, call frame information, VMStructs, Go function tables): FUZZ_SECONDS each.
fuzz: setup
	bash agent/fuzz/run.sh $(FUZZ_SECONDS)

# The kernel matrix: the kernel-sensitive tests on Debian's 5.10, 6.1 and 6.12 kernels, each booted in
# a virtual machine (tests/kernels: the kernels fetched by package name through a private apt
# configuration, cached; virtme-ng under QEMU's software emulation), each kernel's time printed.
kernels: setup build
	bash tests/kernels/matrix.sh $(KERNELS)

test: lint unit integration fuzz kernels

# Regenerate docs/metrics.md from the metric catalogue, and the shell completions and man pages from
# the command line (a unit test fails when any is stale).
docs: build
	$(AGENT) metrics-doc > docs/metrics.md
	mkdir -p contrib/completions docs/man
	$(AGENT) completions bash > contrib/completions/waitmeter.bash
	$(AGENT) completions zsh > contrib/completions/_waitmeter
	$(AGENT) completions fish > contrib/completions/waitmeter.fish
	rm -f docs/man/*.1 && $(AGENT) man --dir docs/man

# Regenerate the mixin (dashboards/*.json, rules) and the chart's copies with dashboards/mixin.py
# (its modules: dashboards/waitmeter_mixin/).
mixin: setup-build $(VENV)/.ok
	$(PYTHON) dashboards/mixin.py

# Only what the demo needs: a compiler, the agent (no test tools, no helm).
demo: build
	@bash tests/demo.sh $(AGENT)

# Overhead and accuracy benchmarks (never part of make test; prints, does not fail on timings).
bench: setup build
	@bash bench/setup.sh
	$(PYTHON) bench/bench.py $(BENCH_ARGS)

# Every probe's per-event cost (about 15 min), then its figures into docs/probes/*.md (bench/probe_docs.py):
# run after changing a BPF program; tests/test_probe_docs.py fails while a doc's figures are older than its program.
bench-cost: setup build
	@bash bench/setup.sh
	$(PYTHON) bench/bench.py --only cost $(BENCH_ARGS)
	$(PYTHON) bench/probe_docs.py write

# ---- release artefacts, in dist/ (tests/test_release.py checks each) ----------------------------
# The static binary: libbpf, libelf, zlib and glibc linked in (glibc 2.34+ has its files and dns
# name services built in, so nothing is loaded at run time), one file for any Linux on this
# architecture with a BTF kernel. --target keeps crt-static away from build scripts and proc macros.
ARCH    := $(shell uname -m)
TRIPLE  := $(ARCH)-unknown-linux-gnu
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' agent/Cargo.toml | head -1)
STATIC  := agent/target/$(TRIPLE)/release/waitmeter
STATIC_ENV := LIBBPF_SYS_LIBRARY_PATH=/usr/lib/$(ARCH)-linux-gnu RUSTFLAGS="-C target-feature=+crt-static"
DIST    := dist
RELEASE_PKGS := buildah
BUILDAH = STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot buildah --root $(CURDIR)/.tools/containers --runroot $(CURDIR)/.tools/containers-run

static: setup-build
	cd agent && $(STATIC_ENV) $(CARGO) build --release --locked --features libbpf-rs/static --target $(TRIPLE)
	@if readelf -dl $(STATIC) | grep -qE "NEEDED|INTERP"; then echo "$(STATIC) is not static: it names an interpreter or libraries (readelf -dl)" >&2; exit 1; fi
	@mkdir -p $(DIST) && cp $(STATIC) $(DIST)/waitmeter-linux-$(ARCH)

# pip install dist/waitmeter-*.whl: the static binary as a console script (maturin, bin bindings,
# pyproject.toml), tagged manylinux_2_17 (Rust's oldest glibc; it needs none: static); maturin adds its CycloneDX SBOM.
# And the application client's wheel (clients/python).
wheel: static $(VENV)/.ok
	rm -f $(DIST)/waitmeter-*.whl $(DIST)/waitmeter_client-*.whl
	$(STATIC_ENV) $(VENV)/bin/maturin build --release --target $(TRIPLE) --compatibility manylinux_2_17 -o $(DIST)
	$(PYTHON) -m pip wheel -q --no-deps -w $(DIST) clients/python

# The container image (Dockerfile, stage release: the static binary on an empty base) as an OCI
# archive, built with buildah: no daemon, no registry (scratch needs no pull).
image: static
	$(call apt,$(RELEASE_PKGS))
	$(BUILDAH) bud --quiet --layers=false --target release -t waitmeter:$(VERSION) -f Dockerfile . >/dev/null
	rm -f $(DIST)/waitmeter-$(VERSION).oci.tar
	$(BUILDAH) push --quiet waitmeter:$(VERSION) oci-archive:$(DIST)/waitmeter-$(VERSION).oci.tar:waitmeter:$(VERSION)
	$(BUILDAH) rmi waitmeter:$(VERSION) >/dev/null

# Everything: binary, wheels, image, chart package, SBOM, and SHA256SUMS over them.
release: wheel image $(HELM)
	rm -f $(DIST)/waitmeter-*.tgz
	$(HELM) package --destination $(DIST) helm/waitmeter >/dev/null
	$(PYTHON) contrib/release/sbom.py $(DIST)/waitmeter-$(VERSION)-*.whl $(DIST)/waitmeter-$(VERSION).cdx.json
	cd $(DIST) && rm -f SHA256SUMS && sha256sum waitmeter-linux-$(ARCH) *.whl *.oci.tar *.tgz *.cdx.json > SHA256SUMS
	@echo "release: $(DIST)/" && cd $(DIST) && ls -1 

clean:
	cd agent && $(CARGO) clean
	rm -rf tests/.build $(DIST) $(SERVING_NODE)/node_modules $(VIEWERS)/node_modules
