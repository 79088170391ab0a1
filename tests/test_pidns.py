"""The agent in a container's PID namespace reports the PIDs/TIDs the user sees
there, although BPF sees host ones (issue: foundation, test 10)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import WAITMETER, free_port

pytestmark = pytest.mark.needs_root

HELPER = Path(__file__).parent / "helpers" / "in_pidns.py"


def in_new_pidns(*args):
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(HELPER), *map(str, args)]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def host_pids_in_use():
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}


def test_attach_reports_namespace_pids_and_tids(workload_bin):
    out = in_new_pidns("attach", WAITMETER, workload_bin, "--busy", 1, "--sleep", 1)
    assert out["rc"] == 0, out["stderr"]
    assert out["ns_self_pid"] == 1  # really a fresh PID namespace
    report = out["report"]
    assert report["pid"] == out["pid"] == out["tids"]["main"]
    assert out["pid"] < 10  # a namespace PID, not the host's
    threads = {t["tid"]: t for t in report["threads"]}
    assert set(threads) == set(out["tids"].values())
    busy = threads[out["tids"]["busy-0"]]
    assert busy["name"] == "busy-0"
    # busy: on a CPU or waiting for one (on 2 cores the agent's start-up may take the other's
    # turn: a fresh-clone run saw 35% of this 1.5 s window in the run queue)
    on_cpu = busy["seconds"]["running"] + busy["seconds"]["runqueue"]
    assert on_cpu / sum(busy["seconds"].values()) >= 0.95, busy["seconds"]
    sleeper = threads[out["tids"]["sleeper-0"]]
    assert sleeper["seconds"]["sleep"] / sum(sleeper["seconds"].values()) >= 0.95


def series(text, **labels):
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            out.append(line)
    return out


def gauge(text, name):
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_run_all_follows_new_processes_and_exits(workload_bin):
    out = in_new_pidns("run-all", WAITMETER, workload_bin, free_port(), "--busy", 1)
    assert out["agent_rc"] == 0, out["agent_stderr"]
    pid = out["pid"]
    assert pid < 10
    # not there before it started, measured while it ran, under its namespace PID
    assert not series(out["before"], pid=pid, thread="busy-0")
    running = series(out["during"], pid=pid, thread="busy-0", state="running")
    assert len(running) == 1, out["during"]
    assert float(running[0].split()[-1]) > 0.5
    assert gauge(out["during"], "waitmeter_watched_processes") >= 1
    # after it exited: no longer counted as watched
    assert gauge(out["after"], "waitmeter_watched_processes") == gauge(out["during"], "waitmeter_watched_processes") - 1
