"""Wait stacks (issue 14): the code on both sides of a wait, in the verdict,
the JSON `wait_sites` and the pprof wait profile, on real interpreters and a
real C program, read by the real pprof consumer (`go tool pprof`)."""
import gzip
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, ROOT, Workload, attach, by_tid
from test_gil import built_python, pyenv_python, stripped_env

pytestmark = pytest.mark.needs_root

HOLDER = ROOT / "tests" / "workloads" / "gil_holder.py"
STARVE = ROOT / "tests" / "workloads" / "gil_starve.py"
CONVOY = ROOT / "tests" / "workloads" / "stack_convoy.c"
GO = shutil.which("go") or "/usr/local/go/bin/go"

INTERPRETERS = {
    "3.9": lambda: pyenv_python(9),
    "3.11": lambda: pyenv_python(11),
    "3.12": lambda: pyenv_python(12),
    "3.13": lambda: pyenv_python(13),
    "3.14": lambda: built_python("3.14"),
    "3.15": lambda: built_python("3.15"),
}


def interpreter(name):
    py = INTERPRETERS[name]()
    if not py:
        pytest.fail(f"Python {name} is not installed here (make setup builds it)")
    return py


def sites(report, tid, state, role):
    return [s for s in report["wait_sites"] if s["tid"] == tid and s["state"] == state and s["role"] == role]


def share_of(entries, pred):
    total = sum(s["seconds"] for s in entries)
    return sum(s["seconds"] for s in entries if pred(s["site"])) / total if total else 0.0


@pytest.mark.parametrize("name", list(INTERPRETERS))
def test_holder_and_victim_stacks_match_the_known_shares(name):
    """processor spends 75% of its time in json.dumps and 25% in spin(); ingest
    waits for the GIL behind it in blocking_call()."""
    with Workload(interpreter(name), HOLDER, "same") as w:
        report, _ = attach(w.pid, 3.0)
    ingest = by_tid(report)[w.tids["ingest"]]
    gil_wait = ingest["seconds"]["gil_wait"]
    assert gil_wait >= 0.5 * ingest["existed_s"], ingest
    holder = sites(report, w.tids["ingest"], "gil_wait", "holder")
    behind = sum(s["seconds"] for s in holder)
    assert behind >= 0.5 * gil_wait, (behind, gil_wait, holder)
    assert all(s["blamed"] == w.tids["processor"] for s in holder if s["seconds"] > 0.05 * behind), holder
    dumps = share_of(holder, lambda s: "json.dumps" in s)
    spin = share_of(holder, lambda s: s.startswith("spin ("))
    assert abs(dumps - 0.75) <= 0.10 and abs(spin - 0.25) <= 0.10, (dumps, spin, holder)
    victim = sites(report, w.tids["ingest"], "gil_wait", "victim")
    assert share_of(victim, lambda s: s.startswith("blocking_call (gil_holder.py:")) >= 0.90, victim


@pytest.mark.parametrize("name", ["3.11", "3.14"])
def test_the_control_has_no_holder_stacks(name):
    """processor in its own process: ingest has nobody to wait behind."""
    with Workload(interpreter(name), HOLDER, "separate") as w:
        report, _ = attach(w.pid, 2.0)
    holder = sites(report, w.tids["ingest"], "gil_wait", "holder")
    assert sum(s["seconds"] for s in holder) < 0.05 * 2.0, holder
    assert not any("json.dumps" in v for v in report["verdict"]), report["verdict"]


@pytest.mark.parametrize("name", ["3.12", "3.14"])
def test_the_starvation_verdict_names_the_code(name):
    with Workload(interpreter(name), STARVE, "same") as w:
        report, _ = attach(w.pid, 2.0)
    line = next(v for v in report["verdict"] if "ingest" in v and "processor" in v and "GIL" in v)
    assert "held the GIL in `json.dumps ← process_forever (gil_starve.py:" in line, line
    finding = next(f for f in report["findings"] if f.get("code"))
    assert finding["code"]["role"] == "holder"
    assert finding["code"]["culprit"]["thread"]["tid"] == w.tids["processor"]
    assert finding["code"]["culprit"]["share"] >= 0.8, finding


def test_a_stripped_libpython_and_threads_that_exit_mid_window(tmp_path):
    """Python frames are read from memory, not symbols: a libpython stripped of
    .symtab still names them; threads that exit during the window keep their
    waits and stacks; nothing crashes, what has no symbol is marked unknown."""
    py, env = stripped_env(12)
    if not py:
        pytest.fail("pyenv 3.12 is not installed here")
    out = tmp_path / "wait.pb.gz"
    with Workload(py, HOLDER, "churn", env=env) as w:
        report, cp = attach(w.pid, 3.0, "--profile", out)
    assert report["python"]["symbols"] is False, report["python"]
    exited = {t["tid"] for t in report["threads"] if t["exited"]}
    assert len(exited) >= 10, len(exited)
    short = [s for s in report["wait_sites"] if s["tid"] in exited and s["state"] == "gil_wait"]
    assert short and sum(s["seconds"] for s in short if s["role"] == "victim") > 0.1, short[:5]
    # a thread younger than the last read of the thread states (once a second)
    # has native frames only: its waits are still charged, to what could be named
    assert all(s["site"] for s in short), short[:10]
    holder = sites(report, w.tids["ingest"], "gil_wait", "holder")
    assert share_of(holder, lambda s: "json.dumps" in s) >= 0.5, holder
    for t in report["threads"]:
        assert abs(sum(t["seconds"].values()) - t["existed_s"]) <= 0.01 * t["existed_s"] + 1e-4, t
    raw = go_pprof("-raw", out)
    assert "[unknown]" in raw or "[unknown code" in raw, raw[:2000]


def go_pprof(*args):
    cp = subprocess.run([GO, "tool", "pprof", *map(str, args)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def test_the_profile_is_read_by_go_pprof(tmp_path):
    out = tmp_path / "wait.pb.gz"
    with Workload(interpreter("3.12"), HOLDER, "same") as w:
        report, _ = attach(w.pid, 2.0, "--profile", out)
    data = out.read_bytes()
    assert data[:2] == b"\x1f\x8b", "not gzipped"
    assert len(gzip.decompress(data)) > 100
    raw = go_pprof("-raw", out)
    assert "wait/nanoseconds" in raw, raw[:2000]
    for label in ("thread:[ingest]", "role:[holder]", "role:[victim]", "state:[gil_wait]", "victim:[ingest]"):
        assert label in raw, (label, raw[:3000])
    # the holder's code while ingest waited: json.dumps first
    top = go_pprof("-top", "-cum", "-tagfocus=role=holder", "-tagfocus=victim=ingest", out)
    assert "json.dumps" in top and "processor" in top, top


def test_a_c_mutex_convoy_names_the_c_functions():
    """A C program whose workers take turns on one mutex in append_record();
    built with frame pointers: the victims' stacks and the wakers' name it."""
    BUILD.mkdir(exist_ok=True)
    exe = BUILD / "stack_convoy"
    subprocess.run(["cc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", str(exe), str(CONVOY)], check=True, timeout=120)
    with Workload(exe) as w:
        report, _ = attach(w.pid, 2.0)
    victims = [s for s in report["wait_sites"] if s["state"] == "futex_wait" and s["role"] == "victim"]
    wakers = [s for s in report["wait_sites"] if s["state"] == "futex_wait" and s["role"] == "waker"]
    assert share_of(victims, lambda s: "append_record" in s) >= 0.8, victims[:10]
    assert share_of(wakers, lambda s: "append_record" in s) >= 0.8, wakers[:10]
    assert report["python"] is None
