"""Code a JIT generated, named from the runtime's perf map (issue 37): Node.js started with
--perf-basic-prof has its JavaScript functions named in the wait stacks; started without it,
one warning names the flag and the measurement is whole."""
import json
import pathlib
import shutil

import pytest

from conftest import Workload, attach, by_tid

pytestmark = pytest.mark.needs_root

# the event loop's one thread kept busy in one named function, called again at once
BUSY = r"""
function crunchTheLedger(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003;
  return x;
}
let sink = 0;
console.log("ready");
(function again() { sink += crunchTheLedger(2e6); setImmediate(again); })();
"""


def node():
    path = shutil.which("node")
    assert path, "node is on the machine (Debian's nodejs or the machine's own)"
    return path


def frames_named(report, text):
    """Every frame of every stack in the report that names `text`."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str) and text in v:
            out.append(v)
    walk(report)
    return out


def in_dir(folder, *argv):
    """`argv` run in `folder` (V8 writes an isolate log into its working directory)."""
    return ("/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", str(folder), *argv)


def test_node_functions_are_named_from_its_perf_map(tmp_path):
    with Workload(*in_dir(tmp_path, node(), "--perf-basic-prof", "-e", BUSY)) as w:
        try:
            report, cp = attach(w.pid, 4.0)
        finally:
            # node leaves its map behind at exit: it is this test's to remove
            w.close()
            pathlib.Path(f"/tmp/perf-{w.pid}.map").unlink(missing_ok=True)
    main = by_tid(report)[w.pid]
    assert main["seconds"]["running"] > 3.0, main["seconds"]
    named = frames_named(report, "crunchTheLedger")
    assert named, f"no frame names crunchTheLedger: {json.dumps(report)[:3000]}"
    # the code the busy thread ran, as its busiest site: the function, and the one that called it
    busy = max((s for s in report["wait_sites"] if s["tid"] == w.pid and s["role"] == "busy"), key=lambda s: s["seconds"])
    assert "crunchTheLedger [eval]:" in busy["site"].split(" ← ")[0], busy
    assert busy["seconds"] >= 0.8 * main["seconds"]["running"], (busy, main["seconds"])
    assert "writes no perf map" not in cp.stderr, cp.stderr


def test_node_without_the_flag_is_told_once_and_measured_whole(tmp_path):
    with Workload(*in_dir(tmp_path, node(), "-e", BUSY)) as w:
        report, cp = attach(w.pid, 3.0)
    main = by_tid(report)[w.pid]
    assert main["seconds"]["running"] > 2.0, main["seconds"]
    assert not frames_named(report, "crunchTheLedger")
    told = [line for line in cp.stderr.splitlines() if "writes no perf map" in line]
    assert len(told) == 1 and "--perf-basic-prof" in told[0], cp.stderr
