"""Python verdicts an expert would sign (issue 18), on real interpreters: a causal chain
(ingest waits on a lock whose holder waits for the GIL) named as one finding with the
lock waiter first; starvation said, as likely, with no age source. Each with the
workload's own ground truth and a control that must stay quiet."""
import json
import re
import time

import pytest

from conftest import ROOT, Workload, attach, by_tid, share
from test_gil import installed_python

pytestmark = pytest.mark.needs_root

CHAIN = ROOT / "tests" / "workloads" / "gil_chain.py"
VERSIONS = ["3.11", "3.12", "3.14"]


def lockwait_attach(w, duration):
    """`attach` for `duration` s, and ingest's seconds inside batch_lock.acquire() per second
    over the same time, by the workload's own clock (the ground truth; it includes getting the
    GIL back): from its lines stamped with CLOCK_MONOTONIC, the last before the window and the
    first after it."""
    start = time.monotonic()
    report, _ = attach(w.pid, duration)
    end = time.monotonic()
    lines = []
    while not lines or lines[-1][1] < end:
        parts = w.readline(5, "a lockwait line").split()
        assert parts[0] == "lockwait", parts
        lines.append((float(parts[1]), float(parts[3])))
    before = max((l for l in lines if l[1] <= start + 0.5), key=lambda l: l[1], default=lines[0])
    after = lines[-1]
    return report, (after[0] - before[0]) / (after[1] - before[1])


@pytest.mark.parametrize("version", VERSIONS)
def test_a_lock_wait_behind_a_gil_waiting_holder_is_one_chain(version):
    """ingest waits on batch_lock while worker holds it, and worker waits for the GIL
    behind processor's json.dumps: the first finding is the chain, ingest first, worker as
    the lock's holder, processor as the GIL's, with no age source (said as likely)."""
    with Workload(installed_python(version), CHAIN, "same") as w:
        report, truth = lockwait_attach(w, 5.0)
    tids = w.tids
    threads = by_tid(report)
    ingest, worker = threads[tids["ingest"]], threads[tids["worker"]]
    # the ground truth: ingest spends a large share of its time in acquire(), and the probes
    # see that wait as futex wait ended by worker
    by_worker = ingest["futex_wait_by_waker"].get(str(tids["worker"]), 0.0)
    assert truth >= 0.2, truth
    assert 0.5 * truth <= by_worker / ingest["existed_s"] <= 1.25 * truth, (truth, ingest)
    assert share(worker, "gil_wait") >= 0.3, worker
    first = report["findings"][0]
    assert first["kind"] == "gil_starvation" and first["thread"]["tid"] == tids["ingest"], first
    assert first["state"] == "futex_wait" and first["age_confirmed"] is False, first
    link = first["lock_holder"]
    assert link["gil_wait"]["thread"]["tid"] == tids["worker"] and link["share"] >= 0.8, link
    assert first["holder"]["tid"] == tids["processor"] and first["holder"]["share"] >= 0.8, first
    line = report["verdict"][0]
    assert line.startswith(f"GIL starvation (likely: no age source): thread ingest ({tids['ingest']}) lost "), report["verdict"]
    assert f"released by worker ({tids['worker']})" in line and f"which itself lost" in line, line
    assert f"held by processor ({tids['processor']})" in line and "Move processor to its own process" in line, line
    # the lock holder's own GIL-wait line would repeat the chain
    assert not any(v.startswith(f"GIL wait: thread worker ({tids['worker']})") for v in report["verdict"]), report["verdict"]


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_the_same_lock_without_the_gil_holder_is_no_chain(version):
    """The control: processor in its own process. worker still holds batch_lock for its own
    work, and ingest still waits on it, but nobody waits for the GIL: no starvation, no chain."""
    with Workload(installed_python(version), CHAIN, "separate") as w:
        report, truth = lockwait_attach(w, 4.0)
    ingest = by_tid(report)[w.tids["ingest"]]
    assert truth >= 0.1 and ingest["seconds"]["futex_wait"] >= 0.1 * ingest["existed_s"], (truth, ingest)
    assert not any(f["kind"] in ("gil_starvation", "gil_wait") for f in report["findings"]), report["findings"]
    # (the verdict may have a run-queue line: processor's process takes a CPU of the two)
    assert not any(v.startswith("GIL") for v in report["verdict"]), report["verdict"]


OLD_GIL = ROOT / "tests" / "workloads" / "old_gil.py"


def old_python(version):
    """pyenv's CPython `version` ("2.7", "3.6", "3.7"): interpreters whose GIL is not measured."""
    import glob
    from test_gil import pyenv_root
    found = sorted(glob.glob(str(pyenv_root() / "versions" / f"{version}.*" / "bin" / "python")))
    if not found:
        pytest.fail(f"pyenv {version} is not installed here")
    return found[-1]


@pytest.mark.parametrize("version", ["2.7", "3.6", "3.7"])
def test_an_unmeasured_interpreters_gil_is_never_a_lock_convoy(version):
    """Four threads of pure Python on CPython 2.7, 3.6 or 3.7 take turns on the GIL, which
    waitmeter does not measure there. The interpreter is recognised (its version in the
    `python` block, one warning naming the versions that are measured), and their waits on
    the GIL's futex words are said as the GIL's, never as a lock convoy with lock advice.
    The control: one thread, nothing waits."""
    with Workload(old_python(version), OLD_GIL, 4) as w:
        report, cp = attach(w.pid, 3.0)
    p = report["python"]
    assert p is not None and p["version"].startswith(version + ".") and p["gil"] == "unknown" and p["gil_probe"] == "none", p
    warnings = [l for l in cp.stderr.splitlines() if "does not measure" in l]
    assert len(warnings) == 1 and f"CPython {p['version']}" in warnings[0] and "3.8 and later" in warnings[0], cp.stderr
    kinds = [f["kind"] for f in report["findings"]]
    assert "lock_convoy" not in kinds and not any(v.startswith("lock convoy") for v in report["verdict"]), report["verdict"]
    gil = next(f for f in report["findings"] if f["kind"] == "unmeasured_gil")
    spinners = {w.tids[f"spin-{i}"] for i in range(4)}
    # the first four named, most wait first: the spinners (the main thread's sleeps ask for the GIL too)
    assert len(spinners & {t["tid"] for t in gil["threads"]}) >= 3, (w.tids, gil)
    assert gil["count"] >= 4 and gil["version"] == p["version"], gil
    # the ground truth: the spinners' futex waits are the waits the finding adds up
    spin_wait = sum(by_tid(report)[t]["seconds"]["futex_wait"] for t in spinners)
    assert 0.9 * spin_wait <= gil["wait_s"] <= spin_wait + 3.0, (spin_wait, gil)
    assert any(v.startswith(f"GIL (not measured): {gil['count']} threads") for v in report["verdict"]), report["verdict"]
    assert not any(v.startswith("thread ") and "blocked on a lock" in v for v in report["verdict"]), report["verdict"]
    with Workload(old_python(version), OLD_GIL, 1) as w:
        quiet, _ = attach(w.pid, 2.0)
    assert not any(f["kind"] in ("unmeasured_gil", "lock_convoy") for f in quiet["findings"]), quiet["verdict"]


PER_REQUEST = ROOT / "tests" / "workloads" / "thread_per_request.py"


def served(w):
    parts = w.readline(5, "a served line").split()
    assert parts[0] == "served", parts
    return int(parts[1])


@pytest.mark.parametrize("version", ["3.12"])
def test_short_lived_threads_are_one_row_per_role_with_their_count(version):
    """A thread-per-request HTTP server (ThreadingHTTPServer) answers hundreds of requests a
    second, each on a thread of its own: the report has a row per role, the request threads
    summed in one with their count (the server's own count of requests is the ground truth),
    and the JSON stays small; --each-thread gives the row per thread back."""
    import subprocess
    from conftest import WAITMETER
    with Workload(installed_python(version), PER_REQUEST) as w:
        report, _ = attach(w.pid, 4.0)
        # the server's rate (its lines are read in order: two in a row a second apart)
        first = served(w)
        during = 4 * (served(w) - first)
        each, cp = attach(w.pid, 2.0, "--each-thread")
        text = subprocess.run([str(WAITMETER), "attach", "--pid", str(w.pid), "--duration", "2"],
                              capture_output=True, text=True, timeout=60).stdout
    assert during >= 200, during
    folded = [t for t in report["threads"] if t.get("folded_threads")]
    assert len(folded) == 1 and len(report["threads"]) <= 8, [(t["tid"], t["name"], t.get("folded_threads")) for t in report["threads"]]
    rows = folded[0]
    assert 0.5 * during <= rows["folded_threads"] <= 1.5 * during, (rows["folded_threads"], during)
    assert rows["exited"] is True and rows["existed_s"] > 0, rows
    # every thread's time is in the report once: the folded row's seconds add up to its existence
    assert abs(sum(rows["seconds"].values()) - rows["existed_s"]) <= 0.01 * rows["existed_s"] + 1e-6, rows
    # --each-thread: a row per request thread, several times the size
    singles = [t for t in each["threads"] if t["exited"]]
    assert len(singles) >= 0.25 * during and not any(t.get("folded_threads") for t in each["threads"]), len(singles)
    assert len(json.dumps(report)) * 3 < len(json.dumps(each)) * 2 or len(json.dumps(report)) < 100_000, (len(json.dumps(report)), len(json.dumps(each)))
    # the table names the folded row by its count
    assert re.search(r"^\s+\d+\s+\d+× \S+", text, re.M), text
    assert len([l for l in text.splitlines() if re.match(r"\s+\d+\s{2}\S", l)]) <= 8, text


FASTAPI_WS = ROOT / "tests" / "workloads" / "fastapi_ws.py"
# a FastAPI whose Starlette TestClient busy-polls its websocket receive (Starlette <= 0.36), and
# a current one that waits on a memory stream (the control): exact versions, from PyPI
STARLETTE_036 = ["fastapi==0.110.0", "starlette==0.36.3", "httpx==0.27.2", "anyio==4.16.0"]
STARLETTE_NOW = ["fastapi==0.165.0", "starlette==1.10.0", "httpx==0.28.1", "anyio==4.16.0"]


def fastapi_python(version, pins):
    """pyenv `version` in a venv of its own with `pins` installed."""
    import subprocess
    from conftest import BUILD
    venv = BUILD / f"fastapi-{version}-{pins[1].replace('==', '-')}"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([installed_python(version), "-m", "venv", str(venv)], check=True, timeout=300)
    check = "import fastapi, starlette; assert starlette.__version__ == %r" % pins[1].split("==")[1]
    if subprocess.run([str(py), "-c", check], capture_output=True, timeout=60).returncode != 0:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *pins], check=True, timeout=900)
    return py


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_a_busy_polling_testclient_is_gil_ping_pong_and_a_current_one_is_quiet(version):
    """FastAPI under Starlette 0.36's TestClient with three websocket sessions: each session's
    portal thread busy-polls (`await anyio.sleep(0)` until the client's next message) and
    takes the GIL tens of thousands of times a second. The verdict says GIL ping-pong, names
    the three, and does not call them threads that had work. A current Starlette (1.10) is the
    control: its portal threads sleep, and nothing is flagged."""
    with Workload(fastapi_python(version, STARLETTE_036), FASTAPI_WS, 3, timeout=60) as w:
        report, _ = attach(w.pid, 4.0)
    portals = {w.tids[f"portal-{i}"] for i in range(3)}
    threads = by_tid(report)
    # the ground truth of busy-polling: each portal was on a CPU or queued for one (two CPUs,
    # shared with whatever else the machine runs) a large share of its time and went to wait
    # for the GIL over 1,000 times a second for holds of microseconds
    for tid in portals:
        t = threads[tid]
        assert share(t, "running") + share(t, "runqueue") >= 0.2 and t["gil_waits"] >= 1000 * t["existed_s"], t
        # holders resolved at the hand-off (point 4): 59-68% had none before, 0-1% measured
        by = t["gil_wait_by_holder"]
        assert by.get("unknown", 0) <= 0.1 * sum(by.values()), by
    pong = next(f for f in report["findings"] if f["kind"] == "gil_ping_pong")
    assert {t["tid"] for t in pong["threads"]} == portals and pong["count"] == 3, pong
    assert pong["handoffs_per_s"] >= 3000 and pong["mean_hold_s"] < 0.001, pong
    assert any(v.startswith("GIL ping-pong: 3 threads") for v in report["verdict"]), report["verdict"]
    assert not any("had work and could not do it" in v for v in report["verdict"]), report["verdict"]
    assert not any(v.startswith("GIL starvation") for v in report["verdict"]), report["verdict"]
    with Workload(fastapi_python(version, STARLETTE_NOW), FASTAPI_WS, 3, timeout=60) as w:
        quiet, _ = attach(w.pid, 4.0)
    assert not any(f["kind"] in ("gil_ping_pong", "gil_wait", "gil_starvation") for f in quiet["findings"]), quiet["verdict"]
    assert quiet["verdict"][0].startswith("healthy:"), quiet["verdict"]


HANDOFF = ROOT / "tests" / "workloads" / "gil_handoff.py"


@pytest.mark.parametrize("version", ["3.9", "3.11", "3.12", "3.14"])
def test_holders_at_fast_hand_offs_are_resolved(version):
    """Two pollers hand the GIL to each other thousands of times a second (a CPU hog beside
    them): a poller often sleeps on the GIL while it is in flight (nobody holds it, or the
    taker has not written last_holder yet). Ground truth: the main thread waits in join(),
    never for the GIL, so each poller's GIL wait can only be behind the other one. Before
    the hand-off was resolved, 40-71% of it had no holder and up to 7% was charged to the
    waiter itself. 3.9 names holders by pthread_t, 3.11+ by native thread id. The control,
    one poller alone, has no GIL wait to charge."""
    with Workload(installed_python(version), HANDOFF, 2, 1, timeout=60) as w:
        report, _ = attach(w.pid, 3.0)
    threads = by_tid(report)
    for me, other in ((0, 1), (1, 0)):
        t = threads[w.tids[f"poller-{me}"]]
        by = t["gil_wait_by_holder"]
        total = sum(by.values())
        assert t["gil_waits"] >= 1000 * t["existed_s"] and total > 0.05, t
        assert by.get(str(w.tids[f"poller-{other}"]), 0) >= 0.9 * total, (me, by)
        assert by.get("unknown", 0) <= 0.05 * total, (me, by)
        assert by.get(str(w.tids[f"poller-{me}"]), 0) <= 0.01 * total, (me, by)
    assert not threads[w.tids["MainThread"]]["gil_wait_by_holder"], threads[w.tids["MainThread"]]
    with Workload(installed_python(version), HANDOFF, 1, 1, timeout=60) as w:
        alone, _ = attach(w.pid, 2.0)
    for t in alone["threads"]:
        assert t["seconds"]["gil_wait"] < 0.005 and not t["gil_wait_by_holder"], t


POOL = ROOT / "tests" / "workloads" / "mp_pool.py"


def attach_family(w, duration):
    """`attach --children` of the pool's parent: its report (first) and its children's, and
    the workers' own off-CPU share over the window (their clock, the ground truth)."""
    import subprocess
    from conftest import WAITMETER
    cmd = [str(WAITMETER), "attach", "--pid", str(w.pid), "--children", "--duration", str(duration), "--output", "json"]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30)
    assert cp.returncode == 0, cp.stderr
    reports = [json.loads(line) for line in cp.stdout.splitlines() if line.strip()]
    # the workload's lines of the seconds after "ready": the window, give or take the agent's start
    shares = []
    while len(shares) < int(duration):
        line = w.readline(5, "an offcpu line")
        if line.startswith("offcpu "):
            shares.append(float(line.split()[1]))
    return reports, shares


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.14"])
def test_a_pool_larger_than_its_cpus_is_oversubscribed(version):
    """multiprocessing.Pool(4) on this machine's 2 CPUs, and Pool(2) pinned to one CPU: the
    workers wait in the run queue behind each other, which only their family's numbers show.
    `attach --children` of the parent finds the workers (3.14 starts them from its forkserver,
    grandchildren) and its first line says "4 processes on 2 CPUs: 2.0× oversubscribed"; the
    run-queue share agrees with the workers' own clocks. The control, a pool as large as its
    CPUs, is not oversubscribed."""
    with Workload(installed_python(version), POOL, 4, timeout=60) as w:
        cpus = int(w.lines[0].split()[1])
        workers = {w.tids[f"worker-{i}"] for i in range(4)}
        reports, truth = attach_family(w, 3.0)
    assert cpus == 2, w.lines
    root = reports[0]
    assert root["pid"] == w.pid and {r["pid"] for r in reports} >= workers | {w.pid}, [r["pid"] for r in reports]
    over = root["findings"][0]
    assert over["kind"] == "oversubscribed", root["verdict"]
    assert root["verdict"][0].startswith("oversubscribed: 4 processes on 2 CPUs want "), root["verdict"]
    assert {p["pid"] for p in over["processes"]} == workers and over["cpus"] == 2, over
    assert 1.6 <= over["demand_cores"] / over["cpus"] <= 2.2, over
    # the workers' own clocks: the share of their tasks' wall time off the CPU
    measured = sum(truth) / len(truth)
    assert abs(over["runqueue_share"] - measured) <= 0.15 and over["behind_family_share"] >= 0.8, (over, truth)
    members = {m["pid"]: m for m in root["family"]["members"]}
    assert root["family"]["members"][0]["pid"] == w.pid and workers <= set(members), root["family"]

    # two workers pinned to one CPU: the limit is the affinity's, and the pool is 2× too big
    with Workload(installed_python(version), POOL, 2, "0", timeout=60) as w:
        reports, _ = attach_family(w, 3.0)
    pinned = reports[0]["findings"][0]
    assert pinned["kind"] == "oversubscribed" and pinned["cpus"] == 1 and pinned["count"] == 2, reports[0]["verdict"]
    assert reports[0]["verdict"][0].startswith("oversubscribed: 2 processes on 1 CPU want "), reports[0]["verdict"]

    # the control: a pool as large as its CPUs
    with Workload(installed_python(version), POOL, 2, timeout=60) as w:
        reports, _ = attach_family(w, 3.0)
    assert len(reports) >= 3, [r["pid"] for r in reports]
    assert not any(f["kind"] == "oversubscribed" for r in reports for f in r["findings"]), reports[0]["verdict"]
    # the parent and its workers hand tasks and results to each other through pipes: they wait
    # for work, not on each other
    assert not any(f["kind"] == "waiting_on_each_other" for r in reports for f in r["findings"]), reports[0]["verdict"]
