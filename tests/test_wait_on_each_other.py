"""Processes that wait on each other (docs/verdicts.md, "waiting on each other"), measured together
(`attach --children` of a server's first process, or `attach -p` of each of its backends), against the server's own account of its waits.

A real multi-process server and its own load tool: Debian's PostgreSQL and pgbench, 8 clients, each
transaction holding what it updated for 4 ms (`pg_sleep`, with the CPUs free). The ground truth is
pg_stat_activity's wait event of each backend, sampled every 20 ms by a session of its own.

- Bug: every client updates the same row. The backends queue on its lock (`Lock:transactionid`,
  `Lock:tuple`: ~85% of their samples). A lock wait sleeps in the backend's latch (epoll_wait) and
  ends when the backend that held the row commits and sets the latch of the next one (a signal
  from another process): no futex, no GIL, no run queue. The first line says the 8 backends waited
  on each other for the share of their time the server counted, each woken by another of them.
- Control: each client updates its own row. The backends sleep in pg_sleep (`Timeout:PgSleep`:
  ~93%), a wait a timer ends, no process: no finding of processes waiting on each other, and the
  sleeps' waker is an interrupt. The server's background processes (the WAL writer, woken by the
  backends with work to do) are never named in either: waiting for work is not waiting on another.
"""
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import SLOWDOWN, WAITMETER

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from postgres import Postgres  # noqa: E402

pytestmark = pytest.mark.needs_root

CLIENTS = 8
HOLD = "begin;\nupdate hot set n = n + 1 where id = {row};\nselect pg_sleep(0.004);\ncommit;\n"
ONE_ROW = HOLD.format(row=1)
OWN_ROWS = "\\set id :client_id + 1\n" + HOLD.format(row=":id")
# the lock waits of the server's account, and the agent's share against it
LOCKS = ("Lock:", "LWLock:")
TOLERANCE = 0.15


def measure(pg, script, seconds=5.0, by_pid=False):
    """Run pgbench with `script`; meanwhile `attach --children` of the postmaster (`by_pid`: `attach
    -p` of each backend, as pg_stat_activity lists them) and the server's own sampling of its
    backends' waits, over the same seconds. (the report with the family, every report, the server's
    {event: samples}, the backends' PIDs, pgbench's output)."""
    bench = pg.pgbench(script, CLIENTS, int(seconds + 6), options="-c synchronous_commit=off")
    try:
        threading.Event().wait(1.5)
        if by_pid:
            listed = pg.psql("select pid from pg_stat_activity where backend_type = 'client backend' "
                             "and application_name = 'pgbench'").split()
            assert len(listed) == CLIENTS, listed
            targets = [a for pid in listed for a in ("-p", pid)]
        else:
            targets = ["--pid", str(pg.postmaster()), "--children"]
        server = {}
        sampler = threading.Thread(target=lambda: server.update(zip(("events", "pids"), pg.sample_waits(seconds))))
        sampler.start()
        cp = subprocess.run([str(WAITMETER), "attach", *targets, "--duration", str(seconds),
                             "--output", "json"], capture_output=True, text=True, timeout=seconds + 60 * SLOWDOWN)
        sampler.join(timeout=60)
        out, _ = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert cp.returncode == 0, cp.stderr
    reports = [json.loads(line) for line in cp.stdout.splitlines() if line.strip()]
    root = next(r for r in reports if r.get("family"))
    return root, reports, server["events"], server["pids"], out


def lock_share(events):
    return sum(n for e, n in events.items() if e.startswith(LOCKS)) / max(1, sum(events.values()))


@pytest.mark.timeout(600)
def test_backends_queued_on_one_rows_lock_wait_on_each_other_and_their_own_rows_do_not():
    pg = Postgres()
    try:
        pg.psql("create table hot (id int primary key, n bigint); insert into hot select g, 0 from generate_series(1, 100) g")
        pg_root = pg.postmaster()
        root, _, events, backends, out = measure(pg, ONE_ROW)
        croot, creports, cevents, cbackends, cout = measure(pg, OWN_ROWS)
        proot, _, pevents, pbackends, pout = measure(pg, ONE_ROW, by_pid=True)
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
    # the backends, and only they (not the WAL writer or the checkpointer they wake), each woken
    # by another backend
    assert found["count"] == CLIENTS and {p["pid"] for p in found["processes"]} <= backends, (found, backends)
    assert found["wakers"] and {w["pid"] for w in found["wakers"]} <= backends, found
    members = {m["pid"]: m for m in root["family"]["members"]}
    for pid in backends:
        assert members[pid]["woken_by_family_s"] >= 0.5 * truth * members[pid]["present_s"], members[pid]

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
