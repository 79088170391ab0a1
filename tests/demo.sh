#!/usr/bin/env bash
# The demo: a process with two busy threads pinned to one CPU (each waits for
# the other half of the time), a sleeper, and a thread blocked on a mutex whose
# holder sleeps. waitmeter attaches to it and shows where every thread's time goes.
set -euo pipefail
agent=${1:-agent/target/release/waitmeter}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/.build"
cc -O2 -Wall -pthread -o "$here/.build/threads" "$here/workloads/threads.c"

out=$(mktemp)
"$here/.build/threads" --pinned-pair 0 --sleep 1 --mutex >"$out" &
workload=$!
trap 'kill $workload 2>/dev/null || true; wait $workload 2>/dev/null || true; rm -f "$out"' EXIT
until grep -q '^ready' "$out"; do
    kill -0 $workload || { echo "demo: the workload died" >&2; exit 1; }
    sleep 0.05
done
echo "demo: workload PID $workload: spin-a and spin-b pinned to CPU 0, sleeper-0, holder (sleeps holding a mutex), waiter (blocked on it)"
echo "demo: waitmeter attach --pid $workload --duration 5"
echo
"$agent" attach --pid "$workload" --duration 5
