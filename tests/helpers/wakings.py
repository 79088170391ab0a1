"""The wakeups among a set of single-threaded processes (a database's backends), counted from
outside waitmeter by bpftrace: the kernel's `sched_waking` events whose waker (the task running the
wakeup) and whose woken task are both of the set, the process waking itself left out. Each is one
task of the set ending another's sleep: a ground truth for waitmeter's count of the waits that
another member ended. bpftrace cannot tell an interrupt (a timer's expiry on a CPU where a member
was running) from its task, so its count is an upper bound by those."""
import re
import shutil
import subprocess
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")


def mount_tracefs():
    """bpftrace finds tracepoints in tracefs, which a machine without systemd may not have mounted
    (waitmeter's own probes do not need it): mount it where the kernel offers it. Returns whether
    this mounted it (then `count` unmounts it)."""
    if (TRACEFS / "events").is_dir():
        return False
    subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True, capture_output=True, timeout=30)
    return True


def start(pids, seconds):
    """bpftrace counting for `seconds` the wakings among `pids` (TIDs: each process has one thread);
    `count(proc)` waits for it and returns the number."""
    assert shutil.which("bpftrace"), "bpftrace is installed (make setup installs Debian's bpftrace)"
    pids = sorted(int(p) for p in pids)
    among = lambda field: " || ".join(f"{field} == {p}" for p in pids)  # noqa: E731
    prog = (f"tracepoint:sched:sched_waking /({among('pid')}) && ({among('args->pid')}) && pid != args->pid/ "
            f"{{ @n = count(); }} interval:s:{int(seconds)} {{ exit(); }}")
    mounted = mount_tracefs()
    proc = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.mounted_tracefs = mounted
    return proc


def count(proc, timeout=120):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if getattr(proc, "mounted_tracefs", False):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            subprocess.run(["umount", str(TRACEFS)], check=True, capture_output=True, timeout=30)
    assert proc.returncode == 0, err
    m = re.search(r"^@n: (\d+)$", out, re.M)
    return int(m.group(1)) if m else 0
