"""`run --timeline-minutes N` keeps the last minutes of every thread's timeline and serves them at
`/debug/timeline?seconds=S` (issue 40), so the minute of an incident can be looked at after the
fact. The ground truth is gil_holder.py's own clock, as for `attach --trace`: 13 s after the agent
started (a window boundary in between: the view joins two of the kept segments), the last 12 s
are asked for, and every json.dumps call the workload printed in them must be drawn as a hold of
the processor with ingest's GIL waits inside it. The same view as a page opens offline in
headless Chromium with a row per thread and the verdict of those seconds first. A view longer
than what is kept is one line, 400."""
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, WAITMETER, Guard, Workload, build_c, free_port, wait_http
from test_timeline import assert_each_call_is_a_hold, calls_of, gil_holder, validate

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from browser import browse, console_errors, pages_requests  # noqa: E402

pytestmark = pytest.mark.needs_root


def get(url):
    """(status, body, headers) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


@pytest.mark.timeout(300)
def test_run_serves_the_last_seconds_drawn_as_the_workloads_clock_says(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with gil_holder("same") as w:
        cmd = [str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}", "--timeline-minutes", "1"]
        with Guard(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)) as agent:
            wait_http(f"{base}/healthz")
            time.sleep(13)
            code, body, headers = get(f"{base}/debug/timeline?seconds=12&format=trace")
            assert code == 200, body
            doc = json.loads(body)
            about = doc["otherData"]["processes"][0]
            calls = calls_of(w, about["window_start_unix_s"], about["duration_s"])
            code_page, page, page_headers = get(f"{base}/debug/timeline?seconds=12")
            too_long, why, _ = get(f"{base}/debug/timeline?seconds=61")
            nobody, who, _ = get(f"{base}/debug/timeline?pid=999999999&format=trace")
            assert agent.poll() is None, agent.stderr.read()
    assert headers["Content-Type"] == "application/json"
    validate(doc)
    # 12 s asked: from the start of the segment that holds their first second, at most 10 s more
    assert 12 <= about["duration_s"] <= 23, about
    assert about["pid"] == w.pid and about["spans_lost"] == 0, about
    assert_each_call_is_a_hold(doc, w, calls)
    # the same seconds as the page, of the one process watched: it opens offline and draws a row per thread
    assert code_page == 200 and page_headers["Content-Type"].startswith("text/html"), page[:300]
    assert "default-src 'none'" in page_headers["Content-Security-Policy"]
    path = tmp_path / "timeline.html"
    path.write_bytes(page)
    data = json.loads(re.search(rb'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    dom, log, connections = browse(path, tmp_path, "--dump-dom")
    assert not pages_requests(connections) and not console_errors(log), (connections, console_errors(log))
    assert 'data-ready="1"' in dom
    tids = {int(t) for t in re.findall(r'<div class="row[^"]*" data-tid="(\d+)"', dom)}
    assert tids == {t["tid"] for t in data["threads"]} and {w.tids["processor"], w.tids["ingest"]} <= tids, tids
    # the verdict of those seconds, first line first: ingest starved for the GIL behind processor
    assert data["verdict"][0]["kind"] == "gil_starvation", data["verdict"][:2]
    assert {w.tids["ingest"], w.tids["processor"]} <= set(data["verdict"][0]["threads"]), data["verdict"][0]
    # more than is kept, or a process not watched: one line each, naming the cause
    assert too_long == 400 and why.decode().count("\n") == 1 and "--timeline-minutes" in why.decode(), why
    assert nobody == 404 and b"not watched" in who, who


@pytest.mark.timeout(120)
def test_without_timeline_minutes_nothing_is_kept_and_the_endpoint_says_how(tmp_path):
    port = free_port()
    with Guard(subprocess.Popen([str(WAITMETER), "run", "--pid", str(os.getpid()), "--listen", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)) as agent:
        # its first line comes once the probes are loaded
        said = [agent.stderr.readline()]
        while said[-1] and not said[-1].startswith("waitmeter: serving"):
            said.append(agent.stderr.readline())
        assert said[-1], f"the agent did not start: {said}"
        code, body, _ = get(f"http://127.0.0.1:{port}/debug/timeline?seconds=10")
        ring = subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True, timeout=30)
    assert code == 404 and b"--timeline-minutes" in body, (code, body)
    # and the span ring is the one page it is when off
    spans = [m for m in json.loads(ring.stdout) if m.get("name") == "spans"]
    assert spans and all(m["max_entries"] <= 4096 for m in spans), spans


@pytest.mark.timeout(300)
def test_views_asked_without_pause_do_not_hold_up_scrapes(tmp_path):
    """Issue 54: six clients looping on a minute's trace of a busy process left room for 4 scrapes
    in 30 s (two timed out at 10 s), and /healthz said nothing. Views are rendered off the loop that
    answers scrapes: under the same loop of six clients, every scrape (spaced past the exposition's
    1 s cache, so that each is a render of the loop) is answered in the time a scrape takes without
    them (at most 2 s, from about 50 ms), views keep being served, and /healthz stays 200."""
    import threading
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    ring = build_c("ring")
    with Workload(ring, 16, 4) as w:
        cmd = [str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}", "--timeline-minutes", "1"]
        with Guard(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)) as agent:
            wait_http(f"{base}/healthz")
            time.sleep(12)  # a busy timeline to draw

            def timed(path):
                t0 = time.monotonic()
                code, body, _ = get(base + path)
                return code, time.monotonic() - t0, body

            alone = []  # the scrapes' time without views, for the failure's message
            for _ in range(3):
                time.sleep(1.1)
                alone.append(round(timed("/metrics")[1], 3))
            stop, views = threading.Event(), []

            def looker():
                while not stop.is_set():
                    code, took, body = timed("/debug/timeline?seconds=60&format=trace")
                    views.append((code, took, len(body)))
                    if code == 429:
                        time.sleep(0.05)

            lookers = [threading.Thread(target=looker, daemon=True) for _ in range(6)]
            for t in lookers:
                t.start()
            scrapes, health = [], []
            try:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    time.sleep(1.1)
                    code, took, _ = timed("/metrics")
                    scrapes.append((code, round(took, 3)))
                    health.append(timed("/healthz")[0])
            finally:
                stop.set()
                for t in lookers:
                    t.join(60)
            assert agent.poll() is None, agent.stderr.read()
    served = [v for v in views if v[0] == 200]
    assert len(served) >= 10 and min(v[2] for v in served) > 100_000, (len(views), views[:5])
    assert all(code == 200 for code, _ in scrapes), scrapes
    assert max(took for _, took in scrapes) <= 2.0, (scrapes, alone)
    assert set(health) == {200}, health
