"""Stalls of serving threads on real services (docs/verdicts.md, "stall"): an event loop or a
single-threaded server kept from its poll by one slow request, while paced pings from another
process wait behind it. The ground truth is the clients' own latency (tests/helpers/serving.py):
the stall's stretch lengths must agree with it, the serving thread must be the first line, and
its code must be named where the runtime's frames can be (Python; nginx is stripped and Node's
frames are JIT code). The controls (the same services and pings, no slow request) must say no
stall, no convoy and no saturation.
"""
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import attach

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
import serving  # noqa: E402

pytestmark = pytest.mark.needs_root

WINDOW = 9.0
# the finding's longest stretch against the clients' longest wait (the issue's bar)
TOLERANCE = 0.25
BUSY_KINDS = ("stall", "lock_convoy", "saturated_thread")
LATE_S = 0.02  # a ping that waited behind something (the control's p99 is under 5 ms)


def in_window(report, lat):
    """The clients' numbers over the agent's window: the pings sent and answered inside it
    (their send times are CLOCK_MONOTONIC; the window's start is wall clock)."""
    offset = time.time() - time.monotonic()
    start = report["started_unix_s"] - offset
    end = start + report["duration_s"]
    waits = sorted(s for at, s in lat["pings"] if at >= start and at + s <= end)
    assert len(waits) > 100, (len(waits), start, end, lat["start"], lat["end"])
    # what the pings waited beyond the few milliseconds one takes unhindered
    late_s = sum(w for w in waits if w >= LATE_S)
    return {"max": waits[-1], "p99": waits[int(0.99 * (len(waits) - 1))], "count": len(waits), "late_s": late_s}


def measured(name, slow, *extra):
    """Start the service, measure the pings from another process while the agent watches it:
    (report, client numbers, service)."""
    with serving.start(name, slow=slow) as svc:
        m = svc.start_measuring(seconds=WINDOW + 1.0, slow=slow)
        out = {}
        agent = threading.Thread(target=lambda: out.update(r=attach(svc.pid, WINDOW, *extra)))
        agent.start()
        agent.join(WINDOW + 60)
        lat = m.result()
        return out["r"][0], lat, svc.serving_tid, svc


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", serving.SERVICES)
def test_a_serving_thread_kept_from_its_poll_is_the_first_line(name):
    report, lat, tid, svc = measured(name, True)
    verdict, findings = report["verdict"], report["findings"]
    # the incident is there: the pings waited
    assert lat["p99"] >= 0.1, lat
    first = findings[0]
    seen = in_window(report, lat)
    # one line of this cause: no convoy, no saturation of an idle pool
    assert not any(f["kind"] in ("lock_convoy", "saturated_thread") for f in findings), verdict
    if name == "waitress":
        waitress_waits_behind_the_gil(report, seen, tid, svc)
        return
    assert first["kind"] == "stall", verdict
    assert first["thread"]["tid"] == tid, (tid, verdict)
    assert verdict[0].startswith("stall: "), verdict
    # the stretch lengths agree with what the clients measured, from outside, over the same
    # window: the stalls' middle with the pings' p99 (what one slow request costs a ping), and
    # the longest covers the longest ping. A stretch lasts until the thread blocks at home
    # again: slow requests back to back on a loaded machine are one longer stretch (a busy
    # period), so the longest may exceed the longest ping (docs/verdicts.md)
    stall = {k: first[k] for k in ("p50_s", "max_s", "stalls", "stall_s")}
    assert abs(first["p50_s"] - seen["p99"]) <= TOLERANCE * seen["p99"], (stall, seen)
    assert first["max_s"] >= (1 - TOLERANCE) * seen["max"], (stall, seen)
    assert first["stalls"] >= 5, first
    thread = next(t for t in report["threads"] if t["tid"] == tid)
    assert thread["stretches"]["max_s"] == first["max_s"], thread["stretches"]
    if name == "aiohttp":
        # the code that kept it: render_report, its own on the loop
        assert svc.slow_function in verdict[0], verdict[0]


def waitress_waits_behind_the_gil(report, seen, tid, svc):
    """waitress: the poll loop (MainThread) reads a request and hands it to a worker. A ping
    that comes while a worker holds the GIL in render_report's json.dumps waits behind it in
    one of two places: in the poll loop, woken and waiting for the GIL to read it (a stall of
    MainThread), or, when the loop had read it just before the hold began, in the worker it was
    handed to (that worker's GIL wait). Which of the two it is varies from request to request
    and run to run (3-6 of the ~18 holds in 9 s kept MainThread from its poll, in runs here).
    The first line is either, and it names the holder's code; a stall of MainThread is never
    longer than what the pings waited (its stretch ends before the ping is answered)."""
    verdict, first = report["verdict"], report["findings"][0]
    assert first["kind"] in ("stall", "gil_wait", "gil_starvation", "gil_contention"), verdict
    assert "GIL" in verdict[0] and "behind waitress-" in verdict[0], verdict[0]
    assert svc.slow_function in verdict[0] and "json.dumps" in verdict[0], verdict[0]
    stall = next((f for f in report["findings"] if f["kind"] == "stall" and f["thread"]["tid"] == tid), None)
    if stall is not None:
        assert stall["max_s"] <= (1 + TOLERANCE) * seen["max"], (stall, seen)
        assert stall["p50_s"] >= 0.1, stall
    # wherever a ping waited behind a hold, a thread of the server waited for the GIL with it:
    # the threads' GIL wait (the holder's own is little) covers the time the pings were late
    gil_s = sum(t["seconds"].get("gil_wait", 0.0) for t in report["threads"])
    assert gil_s >= (1 - TOLERANCE) * seen["late_s"], (gil_s, seen)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", serving.SERVICES)
def test_the_same_service_without_the_slow_request_has_no_stall(name):
    report, lat, tid, _ = measured(name, False)
    assert lat["p99"] < 0.05, lat
    kinds = [f["kind"] for f in report["findings"]]
    assert not any(k in BUSY_KINDS for k in kinds), report["verdict"]
    assert report["verdict"][0].startswith("healthy: "), report["verdict"]
    thread = next(t for t in report["threads"] if t["tid"] == tid)
    # the serving thread's home wait is found, and it was idle there
    assert thread["stretches"]["count"] > 100 and thread["stretches"]["stalls"] == 0, thread.get("stretches")
