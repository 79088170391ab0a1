"""Real services with one real latency incident each (tests/workloads/serving/), and the
ground truth measured from outside the server: client processes that time each request.

The incident: the one thread that serves input (an event loop, a single-threaded server, a
poll loop that hands requests to workers) is kept busy by one slow request, and light
requests ("pings"), sent at a steady pace by another process, wait behind it. The control:
the same server, the same pings, no slow request.

  with serving.start("aiohttp", slow=True) as svc:   # or "waitress", "nginx" (alias "c"), "express" (alias "node")
      svc.pid, svc.serving_tid                       # the server process; the thread that serves input
      lat = svc.measure(seconds=10)                  # blocks; or m = svc.start_measuring(10) ... m.result()
      lat["p99"], lat["max"], lat["slow_s"]          # seconds

measure() starts two client processes (tests/workloads/serving/client.py): one pings
every `interval` (10 ms) on keep-alive, the other (when slow) sends the slow request every
`period` (0.5 s); both print their own timings as JSON. Times are CLOCK_MONOTONIC
(time.monotonic()), the clock the kernel's BPF timestamps use.

Everything started is killed by its process group on exit; the working folder is removed.

  python tests/helpers/serving.py aiohttp [--control] [--seconds 10]   # prints the numbers
"""
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
WORKLOADS = ROOT / "tests" / "workloads" / "serving"
NODE_DIR = WORKLOADS / "node"
PYTHON = sys.executable  # the test venv's, which has aiohttp and waitress (tests/requirements.txt)

ALIASES = {"c": "nginx", "node": "express"}
SERVICES = ("aiohttp", "waitress", "nginx", "express")

# What each service's slow request runs, as a profiler would name it. slow_stack: the frames
# from the handler down to the call that does the work, outermost first (Python frames for the
# Python servers; None where the frames are not a Python stack: nginx is stripped, Node's are
# JIT frames).
SPECS = {
    "aiohttp": dict(
        kind="python", language="python", server="aiohttp", slow_path="/report",
        slow_function="render_report", slow_stack=["report", "render_report", "dumps", "encode", "iterencode"],
        serving_role="loop",
        about="aiohttp's event loop thread runs render_report() (json.dumps) inside the handler",
    ),
    "waitress": dict(
        kind="python", language="python", server="waitress", slow_path="/report",
        slow_function="render_report", slow_stack=["app", "render_report", "dumps", "encode", "iterencode"],
        serving_role="loop",
        about="a waitress worker holds the GIL in render_report() (json.dumps); the main thread's "
              "poll loop (wasyncore.loop) cannot take it back to read the next request",
    ),
    "nginx": dict(
        kind="nginx", language="c", server="nginx", slow_path="/big/",
        slow_function=None, slow_stack=None, serving_role="main",
        about="nginx's only thread lists a directory of tens of thousands of files (autoindex: "
              "readdir, stat, sort, render) in one go",
    ),
    "express": dict(
        kind="node", language="javascript", server="express", slow_path="/report",
        slow_function="renderReport", slow_stack=None, serving_role="main",
        about="Node's main thread runs renderReport() (JSON.stringify) inside an Express handler",
    ),
}


def percentile(sorted_values, q):
    """Nearest rank: the smallest value with at least q of the values at or below it."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def _kill_group(proc):
    """SIGKILL the process group this module made for `proc` (start_new_session: its PGID is
    its PID, which cannot be reused before the leader is reaped, here), then reap it. A leader
    already reaped (returncode set) is left alone: its PID may be another process's now."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


class Measurement:
    """Client processes under way (Service.start_measuring); result() waits for them."""

    def __init__(self, svc, seconds, slow, interval, period, lead):
        self.svc, self.seconds, self.slow = svc, seconds, slow
        self.interval, self.period = interval, period
        self.start = time.monotonic() + lead  # both clients begin then (monotonic clock)
        self.end = self.start + seconds
        self.procs = {}
        self._result = None
        n = svc._next_measurement()
        roles = [("ping", "/ping", interval)] + ([("slow", svc.slow_path, period)] if slow else [])
        for role, path, step in roles:
            out = svc.workdir / f"measure{n}-{role}.json"
            err = svc.workdir / f"measure{n}-{role}.err"
            begin = self.start + (period / 2 if role == "slow" else 0)  # the first slow request mid-period
            cmd = [PYTHON, str(WORKLOADS / "client.py"), role, str(svc.port), path,
                   repr(begin), repr(self.end - begin), repr(step)]
            with open(out, "wb") as o, open(err, "wb") as e:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=o, stderr=e, start_new_session=True)
            self.procs[role] = (proc, out, err)
            svc._children.append(proc)

    def done(self):
        return all(p.poll() is not None for p, _, _ in self.procs.values())

    def result(self, timeout=None):
        """The numbers (Service.measure), once both clients have printed them."""
        if self._result is not None:
            return self._result
        deadline = self.end + (timeout if timeout is not None else 40)
        runs = {}
        for role, (proc, out, err) in self.procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                raise RuntimeError(f"the {role} client did not finish in time: {err.read_text()[-2000:]}")
            if proc.returncode != 0:
                raise RuntimeError(f"the {role} client failed ({proc.returncode}): {err.read_text()[-2000:]}")
            runs[role] = json.loads(out.read_text())
        ping = runs["ping"]
        slow = runs.get("slow", {"requests": [], "errors": []})
        lat = sorted(r[1] for r in ping["requests"])
        self._result = dict(
            p50=percentile(lat, 0.50), p99=percentile(lat, 0.99), max=lat[-1] if lat else None,
            count=len(lat), errors=len(ping["errors"]) + len(slow["errors"]),
            skipped=ping["skipped"],  # ping slots that passed while a ping waited
            slow_count=len(slow["requests"]), slow_s=[r[1] for r in slow["requests"]],
            pings=[(r[0], r[1]) for r in ping["requests"]],  # (monotonic send time, seconds)
            slow_at=[(r[0], r[1]) for r in slow["requests"]],
            error_list=ping["errors"] + slow["errors"],
            start=self.start, end=self.end, seconds=self.seconds, interval=self.interval,
            period=self.period if self.slow else None, slow=self.slow, service=self.svc.name,
        )
        return self._result


class Service:
    """One running server (start() makes it). Attributes:
    name, pid (the server process), serving_tid (native TID of the thread that serves input),
    tids ({role: TID} as the server printed them), port, slow (measure's default),
    slow_path, slow_function / slow_stack (SPECS), rows_or_files (the size of the slow work),
    slow_self_s (one slow call as the server timed it at start, Python and Node),
    workdir; log() is the server's stdout so far, threads() its {TID: comm} now."""

    def __init__(self, name, slow=True, target=0.2, files=50000):
        self.name = ALIASES.get(name, name)
        if self.name not in SPECS:
            raise ValueError(f"unknown service {name!r}: one of {SERVICES} (aliases {ALIASES})")
        spec = SPECS[self.name]
        self.kind, self.language, self.about = spec["kind"], spec["language"], spec["about"]
        self.slow_path, self.slow_function, self.slow_stack = spec["slow_path"], spec["slow_function"], spec["slow_stack"]
        self.slow, self.target, self.files = slow, target, files
        # nginx's directory of many files on tmpfs when there is one: made in well under a second
        # (on a busy disk, seconds), and its listing is CPU work whatever the caches hold
        shm = "/dev/shm" if self.kind == "nginx" and os.access("/dev/shm", os.W_OK) else None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"serving-{self.name}-", dir=shm))
        self.proc = None
        self._children = []
        self._measurements = 0
        self.pid = self.serving_tid = self.port = None
        self.tids = {}
        self.rows_or_files = self.slow_self_s = None

    def _next_measurement(self):
        self._measurements += 1
        return self._measurements

    def _command(self):
        if self.kind == "python":
            return [PYTHON, str(WORKLOADS / f"{self.name}_app.py"), "--target", str(self.target)], WORKLOADS
        if self.kind == "node":
            node = shutil.which("node")
            if not node or not (NODE_DIR / "node_modules" / "express").exists():
                raise RuntimeError("no node, or express not installed: make serving-node (part of make setup)")
            return [node, str(NODE_DIR / "server.js"), "--target", str(self.target)], NODE_DIR
        return [PYTHON, str(WORKLOADS / "nginx_dirlist.py"), str(self.workdir), "--files", str(self.files)], WORKLOADS

    def log(self):
        return (self.workdir / "server.out").read_text(errors="replace")

    def _failure(self, what):
        err = (self.workdir / "server.err").read_text(errors="replace")
        extra = ""
        if (self.workdir / "error.log").exists():
            extra = "\nnginx error.log: " + (self.workdir / "error.log").read_text(errors="replace")[-2000:]
        rc = self.proc.poll() if self.proc else None
        return RuntimeError(f"{self.name}: {what} (exit status {rc}); stdout: {self.log()[-2000:]!r}; "
                            f"stderr: {err[-3000:]!r}{extra}")

    def _start(self, timeout):
        cmd, cwd = self._command()
        with open(self.workdir / "server.out", "wb") as o, open(self.workdir / "server.err", "wb") as e:
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=o, stderr=e, start_new_session=True)
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        want = "ready" if self.kind != "nginx" else "tid main"
        while True:
            lines = self.log().splitlines()
            if any(line.startswith(want) for line in lines):
                break
            if self.proc.poll() is not None:
                raise self._failure("exited before it was ready")
            if time.monotonic() > deadline:
                raise self._failure(f"not ready within {timeout} s")
            time.sleep(0.02)
        for line in lines:
            f = line.split()
            if f[0] == "port":
                self.port = int(f[1])
            elif f[0] == "tid":
                self.tids[f[1]] = int(f[2])
            elif f[0] in ("rows", "files"):
                self.rows_or_files = int(f[1])
                if f[0] == "rows":
                    self.slow_self_s = float(f[2])
        self.serving_tid = self.tids[SPECS[self.name]["serving_role"]]
        while not self.ready(raise_=False):  # nginx says nothing when it listens; the others are checked too
            if self.proc.poll() is not None:
                raise self._failure("exited before it answered")
            if time.monotonic() > deadline:
                raise self._failure(f"no answer to GET /ping within {timeout} s")
            time.sleep(0.05)
        if not Path(f"/proc/{self.pid}/task/{self.serving_tid}").exists():
            raise self._failure(f"serving TID {self.serving_tid} is no thread of PID {self.pid}")
        self._warm()

    def _warm(self):
        """One slow request before any measurement (caches, lazy imports, JIT)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.slow_path}", timeout=30) as r:
            r.read()

    def threads(self):
        """{TID: comm} of the server process's threads now (/proc)."""
        out = {}
        for t in Path(f"/proc/{self.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out[int(t.name)] = (t / "comm").read_text().strip()
        return out

    def ready(self, raise_=True):
        """True when GET /ping answers "ok" within a second (start() has already waited)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ping", timeout=1) as r:
                ok = r.status == 200 and r.read().strip() == b"ok"
        except OSError as e:
            if raise_:
                raise self._failure(f"GET /ping failed: {e}")
            return False
        if not ok and raise_:
            raise self._failure("GET /ping did not answer ok")
        return ok

    def start_measuring(self, seconds=10, slow=None, interval=0.01, period=0.5, lead=0.5):
        """Start the clients and return at once: a Measurement, whose result() waits. The clients
        begin `lead` seconds from now (time.monotonic(): Measurement.start) and stop `seconds` later."""
        return Measurement(self, seconds, self.slow if slow is None else slow, interval, period, lead)

    def measure(self, seconds=10, slow=None, interval=0.01, period=0.5):
        """Ping every `interval` seconds for `seconds` from another process while (if slow, by
        default the start()'s) a third process sends the slow request every `period` seconds.
        Returns, in seconds: p50, p99, max, count (pings answered), errors, skipped (ping slots
        missed while a ping waited), slow_count, slow_s (each slow request's duration as its
        client saw it), pings [(monotonic send time, latency)], slow_at [(send time,
        duration)], start, end."""
        return self.start_measuring(seconds, slow, interval, period).result()

    def close(self):
        for proc in self._children:
            _kill_group(proc)
        if self.proc is not None:
            _kill_group(self.proc)
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def start(name, slow=True, target=0.2, files=50000, timeout=60):
    """A running service (Service), killed with everything it started on exit. `target`: the
    seconds one slow call should take (Python and Node size their data to it at start);
    `files`: the size of nginx's directory."""
    svc = Service(name, slow=slow, target=target, files=files)
    try:
        svc._start(timeout)
        yield svc
    finally:
        svc.close()


def main():
    import argparse

    ap = argparse.ArgumentParser(description="start a service, measure it, print the numbers")
    ap.add_argument("service", choices=[*SERVICES, *ALIASES])
    ap.add_argument("--control", action="store_true", help="no slow request")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    t0 = time.monotonic()
    with start(args.service, slow=not args.control) as svc:
        t1 = time.monotonic()
        tasks = svc.threads()
        print(f"{svc.name}: pid {svc.pid} serving_tid {svc.serving_tid} tids {svc.tids} threads {len(tasks)} "
              f"size {svc.rows_or_files} self-timed {svc.slow_self_s} started in {t1 - t0:.1f} s")
        for _ in range(args.runs):
            r = svc.measure(args.seconds)
            ms = lambda v: f"{v * 1000:.1f}" if v is not None else "-"  # noqa: E731
            slow = ", ".join(ms(s) for s in r["slow_s"])
            print(f"  {'slow' if r['slow'] else 'control'}: pings {r['count']} p50 {ms(r['p50'])} p99 {ms(r['p99'])} "
                  f"max {ms(r['max'])} ms, errors {r['errors']}, skipped {r['skipped']}; "
                  f"slow {r['slow_count']} [{slow}] ms", flush=True)
    print(f"  total {time.monotonic() - t0:.1f} s (start, {args.runs} x measure, stop)")


if __name__ == "__main__":
    main()
