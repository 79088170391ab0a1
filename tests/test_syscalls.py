"""Where the time on the CPU goes (issue 15): each thread's syscalls, counted by the syscall
probe (bpf/syscalls.bpf.c), and the finding for clock reads that are real syscalls (test 4:
"the forced-syscall clock loop is flagged; the vDSO loop is not").

Ground truth: tests/workloads/clockloop.c counts its own clock reads and prints the count
every second; its main thread makes one write(2) and one clock_nanosleep(2) a second."""
import subprocess
import time
import urllib.request

import pytest

from conftest import WAITMETER, Lines, Workload, attach, build_c, by_tid, free_port, metric, stop, wait_http

pytestmark = pytest.mark.needs_root


def read_rate(w, at_least=3):
    """The workload's own clock reads per second, from the "reads N" lines it printed so far
    (at least `at_least` of them, waiting for them if need be; None from a single line)."""
    counts = []
    deadline = time.monotonic() + at_least + 5
    while len(counts) < at_least or w.out.unread():
        line = w.readline(max(0.1, deadline - time.monotonic()), "a reads line")
        if line.startswith("reads "):
            counts.append(int(line.split()[1]))
    return (counts[-1] - counts[0]) / (len(counts) - 1) if len(counts) > 1 else None


@pytest.fixture(scope="module")
def clockloop():
    return build_c("clockloop")


def test_a_forced_syscall_clock_loop_is_flagged_with_its_true_rate(clockloop):
    """The reader calls clock_gettime as a syscall: the probe's count agrees with the
    workload's own (per second, within 20%), and the verdict says what it costs and why
    (the machine's clock source is one the vDSO reads, so the code bypasses it)."""
    with Workload(clockloop, "syscall") as w:
        report, _ = attach(w.pid, 3.0, "--syscalls", "on")
        rate = read_rate(w)
    reader = by_tid(report)[w.tids["reader"]]
    top = reader["syscalls"][0]
    assert top["name"] == "clock_gettime" and top["nr"] == 228, reader["syscalls"]
    assert 0.8 * rate <= top["per_s"] <= 1.2 * rate, (top, rate)
    assert top["calls"] == pytest.approx(top["per_s"] * reader["existed_s"], rel=0.01), top
    # the time inside them is kernel time, within what /proc says the thread spent there
    assert 0 < top["seconds"] <= reader["system_s"] + 0.05, (top, reader)
    main = by_tid(report)[w.pid]
    calls = {s["name"]: s["calls"] for s in main.get("syscalls", [])}
    # one write and one sleep a second: 2 to 4 in a 3 s window
    assert 2 <= calls.get("write", 0) <= 4 and 2 <= calls.get("clock_nanosleep", 0) <= 4, main
    clock = [f for f in report["findings"] if f["kind"] == "clock_syscalls"]
    assert len(clock) == 1 and clock[0]["thread"]["tid"] == w.tids["reader"], report["findings"]
    assert clock[0]["calls"] == top["calls"] and clock[0]["clocksource"] == report["environment"]["clocksource"], clock
    line = next(v for v in report["verdict"] if v.startswith("clock syscalls:"))
    assert f"thread clockloop ({w.tids['reader']}) read the clock with" in line, line
    if report["environment"]["clock_vdso"]:
        assert "so this code makes the syscall itself" in line, line
    else:
        assert "which the vDSO cannot use" in line, line


def test_a_vdso_clock_loop_is_not_flagged(clockloop):
    """The control: the same loop through the vDSO makes no clock syscall at all."""
    with Workload(clockloop, "vdso") as w:
        report, _ = attach(w.pid, 2.0, "--syscalls", "on")
    reader = by_tid(report)[w.tids["reader"]]
    assert not any(s["name"] == "clock_gettime" for s in reader.get("syscalls", [])), reader
    assert not any(f["kind"] == "clock_syscalls" for f in report["findings"]), report["findings"]
    assert not any(v.startswith("clock syscalls:") for v in report["verdict"]), report["verdict"]


@pytest.mark.parametrize("flag", [[], ["--syscalls", "off"]])
def test_without_syscalls_on_none_are_counted(clockloop, flag):
    """The default (and --syscalls off): no probe, no counts, no finding."""
    with Workload(clockloop, "syscall") as w:
        report, _ = attach(w.pid, 1.0, *flag)
    assert not any("syscalls" in t for t in report["threads"]), report["threads"]
    assert not any(f["kind"] == "clock_syscalls" for f in report["findings"])


def test_run_counts_the_clock_syscalls_of_each_process(clockloop):
    """`run --syscalls on` watching both loops: the syscall loop's clock_gettime counter grows
    at the workload's own rate (within 25%); the vDSO loop's does not grow at all."""
    port = free_port()
    with Workload(clockloop, "syscall") as sys_w, Workload(clockloop, "vdso") as vdso_w:
        agent = subprocess.Popen(
            [str(WAITMETER), "run", "--pid", str(sys_w.pid), "--pid", str(vdso_w.pid), "--listen", f"127.0.0.1:{port}",
             "--syscalls", "on", "--stacks", "none"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            Lines(agent, agent.stderr).until(lambda l: "serving" in l, 30, "the agent to serve")
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url)
            read_rate(sys_w, 1)  # the workload's lines so far, consumed
            # past the endpoint's 1 s render cache (wait_http's scrape filled it as the agent
            # started): the first reading below is rendered now, as its time t0 says
            time.sleep(1.1)

            def scrape():
                with urllib.request.urlopen(url, timeout=10) as r:
                    return time.monotonic(), r.read().decode()

            t0, first = scrape()
            time.sleep(3)
            t1, second = scrape()
            rate = read_rate(sys_w, 3)
        finally:
            stop(agent)
    name = "waitmeter_process_syscalls_total"
    grew = metric(second, name, pid=sys_w.pid, syscall="clock_gettime") - metric(first, name, pid=sys_w.pid, syscall="clock_gettime")
    # the program's rate is over the seconds its lines cover, the counter's over the scrapes':
    # not the same seconds, and a loaded machine changes the rate between them (CI: 1.34x)
    assert 0.6 * rate <= grew / (t1 - t0) <= 1.5 * rate, (grew / (t1 - t0), rate)
    assert metric(second, name, pid=sys_w.pid, syscall="other") >= 2, second
    assert (metric(second, name, pid=vdso_w.pid, syscall="clock_gettime") or 0) == 0, second
    assert metric(second, "waitmeter_probe_attached", probe="sys_enter") == 1, second
    assert metric(second, "waitmeter_bpf_events_lost_total", probe="syscalls", reason="syscall_map_full") == 0, second
