"""The kernel's verifier walks every path of a BPF program when it loads: a branch whose outcome
it knows splits the walk, and the splits multiply. It refuses a program past 1,000,000
instructions processed, and its time is the agent's start: the sched_switch program once took
348,000 instructions and a second of a two-second start (issue 38; docs/performance.md, "The
verifier's work"). Each program the agent loads stays within a quarter of the limit, by the
kernel's own count (`verified_insns` of each program's fd), with every probe on: a change that
multiplies the paths again fails here before a kernel with other pruning refuses it.

Real agent, real kernel, a real workload (tests/workloads/mutex_contend.c)."""
import json
import os
import subprocess

import pytest

from conftest import WAITMETER, Lines, Workload, build_c, free_port, stop, wait_http

pytestmark = pytest.mark.needs_root

# a quarter of the kernel's BPF_COMPLEXITY_LIMIT_INSNS
BUDGET = 250_000


def programs_of(pid):
    """{prog_id: verified_insns} of the BPF programs process `pid` holds open."""
    out = {}
    fds = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fds):
        try:
            with open(f"{fds}/{fd}") as f:
                info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        # a program's fd (a link's fdinfo names its program's id too)
        if "prog_type" in info and "prog_id" in info:
            assert "verified_insns" in info, ("this kernel does not count the verifier's work (Linux 5.16+)", info)
            out[int(info["prog_id"])] = int(info["verified_insns"])
    return out


def names(ids):
    """{prog_id: name} as bpftool lists them."""
    listed = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout)
    return {p["id"]: p.get("name", "?") for p in listed if p["id"] in ids}


def test_every_program_verifies_within_a_quarter_of_the_kernels_limit():
    with Workload(build_c("mutex_contend"), 4, 60, 1000, stdin=subprocess.PIPE) as w:
        port = free_port()
        agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            Lines(agent, agent.stderr).until(lambda l: "serving" in l, 30, "the agent to serve")
            wait_http(f"http://127.0.0.1:{port}/metrics")
            progs = programs_of(agent.pid)
            named = names(set(progs))
        finally:
            stop(agent)
    counts = {named.get(i, str(i)): n for i, n in progs.items()}
    # the sched object's programs, the GIL-free process' syscall probe, and the unwinders
    assert any(n.startswith("sched_switch") for n in counts) and len(counts) >= 6, counts
    assert all(n > 0 for n in counts.values()), counts
    over = {n: c for n, c in counts.items() if c > BUDGET}
    assert not over, (f"over {BUDGET:,} instructions verified", over, counts)
