#!/usr/bin/env bash
# The kernel matrix: the tests whose outcome depends on the kernel, run on each of Debian's kernels in
# a virtual machine of its own (boot.sh), each kernel's wall time printed. CI runs it (make kernels).
#
#   tests/kernels/matrix.sh [SERIES...]      default: 5.10 6.1 6.12
#
# On each, every program loads at the maximum configuration within its margins (test_verifier.py), in
# the kernel's own variant (5.10: the legacy object, without bpf_loop) and in the legacy one, and the
# agent measures right: the partition of a known workload, the GIL story with its code, futex blame
# with its waker, `run`'s /metrics and /debug/pprof/wait; what a kernel lacks is said, and refused
# where it must be (test_kernel.py).
# Artefacts (junit XML, each kernel's verifier figures) go to tests/.build/artefacts; at the end
# tests/kernels/table.py prints the margins table of every kernel run (docs/probes/kernels.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

TESTS=(
	tests/test_kernel.py
	tests/test_verifier.py
	tests/test_partition.py::test_busy_thread_is_running
	tests/test_partition.py::test_sleeping_thread_is_asleep
	tests/test_partition.py::test_thread_blocked_on_empty_pipe_since_before_attach_is_io_wait
	tests/test_partition.py::test_mutex_waiter_is_futex_wait_and_holder_sleeps
	tests/test_partition.py::test_two_busy_threads_pinned_to_one_cpu_share_it
	"tests/test_gil.py::test_ingest_starves_behind_processor[pyenv-3.11]"
	"tests/test_stacks.py::test_the_starvation_verdict_names_the_code[3.12]"
	tests/test_blame.py::test_mutex_waits_match_the_programs_own_clock
	tests/test_prometheus.py::test_exposition_is_valid_and_complete
	tests/test_stacks.py::test_run_serves_wait_profiles_of_the_next_seconds
)
# Not in the list, open (issue 53): CFS throttling against cpu.stat reads 5-6% short in these guests
# (6.12: 2.40 s against 2.56 s; 6.1 passed in the same run, failed in an earlier one), within 5% here.

# `go tool pprof` (the profiles' consumer, test_stacks.py) is built on first use into GOCACHE (Go
# 1.25+): 35 s here, minutes under the guests' emulated CPU, again in each guest whose cache is a
# throw-away overlay. Built once here into a cache the guests may write (tests/.build), and shared.
export GOCACHE=${WAITMETER_VM_GOCACHE:-$PWD/tests/.build/gocache}
if command -v go >/dev/null; then go tool pprof -h >/dev/null 2>&1 || true; fi

series=("$@")
[ ${#series[@]} -gt 0 ] || series=(5.10 6.1 6.12)
mkdir -p tests/.build/artefacts
failed=()
for s in "${series[@]}"; do
	tests=("${TESTS[@]}")
	# a kernel without bpf_loop has one object, the legacy one: its two variants are the same load
	# (a node ID as pytest names it: from tests/, its rootdir)
	case "$s" in 5.10) tests+=(--deselect "test_verifier.py::test_every_program_keeps_its_margin_inside_the_verifiers_limits[without-bpf_loop]") ;; esac
	t0=$SECONDS
	echo "kernels: $s: ${#TESTS[@]} tests or files of tests, started $(date -u +%H:%M:%S)"
	# CI: a test that cannot run fails (tests/conftest.py); the guest's pytest writes no cache; the
	# tests' deadlines (not their measurements) are longer in the emulated CPU
	run() {
		WAITMETER_TEST_SLOWDOWN=${WAITMETER_TEST_SLOWDOWN:-8} WAITMETER_VM_ENV="PATH CI WAITMETER_TEST_SLOWDOWN GOCACHE" tests/kernels/boot.sh --timeout "${WAITMETER_VM_TIMEOUT:-1500}" "$s" \
			.venv/bin/python -m pytest -p no:cacheprovider -rs -q --durations=5 --junitxml "tests/.build/artefacts/kernel-$s.xml" "${tests[@]}"
	}
	rc=0
	run || rc=$?
	# 125: the guest reported no exit status (it died under its tests, the emulator failed): run
	# once more, its console kept this time (a test that failed is never run again)
	if [ "$rc" = 125 ]; then
		echo "kernels: $s: the guest died without an exit status; once more, its console in tests/.build/artefacts/console-$s.log"
		rc=0
		WAITMETER_VM_VERBOSE=1 run > >(tee "tests/.build/artefacts/console-$s.log" | grep -v '^\[ *[0-9.]*\]') 2>&1 || rc=$?
	fi
	if [ "$rc" = 0 ]; then
		echo "kernels: $s: passed in $((SECONDS - t0)) s"
	else
		echo "kernels: $s: FAILED in $((SECONDS - t0)) s"
		failed+=("$s")
	fi
done
.venv/bin/python tests/kernels/table.py tests/.build/artefacts/verifier-*.json || true
if [ ${#failed[@]} -gt 0 ]; then
	echo "kernels: failed on ${failed[*]}"
	exit 1
fi
echo "kernels: passed on ${series[*]}"
