"""Yield and spin (issue 15, test 3): market-data consumers on the LMAX Disruptor (Maven
Central) whose YieldingWaitStrategy spins, then calls Thread.yield() (sched_yield), all on
one CPU. A yielder's runnable time is `yield`, not run-queue wait: the consumers are idle by
choice. A thread with work on the same CPU (pricer, which never blocks) is still waiting
whenever it is off the CPU. The control: the same consumers with BusySpinWaitStrategy
never yield, and every thread on the CPU waits for it."""
import contextlib
import os
import shutil
import subprocess
import sys
import time

from conftest import ROOT, attach

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from java import maven_jar, stop, threads, wait_line  # noqa: E402

SOURCE = ROOT / "tests" / "workloads" / "marketdata"
CONSUMERS = ["md-consumer-0", "md-consumer-1", "md-consumer-2"]


@contextlib.contextmanager
def marketdata(*args):
    """The JVM on one CPU (the last one: away from the test's own work on CPU 0)."""
    jar, java = maven_jar(SOURCE, "marketdata"), shutil.which("java") or "java"
    cpu = str(os.cpu_count() - 1)
    proc = subprocess.Popen(["taskset", "-c", cpu, java, "-XX:+UseSerialGC", "-jar", str(jar), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_line(proc, "ready", 60)
        time.sleep(1.5)  # past the JIT's first compilations
        yield proc
    finally:
        stop(proc)


def rows_named(report, pid):
    by_name = threads(pid)
    tids = {t: n for n, ts in by_name.items() for t in ts}
    return {tids.get(t["tid"], t["name"]): t for t in report["threads"]}


def share(t, state):
    return t["seconds"][state] / t["existed_s"]


def test_yielding_consumers_are_idle_and_the_thread_behind_them_waits():
    with marketdata("--strategy", "yielding", "--pricer") as jvm:
        report, _ = attach(jvm.pid, 4.0)
        rows = rows_named(report, jvm.pid)
    pricer = rows["pricer"]
    for name in CONSUMERS:
        c = rows[name]
        # ground truth: a consumer with nothing to do spins 100 times, then yields; it is
        # runnable all the time it does not run, and gives the CPU away thousands of times
        assert share(c, "yield") >= 0.5 and share(c, "runqueue") <= 0.05, c
        assert c["yields"] >= 1000, c
    # pricer never blocks: every moment off the CPU is a wait for it, and the yielders had it
    assert share(pricer, "running") + share(pricer, "runqueue") >= 0.95, pricer
    assert pricer["seconds"]["runqueue"] > 0.01 and "yields" not in pricer, pricer
    consumer_tids = {str(rows[n]["tid"]) for n in CONSUMERS}
    behind = sum(s for k, s in pricer["runqueue_by_preemptor"].items() if k in consumer_tids)
    assert behind >= 0.5 * pricer["seconds"]["runqueue"], pricer
    # the verdict: one line for the yielders, none calls them waiting
    yielding = [f for f in report["findings"] if f["kind"] == "yielding"]
    assert len(yielding) == 1 and yielding[0]["count"] == 3, report["findings"]
    assert yielding[0]["yields"] >= 3000, yielding
    for line in report["verdict"]:
        if any(n in line for n in CONSUMERS):
            assert line.startswith("yielding:"), report["verdict"]


def test_yielding_consumers_alone_are_healthy():
    with marketdata("--strategy", "yielding") as jvm:
        report, _ = attach(jvm.pid, 3.0)
    assert report["verdict"][0].startswith("healthy:"), report["verdict"]
    assert any(line.startswith("yielding: 3 threads") for line in report["verdict"]), report["verdict"]
    # alone, they spin the whole CPU away between them
    yielding = next(f for f in report["findings"] if f["kind"] == "yielding")
    assert 0.8 <= yielding["running_s"] / yielding["window_s"] <= 1.05, yielding
    assert not any(f["kind"] in ("run_queue_saturation", "saturated_thread") for f in report["findings"]), report["findings"]
    # the environment: the one CPU taskset allowed, the machine's clock source (read by the vDSO
    # here: no clock_source line; the other case needs a machine on hpet and is a unit test)
    env = report["environment"]
    clocksource = open("/sys/devices/system/clocksource/clocksource0/current_clocksource").read().strip()
    assert env["cpus_allowed"] == str(os.cpu_count() - 1) and env["clocksource"] == clocksource, env
    assert env["clock_vdso"] == (clocksource in ("tsc", "kvm-clock")), env
    assert env["clock_vdso"] is False or not any(f["kind"] == "clock_source" for f in report["findings"]), report["findings"]


def test_busy_spinning_consumers_make_every_thread_on_the_cpu_wait():
    """The control: BusySpinWaitStrategy never yields; four runnable threads share one CPU."""
    with marketdata("--strategy", "busyspin", "--pricer") as jvm:
        report, _ = attach(jvm.pid, 4.0)
        rows = rows_named(report, jvm.pid)
    for name in CONSUMERS + ["pricer"]:
        t = rows[name]
        assert share(t, "runqueue") >= 0.5 and share(t, "yield") == 0.0 and "yields" not in t, t
    assert not any(f["kind"] == "yielding" for f in report["findings"]), report["findings"]
    waiting = [f for f in report["findings"] if f["kind"] == "run_queue_saturation"]
    assert "pricer" in {f["thread"]["name"] for f in waiting}, report["findings"]
    assert report["verdict"][0].startswith("run-queue saturation:"), report["verdict"]
