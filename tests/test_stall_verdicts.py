"""Verdicts decided on the home wait (docs/verdicts.md: "stall", idle, lock convoys,
head-of-line), each against a ground truth from outside the agent and with its contrast:

  - a thread pool that is idle nearly all the time waits together on its queue's futex word,
    and that is idle, never a lock convoy; the same pool handed a lock in the middle of each
    task is one (tests/workloads/idle_pool.py: the tasks' own clocks);
  - a busy thread nothing waits on (free-threaded 3.14t, GIL off) is not head-of-line: the
    ingest beside it keeps up (the messages' lag by the workload's own clock);
  - the project's story (tests/workloads/gil_starve.py `same`) at a pace where ingest goes back
    to its recv between messages: one finding, the stall of ingest, that names the GIL holder
    and json.dumps, its lengths those of ingest's busy periods by the workload's own clock; at
    the default pace (500 a second: ingest rarely or never gets back to its recv) still one
    finding naming both, GIL starvation where it had no home wait in the window.

The lag of gil_starve.py's messages is taken by running it under a small wrapper (TIMED): it
replaces the script's age reporter and its `os` (for the store's os.write) with ones that note,
on the ingest thread, when each message was due, when ingest got it and when it was stored, and
prints them on SIGUSR1. The workload itself is unchanged.
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, Workload, attach, by_tid
from test_gil import installed_python

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from postgres import Postgres  # noqa: E402

pytestmark = pytest.mark.needs_root

POOL = ROOT / "tests" / "workloads" / "idle_pool.py"
STARVE = ROOT / "tests" / "workloads" / "gil_starve.py"
OBJECTIVE = 0.1  # the agent's default stall objective (model::stretches::STALL_OBJECTIVE_NS)
TOLERANCE = 0.25
BUSY_KINDS = ("stall", "lock_convoy", "saturated_thread")

# gil_starve.py with its own clock on each message: (due, handed to the application, stored,
# written by the feeder), wall clock, noted on the ingest thread; "seen <json>" on SIGUSR1
TIMED = r"""
import json, os, signal, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
sys.argv = sys.argv[1:]
import gil_starve
seen, now = [], [0.0, 0.0, 0.0]

def handed(age):
    t = time.time()
    now[0], now[1] = t - age, t

class _TimedJson:
    def __getattr__(self, name):
        return getattr(json, name)

    def loads(self, line):
        m = json.loads(line)
        now[2] = m.get("wrote", 0.0)
        return m

class _TimedOs:
    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        n = os.write(fd, data)
        seen.append((now[0], now[1], time.time(), now[2]))
        return n

gil_starve.os = _TimedOs()
gil_starve.json = _TimedJson()
gil_starve.age_reporter = lambda args: handed
signal.signal(signal.SIGUSR1, lambda *_: print("seen", __import__("json").dumps(seen), flush=True))
gil_starve.main()
"""


def kinds(report):
    return [f["kind"] for f in report["findings"]]


def window_mono(report):
    """The agent's window on CLOCK_MONOTONIC (its start is wall clock)."""
    start = report["started_unix_s"] - (time.time() - time.monotonic())
    return start, start + report["duration_s"]


# ---------------------------------------------------------------- a pool: idle, or a convoy

def pool_run(mode, duration):
    """idle_pool.py `mode` on 3.12 watched for `duration` s: (report, workers' TIDs, the futex
    words of the executor's queue and of the shared lock, the tasks' own totals over the agent's
    window: tasks, seconds they ran, seconds in lock.acquire())."""
    with Workload(installed_python("3.12"), POOL, mode) as w:
        report, _ = attach(w.pid, duration)
        _, end = window_mono(report)
        stats = []
        while not stats or stats[-1][0] < end + 0.3:
            parts = w.readline(5, "a stats line").split()
            assert parts[0] == "stats", parts
            stats.append(tuple(float(x) for x in parts[1:]))
    start, end = window_mono(report)

    def at(t):  # the totals at monotonic time t, linear between two lines
        before = [s for s in stats if s[0] <= t] or stats[:1]
        after = [s for s in stats if s[0] >= t] or stats[-1:]
        a, b = before[-1], after[0]
        f = 0.0 if b[0] == a[0] else (t - a[0]) / (b[0] - a[0])
        return [x + f * (y - x) for x, y in zip(a[1:], b[1:])]

    assert stats[0][0] <= start + 0.3, (stats[0], start)  # lines from before the window on
    tasks, task_s, lock_s = (y - x for x, y in zip(at(start), at(end)))
    workers = {tid for role, tid in w.tids.items() if role.startswith("worker-")}
    assert len(workers) == 8, w.tids
    words = {l.split()[1]: int(l.split()[2], 16) for l in w.lines if l.startswith("word ")}
    assert set(words) == {"queue", "lock"}, w.lines
    return report, workers, words, {"tasks": tasks, "task_s": task_s, "lock_s": lock_s}


def block(word):
    """A futex word's 8-byte block: the wait a home is (model::stretches::WORD_BLOCK)."""
    return word & ~7


def homes_of(report, workers):
    """{worker TID: its home as the JSON has it ("futex 0x…" or the syscall), None without one}."""
    threads = by_tid(report)
    out = {}
    for tid in sorted(workers):
        s = threads[tid].get("stretches")
        out[tid] = None if not s else (f"futex {s['futex']}" if s.get("futex") else s["home"])
    return out


@pytest.mark.timeout(60)
def test_a_mostly_idle_pool_waiting_on_its_queue_is_idle_not_a_convoy():
    """8 workers of a ThreadPoolExecutor, 50 tasks a second of ~1 ms: the pool is busy ~1% of
    its time. All 8 wait on one futex word, the executor's queue (the workload gives its
    address), woken by the producer and by one another: more than 3 threads waiting on one
    word for more than half the window, the shape of a convoy, but it is where they wait for
    work. The verdict is healthy, the workers idle, no convoy, stall or saturation is said, and
    a worker that left its queue in the window has it as its home."""
    report, workers, words, truth = pool_run("idle", 5.0)
    window = report["duration_s"]
    # the ground truth: ~50 tasks a second ran, and the pool was busy ~1% of its time
    assert truth["tasks"] >= 0.7 * 50 * window, truth
    assert truth["task_s"] <= 0.05 * 8 * window and truth["lock_s"] == 0.0, truth
    threads = by_tid(report)
    for tid in workers:
        assert threads[tid]["seconds"]["futex_wait"] >= 0.8 * threads[tid]["existed_s"], threads[tid]
    # the agent saw them wait together on the queue's word: the convoy's shape
    queue = next((f for f in report["top_futexes"] if block(int(f["addr"], 16)) == block(words["queue"])), None)
    assert queue is not None, (hex(words["queue"]), report["top_futexes"])
    assert len(set(queue["waiters"]) & workers) >= 6 and queue["wait_s"] >= 0.5 * window, queue
    # and said it is idle, not a convoy
    verdict = report["verdict"]
    assert not any(k in BUSY_KINDS for k in kinds(report)), verdict
    assert not any(v.startswith("lock convoy") for v in verdict), verdict
    assert verdict[0].startswith("healthy: "), verdict
    # the workers are idle: each one's own finding (if any) says so, and the idle line counts them
    for f in report["findings"]:
        if f.get("thread", {}).get("tid") in workers:
            assert f["kind"] == "blocked" and f.get("idle") is True, f
    idle = next((v for v in verdict if v.startswith("idle: ")), None)
    assert idle is not None and int(idle.split()[1]) >= 8, verdict
    # why: the queue is their home (a worker that never left it in the window closed no stretch)
    homes = homes_of(report, workers)
    home = f"futex {hex(block(words['queue']))}"
    assert all(h in (home, None) for h in homes.values()) and list(homes.values()).count(home) >= 4, (home, homes)


@pytest.mark.timeout(60)
def test_the_same_pool_handed_a_lock_mid_task_is_a_convoy():
    """The contrast to the idle pool (same executor, same 8 workers, same queue): bursts of 8
    tasks every 200 ms, each holding one shared threading.Lock for 10 ms in the middle of its
    work. The tasks' own clocks put more than half the window of waiting into lock.acquire();
    the first finding is the convoy on that lock's word (not the queue's, the workload gives
    both), with the workers as its waiters, and their home is still the queue. (test_blame.py's
    convoy tests use stack_convoy.c: threads whose only wait is the lock, no queue.)"""
    report, workers, words, truth = pool_run("contend", 5.0)
    window = report["duration_s"]
    # the ground truth: 40 tasks a second, and their waits in lock.acquire() add up to more
    # than half the window (the convoy's bar, model::blame::CONVOY_SHARE)
    assert truth["tasks"] >= 0.7 * 40 * window, truth
    assert truth["lock_s"] >= 0.5 * window, truth
    verdict = report["verdict"]
    first = report["findings"][0]
    assert first["kind"] == "lock_convoy", verdict
    assert block(int(first["futex"], 16)) == block(words["lock"]), (first["futex"], {k: hex(v) for k, v in words.items()}, verdict)
    waiters = set(first["waiters"])
    assert waiters <= workers and len(waiters) >= 6, (first["waiters"], workers)
    # its wait is the tasks' own time in lock.acquire() (which also holds getting the GIL back)
    assert 0.6 * truth["lock_s"] <= first["wait_s"] <= 1.4 * truth["lock_s"], (first["wait_s"], truth)
    assert verdict[0].startswith("lock convoy on "), verdict
    # one convoy: the queue's word, where the same workers wait for work, is none
    convoys = [f for f in report["findings"] if f["kind"] == "lock_convoy"]
    assert len(convoys) == 1, [(f["futex"], f["waiters"], f["wait_s"]) for f in convoys]
    assert "stall" not in kinds(report), verdict
    # the queue stays their home: each leaves it ~5 times a second
    homes = homes_of(report, workers)
    assert set(homes.values()) == {f"futex {hex(block(words['queue']))}"}, ({k: hex(v) for k, v in words.items()}, homes)


# ---------------------------------------------------------------- gil_starve.py, the story

def starve_run(version, duration, *args, env=None):
    """gil_starve.py same `args` under TIMED watched for `duration` s: (report, TIDs, every
    message stored so far as (due, handed, stored), wall clock)."""
    with Workload(installed_python(version), "-c", TIMED, STARVE, "same", *args, env=env, timeout=30) as w:
        report, _ = attach(w.pid, duration)
        os.kill(w.pid, signal.SIGUSR1)
        line = w.out.until(lambda l: l.startswith("seen "), 15, "its messages' times")[-1]
    return report, w.tids, [tuple(m) for m in json.loads(line[len("seen "):])]


def within(report, messages):
    """The messages due and stored inside the agent's window."""
    start = report["started_unix_s"]
    end = start + report["duration_s"]
    return [m for m in messages if m[0] >= start and m[2] <= end]


def busy_periods(messages):
    """Ingest's stretches by the workload's own clock: from a message's arrival (when the feeder
    wrote it: on a loaded machine its sleep overshoots, so this may be well after it was due)
    until ingest stored it and went back to its recv; a message that came before it got back is
    handled in the same stretch."""
    periods = []
    for _, _, stored, wrote in sorted(messages, key=lambda m: m[3]):
        if periods and wrote <= periods[-1][1]:
            periods[-1][1] = max(periods[-1][1], stored)
        else:
            periods.append([wrote, stored])
    return sorted(e - s for s, e in periods)


def gil_lines_about(verdict, name, tid):
    """The verdict's own GIL lines (starvation, wait) of thread `name` (`tid`)."""
    return [v for v in verdict if v.startswith("GIL") and f"thread {name} ({tid})" in v]


@pytest.mark.timeout(60)
def test_a_busy_thread_nothing_waits_on_is_not_head_of_line():
    """Free-threaded 3.14t with the GIL off: processor runs json.dumps without a stop on one
    CPU, and nothing waits on it; ingest, fed 50 messages a second, handles each within a few
    milliseconds. Healthy: no saturated thread, no stall."""
    report, tids, messages = starve_run("3.14t", 6.0, "--rate", "50", env={"PYTHON_GIL": "0"})
    messages = within(report, messages)
    p = report["python"]
    assert p["free_threaded"] is True and p["gil"] == "disabled", p
    window = report["duration_s"]
    # the ground truth: ingest kept up, every message handled within 25 ms of being due
    assert len(messages) >= 0.8 * 50 * window, len(messages)
    lags = sorted(h - d for d, h, _, _ in messages)
    assert lags[-1] < 0.025, (lags[len(lags) // 2], lags[-1])
    threads = by_tid(report)
    processor, ingest = threads[tids["processor"]], threads[tids["ingest"]]
    assert processor["seconds"]["running"] >= 0.5 * processor["existed_s"], processor  # it is busy
    assert ingest.get("stretches") and ingest["stretches"]["stalls"] == 0, ingest.get("stretches")
    verdict = report["verdict"]
    assert "saturated_thread" not in kinds(report) and "stall" not in kinds(report), verdict
    assert verdict[0].startswith("healthy: "), verdict


STORY = ["3.9", "3.11", "3.12", "3.14"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("version", STORY)
def test_the_story_at_a_pace_ingest_keeps_up_with_is_one_stall_naming_the_gil_holder(version):
    """gil_starve.py same, 2 messages a second: ingest goes back to its recv between messages,
    and each message waits for the GIL behind processor's json.dumps (one C call of 100 ms or
    more). The first finding is ingest's stall, and it names the GIL's holder and json.dumps;
    its lengths are ingest's busy periods by the workload's own clock; there is no GIL line of
    ingest's own beside it (the GIL wait is folded into the stall). (2 a second, not 20: each
    message costs ingest two GIL waits, after its recv and after its os.write, and one
    json.dumps takes 200-450 ms on a loaded 2-CPU machine: at 20 it never gets back to its recv.
    Each json.dumps is made to take about 250 ms: a message waits what is left of the one under
    way, and at ~100 ms, as on a fast idle machine, most of those waits are under the objective;
    at 450 ms, as on a slow loaded one, ingest starves: when its own clock says it was busy half
    the window or more, GIL starvation naming the same holder and code is taken as the first line.)"""
    report, tids, messages = starve_run(version, 8.0, "--rate", "2", "--hold", "0.25")
    messages = within(report, messages)
    ingest, processor = tids["ingest"], tids["processor"]
    # the ground truth: ingest's stretches from message to back at recv, most over the objective
    periods = busy_periods(messages)
    long = [p for p in periods if p >= OBJECTIVE]
    # (at least 3: enough for a middle and a longest; a run of short holds gives fewer)
    assert len(messages) >= 10 and len(long) >= 3, (len(messages), periods)
    truth = {"p50": long[(len(long) - 1) // 2], "max": long[-1], "count": len(long)}
    # the agent found ingest's home (its recv) and went by it
    s = by_tid(report)[ingest].get("stretches")
    assert s and s["home"].startswith("recv"), s
    verdict, first = report["verdict"], report["findings"][0]
    # where json.dumps ran so slow (a loaded machine) that ingest was busy most of the window by
    # its own clock, it lost most of it to the GIL: GIL starvation, naming the same holder and
    # code, is then as right as the stall (and outranks it when the GIL took half its time)
    if sum(periods) >= 0.5 * report["duration_s"] and first["kind"] == "gil_starvation":
        assert first["thread"]["tid"] == ingest and first["holder"]["tid"] == processor, (verdict, first)
        assert verdict[0].startswith("GIL starvation") and f"ingest ({ingest})" in verdict[0], verdict
        assert f"held by processor ({processor})" in verdict[0] and "json.dumps" in verdict[0], verdict[0]
        assert not gil_lines_about(verdict[1:], "ingest", ingest), verdict
        return
    # (on a machine loaded by other processes, processor's own run-queue wait may outrank it:
    # its seconds are in the message)
    assert first["kind"] == "stall" and first["thread"]["tid"] == ingest, (verdict, kinds(report), by_tid(report)[processor]["seconds"], periods)
    # one finding names both: the GIL's holder and the code it held it in
    assert verdict[0].startswith(f"stall: ingest ({ingest})"), verdict
    assert f"behind processor ({processor})" in verdict[0] and "json.dumps" in verdict[0], verdict[0]
    gil = next(p for p in first["parts"] if p["state"] == "gil_wait")
    assert gil["behind"]["tid"] == processor and gil["seconds"] >= 0.5 * first["stall_s"], first["parts"]
    assert first["code"]["culprit"]["thread"]["tid"] == processor and "json.dumps" in first["code"]["culprit"]["site"], first["code"]
    # its numbers are the workload's
    got = {k: first[k] for k in ("p50_s", "max_s", "stalls", "stall_s", "stretches")}
    assert OBJECTIVE <= first["p50_s"] <= first["max_s"] <= report["duration_s"], got
    # (its median among the workload's middle half: of a few stretches near the objective, one
    # the workload's clock puts just over it may be just under it by the agent's)
    middle = (long[len(long) // 4] * (1 - TOLERANCE), long[(3 * len(long)) // 4] * (1 + TOLERANCE))
    assert middle[0] <= first["p50_s"] <= middle[1], (got, middle, periods)
    assert abs(first["max_s"] - truth["max"]) <= TOLERANCE * truth["max"], (got, truth, periods)
    # no separate line of ingest's GIL wait or starvation: it is the stall's
    assert not gil_lines_about(verdict, "ingest", ingest), verdict
    assert not any(k in ("lock_convoy", "saturated_thread") for k in kinds(report)), verdict


@pytest.mark.timeout(60)
@pytest.mark.parametrize("version", STORY)
def test_the_story_at_its_default_pace_is_one_finding_naming_the_gil_holder(version):
    """gil_starve.py same at its default 500 messages a second: ingest handles messages in
    bursts while it has the GIL, and what it handles has waited for the GIL. Where it never got
    back to its recv (no home wait in the window) that is GIL starvation; where it did now and
    then, between long stretches, it is its stall. Either way one finding, first, names processor
    and json.dumps, and there is no second line of ingest's GIL wait."""
    report, tids, messages = starve_run(version, 5.0)
    ingest, processor = tids["ingest"], tids["processor"]
    # the ground truth: what it handled in the window (about all that arrived, in bursts while
    # it has the GIL) was old when it got it: a median lag over the objective
    start = report["started_unix_s"]
    end = start + report["duration_s"]
    lags = sorted(h - d for d, h, _, _ in messages if start <= h <= end)
    assert len(lags) >= 100, len(lags)
    assert lags[len(lags) // 2] >= OBJECTIVE, (lags[len(lags) // 2], lags[-1])
    s = by_tid(report)[ingest].get("stretches")
    home = bool(s and s["stalls"] >= 2)
    verdict, first = report["verdict"], report["findings"][0]
    assert first["thread"]["tid"] == ingest, (verdict, kinds(report))
    if home:
        assert first["kind"] == "stall", (s, verdict)
        assert verdict[0].startswith(f"stall: ingest ({ingest})") and f"behind processor ({processor})" in verdict[0], verdict
    else:
        assert first["kind"] == "gil_starvation" and first["holder"]["tid"] == processor, (s, first)
        assert verdict[0].startswith("GIL starvation") and f"ingest ({ingest})" in verdict[0], verdict
        assert f"held by processor ({processor})" in verdict[0], verdict[0]
    assert "json.dumps" in verdict[0], verdict[0]
    assert not gil_lines_about(verdict[1:], "ingest", ingest), verdict
    assert [k for k in kinds(report) if k in ("stall", "gil_starvation")] == [first["kind"]], kinds(report)


# --- a synchronous database call on an event loop (issue 55): the stall names the handler ---------

DB_HANDLER = ROOT / "tests" / "workloads" / "db_handler.py"
DB_PINS = ["fastapi==0.165.0", "uvicorn==0.55.0", "psycopg2-binary==2.9.13", "httpx==0.28.1"]


def db_python():
    """pyenv 3.12 in a venv of its own with DB_PINS installed (from the machine's package index)."""
    import subprocess
    from conftest import BUILD
    venv = BUILD / "db-handler-3.12"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([installed_python("3.12"), "-m", "venv", str(venv)], check=True, timeout=300)
    if subprocess.run([str(py), "-c", "import fastapi, uvicorn, psycopg2, httpx"], capture_output=True, timeout=60).returncode:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *DB_PINS], check=True, timeout=900)
    return py


def test_a_sync_database_call_on_the_event_loop_is_a_stall_naming_the_handler(tmp_path):
    """FastAPI's loop runs `fetch_daily_report`, a psycopg2 query the server takes 150 ms for,
    every 0.5 s: the first line is the loop's stall, its lengths those of the pings that waited
    behind it by the client's own clock, and it names the handler where the loop waited (not the
    loop's own poll, where it waits the rest of the time). The control, pings alone, is quiet."""
    import subprocess
    from conftest import free_port
    py, pg = db_python(), Postgres()
    try:
        port = free_port()
        with Workload(py, DB_HANDLER, pg.sock, pg.port, port, timeout=60) as w:
            def measure(report):
                client = subprocess.Popen([str(py), str(DB_HANDLER), "client", str(port), "7", *(["report"] if report else [])],
                                          stdout=subprocess.PIPE, text=True)
                time.sleep(1.0)
                r, _ = attach(w.pid, 5.0)
                out, _ = client.communicate(timeout=60)
                return r, json.loads(out.strip().splitlines()[-1])
            control, quiet = measure(False)
            report, pings = measure(True)
    finally:
        pg.close()
    first = report["verdict"][0]
    assert first.startswith(f"stall: MainThread ({w.tids['loop']}), an event loop"), report["verdict"]
    # (its qualified name: the handler is defined inside service())
    assert "Code: MainThread" in first and "fetch_daily_report (db_handler.py:" in first.split("Code:")[1], first
    # the longest stall is the longest a ping waited (the client's clock), within 25%
    stall = next(f for f in report["findings"] if f["kind"] == "stall")
    assert abs(stall["max_s"] - pings["max"]) <= TOLERANCE * pings["max"], (stall["max_s"], pings)
    assert pings["max"] >= 0.14 and quiet["max"] < 0.1, (pings, quiet)
    assert not any(v.startswith("stall") for v in control["verdict"]), control["verdict"]
