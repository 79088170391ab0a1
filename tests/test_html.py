"""The one-file HTML report (issue 40), opened the way a person opens it: in a real browser
(Debian's headless Chromium), from disk, with every network request sent to a listener of the
test's that must see none. Its DOM is read back after the page's script ran: one row per thread,
and what each row drew (`data-drawn`: start and end in ms and the state of every stretch drawn).
The ground truth is the workload's own clock: gil_holder.py prints every json.dumps call, and the
processor's drawn holds must line up with them within 5 ms, ingest's drawn GIL waits inside
them. A screenshot of the story's workload is kept (tests/.build/artefacts/html-report.png)."""
import html
import json
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, WAITMETER, Workload, build_c
from test_timeline import TOLERANCE_S, calls_of, gil_holder

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from browser import browse, console_errors, pages_requests  # noqa: E402

pytestmark = pytest.mark.needs_root

ARTEFACTS = BUILD / "artefacts"
HOLDING = {"running", "runqueue", "throttled"}
# a page of 10 s of a 64-thread switch storm stays under this (issue 40: "a few MB at most")
MAX_PAGE_BYTES = 6 << 20


def rows(dom):
    """Each row's thread and what it drew: {tid: [(start s, end s, state)]}."""
    out = {}
    for m in re.finditer(r'<div class="row[^"]*" data-tid="(\d+)" data-drawn="([^"]*)"', dom):
        cells = []
        for c in html.unescape(m.group(2)).split():
            span, state = c.split(":")
            a, b = span.split("-")
            cells.append((float(a) / 1000, float(b) / 1000, state))
        out[int(m.group(1))] = cells
    return out


def holds(cells):
    out = []
    for a, b, state in cells:
        if state not in HOLDING:
            continue
        if out and a - out[-1][1] < 1e-6:
            out[-1][1] = b
        else:
            out.append([a, b])
    return out


def page_data(text):
    m = re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


@pytest.mark.timeout(400)
def test_the_page_opens_offline_and_draws_each_json_dumps_as_a_hold(tmp_path):
    page = tmp_path / "report.html"
    with gil_holder("same") as w:
        cp = subprocess.run([str(WAITMETER), "attach", "--pid", str(w.pid), "--duration", "5", "--output", "json",
                             "--html", str(page)], capture_output=True, text=True, timeout=90)
        assert cp.returncode == 0, cp.stderr
        data = page_data(page.read_text())
        calls = calls_of(w, data["start_unix_s"], data["window_us"] / 1e6)
    report = json.loads(cp.stdout)
    dom, log, connections = browse(page, tmp_path, "--dump-dom")
    assert not pages_requests(connections), f"requests made: {connections}"
    assert not console_errors(log), console_errors(log)
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    assert re.search(r'<pre id="errors" hidden=""></pre>', dom), re.search(r'<pre id="errors".*?</pre>', dom, re.S).group(0)
    drawn = rows(dom)
    # one row per thread of the report, each named
    assert set(drawn) == {t["tid"] for t in report["threads"]}, (sorted(drawn), [t["tid"] for t in report["threads"]])
    processor, ingest = w.tids["processor"], w.tids["ingest"]
    assert f'data-tid="{processor}"' in dom and ">processor " in dom and ">ingest " in dom
    # the verdict at the top, its first line the GIL starvation behind processor, linked to both threads
    first = re.search(r'<li data-kind="([^"]+)" data-threads="([^"]*)">', dom)
    assert first and first.group(1) == "gil_starvation", dom[:3000]
    assert {ingest, processor} <= {int(t) for t in first.group(2).split(",")}, first.group(2)
    assert len(calls) >= 5, calls
    missed = []
    for start, end in calls:
        h = [x for x in holds(drawn[processor]) if x[0] <= start + TOLERANCE_S and x[1] >= end - TOLERANCE_S]
        if not h or h[0][0] < start - TOLERANCE_S - 0.001 or h[0][1] > end + TOLERANCE_S:
            missed.append((round(start, 4), round(end, 4)))
            continue
        inside = sum(max(0.0, min(b, end) - max(a, start)) for a, b, s in drawn[ingest] if s == "gil_wait")
        assert inside >= 0.8 * (end - start), (start, end, inside)
    assert len(missed) <= len(calls) // 5, (len(calls), missed)
    # the blame graph has the edge, the flame graph json.dumps under processor's holder role
    assert any(e["victim"] == ingest and e["culprit"] == str(processor) and e["kind"] == "gil_wait" for e in data["blame"])
    assert any(e["role"] == "holder" and any(f.startswith("json.dumps") for f in e["frames"]) for e in data["flame"])
    # a zoomed view, as a person would take it, kept as the test's artefact
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / "html-report.png"
    s, e = calls[len(calls) // 2]
    _, log, connections = browse(page, tmp_path, f"--screenshot={shot}", fragment=f"#from={(s - 0.2) * 1000:.0f}&to={(e + 0.2) * 1000:.0f}")
    assert not pages_requests(connections) and not console_errors(log), (connections, console_errors(log))
    head = shot.read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000, shot.stat().st_size
    print(f"screenshot: {shot}")


@pytest.mark.timeout(400)
def test_ten_seconds_of_a_64_thread_switch_storm_fit_in_a_page_that_draws(tmp_path):
    ring = build_c("ring")
    page = tmp_path / "storm.html"
    with Workload(ring, 64, 16) as w:
        cp = subprocess.run([str(WAITMETER), "attach", "--pid", str(w.pid), "--duration", "10", "--output", "json",
                             "--html", str(page)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    report = json.loads(cp.stdout)
    data = page_data(page.read_text())
    rate = data["spans"] / 10 / 2
    print(f"page {page.stat().st_size} bytes, {data['spans']} intervals ({rate:.0f} switches/s), "
          f"folded below {data['folded_below_ms']} ms, lost {data['spans_lost']}")
    assert rate >= 20_000, f"the storm did not storm: {rate:.0f} switches/s"
    assert page.stat().st_size <= MAX_PAGE_BYTES, page.stat().st_size
    dom, log, connections = browse(page, tmp_path, "--dump-dom")
    assert not pages_requests(connections) and not console_errors(log), (connections, console_errors(log))
    assert 'data-ready="1"' in dom
    print("drawn in", re.search(r'data-render-ms="(\d+)"', dom).group(1), "ms (headless Chromium, its own clock)")
    assert len(rows(dom)) == len(report["threads"]) >= 64


@pytest.mark.timeout(200)
def test_dump_writes_the_page_too_and_a_path_it_cannot_write_is_one_line(tmp_path):
    page = tmp_path / "dump.html"
    with gil_holder("same") as w:
        cp = subprocess.run([str(WAITMETER), "dump", "-p", str(w.pid), "--html", str(page)], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        bad = subprocess.run([str(WAITMETER), "attach", "-p", str(w.pid), "--duration", "1", "--html", str(tmp_path / "no" / "such" / "x.html")],
                             capture_output=True, text=True, timeout=60)
    assert cp.stdout.startswith("Thread ") or "ingest" in cp.stdout, cp.stdout
    data = page_data(page.read_text())
    ingest, processor = w.tids["ingest"], w.tids["processor"]
    waits = [c for c in data["rows"][str(ingest)] if c[2] == data["states"].index("gil_wait") and c[3] == processor]
    assert sum(c[1] for c in waits) >= 0.5 * data["window_us"], (len(waits), data["window_us"])
    # before anything is measured: one line naming the option and the cause, exit code 2
    assert bad.returncode == 2, bad
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "--html" in lines[0], bad.stderr
