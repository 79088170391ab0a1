"""Integration tests: the real agent, real BPF on the running kernel, real workloads.

Each workload reports its own TIDs ("tid <role> <tid>") and says "ready" when
every thread is in its known state: that is the ground truth the tests assert
against. Every process a test starts is owned by a guard that kills it, and
every wait on a child's output has a deadline (Lines), so a silent child fails
its test on time instead of hanging the suite.

Tests that load the agent's BPF programs are marked `needs_root` (per module or
per test); only they are skipped, with the reason, where root, BTF or the built
agent is missing. Under CI (CI set) they fail instead: CI must run them all.
Every test has a time limit (tests/pytest.ini); a longer one raises its own with
@pytest.mark.timeout(SECONDS).
"""
import contextlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / ".build"
WAITMETER = Path(os.environ.get("WAITMETER_BIN", ROOT / "agent" / "target" / "release" / "waitmeter"))
CLIENT = ROOT / "clients" / "python"  # waitmeter_client, for PYTHONPATH
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")
# Deadlines (never measurements) are this many times longer: the kernel matrix' virtual machines
# emulate the CPU in software, several times slower than this machine (tests/kernels/matrix.sh)
SLOWDOWN = float(os.environ.get("WAITMETER_TEST_SLOWDOWN", "1"))


def skip_reason():
    """Why the tests marked needs_root cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (CAP_BPF, CAP_PERFMON)"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "kernel has no BTF"
    if not WAITMETER.exists():
        return f"{WAITMETER} not built (make build)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = skip_reason()
    if reason and any(item.get_closest_marker("needs_root") for item in items):
        what = "failing (CI runs every test)" if IN_CI else "skipping"
        print(f"{what} the tests marked needs_root: {reason}", file=sys.stderr)


@pytest.hookimpl(tryfirst=True)  # before their fixtures are set up
def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_root") and (reason := skip_reason()):
        if IN_CI:
            pytest.fail(f"CI runs every test, and this one cannot run here: {reason}", pytrace=False)
        pytest.skip(f"skipping: {reason}")


def build_c(name, *flags, out=None):
    """tests/workloads/NAME.c compiled into tests/.build/(out or NAME) with `flags` (default -O2)."""
    BUILD.mkdir(exist_ok=True)
    exe = BUILD / (out or name)
    src = ROOT / "tests" / "workloads" / f"{name}.c"
    subprocess.run(["cc", *(flags or ("-O2",)), "-Wall", "-pthread", "-o", str(exe), str(src)], check=True, timeout=120)
    return exe


@pytest.fixture(scope="session")
def workload_bin():
    """tests/workloads/threads.c, compiled once per run."""
    return build_c("threads")


class Lines:
    """The lines a child writes to one of its pipes, each awaited with a deadline. `for line in
    proc.stdout` checks no deadline until a line comes, so a child that prints nothing blocks it
    forever; this fails on time, naming the command and what it printed. It reads the file
    descriptor itself: every read of that pipe must go through it."""

    def __init__(self, proc, pipe):
        self.proc, self.fd = proc, pipe.fileno()
        self.pipe = "stdout" if pipe is proc.stdout else "stderr"
        self.printed = b""  # all that was read
        self.pos = 0  # where the lines not returned yet start

    def until(self, match, timeout, waiting_for):
        """The lines (without their newline) up to the first one `match` accepts, which is last."""
        if SLOWDOWN != 1:
            timeout *= SLOWDOWN
        deadline = time.monotonic() + timeout
        lines = []
        while True:
            while (end := self.printed.find(b"\n", self.pos)) < 0:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise RuntimeError(self.failure(f"no {waiting_for} within {timeout} s"))
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=1)  # for its exit status in the message
                    raise RuntimeError(self.failure(f"its {self.pipe} ended before {waiting_for}"))
                self.printed += chunk
            lines.append(self.printed[self.pos:end].decode(errors="replace"))
            self.pos = end + 1
            if match(lines[-1]):
                return lines

    def readline(self, timeout, waiting_for="a line"):
        return self.until(lambda _: True, timeout, waiting_for)[0]

    def unread(self):
        """What was read from the pipe but not returned as a line yet."""
        return self.printed[self.pos:].decode(errors="replace")

    def failure(self, what):
        rc = self.proc.poll()
        cmd = f"{self.proc.args}" + ("" if rc is None else f" (exited {rc})")
        printed = self.printed.decode(errors="replace")
        so_far = f"its {self.pipe} so far: {printed[-4000:]!r}" if printed else f"nothing on its {self.pipe}"
        return f"{cmd}: {what}; {so_far}"


class Workload:
    """A running ground-truth workload; kills its process on exit."""

    def __init__(self, binary, *args, env=None, stdin=None, timeout=20.0):
        cmd = [str(binary), *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=stdin, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.out = Lines(self.proc, self.proc.stdout)
        try:
            lines = self.out.until(lambda line: line.strip() == "ready", timeout, '"ready"')
            self.ready_at = time.time()  # wall clock, as the report's started_unix_s
            self.tids = {}
            self.lines = lines  # everything it printed up to "ready"
            for line in lines:
                if line.startswith("tid "):
                    _, role, tid = line.split()
                    self.tids[role] = int(tid)
        except BaseException:
            self.close()  # never leave a workload running behind a failed start
            raise

    @property
    def pid(self):
        return self.proc.pid

    def readline(self, timeout, waiting_for="a line"):
        """The workload's next line, awaited at most `timeout` seconds."""
        return self.out.readline(timeout, waiting_for)

    def close(self):
        stop(self.proc, grace=0)
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
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30 * SLOWDOWN)
    if check and cp.returncode != 0:
        raise AssertionError(f"{cmd} exited {cp.returncode}: {cp.stderr}")
    report = json.loads(cp.stdout) if cp.stdout.strip() else None
    return report, cp


def metric(text, name, **labels):
    """The value of the series of `name` whose labels include `labels` (None: absent)."""
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            return float(m.group(2))
    return None


def by_tid(report):
    return {t["tid"]: t for t in report["threads"]}


def share(thread, state):
    total = sum(thread["seconds"].values())
    return thread["seconds"][state] / total if total else 0.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc, grace=5.0):
    """Ends a started process: SIGTERM, SIGKILL after `grace` seconds (at once with 0), reaped.
    One that outlives SIGKILL by 10 s (stuck in the kernel) fails the test rather than hang it."""
    if proc.poll() is None:
        if grace:
            proc.terminate()
            try:
                proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                pass
        proc.kill()
    proc.wait(timeout=10)


class Guard:
    """Stops a started process on exit (SIGTERM, then SIGKILL after 5 s)."""

    def __init__(self, proc):
        self.proc = proc

    def __enter__(self):
        return self.proc

    def __exit__(self, *exc):
        stop(self.proc)


def wait_http(url, timeout=10.0):
    import urllib.request

    deadline = time.monotonic() + timeout * SLOWDOWN
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2 * SLOWDOWN) as r:
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


def prometheus_api(base, path, **params):
    """The `data` of a successful answer of the Prometheus HTTP API at `base` (`/api/v1/query`,
    `/api/v1/alerts`, ...)."""
    import urllib.parse
    import urllib.request
    with urllib.request.urlopen(f"{base}{path}?" + urllib.parse.urlencode(params), timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")


def read_cpu_stat(cg):
    """cpu.stat of cgroup `cg`, either version; v2's throttled_usec also as v1's throttled_time (ns)."""
    stat = dict(line.split() for line in (cg / "cpu.stat").read_text().splitlines())
    if "throttled_usec" in stat:
        stat["throttled_time"] = str(int(stat["throttled_usec"]) * 1000)
    return stat


def v2_controllers():
    """The controllers of a cgroup v2 hierarchy mounted at /sys/fs/cgroup, or None."""
    f = CGROUP_V2 / "cgroup.controllers"
    return f.read_text().split() if f.exists() else None


@contextlib.contextmanager
def cpu_quota_cgroup(quota_us, period_us=100000):
    """A cgroup with `quota_us` of CPU per `period_us`: a child of the v1 cpu controller where it
    is mounted (this project's machines), else of the cgroup v2 root with the cpu controller
    enabled for its children (the kernel matrix' VMs, most nodes); removed afterwards."""
    name = f"waitmeter-test-{os.getpid()}-{quota_us}"
    if (CGROUP_V1_CPU / "cpu.cfs_quota_us").exists():
        cg = CGROUP_V1_CPU / name
        cg.mkdir()
        (cg / "cpu.cfs_period_us").write_text(str(period_us))
        (cg / "cpu.cfs_quota_us").write_text(str(quota_us))
    elif v2_controllers() and "cpu" in v2_controllers():
        control = CGROUP_V2 / "cgroup.subtree_control"
        if "cpu" not in control.read_text().split():
            control.write_text("+cpu")
        cg = CGROUP_V2 / name
        cg.mkdir()
        (cg / "cpu.max").write_text(f"{quota_us} {period_us}")
    else:
        pytest.fail("no cpu controller: neither cgroup v1's at /sys/fs/cgroup/cpu nor cgroup v2's at /sys/fs/cgroup")
    try:
        yield cg
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)  # its tasks are still exiting
