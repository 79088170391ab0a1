"""What the agent says of the running kernel, against what bpftool says of it (the truth from outside
the agent: `bpftool feature probe kernel`), and what it does with what the kernel lacks.

- Above the floor, the features it reports (JSON `environment.kernel`, `waitmeter_kernel_feature`)
  are the kernel's.
- Without bpf_loop (5.17: Debian's 5.10), the legacy object loads (bpf/core_fixes.bpf.h), whose
  stack walker follows frame pointers in a bounded loop: said once, in one line, and in the JSON;
  the GIL story is still told with its code (gil_holder.py's processor is in json.dumps 75% of its
  time, by its own clock).
- Without task local storage (5.11: Debian's 5.10), `--syscalls on` is refused in one line.
- Without the per-CPU preempt count among the kernel's symbols (CONFIG_KALLSYMS_ALL: this host's
  6.18 lacks it, Debian's kernels have it), sched_waking's variant that does not read it loads.
- Below the floor (no BPF ring buffer, Linux 5.8), one line naming the kernel and what it lacks,
  exit 2, nothing loaded.

Each kernel of the matrix runs these (tests/kernels); on a kernel that has a feature, its absence
is reached by WAITMETER_KERNEL_WITHOUT, which makes the agent act as if it lacked it."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, WAITMETER, Workload, free_port, metric, stop, wait_http
from test_gil import installed_python

pytestmark = pytest.mark.needs_root

RELEASE = Path("/proc/sys/kernel/osrelease").read_text().strip()
FEATURES = ("bpf_loop", "task_storage", "irq_context")


def bpftool_features():
    """{feature: the kernel has it}, as bpftool probes it."""
    probe = json.loads(subprocess.run(["bpftool", "-j", "feature", "probe", "kernel"], capture_output=True, text=True,
                                      check=True, timeout=120).stdout)
    helpers = set(probe["helpers"]["raw_tracepoint_available_helpers"])
    return {
        "ringbuf": bool(probe["map_types"].get("have_ringbuf_map_type")),
        "bpf_loop": "bpf_loop" in helpers,
        "task_storage": bool(probe["map_types"].get("have_task_storage_map_type")),
        # the per-CPU preempt count, which sched_waking reads as a typed symbol: its load needs
        # the symbol's address (CONFIG_KALLSYMS_ALL)
        "irq_context": any(line.split()[2:3] in (["__preempt_count"], ["pcpu_hot"]) and line.split()[0].strip("0")
                           for line in Path("/proc/kallsyms").read_text().splitlines()),
    }


TRUTH = None


def truth():
    global TRUTH
    TRUTH = TRUTH or bpftool_features()
    return TRUTH


def attach_json(pid, env=None, duration=2):
    r = subprocess.run([str(WAITMETER), "attach", "--pid", str(pid), "--duration", str(duration), "--output", "json"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    return r


@pytest.mark.timeout(300)
def test_the_features_it_reports_are_the_kernels():
    t = truth()
    with Workload(installed_python("3.11"), ROOT / "tests/workloads/gil_holder.py", "same") as w:
        r = attach_json(w.pid)
        assert r.returncode == 0, r.stderr
        k = json.loads(r.stdout)["environment"]["kernel"]
        port = free_port()
        agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            text = wait_http(f"http://127.0.0.1:{port}/metrics", timeout=180)
        finally:
            stop(agent)
    assert k["release"] == RELEASE, k
    want = {f for f in FEATURES if t[f]}
    assert set(k["features"]) == want, (k, t)
    assert len(k["degraded"]) == len(FEATURES) - len(want), k
    for f in FEATURES:
        assert metric(text, "waitmeter_kernel_feature", feature=f) == float(t[f]), (f, t)
    # a kernel lacking what changes every measurement (bpf_loop: the stack walk) says so once, in
    # one line, on stderr; the rest is in the report and the metric, and in the log at -v (a host
    # without CONFIG_KALLSYMS_ALL is not warned of at every start)
    said = [line for line in r.stderr.splitlines() if f"kernel {RELEASE}:" in line]
    assert len(said) == (0 if t["bpf_loop"] else 1), r.stderr
    if not t["bpf_loop"]:
        assert said[0].startswith(f"waitmeter: warning: kernel {RELEASE}: no bpf_loop (Linux 5.17): ") and ";" not in said[0], said
    if len(want) < len(FEATURES) - (not t["bpf_loop"]):
        v = subprocess.run([str(WAITMETER), "-v", "attach", "--pid", str(os.getpid()), "--duration", "0.5", "--output", "json"],
                           capture_output=True, text=True, timeout=300)
        lacks = [f for f in FEATURES if not t[f] and f != "bpf_loop"]
        told = [line for line in v.stderr.splitlines() if f"kernel {RELEASE}:" in line and "warning" not in line]
        assert len(told) == 1 and all(f"no {f} (" in told[0] for f in lacks), v.stderr


@pytest.mark.timeout(300)
def test_without_bpf_loop_the_walk_falls_back_and_says_so_once():
    with Workload(installed_python("3.11"), ROOT / "tests/workloads/gil_holder.py", "same") as w:
        r = subprocess.run([str(WAITMETER), "attach", "--pid", str(w.pid), "--duration", "3", "--output", "json",
                            "--stacks", "all"], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "WAITMETER_KERNEL_WITHOUT": "bpf_loop"})
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "no bpf_loop (Linux 5.17)" in line]
    assert len(said) == 1 and said[0].startswith(f"waitmeter: warning: kernel {RELEASE}: "), r.stderr
    report = json.loads(r.stdout)
    k = report["environment"]["kernel"]
    assert "bpf_loop" not in k["features"] and any(d.startswith("no bpf_loop") for d in k["degraded"]), k
    first = report["verdict"][0] if report["verdict"] else ""
    assert any(v.startswith("GIL starvation") for v in report["verdict"][:2]), report["verdict"]
    gil = next(v for v in report["verdict"] if v.startswith("GIL starvation"))
    # the frame-pointer walk still reaches the Python frames of the holder: json.dumps named
    assert "`json.dumps ← processor (gil_holder.py:" in gil, (first, gil)


def test_below_the_floor_it_refuses_in_one_line():
    """Every kernel of the matrix has the ring buffer: each is told to act as if it had none."""
    assert truth()["ringbuf"], "a kernel without the BPF ring buffer: below the floor"
    r = attach_json(os.getpid(), env={"WAITMETER_KERNEL_WITHOUT": "ringbuf"}, duration=1)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0] == (f"waitmeter: kernel {RELEASE} lacks the BPF ring buffer (Linux 5.8): waitmeter needs Linux 5.8 or "
                        "later with BTF (tested: Debian's 5.10, 6.1 and 6.12, and 6.18; docs/deployment.md): run it on a "
                        "newer kernel"), lines
    assert r.stdout == ""


def test_without_task_storage_syscalls_on_is_refused_in_one_line():
    """On a kernel without task local storage (Debian's 5.10) as it is; on one with it, told to act
    as if it had none. Nothing is left loaded: the refusal comes before the syscall probe."""
    env = {} if not truth()["task_storage"] else {"WAITMETER_KERNEL_WITHOUT": "task_storage"}
    r = subprocess.run([str(WAITMETER), "attach", "--pid", str(os.getpid()), "--duration", "1", "--syscalls", "on"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert r.returncode == 2, (r.returncode, r.stderr)
    refusal = [line for line in r.stderr.splitlines() if "has no task local storage" in line]
    assert refusal == [f"waitmeter: kernel {RELEASE} has no task local storage for BPF (Linux 5.11), which the syscall "
                       "probe keeps its calls in: run without --syscalls on"], r.stderr
    assert r.stdout == ""
