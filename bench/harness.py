"""Process handling and measurement for bench.py: starting workloads and tools,
reading their CPU and memory from /proc, BPF program statistics, cleanup.

Every process started here is registered and killed by PID (its process group)
on exit, on Ctrl-C and on errors; cgroups made here are removed; sysctls changed
here are restored.
"""
import glob
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
BUILD = BENCH / ".build"
WAITMETER = Path(os.environ.get("WAITMETER_BIN", ROOT / "agent" / "target" / "release" / "waitmeter"))
PYSPY = ROOT / ".venv" / "bin" / "py-spy"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")

_procs = {}  # pid -> Popen, everything we started and have not reaped
_cgroups = []
_sysctls = {}  # name -> value to restore
_tmp = tempfile.mkdtemp(prefix="waitmeter-bench-")


# ---------------------------------------------------------------- cleanup

def spawn(cmd, **kw):
    """Popen in its own process group, registered for cleanup."""
    p = subprocess.Popen([str(c) for c in cmd], start_new_session=True, **kw)
    _procs[p.pid] = p
    return p


def reap(p, sig=signal.SIGTERM, timeout=5.0):
    """Stop one process we started (its group: the ingest feeder is a child)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    else:
        # the leader is gone; a straggler of its group (a forked child) may not be
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            try:
                f.close()
            except OSError:
                pass
    _procs.pop(p.pid, None)


def cleanup():
    for p in list(_procs.values()):
        reap(p, signal.SIGKILL, timeout=2)
    for cg in list(_cgroups):
        remove_cgroup(cg)
    for name, value in list(_sysctls.items()):
        set_sysctl(name, value)
        _sysctls.pop(name, None)
    for f in glob.glob(os.path.join(_tmp, "*")):
        os.unlink(f)
    try:
        os.rmdir(_tmp)
    except OSError:
        pass


def install_signal_handlers():
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def tmpfile(name):
    return os.path.join(_tmp, name)


# ---------------------------------------------------------------- /proc

def cpu_seconds(pid):
    """CPU time of a process in seconds: the sum of se.sum_exec_runtime of its
    threads (/proc/PID/task/*/sched, ns resolution), else utime + stime from
    /proc/PID/stat (clock ticks: 10 ms, too coarse for an idle agent). None if gone."""
    total, found = 0.0, False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                for line in Path(f"/proc/{pid}/task/{tid}/sched").read_text().splitlines():
                    if line.startswith("se.sum_exec_runtime"):
                        total += float(line.split(":")[1]) / 1e3  # ms
                        found = True
                        break
            except OSError:
                pass
    except OSError:
        return None
    if found:
        return total
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid):
    """VmHWM (peak resident set) in MiB; None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def vm_rss_mib(pid):
    """VmRSS (resident set now) in MiB; None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def live_threads():
    """Threads of the user-space processes of this PID namespace (kernel threads left out):
    what `run --all` watches, to tell a map's growth from the namespace's."""
    n = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if not int(fields[6]) & 0x00200000:  # PF_KTHREAD
            n += int(fields[17])
    return n


def process_switches(pid):
    """Context switches (voluntary + involuntary) of every thread of a process so far, from
    /proc/PID/task/*/status: the workload's own count, taken from outside it."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def machine_ctxt():
    """Context switches since boot, all CPUs (/proc/stat ctxt)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("ctxt "):
            return int(line.split()[1])
    return 0


def set_sysctl(name, value):
    Path("/proc/sys/" + name.replace(".", "/")).write_text(str(value))


def get_sysctl(name):
    return Path("/proc/sys/" + name.replace(".", "/")).read_text().strip()


class BpfStats:
    """kernel.bpf_stats_enabled=1 for the duration of a `with` block (restored after)."""

    NAME = "kernel.bpf_stats_enabled"

    def __enter__(self):
        old = get_sysctl(self.NAME)
        _sysctls.setdefault(self.NAME, old)
        set_sysctl(self.NAME, 1)
        return self

    def __exit__(self, *exc):
        set_sysctl(self.NAME, _sysctls.pop(self.NAME, "0"))


def bpf_progs(owner_pid):
    """{prog name: (run_cnt, run_time_ns)} of the BPF programs a process holds open
    (from /proc/PID/fdinfo: prog_id, run_cnt, run_time_ns; names from bpftool)."""
    found = {}
    try:
        fds = os.listdir(f"/proc/{owner_pid}/fdinfo")
    except OSError:
        return {}
    for fd in fds:
        try:
            info = dict(line.split(":", 1) for line in Path(f"/proc/{owner_pid}/fdinfo/{fd}").read_text().splitlines()
                        if ":" in line)
        except OSError:
            continue
        if "prog_id" in info and "run_cnt" in info:
            found[int(info["prog_id"])] = (int(info["run_cnt"]), int(info["run_time_ns"]))
    names = {}
    try:
        for p in json.loads(subprocess.run(["bpftool", "--json", "prog", "show"], capture_output=True, text=True).stdout):
            names[p.get("id")] = p.get("name")
    except (OSError, ValueError):
        pass
    progs = {}
    for pid_, (cnt, ns) in found.items():
        name = names.get(pid_) or f"id{pid_}"
        a, b = progs.get(name, (0, 0))
        progs[name] = (a + cnt, b + ns)
    return progs


def bpf_delta(progs0, progs1, elapsed):
    """{prog name: {runs_per_s, ns_per_run, cpu_share}} between two bpf_progs() readings."""
    per = {}
    for name, (c1, n1) in progs1.items():
        c0, n0 = progs0.get(name, (0, 0))
        per[name] = {"runs_per_s": (c1 - c0) / elapsed, "ns_per_run": (n1 - n0) / (c1 - c0) if c1 > c0 else 0.0,
                     "cpu_share": (n1 - n0) / 1e9 / elapsed}
    return per


# ---------------------------------------------------------------- cgroups

def make_cgroup(name, quota_us, period_us=100000):
    if not (CGROUP_V1_CPU / "cpu.cfs_quota_us").exists():
        raise RuntimeError("no cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    cg = CGROUP_V1_CPU / name
    cg.mkdir()
    _cgroups.append(cg)
    (cg / "cpu.cfs_period_us").write_text(str(period_us))
    (cg / "cpu.cfs_quota_us").write_text(str(quota_us))
    return cg


def remove_cgroup(cg):
    for _ in range(50):
        try:
            cg.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.1)  # its tasks are still exiting
    if cg in _cgroups:
        _cgroups.remove(cg)


def cpu_stat(cg):
    return {k: int(v) for k, v in (line.split() for line in (cg / "cpu.stat").read_text().splitlines())}


# ---------------------------------------------------------------- workloads

def pyenv_python(minor):
    found = sorted(glob.glob(str(PYENV / f"3.{minor}.*" / "bin" / f"python3.{minor}")),
                   key=lambda p: [int(x) for x in re.findall(r"3\.\d+\.(\d+)", p)])
    return found[-1] if found else None


def libpython(py):
    minor = re.search(r"python3\.(\d+)$", py).group(1)
    return str(Path(py).parent.parent / "lib" / f"libpython3.{minor}.so.1.0")


def build_c(name, src):
    BUILD.mkdir(exist_ok=True)
    out = BUILD / name
    if not out.exists() or out.stat().st_mtime < Path(src).stat().st_mtime:
        subprocess.run(["cc", "-O2", "-Wall", "-pthread", "-o", str(out), str(src)], check=True)
    return out


def build_bpf(name, src):
    """A BPF object from C (clang-19, as the agent's build.rs; WAITMETER_CLANG overrides)."""
    BUILD.mkdir(exist_ok=True)
    out = BUILD / name
    if not out.exists() or out.stat().st_mtime < Path(src).stat().st_mtime:
        clang = os.environ.get("WAITMETER_CLANG", "clang-19")
        subprocess.run([clang, "-target", "bpf", "-O2", "-g", "-Wall", "-c", str(src), "-o", str(out)], check=True)
    return out


def build_holdgil(py):
    info = subprocess.run([py, "-c", "import sysconfig as s; print(s.get_paths()['include']); print(s.get_config_var('EXT_SUFFIX'))"],
                          capture_output=True, text=True, check=True).stdout.split()
    out = BUILD / ("holdgil-" + Path(py).parent.parent.name)
    out.mkdir(parents=True, exist_ok=True)
    so = out / f"holdgil{info[1]}"
    src = ROOT / "tests" / "workloads" / "holdgil.c"
    if not so.exists() or so.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", f"-I{info[0]}", str(src), "-o", str(so)], check=True)
    return out


class Workload:
    """A bench workload: prints "tid NAME TID" lines and "ready", runs on "go",
    prints one JSON line of results, exits when its stdin closes."""

    def __init__(self, cmd, timeout=60.0, linger=True):
        self.linger = linger  # False: runs until killed (tests/workloads/threads.c)
        self.proc = spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.tids = {}
        self._buf = b""
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(deadline)
            if line is None:
                self.close()
                raise RuntimeError(f"workload {cmd} not ready (ended or {timeout} s)")
            parts = line.split()
            if len(parts) == 3 and parts[0] == "tid" and parts[2].isdigit():
                self.tids[parts[1]] = int(parts[2])
            elif line == "ready":
                return

    @property
    def pid(self):
        return self.proc.pid

    def readline(self, deadline):
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode().strip()

    def go(self):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def result(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(deadline)
            if line is None:
                raise RuntimeError(f"workload {self.proc.args} gave no result within {timeout} s")
            if line.startswith("{"):
                return json.loads(line)

    def close(self):
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.linger:
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        reap(self.proc)


# ---------------------------------------------------------------- tools

def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_text(path, marker, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if marker in Path(path).read_text(errors="replace"):
                return True
        except OSError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


class Tool:
    """A measuring tool attached to a workload. `name` is the config's label."""
    name = "none"
    needs_python = False

    def start(self, workload):
        self.proc = None

    def started(self, ok, what):
        if not ok:
            log = ""
            if getattr(self, "log", None):
                try:
                    log = Path(self.log).read_text(errors="replace")[-600:]
                except OSError:
                    pass
            self.stop()
            raise RuntimeError(f"{self.name}: {what} did not start: {log.strip()}")

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def mark(self):
        """Called right before "go" and right after the result."""
        return cpu_seconds(self.pid) if self.proc else None

    def stop(self):
        if self.proc:
            reap(self.proc, signal.SIGINT, timeout=10)


class NoTool(Tool):
    name = "none"


class Waitmeter(Tool):
    """`waitmeter run --pid P` (default: the futex GIL method), scraped every
    SCRAPE_S seconds as Prometheus would (more often than Prometheus' usual 15 s)."""
    SCRAPE_S = 2.0

    def __init__(self, name="waitmeter", *extra, elsewhere=False, all_processes=False):
        """`elsewhere`: watch an idle process of its own instead of the workload (what the
        agent's machine-wide hooks cost the processes it does not watch).
        `all_processes`: `run --all`, the sidecar's mode: every process of the PID namespace."""
        self.name, self.extra, self.elsewhere, self.all_processes = name, extra, elsewhere, all_processes
        self.other = None

    def start(self, workload):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.log = tmpfile(f"waitmeter-{self.port}.log")
        target = ["--pid", workload.pid]
        if self.elsewhere:
            self.other = spawn(["sleep", "600"])
            target = ["--pid", self.other.pid]
        elif self.all_processes:
            target = ["--all"]
        with open(self.log, "w") as log:
            self.proc = spawn([WAITMETER, "run", *target, "--listen", f"127.0.0.1:{self.port}", *self.extra],
                              stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 20
        ok = False
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                http_get(self.url)
                ok = True
                break
            except OSError:
                time.sleep(0.05)
        self.started(ok, "/metrics")
        self.last_text = ""
        self._stop = threading.Event()
        self._scraper = threading.Thread(target=self._scrape, daemon=True)
        self._scraper.start()

    def _scrape(self):
        while not self._stop.wait(self.SCRAPE_S):
            try:
                self.last_text = http_get(self.url)
            except OSError:
                pass

    def scrape(self):
        self.last_text = http_get(self.url, timeout=5)
        return self.last_text

    def stop(self):
        if getattr(self, "_stop", None):
            self._stop.set()
        if self.proc:
            reap(self.proc, signal.SIGTERM, timeout=10)
        if self.other:
            reap(self.other, signal.SIGKILL, timeout=5)
            self.other = None


class Floor(Tool):
    """Empty tp_btf programs on the sched probe's hooks (bench/floor/), held by a small
    loader: with bpf_stats, the floor under waitmeter's per-event cost on each hook."""

    def __init__(self, name="floor"):
        self.name = name

    def start(self, workload):
        self.proc = None
        try:
            obj = build_bpf("floor.bpf.o", BENCH / "floor" / "floor.bpf.c")
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"floor: cannot build bench/floor/floor.bpf.c: {e}") from e
        self.log = tmpfile(f"floor-{workload.pid}.log")
        with open(self.log, "w") as log:
            self.proc = spawn([sys.executable, BENCH / "floor" / "floor.py", obj], stdout=log, stderr=subprocess.STDOUT)
        self.started(wait_for_text(self.log, "floor: attached", self.proc, 20), "floor")

    def stop(self):
        if self.proc:
            reap(self.proc, signal.SIGTERM, timeout=10)


class PySpy(Tool):
    """`py-spy record --rate 100` (blocking: it pauses the target per sample, its
    default), or with --nonblocking."""

    def __init__(self, name="py-spy", nonblocking=False):
        self.name, self.nonblocking = name, nonblocking
        self.needs_python = True

    def start(self, workload):
        self.log = tmpfile(f"pyspy-{workload.pid}.log")
        out = tmpfile(f"pyspy-{workload.pid}.txt")
        cmd = [PYSPY, "record", "--pid", workload.pid, "--rate", "100", "--format", "raw", "--output", out]
        if self.nonblocking:
            cmd.append("--nonblocking")
        with open(self.log, "w") as log:
            self.proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.started(wait_for_text(self.log, "Sampling process", self.proc, 20), "py-spy")


class Bpftrace(Tool):
    """A naive bpftrace script, as someone would write it for this question."""

    def __init__(self, name, script):
        self.name, self.script = name, script  # script(workload) -> text
        self.needs_python = name == "bpftrace-gil"

    def start(self, workload):
        self.log = tmpfile(f"bpftrace-{workload.pid}.log")
        src = tmpfile(f"bpftrace-{workload.pid}.bt")
        Path(src).write_text(self.script(workload))
        with open(self.log, "w") as log:
            self.proc = spawn(["bpftrace", "-p", workload.pid, src], stdout=log, stderr=subprocess.STDOUT)
        self.started(wait_for_text(self.log, "Attaching", self.proc, 60), "bpftrace")
        time.sleep(0.2)  # "Attaching N probes..." is printed before the attach completes

    def output(self):
        try:
            return Path(self.log).read_text(errors="replace")
        except OSError:
            return ""


def bpftrace_gil_script(workload):
    """uprobe + uretprobe on take_gil: time inside take_gil per thread."""
    lib = workload.libpython
    return f"""
uprobe:{lib}:take_gil {{ @start[tid] = nsecs; }}
uretprobe:{lib}:take_gil /@start[tid]/ {{
  @gil_wait_ns[tid] = sum(nsecs - @start[tid]); @acquires[tid] = count(); delete(@start[tid]);
}}
END {{ clear(@start); }}
"""


def bpftrace_sched_script(workload):
    """Off-CPU time from sched_switch and time in futex() per thread, by tracepoints."""
    pid = workload.pid
    return f"""
tracepoint:sched:sched_switch /pid == {pid}/ {{ @switches[tid] = count(); @off[tid] = nsecs; }}
tracepoint:sched:sched_switch /@off[args->next_pid]/ {{
  @offcpu_ns[args->next_pid] = sum(nsecs - @off[args->next_pid]); delete(@off[args->next_pid]);
}}
tracepoint:syscalls:sys_enter_futex /pid == {pid}/ {{ @fstart[tid] = nsecs; }}
tracepoint:syscalls:sys_exit_futex /@fstart[tid]/ {{
  @futex_ns[tid] = sum(nsecs - @fstart[tid]); delete(@fstart[tid]);
}}
END {{ clear(@off); clear(@fstart); }}
"""


def parse_bpftrace_map(text, name):
    """{key: value} of a bpftrace map printed at exit (@name[key]: value)."""
    return {int(k): int(v) for k, v in re.findall(rf"^@{name}\[(\d+)\]: (\d+)$", text, re.M)}


def metric_value(text, name, **labels):
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name and all(dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))).get(k) == v
                                             for k, v in labels.items()):
            return float(m.group(3))
    return None


def metric_by(text, name, *labels):
    """{"v1/v2": value} of a metric's series, keyed by the values of `labels`."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name:
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            key = "/".join(have.get(k, "") for k in labels)
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(\{{.*\}})? (\S+)$", line)
        if m:
            total += float(m.group(2))
    return total


# ---------------------------------------------------------------- one measured run

def run_once(make_workload, tool, timeout, bpf_stats=False):
    """Start the workload, attach the tool, run the workload's fixed work, and
    return its result plus the tool's cost over exactly that work."""
    w = make_workload()
    try:
        tool.start(w)
        try:
            t0, ctxt0 = time.monotonic(), machine_ctxt()
            sw0 = process_switches(w.pid)
            cpu0 = tool.mark()
            progs0 = bpf_progs(tool.pid) if bpf_stats else None
            w.go()
            res = w.result(timeout)
            elapsed = time.monotonic() - t0
            sw1 = process_switches(w.pid)
            cpu1 = tool.mark()
            progs1 = bpf_progs(tool.pid) if bpf_stats else None
            out = dict(res)
            out["wall_s"] = elapsed
            out["tids"] = dict(w.tids)
            out["machine_ctxt_per_s"] = (machine_ctxt() - ctxt0) / elapsed
            if sw0 is not None and sw1 is not None:
                # the workload's threads' own switches (its threads that exited meanwhile are not counted)
                out["workload_switches_per_s"] = (sw1 - sw0) / elapsed
            if tool.proc:
                if cpu0 is not None and cpu1 is not None:
                    out["tool_cpu_per_s"] = (cpu1 - cpu0) / elapsed
                out["tool_peak_rss_mib"] = peak_rss_mib(tool.pid)
            if isinstance(tool, Waitmeter):
                try:
                    text = tool.scrape()
                    out["events_lost"] = metric_sum(text, "waitmeter_bpf_events_lost_total")
                    out["events_lost_by_reason"] = {
                        m[0]: float(m[1]) for m in re.findall(
                            r'^waitmeter_bpf_events_lost_total\{[^}]*reason="([^"]+)"[^}]*\} (\S+)$', text, re.M)
                        if float(m[1]) > 0}
                except OSError:
                    pass
            if bpf_stats and progs0 is not None:
                per = bpf_delta(progs0, progs1, elapsed)
                out["bpf_progs"] = per
                out["bpf_runs_per_s"] = sum(p["runs_per_s"] for p in per.values())
                out["bpf_cpu_share"] = sum(p["cpu_share"] for p in per.values())
        finally:
            tool.stop()
        if isinstance(tool, Bpftrace):
            out["bpftrace_output"] = tool.output()
        return out
    finally:
        w.close()
