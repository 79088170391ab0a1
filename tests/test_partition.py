"""The time partition on workloads whose states are known (issue: foundation, tests 1-7)."""
import json
import subprocess
import time

import pytest

from conftest import WAITMETER, Lines, Workload, attach, build_c, by_tid, share, stop

pytestmark = pytest.mark.needs_root

WINDOW = 2.0
STATES = ["running", "runqueue", "throttled", "gil_wait", "futex_wait", "io_wait", "sleep", "other", "yield"]


@pytest.fixture(scope="module")
def mixed(workload_bin):
    """One process: a busy thread, a sleeper, a reader blocked on an empty pipe
    (since before the agent attached), a mutex holder and a waiter blocked on it."""
    with Workload(workload_bin, "--busy", 1, "--sleep", 1, "--pipe", 1, "--mutex") as w:
        t0 = time.monotonic()
        report, _ = attach(w.pid, WINDOW)
        wall = time.monotonic() - t0
        yield w, report, wall


def test_report_names_the_process_and_all_threads(mixed):
    w, report, _ = mixed
    assert report["pid"] == w.pid
    assert report["python"] is None
    assert set(by_tid(report)) == set(w.tids.values())
    for role, tid in w.tids.items():
        t = by_tid(report)[tid]
        assert t["name"] == role  # pthread_setname_np names, read from the target
        assert sorted(t["seconds"]) == sorted(STATES)
        assert not t["exited"]


def test_busy_thread_is_running(mixed):
    w, report, _ = mixed
    t = by_tid(report)[w.tids["busy-0"]]
    assert share(t, "running") >= 0.95, t
    assert t["wait_ratio"] is not None and t["wait_ratio"] <= 0.05


def test_sleeping_thread_is_asleep(mixed):
    w, report, _ = mixed
    t = by_tid(report)[w.tids["sleeper-0"]]
    assert share(t, "sleep") >= 0.95
    # it ran and waited for microseconds at each wake: too little for a ratio to mean anything
    waited = sum(t["seconds"][s] for s in ("runqueue", "throttled", "gil_wait"))
    assert waited + t["seconds"]["running"] > 0 and t["wait_ratio"] is None, t


def test_thread_blocked_on_empty_pipe_since_before_attach_is_io_wait(mixed):
    w, report, _ = mixed
    t = by_tid(report)[w.tids["reader-0"]]
    assert share(t, "io_wait") >= 0.95, t
    assert t["seconds"]["running"] == 0.0


def test_mutex_waiter_is_futex_wait_and_holder_sleeps(mixed):
    w, report, _ = mixed
    assert share(by_tid(report)[w.tids["waiter"]], "futex_wait") >= 0.90
    assert share(by_tid(report)[w.tids["holder"]], "sleep") >= 0.95  # pause()


def test_states_sum_to_wall_time_for_every_thread(mixed):
    w, report, wall = mixed
    # the window is what was asked for, and no longer than the command took
    assert WINDOW * 0.99 <= report["duration_s"] <= wall
    for t in report["threads"]:
        total = sum(t["seconds"].values())
        assert abs(total - t["existed_s"]) <= 0.01 * t["existed_s"], t
        # every thread existed for the whole window
        assert abs(total - report["duration_s"]) <= 0.01 * report["duration_s"], t


def test_two_busy_threads_pinned_to_one_cpu_share_it(workload_bin):
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        report, _ = attach(w.pid, WINDOW)
    threads = by_tid(report)
    for role in ("spin-a", "spin-b"):
        t = threads[w.tids[role]]
        assert 0.40 <= share(t, "runqueue") <= 0.60, t
        assert share(t, "running") + share(t, "runqueue") >= 0.98, t
        total = sum(t["seconds"].values())
        assert abs(total - report["duration_s"]) <= 0.01 * report["duration_s"]
        assert 0.40 <= t["wait_ratio"] <= 0.60
    assert any("waiting for a CPU (run queue)" in v for v in report["verdict"]), report["verdict"]


def test_thread_that_exits_mid_window_gets_a_partial_row(workload_bin):
    # the "short" thread spins for 2 s after "ready", then exits
    with Workload(workload_bin, "--short-lived", 2000, "--sleep", 1) as w:
        report, _ = attach(w.pid, 3.5)
    t = by_tid(report)[w.tids["short"]]
    assert t["exited"] is True
    # it existed in the window from attach (once the agent has loaded and attached everything:
    # 0.3-0.7 s after "ready", more on a loaded machine) until its exit, by the test's clock
    truth = w.ready_at + 2.0 - report["started_unix_s"]
    assert truth >= 0.3, (truth, "the agent took too long to load")
    assert abs(t["existed_s"] - truth) <= 0.15, (t, truth)
    total = sum(t["seconds"].values())
    assert abs(total - t["existed_s"]) <= 0.01 * t["existed_s"], t
    assert share(t, "running") + share(t, "runqueue") >= 0.95, t
    # the others were measured for the whole window
    assert abs(sum(by_tid(report)[w.tids["sleeper-0"]]["seconds"].values()) - report["duration_s"]) <= 0.01 * report["duration_s"]


def test_process_that_exits_mid_attach_gets_a_partial_report(workload_bin):
    # the process exits 2.5 s after "ready"; the window asked for is 5 s
    with Workload(workload_bin, "--busy", 1, "--sleep", 1, "--exit-after", 2500) as w:
        t0 = time.monotonic()
        report, cp = attach(w.pid, 5.0, check=False)
        took = time.monotonic() - t0
    assert cp.returncode == 2, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert lines[0].startswith(f"waitmeter: watching PID {w.pid}"), cp.stderr
    assert len(lines) == 2, cp.stderr  # then one line: why it ended early
    assert f"process {w.pid} exited" in lines[1] and "the report covers the time it ran" in lines[1]
    assert took < 4.0  # it did not wait out the window
    assert report["exited"] is True
    # the window opens once the agent has loaded and attached everything (0.3-0.7 s after
    # "ready", more on a loaded machine); it ends at the exit, by the test's clock
    truth = w.ready_at + 2.5 - report["started_unix_s"]
    assert truth >= 0.3, (truth, "the agent took too long to load")
    assert abs(report["exited_after_s"] - truth) <= 0.15, (report, truth)
    busy = by_tid(report)[w.tids["busy-0"]]
    assert busy["exited"] is True
    # runnable all the time it existed (how much of it on a CPU depends on the machine's load)
    assert share(busy, "running") + share(busy, "runqueue") >= 0.95, busy
    for t in report["threads"]:
        total = sum(t["seconds"].values())
        assert abs(total - t["existed_s"]) <= 0.01 * max(t["existed_s"], 0.01), t
        assert t["existed_s"] <= report["exited_after_s"] + 0.05


@pytest.mark.parametrize("mode", ["vdso", "syscall"])
def test_running_is_split_into_user_and_kernel_time(mode):
    """Where the time on the CPU goes (issue 15): a thread that reads the clock in a loop.
    Through the vDSO it stays in user mode; as a real syscall (what every clock read costs
    when the clock source is one the vDSO cannot read) most of its running is kernel time.
    The split is /proc's CPU time over (nearly) the window: at least the partition's running,
    at most the time the thread existed. (It should equal running; on a loaded CI machine a
    syscall loop read 1.98 s of /proc CPU time against 1.72 s running and 0.28 s runqueue:
    an open question, see the note on issue 15.)"""
    with Workload(build_c("clockloop"), mode) as w:
        report, _ = attach(w.pid, 2.0)
    t = by_tid(report)[w.tids["reader"]]
    running = t["seconds"]["running"]
    assert running >= 0.5, t
    split = t["user_s"] + t["system_s"]
    assert running - 0.05 - 0.05 * running <= split <= t["existed_s"] + 0.05, t
    kernel = t["system_s"] / (t["user_s"] + t["system_s"])
    if mode == "vdso":
        assert kernel <= 0.1, t
    else:
        assert kernel >= 0.5, t


def schedstat(pid, tid):
    """The kernel's own accounting of a thread (/proc/PID/task/TID/schedstat): ns on a CPU, ns
    runnable waiting on a run queue."""
    run, wait, _ = (int(x) for x in open(f"/proc/{pid}/task/{tid}/schedstat").read().split())
    return run, wait


def attach_beside_schedstat(pid, tids, duration):
    """attach for `duration`, reading the threads' schedstat when it starts measuring (its
    "watching" line) and when it has printed the report: (report, {tid: (run s, wait s)})."""
    agent = subprocess.Popen([str(WAITMETER), "attach", "--pid", str(pid), "--duration", str(duration), "--output", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        Lines(agent, agent.stderr).until(lambda l: "watching" in l, 30, "the agent to start measuring")
        before = {t: schedstat(pid, t) for t in tids}
        out, _ = agent.communicate(timeout=duration + 30)
        after = {t: schedstat(pid, t) for t in tids}
    finally:
        stop(agent)
    assert agent.returncode == 0, agent.returncode
    return json.loads(out), {t: tuple((a - b) / 1e9 for a, b in zip(after[t], before[t])) for t in tids}


# A known error, kept as its reproduction: on a busy machine the partition has charged a clock
# loop of real syscalls with 0.3 s of runqueue in 5 s (CI: running 4.68 s, runqueue 0.32 s)
# where schedstat had it on a CPU 4.97 s and waiting 0.03 s. Not found yet; it must not hide
# behind a wider tolerance. Not reproduced here (agreement within 50 ms) under 4 spinners at
# nice -5 on 2 CPUs, nor under two pipe ping-pongs (~100k switches/s); a failure now says who
# had the CPU during the waits and when in the window they were.
SYSCALL_LOOP_KNOWN = pytest.mark.xfail(reason="open: the partition over-charges runqueue to a syscall loop on a busy machine "
                                       "(0.3 s in 5 s against schedstat); see the note on issue 15", strict=False)


@pytest.mark.parametrize("case", ["pinned-pair", pytest.param("syscall-loop", marks=SYSCALL_LOOP_KNOWN)])
def test_running_and_runqueue_agree_with_the_kernels_schedstat(case, workload_bin):
    """The partition against the kernel's own per-thread accounting (schedstat: time on a CPU,
    time runnable on a run queue), read by the test when the agent says it is measuring and when
    it has printed the report: within 60 ms plus 3% of the window for each thread (the test's
    reads lag the window's edges by a few milliseconds, more on a loaded machine). Two spinners
    sharing one CPU (half running, half queued), and a clock loop of real syscalls (the case whose
    /proc CPU time once read above the partition's running: the window opened before the agent
    had finished its start-up, and the target's queueing behind it counted in the window; it now
    opens once everything is attached)."""
    binary, args = (workload_bin, ["--pinned-pair", 0]) if case == "pinned-pair" else (build_c("clockloop"), ["syscall"])
    with Workload(binary, *args) as w:
        tids = list(w.tids.values())
        report, kernel = attach_beside_schedstat(w.pid, tids, 5.0)
    window = report["duration_s"]
    for tid in tids:
        t = by_tid(report)[tid]
        run, wait = kernel[tid]
        slack = 0.06 + 0.03 * window
        # what to look at when it fails: who had the CPU, and when in the window the waits were
        evidence = (tid, t["seconds"], run, wait, t.get("runqueue_by_preemptor"), t.get("peaks"), report.get("events_lost"))
        assert abs(t["seconds"]["running"] - run) <= slack, evidence
        assert abs(t["seconds"]["runqueue"] - wait) <= slack, evidence
