"""A real Prometheus scrapes `waitmeter run` on loopback (issue: foundation, test 8)."""
import json
import re
import statistics
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, WAITMETER, Guard, Workload, free_port, prometheus, wait_http, which

pytestmark = pytest.mark.needs_root

HOOKS = ["sched_switch", "sched_wakeup", "sched_waking", "sched_wakeup_new", "sched_process_exit"]


def query(base, promql):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in body["data"]["result"]}


def query_median(base, promql, seconds=4):
    """The median, per series, of `promql` evaluated once a second over the
    last `seconds` + 1 s: one scrape that came late (its value older than its
    timestamp) skews only the windows it ends or starts, not the median."""
    end = time.time()
    url = f"{base}/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": promql, "start": end - seconds, "end": end, "step": 1})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return {tuple(sorted(s["metric"].items())): statistics.median(float(v[1]) for v in s["values"])
            for s in body["data"]["result"]}


@pytest.fixture
def pinned_pair_agent(workload_bin):
    port = free_port()
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}"],
                                 stderr=subprocess.PIPE, text=True)
        with Guard(agent):
            wait_http(f"http://127.0.0.1:{port}/metrics")
            yield w, port, agent


def catalogue_labels():
    """Metric (as scraped in the classic format) -> its labels, from docs/metrics.md (generated
    from the agent's catalogue)."""
    rows = re.findall(r"^\| `(waitmeter_[a-z_]+)` \| [a-z]+ \| ([^|]*) \|", (ROOT / "docs" / "metrics.md").read_text(), re.M)
    return {name: re.findall(r"`([a-z_]+)`", labels) for name, labels in rows}


def test_exposition_is_valid_and_complete(pinned_pair_agent):
    w, port, _ = pinned_pair_agent
    text = wait_http(f"http://127.0.0.1:{port}/metrics")
    assert "# TYPE waitmeter_thread_seconds_total counter" in text  # classic text format
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                 headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        om = r.read().decode()
    assert "# TYPE waitmeter_thread_seconds counter" in om and "# UNIT waitmeter_thread_seconds seconds" in om
    assert om.endswith("# EOF\n")
    for state in ["running", "runqueue", "throttled", "gil_wait", "futex_wait", "io_wait", "sleep", "other", "yield"]:
        assert f'waitmeter_thread_seconds_total{{pid="{w.pid}",comm="main",thread="spin-a",state="{state}"}}' in text
    for hook in HOOKS:
        assert f'waitmeter_probe_attached{{probe="{hook}",variant="tp_btf"}} 1' in text
    assert 'waitmeter_bpf_events_lost_total{probe="sched",reason="thread_map_full"} 0' in text
    assert 'waitmeter_bpf_events_lost_total{probe="sched",reason="exit_ringbuf_full"} 0' in text
    assert "waitmeter_build_info{version=" in text
    assert "waitmeter_watched_processes 1" in text
    # every series carries the labels the catalogue declares for its metric, in its order
    declared = catalogue_labels()
    wrong = []
    for line in text.splitlines():
        m = re.match(r"^([a-z_:]+)(?:\{(.*)\})? ", line)
        if not m or line.startswith("#"):
            continue
        family = next((n for n in (m[1], re.sub(r"_(bucket|sum|count)$", "", m[1])) if n in declared), None)
        names = [n for n in re.findall(r'([a-zA-Z_]+)="', m[2] or "") if n != "le"]
        if family is None or any(n not in declared[family] for n in names) or \
                names != sorted(names, key=declared[family].index):
            wrong.append(line)
    assert not wrong, f"series whose labels are not their metric's in docs/metrics.md: {wrong[:5]}"
    # promtool's own linter accepts it
    assert which("promtool"), "promtool (Debian prometheus) is installed by make setup"
    cp = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_real_prometheus_sees_half_runqueue_for_pinned_pair(pinned_pair_agent, tmp_path):
    w, port, _ = pinned_pair_agent
    with prometheus(tmp_path, port) as base:
        sel = f'waitmeter_thread_seconds_total{{pid="{w.pid}",thread=~"spin-a|spin-b"}}'
        rq = f'rate(waitmeter_thread_seconds_total{{pid="{w.pid}",state="runqueue",thread=~"spin-a|spin-b"}}[5s])'
        total = f'sum by (thread) (rate({sel}[5s]))'
        # rate() over a series younger than its range extrapolates: wait until
        # every series has samples spanning more than the range
        # (the medians below look 4 s further back)
        deadline = time.monotonic() + 60
        while True:
            counts = query(base, f"min(count_over_time({sel}[12s]))")
            if (counts and min(counts.values()) >= 12) or time.monotonic() > deadline:
                break
            time.sleep(1)
        rates = query_median(base, rq)
        sums = query_median(base, total)
        up = query(base, 'up{job="waitmeter"}')
        slowest = query(base, 'max_over_time(scrape_duration_seconds{job="waitmeter"}[20s])')
    print(f"rates {rates}, sums {sums}, slowest scrape {slowest}")
    assert list(up.values()) == [1.0]
    assert len(rates) == 2, rates
    for labels, v in rates.items():
        assert 0.35 <= v <= 0.65, (labels, v)
    # the partition: all states of a thread add up to one second per second
    assert len(sums) == 2, sums
    for labels, v in sums.items():
        assert 0.95 <= v <= 1.05, (labels, v)


def thread_series(text):
    """waitmeter_thread_seconds_total of an exposition: (thread, state) -> value."""
    out = {}
    for line in text.splitlines():
        if line.startswith("waitmeter_thread_seconds_total{"):
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.rindex("}")].split(","))
            out[(labels["thread"].strip('"'), labels["state"].strip('"'))] = float(line.rsplit(" ", 1)[1])
    return out


def test_the_busy_thread_gets_its_own_series_though_40_idle_ones_started_first(workload_bin):
    """Issue 15, test 2: 40 sleeping threads (and main) start before the spinning one and
    would take the 20 labels first; within two scrapes the busy thread has its own series,
    no counter ever goes down, and the process has at most 20 labels and "other"."""
    port = free_port()
    with Workload(workload_bin, "--sleep", 40, "--busy", 1) as w:
        agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}"],
                                 stderr=subprocess.PIPE, text=True)
        with Guard(agent):
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url)
            scrapes = []
            for _ in range(2):
                time.sleep(1.5)
                with urllib.request.urlopen(url, timeout=10) as r:
                    scrapes.append(thread_series(r.read().decode()))
            assert ("busy-0", "running") in scrapes[-1], sorted({t for t, _ in scrapes[-1]})
            for _ in range(3):
                time.sleep(1.5)
                with urllib.request.urlopen(url, timeout=10) as r:
                    scrapes.append(thread_series(r.read().decode()))
    for before, after in zip(scrapes, scrapes[1:]):
        for k, v in before.items():
            assert after.get(k, 0.0) >= v, f"{k} went down: {v} -> {after.get(k)}"
    first, last = scrapes[1], scrapes[-1]
    # the busy thread's series grows at about a core; "other" (idle sleepers) hardly at all
    grew = lambda t: last.get((t, "running"), 0.0) - first.get((t, "running"), 0.0)
    assert grew("busy-0") >= 0.8 * 4.5, (grew("busy-0"), last)
    assert grew("other") < 0.1, last
    # 20 labels and "other"; the name that gave its label to busy-0 keeps its series (standing
    # still) for 60 s before it is dropped
    labels = {t for t, _ in last}
    assert len(labels) <= 22 and "other" in labels, sorted(labels)
    moving = {t for (t, st), v in last.items() if v > first.get((t, st), 0.0)}
    assert len(moving) <= 21, sorted(moving)
