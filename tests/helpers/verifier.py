"""Each loaded BPF program's margins inside the kernel verifier's limits, by the kernel's own numbers.

The agent loads every program with the verifier's statistics when WAITMETER_VERIFIER_STATS=1
(agent/src/probes/mod.rs): libbpf logs, at debug level (-vv), each program's

    stack depth 96+56+16+...      one number per function of the program, in the order of the
                                  program's functions (the main one first)
    processed 89161 insns (limit 1000000) ...

The verifier refuses a program whose deepest call chain needs more than 512 bytes of stack: the sum
over the chain of each function's depth, rounded up to 32 bytes (kernel/bpf/verifier.c,
check_max_stack_depth; newer kernels round to 16, so 32 is the safe reading). The chains come from
the program as the kernel holds it (`bpftool prog dump xlated`): its functions in the same order,
and each call of one by another (`call pc+N#bpf_prog_<tag>_<callee>`, which an inlined bpf_loop's
callback is too). A callback the kernel did not inline is passed by address, not called: it is
counted as called by every function that calls bpf_loop.
"""
import json
import os
import re
import subprocess

STACK_LIMIT = 512
FRAME_ROUND = 32
INSN_LIMIT = 1_000_000

_LOG_START = re.compile(r"prog '([^']+)': -- BEGIN PROG LOAD LOG --")
_STACK = re.compile(r"^stack depth ([0-9+]+)\s*$")
_PROCESSED = re.compile(r"^processed (\d+) insns")
_FUNC = re.compile(r"^([A-Za-z_][\w \*]*?)\b([A-Za-z_]\w*)\((.*)\):$")
_CALL = re.compile(r"\(85\) call pc([+-]\d+)#(?:bpf_prog_[0-9a-f]+_)?(\w+)")
_HELPER_LOOP = re.compile(r"\(85\) call (bpf_loop|bpf_for_each_map_elem)#")


def load_logs(text):
    """{program name: {"stack": [per-function depths], "insns": processed}} from the agent's -vv log."""
    out, name = {}, None
    for line in text.splitlines():
        m = _LOG_START.search(line)
        if m:
            name = m.group(1)
            out[name] = {"stack": None, "insns": None}
            continue
        if name is None:
            continue
        line = line.strip()
        if m := _STACK.match(line):
            out[name]["stack"] = [int(x) for x in m.group(1).split("+")]
        elif m := _PROCESSED.match(line):
            out[name]["insns"] = int(m.group(1))
        elif "END PROG LOAD LOG" in line:
            name = None
    return out


def functions_and_calls(xlated):
    """The functions of a program in order, and the set of (caller, callee) names, from its dump."""
    funcs, calls, loopers = [], set(), set()
    for line in xlated.splitlines():
        if m := _FUNC.match(line):
            funcs.append(m.group(2))
            continue
        if not funcs:
            continue
        if m := _CALL.search(line):
            calls.add((funcs[-1], m.group(2)))
        elif _HELPER_LOOP.search(line):
            loopers.add(funcs[-1])
    called = {callee for _, callee in calls}
    # a callback the kernel did not inline: only passed by address, to bpf_loop
    for f in funcs[1:]:
        if f not in called:
            calls.update((looper, f) for looper in loopers)
    return funcs, calls


def rounded(depth):
    return -(-max(depth, 1) // FRAME_ROUND) * FRAME_ROUND


def deepest_chain(funcs, calls, depths):
    """(bytes, [function names]) of the deepest call chain from the program's main function."""
    if len(depths) != len(funcs):
        raise ValueError(f"{len(depths)} stack depths for {len(funcs)} functions: {funcs}")
    depth = dict(zip(funcs, depths))
    callees = {}
    for a, b in calls:
        callees.setdefault(a, []).append(b)

    def walk(f, seen):
        best = (0, [])
        for g in callees.get(f, []):
            if g in seen:  # the verifier refuses recursion; never loops here
                continue
            best = max(best, walk(g, seen | {g}))
        return (rounded(depth[f]) + best[0], [f] + best[1])

    return walk(funcs[0], {funcs[0]})


def programs_of(pid):
    """{prog_id: verified_insns or None} of the BPF programs process `pid` holds open."""
    out = {}
    fds = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fds):
        try:
            with open(f"{fds}/{fd}") as f:
                info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        if "prog_type" in info and "prog_id" in info:
            out[int(info["prog_id"])] = int(info["verified_insns"]) if "verified_insns" in info else None
    return out


def margins(pid, log_text):
    """[{name, id, insns, stack, chain}] for every program `pid` holds, joined with its load log."""
    logs = load_logs(log_text)
    listed = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                                       check=True).stdout)
    names = {p["id"]: p.get("name", "?") for p in listed}
    rows = []
    for pid_, verified in sorted(programs_of(pid).items()):
        name = names.get(pid_, "?")
        # the kernel keeps 15 characters of a program's name
        log = logs.get(name) or next((v for k, v in logs.items() if k[:15] == name), None)
        if log is None or log["stack"] is None:
            raise AssertionError(f"program {name} (id {pid_}) has no verifier statistics in the agent's log")
        xlated = subprocess.run(["bpftool", "prog", "dump", "xlated", "id", str(pid_)], capture_output=True,
                                text=True, check=True).stdout
        funcs, calls = functions_and_calls(xlated)
        if not funcs:  # a program without BTF function info: one function
            funcs = [name]
        stack, chain = deepest_chain(funcs, calls, log["stack"])
        rows.append({"name": name, "id": pid_, "insns": verified if verified is not None else log["insns"],
                     "stack": stack, "chain": chain})
    return rows
