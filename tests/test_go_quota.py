"""A Go service under a CPU quota (docs/verdicts.md, "CPU quota throttling"): the line names the
threads that lost the most to the quota, and its remedy is the runtime's: the GOMAXPROCS the
runtime runs with, against the quota.

The service is the standard library's net/http (tests/workloads/gohttp), started inside a cgroup of
half a CPU (so that Go 1.25+'s default GOMAXPROCS reads the quota at start), under four closed-loop
clients whose requests each hash for about 0.3 ms. The ground truth is outside waitmeter: the
cgroup's own cpu.stat (periods throttled in the window), the runtime's own scheduler trace
(GODEBUG=schedtrace: `gomaxprocs=N`), and `go version` of the toolchain that built it.

- Bug: GOMAXPROCS as the runtime chose it. At least 2 (the runtime's floor under a quota) threads
  run Go code at once on half a CPU: the throttling line names the threads and the code they ran
  (the hash the handler calls, walked out of its frameless assembly by the Go runtime's own
  function table), and says to set GOMAXPROCS=1.
- The same with GOMAXPROCS=1 in its environment: still throttled (one busy thread on half a CPU),
  but the line says its GOMAXPROCS fits and does not say to set it.
- Control: the same service and load without a quota: no throttling line.
"""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import SLOWDOWN, attach, cpu_quota_cgroup, free_port, read_cpu_stat
from test_idle_handoffs import gohttp, load, wait_ready

pytestmark = pytest.mark.needs_root


def serve(cg, env):
    """The service, started inside cgroup `cg` (None: where the test runs), with its scheduler
    trace on; (report, the runtime's GOMAXPROCS, periods throttled in the window)."""
    exe = gohttp()
    port = free_port()
    enter = f"echo $$ > {cg / 'cgroup.procs'} && " if cg else ""
    server = subprocess.Popen(["sh", "-c", f"{enter}exec {exe} serve {port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "GODEBUG": "schedtrace=1000", **env})
    try:
        wait_ready(server, 30 * SLOWDOWN)
        client = load(exe, port, 4, 9, 8)
        time.sleep(1.5)
        before = read_cpu_stat(cg) if cg else None
        report, _ = attach(server.pid, 5.0)
        after = read_cpu_stat(cg) if cg else None
        client.communicate(timeout=60)
    finally:
        server.terminate()
        _, trace = server.communicate(timeout=30)
    procs = {int(m.group(1)) for m in re.finditer(r"gomaxprocs=(\d+)", trace)}
    assert len(procs) == 1, trace[-500:]
    throttled = int(after["nr_throttled"]) - int(before["nr_throttled"]) if cg else 0
    return report, procs.pop(), throttled


def go_version():
    go = shutil.which("go") or "/usr/local/go/bin/go"
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def throttling(report):
    return next((f for f in report["findings"] if f["kind"] == "cpu_quota_throttling"), None)


@pytest.mark.timeout(300)
def test_a_throttled_go_service_hears_of_gomaxprocs_and_is_named_by_its_threads():
    with cpu_quota_cgroup(50000) as cg:
        report, gomaxprocs, periods = serve(cg, {})
        pinned, pinned_procs, pinned_periods = serve(cg, {"GOMAXPROCS": "1"})
    control, _, _ = serve(None, {})

    # the runtime's own account: it ran more threads of Go code at once than the quota's one
    # half CPU; the cgroup's: throttled through the window
    assert gomaxprocs >= 2 and pinned_procs == 1, (gomaxprocs, pinned_procs)
    assert periods >= 25 and pinned_periods >= 25, (periods, pinned_periods)
    go = report["environment"]["go"]
    assert go == {"version": go_version(), "gomaxprocs_env": None}, go

    found = throttling(report)
    assert found and report["verdict"][0].startswith("CPU quota throttling:"), report["verdict"]
    line = report["verdict"][0]
    assert f"{go_version()}'s default GOMAXPROCS" in line and "set GOMAXPROCS=1" in line, line
    # named by the threads that lost the most to it, each its own throttled time
    threads = {t["tid"]: t for t in report["threads"]}
    assert found["count"] >= 2 and found["threads"], found
    for t in found["threads"]:
        assert abs(t["wait_s"] - threads[t["thread"]["tid"]]["seconds"]["throttled"]) < 0.01, (t, threads[t["thread"]["tid"]])
        assert f"({t['thread']['tid']}) {t['wait_s']:.2f} s" in line, (t, line)
    most = max(threads.values(), key=lambda t: t["seconds"]["throttled"])
    assert found["threads"][0]["thread"]["tid"] == most["tid"], (found["threads"], most)
    # and by the code they ran when the quota ran out, as the service's source says: its handler
    # hashes in a loop, so the stacks stand in the hash's assembly, whose leaf keeps no frame
    # pointer (a frame-pointer walk ended there); the Go runtime's own table steps out of it, to
    # the standard library's call and the service's own function that made it
    assert "crypto/sha256.Sum256 ← main.handler (gohttp)" in found.get("site", ""), found
    assert found["site"] in line, (found["site"], line)

    pline = next(v for v in pinned["verdict"] if v.startswith("CPU quota throttling:"))
    assert pinned["environment"]["go"]["gomaxprocs_env"] == "1", pinned["environment"]
    assert "its GOMAXPROCS=1 fits the quota" in pline and "set GOMAXPROCS" not in pline, pline

    assert throttling(control) is None, control["verdict"]
