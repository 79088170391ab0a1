"""Verdicts on a service they were not written for (issue 15): a FIX engine on QuickFIX/J
(Maven Central) whose one message-processing thread serves five sessions, and the fix, a
thread per session, as the control."""
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, attach

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from fixengine import fix_pair  # noqa: E402

pytestmark = pytest.mark.needs_root

# JVM and QuickFIX/J threads that only ever wait for work here
HOUSEKEEPING = re.compile(r"GC Thread|G1 |VM Thread|C[12] CompilerThre|Signal Dispatch|Finalizer|Reference Handl|"
                          r"Common-Cleaner|Service Thread|Sweeper|Monitor Deflati|VM Periodic|QFJ Timer|NioProcessor|NioSocketAccept")


def idle_by_proc(report):
    """Names of threads that used less than 10% of the window in CPU time by /proc's own
    accounting (`user_s` + `system_s`, independent of the probes): idle by the verdict's
    definition. (A JIT compiler thread still compiling 15% of the time on a slow machine is not
    idle, and may have a line.)"""
    window = report["duration_s"]
    return {t["name"] for t in report["threads"] if "user_s" in t and t["user_s"] + t["system_s"] < 0.1 * window}


def check_lines(report):
    """At most 8 lines; idle housekeeping threads only in the one idle line."""
    verdict = report["verdict"]
    assert 1 <= len(verdict) <= 8, verdict
    idle = [n for n in idle_by_proc(report) if HOUSEKEEPING.search(n)]
    assert idle, report["threads"]  # the JVM's housekeeping threads are there, and mostly idle
    for line in verdict:
        if not line.startswith("idle:"):
            head = line.split(". Code:")[0]
            assert not any(f"{n} (" in head for n in idle), f"a line about an idle thread: {line}\n{verdict}"
    return verdict


def test_the_shared_processing_thread_is_named_first_as_the_head_of_line():
    """One slow session (20 ms of CPU per order, 50 orders/s) keeps the shared "QFJ Message
    Processor" busy all the time while the JVM uses about 1 of 2 CPUs; the other sessions'
    orders queue behind it. The verdict's first line names that thread, with the age."""
    with fix_pair("spin", slow_ms=20, rate=50) as f:
        tids = f.processor_tids()
        assert len(tids) == 1, f.threads()
        report, _ = attach(f.acceptor.pid, 8.0, "--age-url", f.metrics_url, "--age-metric", "fix_order_age_max_seconds")
    verdict = check_lines(report)
    assert verdict[0].startswith(f"head-of-line: thread QFJ Message Pro ({tids[0]}) was busy"), verdict
    assert "message age" in verdict[0], verdict[0]
    first = report["findings"][0]
    assert first["kind"] == "saturated_thread" and first["thread"]["tid"] == tids[0], first
    # the ground truth, from the partition: the thread was busy >= 90% of the window
    proc = next(t for t in report["threads"] if t["tid"] == tids[0])
    busy = sum(proc["seconds"][s] for s in ("running", "runqueue", "throttled"))
    assert busy >= 0.9 * proc["existed_s"], proc
    assert report["cpu_used_cores"] < report["cpu_limit_cores"] - 0.5, report["cpu_used_cores"]
    assert any(v.startswith("idle: ") for v in verdict), verdict


def test_a_thread_per_session_under_light_load_is_healthy():
    """The control: ThreadedSocketAcceptor (a thread per session), 20 light orders a second per
    session. No saturation, no line about an idle thread."""
    with fix_pair("threaded", slow_ms=0, rate=20) as f:
        report, _ = attach(f.acceptor.pid, 8.0, "--age-url", f.metrics_url, "--age-metric", "fix_order_age_max_seconds")
    verdict = check_lines(report)
    assert not any(v.startswith("head-of-line") for v in verdict), verdict
    assert not any(f["kind"] == "saturated_thread" for f in report["findings"]), report["findings"]
    assert verdict[0].startswith("healthy: "), verdict


@pytest.mark.parametrize("columns", [80, 120])
def test_the_live_view_and_report_fit_the_terminal_busiest_first(workload_bin, columns):
    """On a terminal of 80 or 120 columns (a pty from script(1)), every line of the live view
    and of the report's table fits, and the busy thread is the first row."""
    from conftest import WAITMETER, Workload

    script = shutil.which("script")
    assert script, "script(1) (util-linux) is needed"
    with Workload(workload_bin, "--sleep", 6, "--pipe", 2, "--busy", 1) as w:
        cmd = f"stty cols {columns} rows 60; NO_COLOR=1 {WAITMETER} attach --pid {w.pid} --duration 3"
        cp = subprocess.run([script, "-qec", cmd, "/dev/null"], capture_output=True, timeout=60)
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", cp.stdout.decode("utf-8", "replace")).replace("\r", "")
    assert cp.returncode == 0, out
    frames = [line for line in out.split("\n") if line and not line.startswith("  - ")]
    assert len(frames) > 15, out  # at least one live frame and the report
    too_wide = [line for line in frames if len(line) > columns]
    assert not too_wide, too_wide
    report = out[out.rindex("waitmeter: PID"):]
    rows = [line for line in report.split("\n") if re.match(r"\s+\d+\s{2}\S", line)]
    assert rows and rows[0].split()[1] == "busy-0", report
