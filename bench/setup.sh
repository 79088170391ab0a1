#!/usr/bin/env bash
# Tools `make bench` compares waitmeter against. Idempotent; run as root.
#   bpftrace  Debian package (naive uprobe / tracepoint scripts)
#   py-spy    PyPI wheel, into the repository's .venv (the sampling profiler)
set -euo pipefail
cd "$(dirname "$0")/.."
PY_SPY_VERSION=0.4.3
VENV=${VENV:-.venv}

if ! command -v bpftrace >/dev/null; then
	echo "bench setup: installing bpftrace (apt)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftrace >/dev/null
fi
if [ ! -x "$VENV/bin/py-spy" ] || ! "$VENV/bin/py-spy" --version | grep -q " $PY_SPY_VERSION\$"; then
	echo "bench setup: installing py-spy $PY_SPY_VERSION (pip)"
	"$VENV/bin/python" -m pip install -q "py-spy==$PY_SPY_VERSION"
fi
command -v cc >/dev/null || { echo "bench setup: no C compiler (make setup installs build-essential)"; exit 1; }
echo "bench setup: ok (bpftrace $(bpftrace --version | awk '{print $2}'), py-spy $("$VENV/bin/py-spy" --version | awk '{print $2}'))"
