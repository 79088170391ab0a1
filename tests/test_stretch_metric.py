"""waitmeter_thread_stretch_seconds of `waitmeter run` against an event loop's own clients.

tests/workloads/loop_stall.py is an asyncio TCP server whose handler renders a report on the
loop (json.dumps of a big list, ~200 ms) for every "slow" line. Ground truth from separate
client processes: one sends "slow" every 0.5 s (when each was answered), one pings every 10 ms
(each ping's latency). The loop thread's histogram is at its home wait, epoll_wait; the
stretches of 128 ms and more that it gains between two scrapes are the slow requests answered
between them, and its top bucket holds the longest wait a client saw. A second server, pinged
only, is the control: no stretch of 64 ms or more."""
import contextlib
import json
import math
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT, WAITMETER, Guard, Workload, free_port, wait_http

pytestmark = pytest.mark.needs_root

STALL = ROOT / "tests" / "workloads" / "loop_stall.py"
MEASURE_S = 20  # between the two scrapes compared
CLIENT_S = MEASURE_S + 4
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def stretches(text, pid):
    """The process' waitmeter_thread_stretch_seconds: {(thread, wait): {"count", "sum", "le": {bound: n}}}."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"waitmeter_thread_stretch_seconds_(bucket|count|sum)\{(.*)\} (\S+)$", line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        if labels["pid"] != str(pid):
            continue
        h = out.setdefault((labels["thread"], labels["wait"]), {"le": {}})
        if m.group(1) == "bucket":
            h["le"][math.inf if labels["le"] == "+Inf" else float(labels["le"])] = float(m.group(3))
        else:
            h[m.group(1)] = float(m.group(3))
    return out


def at_least(h, seconds):
    """Stretches of `seconds` or more (a bound of the buckets)."""
    return h["count"] - h["le"][seconds]


def top_bucket(h):
    """The upper bound of the highest non-empty bucket."""
    return min(le for le, n in h["le"].items() if n == h["count"])


def octave(seconds):
    """The power-of-two millisecond bucket a length falls in (1: up to 1 ms, 2: to 2 ms...)."""
    return math.ceil(math.log2(max(seconds, 1e-4) / 0.001))


def scrape(port):
    t0 = time.monotonic()
    text = wait_http(f"http://127.0.0.1:{port}/metrics")
    return (t0 + time.monotonic()) / 2, text


def port_of(w):
    return int(next(line.split()[1] for line in w.lines if line.startswith("port ")))


def client(*args):
    return subprocess.Popen([sys.executable, str(STALL), *map(str, args)], stdout=subprocess.PIPE, text=True)


def test_an_event_loops_stretches_are_its_slow_requests_and_its_clients_wait():
    port = free_port()
    with Workload(sys.executable, STALL, "server") as stalled, Workload(sys.executable, STALL, "server") as control:
        loop_tid = stalled.tids["loop"]
        render_ms = float(next(line.split()[1] for line in stalled.lines if line.startswith("render_ms")))
        agent = subprocess.Popen(
            [str(WAITMETER), "run", "--pid", str(stalled.pid), "--pid", str(control.pid), "--listen", f"127.0.0.1:{port}"],
            stderr=subprocess.DEVNULL)
        with Guard(agent):
            wait_http(f"http://127.0.0.1:{port}/metrics")
            with contextlib.ExitStack() as clients:
                slow, ping, control_ping = (clients.enter_context(Guard(c)) for c in (
                    client("slow", port_of(stalled), CLIENT_S), client("ping", port_of(stalled), CLIENT_S),
                    client("ping", port_of(control), CLIENT_S)))
                time.sleep(2)
                t_a, first = scrape(port)
                time.sleep(MEASURE_S)
                t_b, second = scrape(port)
                outs = [json.loads(c.communicate(timeout=CLIENT_S + 30)[0]) for c in (slow, ping, control_ping)]
            _, last = scrape(port)
    slow_out, ping_out, control_out = outs
    answered = [b for _, b in slow_out["answered"] if t_a < b <= t_b]
    durations = [b - a for a, b in slow_out["answered"]]
    a, b, end = (stretches(t, stalled.pid) for t in (first, second, last))
    c = stretches(last, control.pid)
    key = ("loop", "epoll_wait")
    long = at_least(b[key], 0.128) - at_least(a[key], 0.128) if key in a and key in b else None
    loop = end.get(key)
    longest = max(ping_out["max"], max(durations))
    print(f"loop tid {loop_tid}, render {render_ms} ms; slow requests answered in {t_b - t_a:.1f} s: {len(answered)}, "
          f"stretches >= 128 ms gained: {long}; slow durations {min(durations) * 1e3:.0f}-{max(durations) * 1e3:.0f} ms; "
          f"pings (stalled) p99 {ping_out['p99'] * 1e3:.0f} ms max {ping_out['max'] * 1e3:.0f} ms; "
          f"top bucket {loop and top_bucket(loop)}; control pings p99 {control_out['p99'] * 1e3:.1f} ms "
          f"max {control_out['max'] * 1e3:.1f} ms, its stretches >= 16 ms {[at_least(h, 0.016) for h in c.values()]}")
    # one series for the loop thread, at its home: epoll_wait (nothing else of the server waits there)
    assert set(end) == {key}, end
    assert key in a and key in b, (a, b)
    # its count grows (the pings, every 10 ms but while it renders, and the slow requests), its sum with it
    assert b[key]["count"] > a[key]["count"] + MEASURE_S * 20, (a, b)
    assert b[key]["sum"] > a[key]["sum"]
    # every slow request is a stretch of 128 ms or more: as many as were answered (two a second)
    assert min(durations) >= 0.128, durations
    assert abs(long - len(answered)) <= 2 * MEASURE_S / 10, (long, len(answered))
    # the longest wait a client saw is in the top bucket or next to it
    assert abs(octave(longest) - octave(top_bucket(loop))) <= 1, (longest, loop)
    # the control's loop is never kept from its poll for 64 ms
    assert set(c) == {key}, c
    h = c[key]
    assert h["count"] > MEASURE_S * 20 and at_least(h, 0.064) == 0, h
