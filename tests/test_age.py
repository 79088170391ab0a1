"""The age join and the verdict engine on real workloads (issue: age join):
the application's own Prometheus endpoint (prometheus_client), and
waitmeter_client over the agent's Unix socket."""
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, WAITMETER, Workload, attach, by_tid, free_port
from test_blame import throttled_cgroup  # noqa: F401  (fixture)
from test_gil import STARVE, pyenv_python

CLIENT = ROOT / "clients" / "python"


@pytest.fixture(scope="module")
def app_python():
    """pyenv 3.11 in a venv of its own with prometheus_client (from PyPI)."""
    base = pyenv_python(11)
    if not base:
        pytest.fail("pyenv 3.11 not installed here")
    venv = BUILD / "app-venv-3.11"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    if subprocess.run([str(py), "-c", "import prometheus_client"]).returncode != 0:
        subprocess.run([str(py), "-m", "pip", "install", "-q", "prometheus_client"], check=True)
    return py


def age_attach(pid, *extra, duration=4.0):
    report, cp = attach(pid, duration, *extra)
    return report, cp


def test_gil_starvation_with_the_apps_own_lag_metric(app_python):
    port = free_port()
    with Workload(app_python, STARVE, "same", "--metrics-port", port) as w:
        # the starved application serves its own /metrics slowly too (2.6-6 s per scrape
        # measured): a window long enough for several scrapes
        report, _ = age_attach(w.pid, "--age-url", f"http://127.0.0.1:{port}/metrics", "--age-metric", "fix_lag_seconds", duration=15.0)
    age = report["age"]
    assert age is not None and age["source"] == "endpoint" and age["samples"] >= 2 and age["rising"] is True, age
    first = report["verdict"][0]
    assert first.startswith(f"GIL starvation: thread ingest ({w.tids['ingest']})"), report["verdict"]
    assert f"held by processor ({w.tids['processor']})" in first and "message age grew" in first, first
    assert "Move processor to its own process" in first


def test_processor_in_its_own_process_is_healthy(app_python):
    port = free_port()
    with Workload(app_python, STARVE, "separate", "--metrics-port", port) as w:
        report, _ = age_attach(w.pid, "--age-url", f"http://127.0.0.1:{port}/metrics", "--age-metric", "fix_lag_seconds")
    assert report["age"]["rising"] is False, report["age"]
    assert report["verdict"][0].startswith("healthy: age flat"), report["verdict"]
    assert not any("GIL" in v for v in report["verdict"][1:]), report["verdict"]


def test_client_samples_join_the_right_thread(app_python, tmp_path):
    sock = tmp_path / "age.sock"
    env = {"PYTHONPATH": str(CLIENT), "WAITMETER_SOCKET": str(sock)}
    with Workload(app_python, STARVE, "same", "--client", env=env) as w:
        report, _ = age_attach(w.pid, "--age-socket", sock)
    threads = by_tid(report)
    ingest = threads[w.tids["ingest"]]
    assert ingest["age"]["samples"] >= 2 and ingest["age"]["rising"] is True, ingest.get("age")
    assert all("age" not in t for tid, t in threads.items() if tid != w.tids["ingest"])
    assert report["age"]["source"] == "client"
    assert report["verdict"][0].startswith(f"GIL starvation: thread ingest ({w.tids['ingest']})"), report["verdict"]
    assert not sock.exists()  # the agent removed its socket


def run_client(code, env):
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                        env={**os.environ, "PYTHONPATH": str(CLIENT), **env})
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


LOOP = """
import json, socket, time, waitmeter_client as w
N = 100_000
t = time.perf_counter()
for i in range(N):
    w.observe_age(0.001 * i)
took = time.perf_counter() - t
raw = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); raw.setblocking(False)
t = time.perf_counter()
for i in range(N):
    try:
        raw.sendto(b"x" * 28, w._path)
    except OSError:
        pass
raw_took = time.perf_counter() - t
print(json.dumps({"took": took, "raw": raw_took, "dropped": w.dropped(), "sent": w.sent()}))
"""


def test_client_with_no_agent_never_blocks_and_counts_drops(tmp_path):
    r = run_client(LOOP, {"WAITMETER_SOCKET": str(tmp_path / "nobody.sock")})
    assert r["dropped"] == 100_000 and r["sent"] == 0
    # no slower than a non-blocking sendto by more than the packing around it
    assert r["took"] <= 5 * r["raw"] + 1.0, r


def test_client_with_an_agent_that_stops_reading_never_blocks(tmp_path):
    path = tmp_path / "stuck.sock"
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stuck.bind(str(path))  # bound, never read: its queue fills
    try:
        r = run_client(LOOP, {"WAITMETER_SOCKET": str(path)})
    finally:
        stuck.close()
    assert r["sent"] > 0 and r["dropped"] > 0 and r["sent"] + r["dropped"] == 100_000, r
    assert r["took"] <= 5 * r["raw"] + 1.0, r


def test_throttling_and_runqueue_get_their_own_findings(workload_bin, throttled_cgroup):
    with Workload(workload_bin, "--busy", 1) as w:
        (throttled_cgroup / "cgroup.procs").write_text(str(w.pid))
        throttled, _ = attach(w.pid, 2.0)
    assert throttled["verdict"][0].startswith("CPU quota throttling:"), throttled["verdict"]
    assert not any(v.startswith(("GIL", "healthy")) for v in throttled["verdict"]), throttled["verdict"]
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        queued, _ = attach(w.pid, 2.0)
    assert any(v.startswith("run-queue saturation: thread spin-a") for v in queued["verdict"]), queued["verdict"]
    assert not any(v.startswith(("GIL", "healthy")) for v in queued["verdict"]), queued["verdict"]


def test_a_bad_age_endpoint_warns_once_and_the_report_still_comes(workload_bin):
    port = free_port()  # nothing listens there
    with Workload(workload_bin, "--sleep", 1) as w:
        report, cp = attach(w.pid, 2.0, "--age-url", f"http://127.0.0.1:{port}/metrics", "--age-metric", "lag")
    assert cp.returncode == 0
    warnings = [l for l in cp.stderr.splitlines() if "age source" in l]
    assert len(warnings) == 1 and "retrying" in warnings[0], cp.stderr
    assert report["age"] is None and report["verdict"][0].startswith("healthy: no age source"), report


def test_bad_age_options_are_usage_errors(workload_bin):
    with Workload(workload_bin, "--sleep", 1) as w:
        cp = subprocess.run([str(WAITMETER), "attach", "--pid", str(w.pid), "--age-url", "https://x/metrics", "--age-metric", "lag"],
                            capture_output=True, text=True)
        assert cp.returncode == 2 and "only http:// URLs" in cp.stderr, cp.stderr
        cp = subprocess.run([str(WAITMETER), "run", "--all", "--age-url", "http://127.0.0.1:1/m", "--age-metric", "lag"],
                            capture_output=True, text=True)
        assert cp.returncode == 2 and "give exactly one --pid" in cp.stderr, cp.stderr


def test_text_output_off_a_terminal_is_plain_lines(workload_bin):
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        cp = subprocess.run([str(WAITMETER), "attach", "--pid", str(w.pid), "--duration", "2.5"],
                            capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert "\x1b[" not in cp.stdout  # no cursor movement, no colour
    ticks = [l for l in cp.stdout.splitlines() if l.startswith("waitmeter: t=")]
    assert len(ticks) >= 2, cp.stdout
    assert "spin-a" in ticks[0] and "(CPU: spin-b)" in ticks[0], ticks
    assert "TOP CULPRIT" in cp.stdout and "verdict:" in cp.stdout
