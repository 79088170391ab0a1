#!/usr/bin/env bash
# Tools `make bench` compares waitmeter against, and what it measures with. Idempotent; run as root.
#   bpftrace  Debian package (naive uprobe / tracepoint scripts)
#   py-spy    PyPI wheel, into the repository's .venv (the sampling profiler)
#   bpftool   Debian package: names the BPF programs in the bpf_stats figures (make setup installs it too)
#   libbpf1   Debian package: the shared libbpf the floor's loader (bench/floor/floor.py) uses
# The floor's empty programs are compiled with clang-19 (make setup-build installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY_SPY_VERSION=0.4.3
VENV=${VENV:-.venv}

if ! command -v bpftrace >/dev/null; then
	echo "bench setup: installing bpftrace (apt)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftrace >/dev/null
fi
missing=$(for p in bpftool libbpf1; do dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q "ok installed" || echo $p; done)
if [ -n "$missing" ]; then
	echo "bench setup: installing" $missing "(apt)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
if [ ! -x "$VENV/bin/py-spy" ] || ! "$VENV/bin/py-spy" --version | grep -q " $PY_SPY_VERSION\$"; then
	echo "bench setup: installing py-spy $PY_SPY_VERSION (pip)"
	"$VENV/bin/python" -m pip install -q "py-spy==$PY_SPY_VERSION"
fi
command -v cc >/dev/null || { echo "bench setup: no C compiler (make setup installs build-essential)"; exit 1; }
command -v "${WAITMETER_CLANG:-clang-19}" >/dev/null || { echo "bench setup: no ${WAITMETER_CLANG:-clang-19} for the floor's BPF programs (make setup-build installs it)"; exit 1; }
echo "bench setup: ok (bpftrace $(bpftrace --version | awk '{print $2}'), py-spy $("$VENV/bin/py-spy" --version | awk '{print $2}'))"
