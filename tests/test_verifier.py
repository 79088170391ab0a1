"""Every BPF program the agent loads keeps a margin inside the kernel verifier's limits, by the kernel's
own numbers, at the maximum configuration, in each variant the agent picks by the kernel's features.

The verifier refuses a program whose deepest call chain needs more than 512 bytes of stack, or whose
verification walks more than 1,000,000 instructions; its verification time is the agent's start. A
program that fits here with no margin is refused by a kernel whose verifier counts a little
differently (issue 53: 528 bytes refused on 6.18.44 and every Debian kernel). Held here: each
program's deepest chain at most 448 bytes, its verification at most half the instruction budget.

Maximum configuration: `run` watching a CPython 3.11 process (GIL waits, uprobes on take_gil and
drop_gil) and a CPython 3.13 one (uprobes on the parking lot's semaphore), every stack (native and
Python, the holders' CPU-clock sampler), the timeline, `--syscalls on` (where the kernel has task
local storage: not 5.10). Each variant: the kernel's own (the main object where it has bpf_loop) and
the legacy object of a kernel without bpf_loop (WAITMETER_KERNEL_WITHOUT; on 5.10 both are it). The numbers of each run go to tests/.build/artefacts/verifier-<kernel>.json,
from which tests/kernels/table.py writes docs/probes/kernels.md.

Real agent, real kernel (this machine's, and each kernel of the matrix: tests/kernels/)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD, ROOT, WAITMETER, Workload, free_port, stop, wait_http
from test_gil import installed_python
from test_kernel import truth

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import verifier  # noqa: E402

pytestmark = pytest.mark.needs_root

STACK_BUDGET = 448  # of the verifier's 512
INSN_BUDGET = 500_000  # of its 1,000,000


def run_at_maximum(without):
    """(rows of verifier.margins, the agent's log) for `run` at the maximum configuration."""
    env = {**os.environ, "WAITMETER_VERIFIER_STATS": "1", "WAITMETER_KERNEL_WITHOUT": without}
    syscalls = ["--syscalls", "on"] if truth()["task_storage"] else []
    with Workload(installed_python("3.11"), ROOT / "tests/workloads/gil_holder.py", "same") as gil, \
            Workload(installed_python("3.13"), ROOT / "tests/workloads/pylock.py", "lock") as lock:
        port = free_port()
        log = BUILD / f"verifier-{without or 'kernel'}.log"
        BUILD.mkdir(exist_ok=True)
        with open(log, "w") as err:
            agent = subprocess.Popen(
                [str(WAITMETER), "-vv", "run", "--pid", str(gil.pid), "--pid", str(lock.pid), "--listen", f"127.0.0.1:{port}",
                 "--stacks", "all", "--holder-sample-hz", "97", "--gil-probe", "uprobe", "--lock-probe", "uprobe",
                 *syscalls, "--timeline-minutes", "1"],
                stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            # loading under software emulation (tests/kernels) takes a while
            wait_http(f"http://127.0.0.1:{port}/metrics", timeout=180)
            text = log.read_text()
            rows = verifier.margins(agent.pid, text)
        finally:
            stop(agent)
    return rows, text


@pytest.mark.timeout(600)
@pytest.mark.parametrize("without", ["", "bpf_loop"], ids=["kernel", "without-bpf_loop"])
def test_every_program_keeps_its_margin_inside_the_verifiers_limits(without):
    rows, text = run_at_maximum(without)
    release = Path("/proc/sys/kernel/osrelease").read_text().strip()
    names = {r["name"] for r in rows}
    # every family at its maximum: the scheduler's hooks, the holders' sampler, the GIL's and
    # the parking lot's uprobes, the syscall probe
    syscalls = ("sys_enter_btf", "sys_exit_btf") if truth()["task_storage"] else ()
    for want in ("sched_switch", "sched_wakeup", "sched_waking", "sched_process_e", "sample_holder", "take_gil_exit",
                 "drop_gil_enter", "task_ids", *syscalls):
        assert any(n.startswith(want) for n in names), (want, sorted(names))
    assert any("sem" in n or "park" in n for n in names), ("the parking lot's uprobe", sorted(names))
    assert ("sweep" in names) == (without != "bpf_loop" and "bpf_loop" not in kernel_lacks(text)), sorted(names)
    out = BUILD / "artefacts"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"verifier-{release}{'-' + without if without else ''}.json").write_text(
        json.dumps({"kernel": release, "variant": without or "kernel", "programs": rows}, indent=1))
    for r in rows:
        print(f"{release} {'without-' + without if without else 'kernel'}: {r['name']}: stack {r['stack']} ({' > '.join(r['chain'])}), "
              f"{r['insns']} instructions")
    over = [r for r in rows if r["stack"] > STACK_BUDGET or r["insns"] > INSN_BUDGET]
    assert not over, f"over {STACK_BUDGET} bytes of stack or {INSN_BUDGET:,} instructions: {over}"
    assert all(r["insns"] > 0 and r["stack"] > 0 for r in rows), rows


def kernel_lacks(text):
    """The features the agent said this kernel lacks (its one warning line)."""
    return {f for f in ("bpf_loop", "task_storage") if f"no {f} (Linux" in text}


def test_the_stack_chain_is_read_as_the_kernel_counts_it():
    """The chain arithmetic against a program whose answer is known by hand."""
    xlated = """int main_prog(void * ctx):
   0: (85) call pc+3#bpf_prog_aa_helper_a
   1: (85) call bpf_loop#123
int helper_a(int x):
   4: (85) call pc+2#bpf_prog_bb_leaf
long callback(int i, void * d):
   6: (95) exit
void leaf(void):
   7: (95) exit
"""
    funcs, calls = verifier.functions_and_calls(xlated)
    assert funcs == ["main_prog", "helper_a", "callback", "leaf"]
    # the callback is passed to bpf_loop by main_prog: counted as its call
    assert calls == {("main_prog", "helper_a"), ("helper_a", "leaf"), ("main_prog", "callback")}
    # 100 -> 128, 40 -> 64, 200 -> 224, 1 -> 32: main > callback (352) beats main > a > leaf (224)
    assert verifier.deepest_chain(funcs, calls, [100, 40, 200, 1]) == (352, ["main_prog", "callback"])
    log = "x\nwaitmeter: libbpf: prog 'main_prog': -- BEGIN PROG LOAD LOG --\nverification time 5 usec\n" \
          "stack depth 100+40+200+1\nprocessed 77 insns (limit 1000000) max_states_per_insn 0\n-- END PROG LOAD LOG --\n"
    assert verifier.load_logs(log) == {"main_prog": {"stack": [100, 40, 200, 1], "insns": 77}}
    with pytest.raises(ValueError):
        verifier.deepest_chain(funcs, calls, [100, 40])
