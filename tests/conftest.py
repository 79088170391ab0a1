"""Integration tests: the real agent, real BPF on the running kernel, real workloads.

Each workload reports its own TIDs ("tid <role> <tid>") and says "ready" when
every thread is in its known state: that is the ground truth the tests assert
against. Every process a test starts is owned by a guard that kills it.
"""
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / ".build"
WAITMETER = Path(os.environ.get("WAITMETER_BIN", ROOT / "agent" / "target" / "release" / "waitmeter"))


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (CAP_BPF, CAP_PERFMON)"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "kernel has no BTF"
    if not WAITMETER.exists():
        return f"{WAITMETER} not built (make build)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = skip_reason()
    if reason:
        print(f"skipping: {reason}", file=sys.stderr)
        for item in items:
            item.add_marker(pytest.mark.skip(reason=f"skipping: {reason}"))


@pytest.fixture(scope="session")
def workload_bin():
    """tests/workloads/threads.c, compiled once per run."""
    BUILD.mkdir(exist_ok=True)
    out = BUILD / "threads"
    src = ROOT / "tests" / "workloads" / "threads.c"
    subprocess.run(["cc", "-O2", "-Wall", "-pthread", "-o", str(out), str(src)], check=True)
    return out


class Workload:
    """A running ground-truth workload; kills its process on exit."""

    def __init__(self, binary, *args, env=None, stdin=None, timeout=20.0):
        cmd = [str(binary), *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=stdin, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.tids = {}
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            if line.startswith("tid "):
                _, role, tid = line.split()
                self.tids[role] = int(tid)
            elif line.strip() == "ready":
                break
            if time.monotonic() > deadline:
                break
        else:
            self.close()
            raise RuntimeError(f"workload {cmd} ended before it was ready")
        if time.monotonic() > deadline:
            self.close()
            raise RuntimeError(f"workload {cmd} not ready after {timeout} s")

    @property
    def pid(self):
        return self.proc.pid

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        if self.proc.stdin:
            self.proc.stdin.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def attach(pid, duration=2.0, *extra, check=True):
    """Run `waitmeter attach --output json`; returns (report, completed process)."""
    cmd = [str(WAITMETER), "attach", "--pid", str(pid), "--duration", str(duration), "--output", "json", *extra]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30)
    if check and cp.returncode != 0:
        raise AssertionError(f"{cmd} exited {cp.returncode}: {cp.stderr}")
    report = json.loads(cp.stdout) if cp.stdout.strip() else None
    return report, cp


def by_tid(report):
    return {t["tid"]: t for t in report["threads"]}


def share(thread, state):
    total = sum(thread["seconds"].values())
    return thread["seconds"][state] / total if total else 0.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Guard:
    """Kills a started process (and its process group) on exit."""

    def __init__(self, proc):
        self.proc = proc

    def __enter__(self):
        return self.proc

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_http(url, timeout=10.0):
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def which(name):
    return shutil.which(name)


@contextlib.contextmanager
def prometheus(tmp_path, target_port, rule_files=(), job=None, jobs=None):
    """A real Prometheus (Debian package) scraping 127.0.0.1:target_port as
    job "waitmeter" every second, evaluating `rule_files` every second; yields
    its base URL once ready and stops it on exit. `job`: more settings of the
    scrape job (scheme, tls_config, basic_auth, ...); `jobs`: these scrape
    configs instead of it."""
    assert which("prometheus"), "prometheus (Debian package) is installed by make setup"
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    # JSON is YAML: no YAML library needed here
    cfg.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(f) for f in rule_files],
        "scrape_configs": jobs or [{**(job or {}), "job_name": "waitmeter",
                                    "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
    }))
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    with Guard(prom):
        wait_http(f"{base}/-/ready", timeout=30)
        yield base
