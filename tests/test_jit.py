"""Code a JIT generated, named from the runtime's perf map (issue 37): Node.js started with
--perf-basic-prof has its JavaScript functions named in the wait stacks, a JVM with
-XX:+PreserveFramePointer and a map from `jcmd PID Compiler.perfmap` its Java methods; started
without them, one warning each names the remedy and the measurement is whole."""
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, Workload, attach, by_tid

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from fixengine import fix_pair  # noqa: E402
from pyroscope_receiver import go_pprof  # noqa: E402

pytestmark = pytest.mark.needs_root

# the event loop's one thread kept busy in one named function, called again at once
BUSY = r"""
function crunchTheLedger(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003;
  return x;
}
let sink = 0;
console.log("ready");
(function again() { sink += crunchTheLedger(2e6); setImmediate(again); })();
"""


def node():
    path = shutil.which("node")
    assert path, "node is on the machine (Debian's nodejs or the machine's own)"
    return path


def frames_named(report, text):
    """Every frame of every stack in the report that names `text`."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str) and text in v:
            out.append(v)
    walk(report)
    return out


def in_dir(folder, *argv):
    """`argv` run in `folder` (V8 writes an isolate log into its working directory)."""
    return ("/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", str(folder), *argv)


def test_node_functions_are_named_from_its_perf_map(tmp_path):
    with Workload(*in_dir(tmp_path, node(), "--perf-basic-prof", "-e", BUSY)) as w:
        try:
            report, cp = attach(w.pid, 4.0)
        finally:
            # node leaves its map behind at exit: it is this test's to remove
            w.close()
            pathlib.Path(f"/tmp/perf-{w.pid}.map").unlink(missing_ok=True)
    main = by_tid(report)[w.pid]
    assert main["seconds"]["running"] > 3.0, main["seconds"]
    named = frames_named(report, "crunchTheLedger")
    assert named, f"no frame names crunchTheLedger: {json.dumps(report)[:3000]}"
    # the code the busy thread ran, as its busiest site: the function, and the one that called it
    busy = max((s for s in report["wait_sites"] if s["tid"] == w.pid and s["role"] == "busy"), key=lambda s: s["seconds"])
    assert "crunchTheLedger [eval]:" in busy["site"].split(" ← ")[0], busy
    assert busy["seconds"] >= 0.8 * main["seconds"]["running"], (busy, main["seconds"])
    assert "writes no perf map" not in cp.stderr, cp.stderr


def test_node_without_the_flag_is_told_once_and_measured_whole(tmp_path):
    with Workload(*in_dir(tmp_path, node(), "-e", BUSY)) as w:
        report, cp = attach(w.pid, 3.0)
    main = by_tid(report)[w.pid]
    assert main["seconds"]["running"] > 2.0, main["seconds"]
    assert not frames_named(report, "crunchTheLedger")
    told = [line for line in cp.stderr.splitlines() if "writes no perf map" in line]
    assert len(told) == 1 and "--perf-basic-prof" in told[0], cp.stderr


def test_a_perf_maps_bad_lines_are_the_runs_losses(tmp_path):
    """A perf map of 1,500 malformed lines (planted where the process's map is, as root: a map the
    agent reads): attach's report counts every one in events_lost and warns, though the map is read
    for the first stack that needs it, before the window opens (issue 54: `events_lost: []`)."""
    with Workload(*in_dir(tmp_path, node(), "-e", BUSY)) as w:
        path = pathlib.Path(f"/tmp/perf-{w.pid}.map")
        path.write_text("not a line\n" * 1000 + "zz 10 not hex\n" * 500)
        try:
            report, cp = attach(w.pid, 2.0)
        finally:
            path.unlink(missing_ok=True)
    lost = {(l["probe"], l["reason"]): l["count"] for l in report["events_lost"]}
    assert lost.get(("stacks", "perf_map_bad_line")) == 1500, report["events_lost"]
    assert "1500 stacks events were lost (perf_map_bad_line)" in cp.stderr, cp.stderr


# --- the JVM: QuickFIX/J (tests/workloads/fixengine) -------------------------------------------

def perfmap_of(pid):
    """What the docs tell a user to run: the JVM writes /tmp/perf-PID.map of its code cache now
    (JDK 17+; the attach mechanism, a safepoint)."""
    cp = subprocess.run(["jcmd", str(pid), "Compiler.perfmap"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    path = pathlib.Path(f"/tmp/perf-{pid}.map")
    assert path.stat().st_size > 0
    return path


def test_a_busy_java_method_is_named_in_the_finding_and_the_profile(tmp_path):
    """QuickFIX/J's one message-processing thread kept busy by one slow session, whose orders
    cost 20 ms of SHA-256 each in fixengine.Main.work; the JVM started with
    -XX:+PreserveFramePointer and its map written with jcmd. The head-of-line finding's code,
    the busy thread's top site (>= 80% of its time) and go tool pprof's -top name the method."""
    with fix_pair("spin", slow_ms=20, rate=50, warmup=6.0, jvm=["-XX:+PreserveFramePointer"]) as f:
        tids = f.processor_tids()
        assert len(tids) == 1, f.threads()
        path = perfmap_of(f.acceptor.pid)
        try:
            report, cp = attach(f.acceptor.pid, 5.0, "--profile", str(tmp_path / "wait.pb.gz"))
        finally:
            path.unlink(missing_ok=True)
    assert "writes no perf map" not in cp.stderr and "PreserveFramePointer" not in cp.stderr, cp.stderr
    busy_s = sum(by_tid(report)[tids[0]]["seconds"][s] for s in ("running", "runqueue"))
    assert busy_s >= 4.0, by_tid(report)[tids[0]]
    first = report["verdict"][0]
    assert first.startswith(f"head-of-line: thread QFJ Message Pro ({tids[0]})"), report["verdict"]
    assert "ran `fixengine.Main.work" in first, first
    sites = [s for s in report["wait_sites"] if s["tid"] == tids[0] and s["role"] == "busy"]
    named = sum(s["seconds"] for s in sites if s["site"].startswith("fixengine.Main.work"))
    assert named >= 0.8 * sum(s["seconds"] for s in sites), sorted(sites, key=lambda s: -s["seconds"])[:5]
    top = go_pprof(tmp_path / "wait.pb.gz", "-top", "-cum", "-tagfocus=role=busy")
    assert "fixengine.Main.work" in top, top


def test_interpreted_java_frames_are_named_by_the_method_they_run(tmp_path):
    """The same engine on a JVM that only interprets (-Xint: the perf map could only say
    `Interpreter` for every frame), with no perf map at all: the busy thread's sites (>= 80% of
    its busy time: the JDK's digest called from it) and go tool pprof, with the session code
    that called it, name fixengine.Main.work, read from the JVM's own structures (VMStructs) at
    each interpreted frame."""
    with fix_pair("spin", slow_ms=20, rate=50, warmup=6.0, jvm=["-Xint", "-XX:+PreserveFramePointer"]) as f:
        tids = f.processor_tids()
        assert len(tids) == 1, f.threads()
        report, cp = attach(f.acceptor.pid, 5.0, "--profile", str(tmp_path / "wait.pb.gz"))
    assert "JVM's structures are not read" not in cp.stderr and "libjvm is not read" not in cp.stderr, cp.stderr
    # busy: it wanted a CPU 80% of the window (on a loaded 2-CPU machine an interpreting JVM's other
    # threads and the agent's stack walks keep it queued a part of that: 3.47 s ran, 1.55 s queued)
    secs = by_tid(report)[tids[0]]["seconds"]
    assert secs["running"] + secs["runqueue"] >= 4.0, by_tid(report)[tids[0]]
    sites = [s for s in report["wait_sites"] if s["tid"] == tids[0] and s["role"] == "busy"]
    named = sum(s["seconds"] for s in sites if re.match(r"java\.security\.MessageDigest\.\w+ ← fixengine\.Main\.work", s["site"]))
    assert named >= 0.8 * sum(s["seconds"] for s in sites), sorted(sites, key=lambda s: -s["seconds"])[:5]
    top = go_pprof(tmp_path / "wait.pb.gz", "-top", "-cum", "-tagfocus=role=busy")
    assert "fixengine.Main.work" in top and "quickfix.Session.next" in top, top


def test_a_jvm_without_frame_pointers_or_a_map_is_told_once_each_and_measured_whole():
    """The same JVM started as most are (no flag, no map): one warning names the flag; none asks
    for a map (its compiled code is named from its code cache); the partition is whole and the
    finding names no address."""
    with fix_pair("spin", slow_ms=20, rate=50) as f:
        tids = f.processor_tids()
        report, cp = attach(f.acceptor.pid, 4.0)
    no_map = [ln for ln in cp.stderr.splitlines() if "writes no perf map" in ln]
    no_fp = [ln for ln in cp.stderr.splitlines() if "without -XX:+PreserveFramePointer" in ln]
    assert not no_map, cp.stderr
    assert len(no_fp) == 1 and "stop at the first JIT-compiled" in no_fp[0], cp.stderr
    proc = by_tid(report)[tids[0]]
    assert sum(proc["seconds"].values()) >= 0.95 * proc["existed_s"], proc
    assert report["verdict"][0].startswith(f"head-of-line: thread QFJ Message Pro ({tids[0]})"), report["verdict"]
    assert "0x" not in report["verdict"][0], report["verdict"][0]


@pytest.fixture(scope="module")
def jvm_convoy():
    """Five session threads of a ThreadedSocketAcceptor match every order against one
    synchronized order book (20 ms of CPU each, 100 orders/s in all: twice what one lock
    serves); HotSpot parks each waiter of the monitor on an event of its own. OrderBook.match
    stays interpreted and is inlined nowhere (CompileCommand): whether a JIT compiles it, or
    inlines it into its compiled caller, before the window depends on the machine's speed, and
    the frames named depend on that."""
    match = "fixengine.Main$OrderBook::match"
    jvm = ["-XX:+PreserveFramePointer", "-XX:CompileCommand=quiet", f"-XX:CompileCommand=exclude,{match}",
           f"-XX:CompileCommand=dontinline,{match}"]
    with fix_pair("locked", slow_ms=20, rate=20, warmup=6.0, jvm=jvm) as f:
        sessions = f.threads().get("QF/J Session di", [])
        path = perfmap_of(f.acceptor.pid)
        try:
            report, _ = attach(f.acceptor.pid, 5.0)
        finally:
            path.unlink(missing_ok=True)
    return report, sessions


def test_a_jvm_lock_convoy_is_the_first_line(jvm_convoy):
    """The ground truth from the partition: the five threads ran about one lock's worth (one of
    them at a time) and waited the rest. The first line is the convoy, of those threads, though
    no futex word has more than one of them waiting on it."""
    report, sessions = jvm_convoy
    assert len(sessions) == 5, sessions
    rows = [by_tid(report)[t] for t in sessions]
    ran = sum(r["seconds"]["running"] for r in rows)
    assert 0.8 * 5.0 <= ran <= 1.1 * 5.0, [r["seconds"] for r in rows]
    first = report["findings"][0]
    assert first["kind"] == "lock_convoy" and "futex" not in first, report["verdict"]
    assert sorted(first["waiters"]) == sorted(sessions), first
    assert report["verdict"][0].startswith("lock convoy: "), report["verdict"]


def test_a_jvm_lock_convoy_names_the_method_holding_the_lock(jvm_convoy):
    """The convoy's code names the method that holds the lock, OrderBook.match (interpreted: it
    runs 20 times a second, too few to be compiled), on both sides, and the monitor operation it
    was in: the walk steps through the C library by its .eh_frame and names the interpreted frame
    by the Method* it holds."""
    report, _ = jvm_convoy
    first = report["verdict"][0]
    assert "released it in `InterpreterRuntime::monitorexit ← fixengine.Main$OrderBook.match ← " in first, first
    assert "waited in `InterpreterRuntime::monitorenter ← fixengine.Main$OrderBook.match ← " in first, first
    # the lock as its frames say: the order book's synchronized method, a JVM monitor
    assert report["findings"][0].get("mechanism") == "jvm_monitor" and "a JVM monitor: `synchronized`" in first, first


def test_a_map_in_the_targets_own_namespaces_is_found_through_its_root():
    """Node.js in a PID and mount namespace of its own (unshare), as in a container: it is PID 1
    there and writes /tmp/perf-1.map on a /tmp only it sees. The agent, outside, finds the map
    through /proc/PID/root under the PID the process has there, and names its function; the
    host's /tmp has no map of it."""
    script = 'mount -t tmpfs wm-jit-tmp /tmp && cd /tmp && exec "$0" --perf-basic-prof -e "$1"'
    with Workload("unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
                  "/bin/sh", "-c", script, node(), BUSY) as w:
        children = pathlib.Path(f"/proc/{w.pid}/task/{w.pid}/children").read_text().split()
        assert len(children) == 1, children
        pid = int(children[0])
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
        assert re.search(r"^NSpid:\s+\d+\s+1$", status, re.M), status  # PID 1 in its namespace
        assert not pathlib.Path(f"/tmp/perf-{pid}.map").exists() and not pathlib.Path("/tmp/perf-1.map").exists()
        report, cp = attach(pid, 3.0)
    busy = max((s for s in report["wait_sites"] if s["role"] == "busy"), key=lambda s: s["seconds"])
    assert "crunchTheLedger [eval]:" in busy["site"].split(" ← ")[0], busy
    assert "writes no perf map" not in cp.stderr, cp.stderr


def serve_reports(tmp_path, rows, seconds=4.0):
    """tests/workloads/report_server.js (Node.js's own `http`) with `rows` to serialize per /report,
    asked for a report every 150 ms while /ping is timed every 20 ms from outside; meanwhile `attach`.
    (the report, the pings' latencies in seconds)."""
    import http.client
    import threading
    import time

    script = ROOT / "tests" / "workloads" / "report_server.js"
    with Workload(*in_dir(tmp_path, node(), "--perf-basic-prof", str(script), str(rows))) as w:
        port = int(next(line.split()[1] for line in w.lines if line.startswith("port ")))
        done, pings = threading.Event(), []

        def ask(path, every, out=None):
            while not done.is_set():
                t0 = time.monotonic()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", path)
                c.getresponse().read()
                c.close()
                if out is not None:
                    out.append(time.monotonic() - t0)
                done.wait(every)

        clients = [threading.Thread(target=ask, args=("/report", 0.15)), threading.Thread(target=ask, args=("/ping", 0.02, pings))]
        try:
            for c in clients:
                c.start()
            report, _ = attach(w.pid, seconds)
        finally:
            done.set()
            for c in clients:
                c.join(timeout=30)
            w.close()
            pathlib.Path(f"/tmp/perf-{w.pid}.map").unlink(missing_ok=True)
    return report, pings


def test_a_node_loop_stalled_in_a_builtin_is_named_by_the_javascript_that_called_it(tmp_path):
    """The event loop serializes a large array with JSON.stringify: V8's C++ (in the `node`
    executable, not a system library) is on the CPU, but the code to name is the program's
    JavaScript function that called it, with the builtin it called (as a Python site names
    `json.dumps ← handler`) and V8's function inside it. Truth: /ping's latency, timed by its client.
    Control: the same server answering /report with a string made at start: no stall."""
    report, pings = serve_reports(tmp_path, 200_000)
    assert max(pings) >= 0.08, sorted(pings)[-5:]
    first = report["verdict"][0]
    assert first.startswith("stall:"), report["verdict"]
    stall = next(f for f in report["findings"] if f["kind"] == "stall")
    # the longest stall is what /ping's slowest answer waited, within a ping's own time and spacing
    assert stall["max_s"] >= 0.6 * max(pings) and stall["max_s"] <= max(pings) + 0.05, (stall, sorted(pings)[-5:])
    culprit = stall["code"]["culprit"]
    own = culprit["site"].split(" ← ")
    # the builtin the JavaScript called, then the program's JavaScript function (renderReport, or
    # the handler it was inlined into: V8's map names the compiled function only): never V8's C++
    assert own[0].endswith("Builtin_JsonStringify") and own[1].startswith("JS:") and "report_server.js:" in own[1], culprit
    assert culprit["share"] >= 0.4, culprit
    assert culprit["in_c"] and "JsonStringifier" in culprit["in_c"]["function"], culprit
    assert f"`{culprit['site']}`" in first, first

    calm, cpings = serve_reports(tmp_path, 0)
    assert max(cpings) < 0.05, sorted(cpings)[-5:]
    assert not any(f["kind"] == "stall" for f in calm["findings"]), calm["verdict"]
