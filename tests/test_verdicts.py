"""Verdicts on a service they were not written for (issue 15): a FIX engine on QuickFIX/J
(Maven Central) whose one message-processing thread serves five sessions, and the fix, a
thread per session, as the control."""
import re
import sys

import pytest

from conftest import ROOT, attach

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from fixengine import fix_pair  # noqa: E402

pytestmark = pytest.mark.needs_root

# JVM and QuickFIX/J threads that only ever wait for work here
HOUSEKEEPING = re.compile(r"GC Thread|G1 |VM Thread|C[12] CompilerThre|Signal Dispatch|Finalizer|Reference Handl|"
                          r"Common-Cleaner|Service Thread|Sweeper|Monitor Deflati|VM Periodic|QFJ Timer|NioProcessor|NioSocketAccept")


def check_lines(report):
    """At most 8 lines; housekeeping threads only in the one idle line."""
    verdict = report["verdict"]
    assert 1 <= len(verdict) <= 8, verdict
    for line in verdict:
        if not line.startswith("idle:"):
            assert not HOUSEKEEPING.search(line.split(". Code:")[0]), f"a line about an idle thread: {line}\n{verdict}"
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
