"""Processes that wait on each other (docs/verdicts.md, "waiting on each other"), measured together
(`attach --children` of a server's first process, or `attach -p` of each of its backends), against the server's own account of its waits.

A real multi-process server and its own load tool: Debian's PostgreSQL and pgbench, 8 clients, each
transaction holding what it updated for 4 ms (`pg_sleep`, with the CPUs free). The ground truth is
pg_stat_activity's wait event of each backend, sampled every 20 ms by a session of its own; the
transactions committed, as the table counts them; and the backends' wakeups of each other, as
bpftrace counts the kernel's wakings among them (tests/helpers/wakings.py).

- Bug: every client updates the same row. The backends queue on its lock (`Lock:transactionid`,
  `Lock:tuple`: ~85% of their samples). A lock wait sleeps in the backend's latch (epoll_wait) and
  ends when the backend that held the row commits and sets the latch of the next one (a signal
  from another process): no futex, no GIL, no run queue. The first line says the 8 backends waited
  on each other for the share of their time the server counted, each woken by another of them, as
  often as bpftrace counted (about 11 wakeups a commit: a commit wakes every waiter of the row).
- Control: each client updates its own row. The backends sleep in pg_sleep (`Timeout:PgSleep`:
  ~93%), a wait a timer ends, no process: no finding of processes waiting on each other, and the
  sleeps' waker is an interrupt. The time in pg_sleep is 4 ms a commit, charged to pg_sleep's
  stack, not to that of the wait for the client made just before from the same epoll_wait. The server's background processes (the WAL writer, woken by the
  backends with work to do) are never named in either: waiting for work is not waiting on another.

The same server watched by `waitmeter run --pid POSTMASTER --children` (a sidecar's view), scraped by
a real Prometheus that evaluates the mixin's rules: the backends, and only they, have the gauge of
processes waiting on each other at the share the server counted, and the alert is pending for each;
on their own rows neither, though the counter of who woke whom shows each backend woken by its
client (pgbench, not watched) across processes.
"""
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, SLOWDOWN, WAITMETER, Guard, free_port, prometheus, prometheus_api as api, wait_http

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
import wakings  # noqa: E402
from postgres import Postgres  # noqa: E402
from pyroscope_receiver import go_pprof  # noqa: E402

pytestmark = pytest.mark.needs_root

CLIENTS = 8
HOLD = "begin;\nupdate hot set n = n + 1 where id = {row};\nselect pg_sleep(0.004);\ncommit;\n"
ONE_ROW = HOLD.format(row=1)
OWN_ROWS = "\\set id :client_id + 1\n" + HOLD.format(row=":id")
# the lock waits of the server's account, and the agent's share against it
LOCKS = ("Lock:", "LWLock:")
TOLERANCE = 0.15


def measure(pg, script, seconds=5.0, by_pid=False, profile=None):
    """Run pgbench with `script`; meanwhile `attach --children` of the postmaster (`by_pid`: `attach
    -p` of each backend, as pg_stat_activity lists them) and the server's own sampling of its
    backends' waits, over the same seconds (`profile`: the wait profile written there too). (the
    report with the family, every report, the server's {event: samples}, the backends' PIDs,
    pgbench's output, the rates measured outside waitmeter meanwhile: {"commits": the
    transactions committed a second, as the table counts them (each adds 1 to a row), "wakings":
    the backends' wakeups of each other a second, as bpftrace counts them}."""
    bench = pg.pgbench(script, CLIENTS, int(seconds + 8), options="-c synchronous_commit=off")
    try:
        threading.Event().wait(1.5)
        listed = pg.psql("select pid from pg_stat_activity where backend_type = 'client backend' "
                         "and application_name = 'pgbench'").split()
        assert len(listed) == CLIENTS, listed
        if by_pid:
            targets = [a for pid in listed for a in ("-p", pid)]
        else:
            targets = ["--pid", str(pg.postmaster()), "--children"]
        server = {}
        sampler = threading.Thread(target=lambda: server.update(zip(("events", "pids"), pg.sample_waits(seconds))))
        sampler.start()
        counter = wakings.start(listed, seconds)
        also = ["--profile", str(profile)] if profile else []
        n0, t0 = int(pg.psql("select sum(n) from hot")), time.monotonic()
        cp = subprocess.run([str(WAITMETER), "attach", *targets, "--duration", str(seconds),
                             "--output", "json", *also], capture_output=True, text=True, timeout=seconds + 60 * SLOWDOWN)
        n1, t1 = int(pg.psql("select sum(n) from hot")), time.monotonic()
        rates = {"commits": (n1 - n0) / (t1 - t0), "wakings": wakings.count(counter) / seconds}
        sampler.join(timeout=60)
        out, _ = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert cp.returncode == 0, cp.stderr
    reports = [json.loads(line) for line in cp.stdout.splitlines() if line.strip()]
    root = next(r for r in reports if r.get("family"))
    return root, reports, server["events"], server["pids"], out, rates


def lock_share(events):
    return sum(n for e, n in events.items() if e.startswith(LOCKS)) / max(1, sum(events.values()))


@pytest.mark.timeout(600)
def test_backends_queued_on_one_rows_lock_wait_on_each_other_and_their_own_rows_do_not(tmp_path):
    pg = Postgres()
    try:
        pg.psql("create table hot (id int primary key, n bigint); insert into hot select g, 0 from generate_series(1, 100) g")
        pg_root = pg.postmaster()
        root, _, events, backends, out, rates = measure(pg, ONE_ROW, profile=tmp_path / "family.pb.gz")
        croot, creports, cevents, cbackends, cout, crates = measure(pg, OWN_ROWS)
        proot, _, pevents, pbackends, pout, _ = measure(pg, ONE_ROW, by_pid=True)
    finally:
        pg.close()
    # the server's account: the bug's backends wait on the row's lock, the control's sleep
    truth, ctruth = lock_share(events), lock_share(cevents)
    assert truth > 0.6 and ctruth < 0.1, (events, cevents, out, cout)
    assert len(backends) == CLIENTS and len(cbackends) == CLIENTS, (backends, cbackends)

    assert root["family"]["of"] == "children" and root["pid"] == pg_root, root["family"]
    first = root["verdict"][0]
    assert first.startswith(f"waiting on each other: {CLIENTS} processes were blocked"), root["verdict"]
    found = next(f for f in root["findings"] if f["kind"] == "waiting_on_each_other")
    assert abs(found["share"] - truth) <= TOLERANCE, (found["share"], truth, events)
    # the waiters' code, past the latch every sleep of the server goes through, to the lock the
    # server's account says they waited for (its heavyweight lock's acquire: a row's lock)
    assert "WaitLatch ← ProcSleep ← LockAcquire" in first and found["waited_in"] in first, (first, found)
    # and the wakers' code as they woke them, across processes: the backend that held the row's
    # lock, letting go of its locks at commit
    assert "LockRelease" in found.get("woken_from", "") and found["woken_from"] in first, (first, found)
    # the backends, and only they (not the WAL writer or the checkpointer they wake), each woken
    # by another backend
    assert found["count"] == CLIENTS and {p["pid"] for p in found["processes"]} <= backends, (found, backends)
    assert found["wakers"] and {w["pid"] for w in found["wakers"]} <= backends, found
    # how often they woke each other, as bpftrace counted the kernel's wakings among the backends
    # over the same seconds (an upper bound by the timers' wakings that interrupted a backend);
    # at least once a commit (the row's lock changed hands at each), more when a commit's release
    # wakes every waiter of the row and one gets it
    assert 0.8 * rates["wakings"] <= found["wakeups_per_s"] <= 1.15 * rates["wakings"], (found, rates)
    assert found["wakeups_per_s"] >= rates["commits"], (found, rates)
    assert "; woken by one another " in first, first
    members = {m["pid"]: m for m in root["family"]["members"]}
    for pid in backends:
        assert members[pid]["woken_by_family_s"] >= 0.5 * truth * members[pid]["present_s"], members[pid]

    # the family's wait profile, as Go's own pprof reads it: the backends' lock waits, each
    # backend's samples labelled with its PID (an autovacuum worker of the hot table may wait on a
    # lock too), where the server's root process waited for none
    traces = go_pprof(tmp_path / "family.pb.gz", "-traces", "-tagfocus=role=victim")
    lock_pids = set()
    for trace in traces.split("-----------+")[1:]:
        if "LockAcquireExtended" in trace:
            lock_pids.update(int(p) for p in re.findall(r"^\s+pid:\s+(\d+)$", trace, re.M))
    assert len(lock_pids & backends) >= CLIENTS // 2 and pg_root not in lock_pids, (sorted(lock_pids), sorted(backends), traces[:2000])

    # the same backends asked for by PID (`attach -p` of each): the same first line, on the
    # report of the first asked for, which is one of them; no oversubscription is judged of
    # processes that need not share their CPUs
    ptruth = lock_share(pevents)
    assert ptruth > 0.6, (pevents, pout)
    assert proot["family"]["of"] == "pids" and proot["pid"] in pbackends, proot["family"]
    assert proot["verdict"][0].startswith(f"waiting on each other: {CLIENTS} processes were blocked"), proot["verdict"]
    pfound = next(f for f in proot["findings"] if f["kind"] == "waiting_on_each_other")
    assert abs(pfound["share"] - ptruth) <= TOLERANCE, (pfound["share"], ptruth, pevents)
    assert not any(f["kind"] == "oversubscribed" for f in proot["findings"]), proot["verdict"]

    # the control: no such finding; the backends' sleeps were ended by an interrupt (a timer)
    assert not any(f["kind"] == "waiting_on_each_other" for f in croot["findings"]), croot["verdict"]
    woken = {}
    for r in creports:
        if r["pid"] in cbackends:
            for t in r["threads"]:
                for by in t.get("woken_by", {}).values():
                    for who, s in by.items():
                        woken[who] = woken.get(who, 0.0) + s
    assert woken.get("interrupt", 0.0) >= 0.5 * sum(woken.values()), woken
    # and the code says the same thing as the server: they slept in pg_sleep, through the same
    # latch as the bug's lock waits, and never in the lock (the rest: waiting for their clients,
    # which pg_stat_activity's active sessions leave out)
    slept = {}
    for r in creports:
        if r["pid"] in cbackends:
            for site in r.get("wait_sites", []):
                if site["role"] == "victim" and site["state"] == "io_wait":
                    slept[site["site"]] = slept.get(site["site"], 0.0) + site["seconds"]
    # the table's own count over the attach: each transaction slept 4 ms in pg_sleep (and the
    # wait for the client between them is charged to its own code, never the sleep's: each block
    # is charged to the stack it was made from, not one left from an earlier wait)
    in_sleep = sum(t for site, t in slept.items() if "WaitLatch ← pg_sleep" in site)
    expected = crates["commits"] * 0.004 * 5.0
    assert 0.8 * expected <= in_sleep <= 1.3 * expected and not any("LockAcquire" in s for s in slept), (crates, slept)


RULES = ROOT / "dashboards" / "rules" / "waitmeter-rules.yaml"
ALERT = "WaitmeterProcessesWaitOnEachOther"


def served(pg, script, tmp_path):
    """pgbench running `script`, the server watched by `run --pid POSTMASTER --children` and scraped
    by a real Prometheus with the mixin's rules, the server sampling its backends' waits meanwhile.
    Returns ({pid: the gauge}, the alerts, {(pid, waker_comm): woken seconds}, the server's events,
    the backends' PIDs, pgbench's output)."""
    bench = pg.pgbench(script, CLIENTS, int(75 * SLOWDOWN), options="-c synchronous_commit=off")
    try:
        threading.Event().wait(1.5)
        backends = {int(p) for p in pg.psql("select pid from pg_stat_activity where backend_type = 'client backend' "
                                            "and application_name = 'pgbench'").split()}
        assert len(backends) == CLIENTS, backends
        port = free_port()
        agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(pg.postmaster()), "--children",
                                  "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
        with Guard(agent):
            wait_http(f"http://127.0.0.1:{port}/metrics")
            with prometheus(tmp_path, port, [RULES]) as base:
                threading.Event().wait(12)
                # the server's account over the seconds that end at the agent's 40 s boundary
                events, _ = pg.sample_waits(27)
                threading.Event().wait(3)
                gauge = {int(r["metric"]["pid"]): float(r["value"][1]) for r in
                         api(base, "/api/v1/query", query="waitmeter_process_wait_on_each_other_ratio")["result"]}
                alerts = [a for a in api(base, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == ALERT]
                woken = {(int(r["metric"]["pid"]), r["metric"]["waker_comm"]): float(r["value"][1]) for r in api(
                    base, "/api/v1/query", query="sum by (pid, waker_comm) (waitmeter_woken_by_process_seconds_total)")["result"]}
        out, _ = bench.communicate(timeout=int(75 * SLOWDOWN) + 60)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    return gauge, alerts, woken, events, backends, out


@pytest.mark.timeout(600)
def test_a_sidecar_exports_and_alerts_on_the_backends_that_wait_on_each_other_and_not_on_their_own_rows(tmp_path):
    pg = Postgres()
    try:
        pg.psql("create table hot (id int primary key, n bigint); insert into hot select g, 0 from generate_series(1, 100) g")
        (tmp_path / "bug").mkdir()
        (tmp_path / "control").mkdir()
        gauge, alerts, woken, events, backends, out = served(pg, ONE_ROW, tmp_path / "bug")
        cgauge, calerts, cwoken, cevents, cbackends, cout = served(pg, OWN_ROWS, tmp_path / "control")
    finally:
        pg.close()
    truth, ctruth = lock_share(events), lock_share(cevents)
    print(f"bug: server {truth:.2f} in lock waits, gauge {gauge}; control: server {ctruth:.2f}, gauge {cgauge}")
    assert truth > 0.6 and ctruth < 0.1, (events, cevents, out, cout)
    # the backends, and only they (not the WAL writer or the checkpointer they wake with work, nor
    # the postmaster), at the share of their time the server counted in lock waits
    assert set(gauge) == backends, (gauge, backends)
    mean = sum(gauge.values()) / len(gauge)
    assert abs(mean - truth) <= TOLERANCE, (gauge, truth, events)
    # the alert of the mixin, pending (its `for` is 5 minutes) for each of them, naming the
    # backend that woke it most
    assert {int(a["labels"]["pid"]) for a in alerts} == backends, alerts
    assert all(a["state"] == "pending" for a in alerts), alerts
    assert all(re.search(r"mostly by pid (\d+) \(postgres\)", a["annotations"]["description"]) for a in alerts), alerts
    named = {int(re.search(r"mostly by pid (\d+)", a["annotations"]["description"]).group(1)) for a in alerts}
    assert named <= backends, (named, backends)
    # who woke whom: the backends by each other (postgres) far more than by their client
    for pid in backends:
        assert woken.get((pid, "postgres"), 0.0) > 2 * woken.get((pid, "pgbench"), 0.0), (pid, woken)

    # the control: no process waited on another; the gauge and the alert stay away, though each
    # backend was woken across processes, by its client's requests (pgbench: not watched)
    assert cgauge == {} and calerts == [], (cgauge, calerts)
    assert all(cwoken.get((pid, "pgbench"), 0.0) > 0 for pid in cbackends), (cwoken, cbackends)
