"""The state timeline (issue 40): `attach --trace` writes every thread's states over the window
in the Chrome trace-event format. The ground truth is the workload's own clock: gil_holder.py
prints the Unix time and length of every json.dumps call (one C call that never lets the GIL
go), and the trace says when the window opened on that clock. Each call must be drawn as a hold
of the processor (it runs, or waits only for a CPU, from within 5 ms of the call's start to
within 5 ms of its end), with ingest's GIL waits inside it charged to processor. The control, the
processor in a process of its own, leaves ingest no GIL wait to draw. The file is opened in a
real consumer of the format too: speedscope (npm, tests/viewers), in headless Chromium."""
import base64
import json
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT, WAITMETER, Workload
from test_gil import pyenv_python

pytestmark = pytest.mark.needs_root

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from browser import browse, console_errors, pages_requests  # noqa: E402

TOLERANCE_S = 0.005
# speedscope's page as its package ships it (make setup: npm ci in tests/viewers)
SPEEDSCOPE = ROOT / "tests" / "viewers" / "node_modules" / "speedscope" / "dist" / "release" / "index.html"
# a hold is the processor's stretch of holding on: running, or runnable without a CPU
HOLDING = {"running", "runqueue", "throttled"}


def gil_holder(mode):
    """tests/workloads/gil_holder.py MODE under CPython 3.12, running."""
    py = pyenv_python(12)
    assert py, "pyenv 3.12 not installed here"
    return Workload(py, ROOT / "tests" / "workloads" / "gil_holder.py", mode)


def validate(doc):
    """The trace-event format's JSON Object Format, as its specification and Perfetto's importer
    read it: every event has a name, a phase, a pid and a tid; complete events a ts and a dur in
    µs, dur not negative; metadata events name what they describe; instant events a scope."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list) and doc["traceEvents"], doc.keys()
    assert doc.get("displayTimeUnit") in (None, "ms", "ns")
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in ("X", "M", "i"), e
        assert isinstance(e["pid"], int), e
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and isinstance(e["ts"], (int, float)) and e["dur"] >= 0, e
        elif e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index"), e
            assert "name" in e["args"] or "sort_index" in e["args"], e
        else:
            assert e["s"] in ("g", "p", "t") and isinstance(e["ts"], (int, float)), e


def trace_of(w, tmp_path, seconds):
    """Attach with --trace for `seconds`; the trace, and the json.dumps calls the workload printed
    that began and ended inside the window, as (start, end) seconds since it opened."""
    out = tmp_path / "trace.json"
    cp = subprocess.run(
        [str(WAITMETER), "attach", "--pid", str(w.pid), "--duration", str(seconds), "--output", "json", "--trace", str(out)],
        capture_output=True, text=True, timeout=seconds + 60)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(out.read_text())
    validate(doc)
    about = doc["otherData"]["processes"][0]
    return doc, calls_of(w, about["window_start_unix_s"], about["duration_s"]), json.loads(cp.stdout)


def calls_of(w, t0, length):
    """The json.dumps calls gil_holder.py printed that began and ended inside the window that
    opened at Unix time `t0` and lasted `length` s: (start, end) in s since it opened. Its lines
    of the window and a little after are read (a line a second, for the calls that ended since)."""
    calls = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        line = w.readline(5, "the workload's calls")
        if line.startswith("calls "):
            for c in line.split()[1:]:
                end, wall = map(float, c.split(":"))
                calls.append((end - wall - t0, end - t0))
            if calls and calls[-1][1] > length + 0.5:
                break
    return [c for c in calls if c[0] > 0.01 and c[1] < length - 0.01]


def cells(doc, tid):
    """A thread's complete events, in time order: (start s, end s, state, args)."""
    out = [(e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6, e["name"], e["args"]) for e in doc["traceEvents"]
           if e["ph"] == "X" and e["tid"] == tid]
    return sorted(out)


def holds(doc, tid):
    """The thread's stretches of holding on (running or runnable), merged across folds that are
    mostly that too."""
    out = []
    for start, end, state, args in cells(doc, tid):
        holding = state in HOLDING if not args.get("folded") else sum(
            p for s, p in args["percent"].items() if s in HOLDING) >= 90
        if not holding:
            continue
        if out and start - out[-1][1] < 1e-6:
            out[-1][1] = end
        else:
            out.append([start, end])
    return out


def covered(spans, start, end):
    return sum(max(0.0, min(e, end) - max(s, start)) for s, e in spans)


def assert_each_call_is_a_hold(doc, w, calls):
    """Each json.dumps call the workload printed is drawn as a hold of the processor, with
    ingest's GIL waits covering it, charged to processor."""
    processor, ingest = w.tids["processor"], w.tids["ingest"]
    assert len(calls) >= 5, calls
    drawn = holds(doc, processor)
    waits = [(s, e, a) for s, e, st, a in cells(doc, ingest) if st == "gil_wait"]
    missed = []
    for start, end in calls:
        # the hold that covers the call: from within 5 ms before its start (the processor took
        # the GIL at a switch of its spin() before it) to within 5 ms after its end
        h = [x for x in drawn if x[0] <= start + TOLERANCE_S and x[1] >= end - TOLERANCE_S]
        if not h or h[0][0] < start - TOLERANCE_S - 0.001 or h[0][1] > end + TOLERANCE_S:
            missed.append(((round(start, 4), round(end, 4)), [(round(a, 4), round(b, 4)) for a, b in drawn
                                                              if b > start - 0.05 and a < end + 0.05]))
            continue
        # ingest waited for the GIL through it, behind processor
        inside = [(s, e) for s, e, a in waits if s < end and e > start]
        assert covered(inside, start, end) >= 0.8 * (end - start), (start, end, inside)
        others = [a for s, e, a in waits if s >= start and e <= end and not a.get("folded")
                  and a.get("behind") != f"processor ({processor})"]
        assert not others, (start, end, others)
    # a call the machine's other load cut into (the processor queued for a CPU in the middle of
    # it is still holding on; only a call it was not seen holding) is a miss: at most one in five
    assert len(missed) <= len(calls) // 5, (len(calls), missed)


@pytest.mark.timeout(300)
def test_the_trace_draws_each_json_dumps_as_a_hold_with_ingests_gil_waits_inside(tmp_path):
    with gil_holder("same") as w:
        doc, calls, report = trace_of(w, tmp_path, 5)
    processor, ingest = w.tids["processor"], w.tids["ingest"]
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names[processor] == "processor" and names[ingest] == "ingest", names
    # one row per thread of the report
    assert set(names) == {t["tid"] for t in report["threads"]}, (names, [t["tid"] for t in report["threads"]])
    assert_each_call_is_a_hold(doc, w, calls)


@pytest.mark.timeout(300)
def test_a_processor_in_its_own_process_leaves_ingest_no_gil_wait_to_draw(tmp_path):
    with gil_holder("separate") as w:
        doc, calls, _ = trace_of(w, tmp_path, 3)
    ingest = w.tids["ingest"]
    gil = sum(e - s for s, e, st, _ in cells(doc, ingest) if st == "gil_wait")
    total = sum(e - s for s, e, _, _ in cells(doc, ingest))
    assert total >= 2.5, total
    assert gil <= 0.05 * total, (gil, total)
    assert doc["otherData"]["processes"][0]["spans_lost"] == 0


@pytest.mark.timeout(300)
def test_speedscope_imports_the_trace_with_every_thread_and_each_event_in_its_place(tmp_path):
    """speedscope's Trace Event importer turns each complete event into a begin and an end on its
    thread's stack and says so on the console when one begins before the last has ended (then
    drops it). Each thread of gil_holder.py lived through the window, and its partition covers
    it: its events must all be taken, adding up to the window's length."""
    assert SPEEDSCOPE.exists(), f"no {SPEEDSCOPE}: make setup installs speedscope (npm ci in tests/viewers)"
    with gil_holder("same") as w:
        doc, _, report = trace_of(w, tmp_path, 3)
    window = doc["otherData"]["processes"][0]["duration_s"]
    # as speedscope's own command line hands a file to its page: a script that loads it
    loader = tmp_path / "load.js"
    raw = (tmp_path / "trace.json").read_bytes()
    loader.write_text(f"speedscope.loadFileFromBase64({json.dumps('trace.json')}, {json.dumps(base64.b64encode(raw).decode())})")
    dom, log, connections = browse(SPEEDSCOPE, tmp_path, "--dump-dom", fragment=f"#localProfilePath={loader}")
    assert not pages_requests(connections), connections
    assert "Importing as Trace Event Format profile" in log, log[-3000:]
    misplaced = [line for line in log.splitlines() if "Tried to end" in line or "was on the top of the stack" in line]
    assert not misplaced, misplaced[:5]
    assert not console_errors(log), console_errors(log)
    # its profile list: a row per thread, "comm (pid) (pid P), NAME (tid T)", and its total weight
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
    listed = {int(tid): (name, float(secs)) for name, tid, secs in re.findall(r"\(pid \d+\), (\S+) \(tid (\d+)\) ([\d.]+)s", text)}
    assert set(listed) == {t["tid"] for t in report["threads"]}, (listed, text[:2000])
    assert listed[w.tids["processor"]][0] == "processor" and listed[w.tids["ingest"]][0] == "ingest", listed
    for tid, (name, secs) in listed.items():
        assert abs(secs - window) <= 0.02 * window + 0.01, (name, secs, window)
