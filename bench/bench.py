"""waitmeter benchmarks: overhead and accuracy, side by side with peers.

  make bench                           the default run (~20-25 min)
  make bench BENCH_ARGS=--quick        fewer rounds and scenarios (~7 min)
  make bench BENCH_ARGS="--only pingpong,accuracy --rounds 3"
  make bench BENCH_ARGS="--churn-minutes 10"   also: 10 min of thread churn under run --all
  make bench BENCH_ARGS="--only long --soak-minutes 60"   only the 1-hour soak

Each overhead scenario runs its workload with no tool, then with each tool,
interleaved in the same run (none, tool1, tool2, ..., none, tool1, ...), and
prints medians, the slowdown against the no-tool baseline and, beside the
figures that have one, whether the target is met. It prints, it does not fail
on timings. Results: bench/results/latest.json (and a timestamped copy).
Method and the latest results: docs/performance.md.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as h
import probe_docs  # noqa: E402

RESULTS = h.BENCH / "results"

TARGETS = {
    "gil_slowdown": 0.01,       # scenario 1, default mode
    "pingpong_slowdown": 0.05,  # GIL ping-pong, default mode
    "agent_cpu_10k": 0.01,      # of one core at 10k scheduler events/s
    "peak_rss_mib": 64.0,
    "accuracy": 0.02,
    "first_answer_s": 1.0,
    "sidecar_slowdown": 0.03,       # the switch storm (pinned ping-pong) under run --all, default mode
    "switch_over_floor_ns": 150.0,  # sched_switch per run on a watched task, over the empty program's (bpf_stats)
    "wake_over_floor_ns": 75.0,     # sched_wakeup, sched_waking per run on a watched task, over the empty program's
    "unwatched_over_floor_ns": 10.0,  # per run on an unwatched task, over the empty program's
    "agent_cpu_20k": 0.01,          # of one core, process + programs, at 20k switches/s of watched threads
    "agent_cpu_idle": 0.002,        # of one core when nothing watched switches
    "pod_list_ratio": 1.5,          # peak RSS over a one-pod list's, per byte of the list (+ 16 MiB)
    "churn_exit_rate": 20000.0,     # thread exits/s the long churn must reach
    "churn_agent_cpu": 0.05,        # agent process, of one core, under that churn
    "rss_growth_mib": 4.0,          # churn, soak: RSS at the end over RSS after the first minute
    "page_mib": 6.0,                # attach --html of 10 s of a 64-thread switch storm: the file
    "page_render_s": 3.0,           # ... and headless Chromium's time to draw it, from the start of its loading
}


def verdict(ok):
    return "met" if ok else "MISSED"


def pct(x, signed=True):
    if x is None:
        return "n/a"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.2f}%"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------- tools

def tools_for(kind, names):
    make = {
        "none": lambda: h.NoTool(),
        "waitmeter": lambda: h.Waitmeter("waitmeter"),
        "waitmeter-uprobe": lambda: h.Waitmeter("waitmeter-uprobe", "--gil-probe", "uprobe"),
        "waitmeter-nolock": lambda: h.Waitmeter("waitmeter-nolock", "--lock-probe", "none"),
        "waitmeter-nostacks": lambda: h.Waitmeter("waitmeter-nostacks", "--stacks", "none"),
        "waitmeter-timeline": lambda: h.Waitmeter("waitmeter-timeline", "--timeline-minutes", "5"),
        "waitmeter-syscalls": lambda: h.Waitmeter("waitmeter-syscalls", "--syscalls", "on"),
        "waitmeter-syscalls-elsewhere": lambda: h.Waitmeter("waitmeter-syscalls-elsewhere", "--syscalls", "on", elsewhere=True),
        "waitmeter-elsewhere": lambda: h.Waitmeter("waitmeter-elsewhere", elsewhere=True),
        "waitmeter-all": lambda: h.Waitmeter("waitmeter-all", all_processes=True),
        "waitmeter-all-nostacks": lambda: h.Waitmeter("waitmeter-all-nostacks", "--stacks", "none", all_processes=True),
        "waitmeter-all-uprobe": lambda: h.Waitmeter("waitmeter-all-uprobe", "--gil-probe", "uprobe", all_processes=True),
        "waitmeter-all-timeline": lambda: h.Waitmeter("waitmeter-all-timeline", "--timeline-minutes", "5", all_processes=True),
        "floor": lambda: h.Floor("floor"),
        "py-spy": lambda: h.PySpy("py-spy"),
        "py-spy-nonblocking": lambda: h.PySpy("py-spy-nonblocking", nonblocking=True),
        "bpftrace-gil": lambda: h.Bpftrace("bpftrace-gil", h.bpftrace_gil_script),
        "bpftrace-sched": lambda: h.Bpftrace("bpftrace-sched", h.bpftrace_sched_script),
    }
    return [make[n]() for n in names]


TOOL_NOTES = {
    "none": "no tool (baseline)",
    "waitmeter": "waitmeter run, default (futex GIL method), scraped every 2 s",
    "waitmeter-uprobe": "waitmeter run --gil-probe uprobe (take_gil/drop_gil uprobes)",
    "waitmeter-nolock": "waitmeter run --lock-probe none (no parking-lot uprobes on 3.13+)",
    "waitmeter-syscalls": "waitmeter run --syscalls on (the syscall probe: every syscall of the machine enters it)",
    "waitmeter-syscalls-elsewhere": "waitmeter run --syscalls on watching another process (an idle sleep): what the probe costs the rest of the machine",
    "waitmeter-timeline": "waitmeter run --timeline-minutes 5 (every closed interval a span in the ring, kept 5 min: the timeline's cost is the difference from waitmeter)",
    "waitmeter-nostacks": "waitmeter run --stacks none (no wait stacks, no holder sampler: the default's cost of stacks is the difference)",
    "waitmeter-all": "waitmeter run --all (the sidecar's mode: every process of the PID namespace, the bench's own included)",
    "waitmeter-all-nostacks": "waitmeter run --all --stacks none",
    "waitmeter-all-timeline": "waitmeter run --all --timeline-minutes 5 (the sidecar keeping every process' timeline)",
    "waitmeter-all-uprobe": "waitmeter run --all --gil-probe uprobe (take_gil/drop_gil uprobes in every Python process)",
    "waitmeter-elsewhere": "waitmeter run watching another process (an idle sleep): the workload is unwatched, the hooks still run",
    "floor": "empty tp_btf programs on the sched probe's hooks (bench/floor/): the per-event floor, for bpf_stats",
    "py-spy": "py-spy record --rate 100 (blocking: pauses the target per sample)",
    "py-spy-nonblocking": "py-spy record --rate 100 --nonblocking",
    "bpftrace-gil": "bpftrace: uprobe+uretprobe on take_gil, time per thread",
    "bpftrace-sched": "bpftrace: sched_switch off-CPU time + sys_enter/exit_futex time per thread",
}


# ---------------------------------------------------------------- workloads

def python_workload(py, script, *args):
    def make():
        w = h.Workload([py, h.BENCH / "workloads" / script, *args])
        w.libpython = h.libpython(py)
        return w
    return make


def storm_workload(*args):
    storm = h.build_c("storm", h.BENCH / "workloads" / "storm.c")
    return lambda: h.Workload([storm, *args])


# ---------------------------------------------------------------- overhead scenarios

class Overhead:
    """An overhead scenario: one workload, several tools, interleaved rounds."""

    def __init__(self, name, title, make, tools, metrics, rounds, timeout, target=None, stats_tools=("waitmeter",),
                 costs=None, stats_rounds=1):
        self.name, self.title, self.make, self.tools = name, title, make, tools
        self.metrics = metrics  # [(key, label, higher_is_better)]; the first is the one slowdown is computed on
        self.rounds, self.timeout, self.target = rounds, timeout, target  # target: (key in TARGETS, tool name)
        self.stats_tools = stats_tools
        # (watched tool, unwatched tool): a per-event cost table against the "floor" tool's bpf_stats run
        self.costs = costs
        # bpf_stats runs of each stats tool, interleaved; per program, the median of its runs
        self.stats_rounds = stats_rounds


def run_overhead(sc, out):
    print(f"\n== {sc.name}: {sc.title}")
    print(f"   {sc.rounds} interleaved rounds of: {', '.join(t.name for t in sc.tools)}", flush=True)
    runs = {t.name: [] for t in sc.tools}
    errors = []
    for r in range(sc.rounds):
        for tool in sc.tools:
            try:
                res = h.run_once(sc.make, tool, sc.timeout)
                res.pop("bpftrace_output", None)
                res["round"] = r
                runs[tool.name].append(res)
            except RuntimeError as e:
                errors.append(f"round {r} {tool.name}: {e}")
                print(f"   error: round {r} {tool.name}: {e}", flush=True)
        key = sc.metrics[0][0]
        print(f"   round {r + 1}/{sc.rounds}: " + "  ".join(
            f"{n}={runs[n][-1][key]:.4g}" for n in runs if runs[n] and runs[n][-1]["round"] == r), flush=True)
    # one more run of waitmeter with BPF statistics on: events handled and their in-kernel cost
    bpf = {}
    for r in range(sc.stats_rounds):
        for tool in sc.tools:
            if tool.name in sc.stats_tools:
                try:
                    with h.BpfStats():
                        res = h.run_once(sc.make, tool, sc.timeout, bpf_stats=True)
                    bpf.setdefault(tool.name, []).append(
                        {k: res.get(k) for k in ("bpf_progs", "bpf_runs_per_s", "bpf_cpu_share", "wall_s", "tool_cpu_per_s")})
                except RuntimeError as e:
                    errors.append(f"bpf_stats {tool.name}: {e}")
    bpf = {name: merge_stats(rs) for name, rs in bpf.items()}
    summary = summarize(sc, runs, bpf)
    sc.bpf = bpf
    print_overhead(sc, summary)
    out[sc.name] = {"title": sc.title, "kind": "overhead", "rounds": sc.rounds, "runs": runs, "bpf_stats": bpf,
                    "summary": summary, "errors": errors, "metric": sc.metrics[0][0],
                    "higher_is_better": sc.metrics[0][2], "target": sc.target}
    if sc.costs:
        costs = per_event_costs(sc, bpf)
        out.setdefault("per_event_costs", {})[sc.name] = costs
        print_costs(costs)
    return out[sc.name]


def merge_stats(runs):
    """One tool's bpf_stats runs as one: per program and per figure, the median over the runs
    (a run-to-run spread of ±15% on a shared 2-vCPU VM makes one run a poor per-event figure)."""
    progs = {}
    for r in runs:
        for prog, v in (r.get("bpf_progs") or {}).items():
            progs.setdefault(prog, []).append(v)
    merged = {k: median([r.get(k) for r in runs]) for k in ("bpf_runs_per_s", "bpf_cpu_share", "wall_s", "tool_cpu_per_s")}
    merged["bpf_progs"] = {prog: {k: median([v[k] for v in vs if v["runs_per_s"] > 0 or k != "ns_per_run"]) or 0.0
                                  for k in ("runs_per_s", "ns_per_run", "cpu_share")}
                           for prog, vs in progs.items()}
    merged["runs"] = len(runs)
    return merged


# ---------------------------------------------------------------- per-event cost against the floor

HOOKS = ["sched_switch", "sched_wakeup", "sched_waking", "sched_wakeup_new", "sched_process_exit"]


def hook_of(prog):
    """The hook a program runs on, by name: waitmeter's are the hook + "_btf" (sched_waking's variant
    without the preempt count, loaded where the kernel's symbols do not name it, is
    "sched_waking_noirq_btf"), the floor's the hook."""
    return (prog[:-4] if prog.endswith("_btf") else prog).removesuffix("_noirq")


def per_event_costs(sc, bpf):
    """ns per run of every program of each tool's bpf_stats run, by hook, with the empty
    program's (floor) beside it, and the watched/unwatched tools' figures over it."""
    watched, unwatched = sc.costs
    tools = [t.name for t in sc.tools if t.name in bpf]
    hooks = {}
    for tool in tools:
        for prog, v in (bpf[tool].get("bpf_progs") or {}).items():
            if v["runs_per_s"] > 0:
                hooks.setdefault(hook_of(prog), {})[tool] = {"ns_per_run": v["ns_per_run"], "runs_per_s": v["runs_per_s"]}
    order = [k for k in HOOKS if k in hooks] + sorted(k for k in hooks if k not in HOOKS)
    over = {}
    for hook in order:
        floor = hooks[hook].get("floor", {}).get("ns_per_run")
        row = {"floor_ns": floor}
        for side, tool in (("watched", watched), ("unwatched", unwatched)):
            v = hooks[hook].get(tool)
            if v:
                row[f"{side}_ns"] = v["ns_per_run"]
                row[f"{side}_runs_per_s"] = v["runs_per_s"]
                if floor is not None:
                    row[f"{side}_over_floor_ns"] = v["ns_per_run"] - floor
        over[hook] = row
    return {"tools": tools, "watched": watched, "unwatched": unwatched, "hooks": {k: hooks[k] for k in order},
            "over_floor": over}


def print_costs(c):
    print(f"   per-event cost, ns per run (bpf_stats runs; watched: {c['watched']}, unwatched: {c['unwatched']}, "
          f"floor: the empty program on the same hook):")
    print(f"   {'hook':<20}" + "".join(f"{t:>24}" for t in c["tools"]) + f"{'watched-floor':>15}{'unwatched-floor':>17}")
    for hook, cells in c["hooks"].items():
        o = c["over_floor"][hook]
        print(f"   {hook:<20}" + "".join(
            f"{(format(cells[t]['ns_per_run'], '.0f') + ' (' + format(cells[t]['runs_per_s'], ',.0f') + '/s)') if t in cells else '-':>24}"
            for t in c["tools"])
              + f"{ns(o.get('watched_over_floor_ns')):>15}{ns(o.get('unwatched_over_floor_ns')):>17}")


def ns(v):
    return "-" if v is None else f"{v:+.0f}"


def slowdown(value, base, higher_is_better):
    """Positive: the workload got slower (less throughput or more time)."""
    if value is None or base is None or value == 0 or base == 0:
        return None
    return base / value - 1 if higher_is_better else value / base - 1


def summarize(sc, runs, bpf):
    key, _, hib = sc.metrics[0]
    base_by_round = {r["round"]: r[key] for r in runs.get("none", [])}
    floor_by_round = {r["round"]: r[key] for r in runs.get("floor", [])}
    summary = {}
    for name, rs in runs.items():
        s = {"n": len(rs)}
        for k, _, _ in sc.metrics:
            s[k] = median([r.get(k) for r in rs])
        if name == "none" and len(rs) >= 2:
            # run-to-run spread of the baseline: median absolute deviation over the median
            med = s[key]
            s["noise"] = median([abs(r[key] - med) for r in rs]) / med if med else None
        if name != "none":
            # paired: each run against the baseline of its own round, then the median
            s["slowdown"] = median([slowdown(r[key], base_by_round.get(r["round"]), hib) for r in rs])
            cpu_key = sc.metrics[1][0]
            cpu_base = {r["round"]: r.get(cpu_key) for r in runs.get("none", [])}
            s["cpu_slowdown"] = median([slowdown(r.get(cpu_key), cpu_base.get(r["round"]), False) for r in rs])
            s["slowdown_of_medians"] = slowdown(s[key], summary.get("none", {}).get(key), hib)
            if floor_by_round and name != "floor":
                # against the empty programs' run of the same round: what the tool adds over the bare hooks
                s["slowdown_vs_floor"] = median([slowdown(r[key], floor_by_round.get(r["round"]), hib) for r in rs])
            s["tool_cpu_per_s"] = median([r.get("tool_cpu_per_s") for r in rs])
            s["tool_peak_rss_mib"] = max([r["tool_peak_rss_mib"] for r in rs if r.get("tool_peak_rss_mib")], default=None)
            lost = [r.get("events_lost") for r in rs if r.get("events_lost") is not None]
            if lost:
                s["events_lost"] = max(lost)
                worst = max(rs, key=lambda r: r.get("events_lost") or 0)
                s["events_lost_by_reason"] = worst.get("events_lost_by_reason", {})
        s["machine_ctxt_per_s"] = median([r.get("machine_ctxt_per_s") for r in rs])
        if name in bpf:
            s["bpf_runs_per_s"] = bpf[name].get("bpf_runs_per_s")
            s["bpf_cpu_share"] = bpf[name].get("bpf_cpu_share")
            if s.get("tool_cpu_per_s") is not None and s.get("bpf_cpu_share") is not None:
                s["agent_total_cpu_share"] = s["tool_cpu_per_s"] + s["bpf_cpu_share"]
        if sc.target and name == sc.target[1] and s.get("slowdown") is not None:
            s["target"] = TARGETS[sc.target[0]]
            s["met"] = s["slowdown"] <= TARGETS[sc.target[0]]
            if s.get("cpu_slowdown") is not None:
                s["cpu_met"] = s["cpu_slowdown"] <= TARGETS[sc.target[0]]
        summary[name] = s
    return summary


def mib(v):
    return f"{v:.1f}M" if v else "-"


def fmt(v):
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.3g}"
    return f"{v:.3g}"


def print_overhead(sc, summary):
    cols = [label for _, label, _ in sc.metrics]
    print(f"   {'tool':<20}" + "".join(f"{c:>16}" for c in cols)
          + f"{'slowdown':>10}{'CPU +':>8}{'tool CPU':>10}{'tool RSS':>10}{'BPF CPU':>9}{'BPF runs/s':>11}  target")
    for name, s in summary.items():
        line = f"   {name:<20}" + "".join(f"{fmt(s.get(k)):>16}" for k, _, _ in sc.metrics)
        line += f"{(pct(s['slowdown']) if 'slowdown' in s else ('±' + pct(s['noise'], False) if s.get('noise') is not None else '-')):>10}"
        line += f"{(pct(s['cpu_slowdown']) if s.get('cpu_slowdown') is not None else '-'):>8}"
        line += f"{(pct(s['tool_cpu_per_s'], False) if s.get('tool_cpu_per_s') is not None else '-'):>10}"
        line += f"{mib(s.get('tool_peak_rss_mib')):>10}"
        line += f"{(pct(s['bpf_cpu_share'], False) if s.get('bpf_cpu_share') is not None else '-'):>9}"
        line += f"{(fmt(s['bpf_runs_per_s']) if s.get('bpf_runs_per_s') is not None else '-'):>11}"
        if "met" in s:
            line += f"  ≤{s['target'] * 100:.0f}%: {verdict(s['met'])}"
            if "cpu_met" in s:
                line += f" (CPU: {verdict(s['cpu_met'])})"
        print(line)
    if any("slowdown_vs_floor" in s for s in summary.values()):
        print("   against the floor (empty programs on the same hooks) of the same round: " + ", ".join(
            f"{name} {pct(s['slowdown_vs_floor'])}" for name, s in summary.items() if "slowdown_vs_floor" in s))
    for name, s in summary.items():
        if s.get("events_lost"):
            print(f"   {name}: events lost in the worst run: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in s.get("events_lost_by_reason", {}).items()))
    for name, b in (getattr(sc, "bpf", None) or {}).items():
        progs = b.get("bpf_progs") or {}
        print(f"   {name} BPF programs (bpf_stats run): " + ", ".join(
            f"{p.replace('_btf', '')} {v['runs_per_s']:,.0f}/s × {v['ns_per_run']:.0f} ns"
            for p, v in sorted(progs.items(), key=lambda x: -x[1]["cpu_share"]) if v["runs_per_s"] >= 1))
    print(f"   (slowdown: of {sc.metrics[0][1]}, median over rounds of each run against the baseline of its round; "
          f"the baseline row shows its run-to-run noise (median absolute deviation); "
          f"CPU +: the same for the workload's own CPU time ({sc.metrics[1][1]}, BPF programs included); "
          f"tool CPU: user+sys of the tool's process per second of workload; "
          f"BPF CPU/runs: waitmeter's programs, from one extra run with kernel.bpf_stats_enabled=1)", flush=True)


# ---------------------------------------------------------------- the agent's cost per switch rate

PRIMITIVE_NOTES = {
    "helper_call": "a helper call that does next to nothing (bpf_get_prandom_u32)",
    "ktime": "bpf_ktime_get_ns: sched_waking's and an exit's clock; a switch's or a wakeup's once a millisecond per run queue",
    "current_task": "bpf_get_current_task_btf",
    "task_pt_regs": "bpf_task_pt_regs of current: the syscall in flight (switch-out, waking)",
    "hash_lookup": "the per-thread entry: a hash lookup by TID, 3,000 entries (threads, blame maps)",
    "hash_lookup_locked": "the same, then bpf_spin_lock/unlock of the entry",
    "array_lookup": "an array lookup (inlined by the verifier)",
    "percpu_scratch": "a per-CPU array lookup (inlined): scratch space",
    "task_storage": "bpf_task_storage_get: per-task state",
    "atomic_add": "an array lookup and an atomic add",
    "rq_clock": "the run queue's clock through current's typed pointer (task->se.cfs_rq->rq->clock): a switch's and a wakeup's time (less current_task: loads)",
}


def primitives(quick, out):
    """What each BPF primitive the probes are made of costs on this machine: one program per primitive on
    sys_enter, timed on a getppid(2) loop against an empty program in interleaved rounds
    (bench/primitives/). The per-event figures of docs/probes/ are sums of these."""
    rounds = 3 if quick else 9
    print(f"\n== primitives: each BPF primitive's cost, over an empty tp_btf program, median of {rounds} rounds")
    try:
        obj = h.build_bpf("primitives.bpf.o", h.BENCH / "primitives" / "primitives.bpf.c")
        loop = h.build_c("primitives-loop", h.BENCH / "primitives" / "loop.c")
        cp = subprocess.run([sys.executable, str(h.BENCH / "primitives" / "primitives.py"), str(obj), str(loop),
                             "--rounds", str(rounds)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        print(f"   failed: {e}")
        out["primitives"] = {"kind": "primitives", "error": str(e)}
        return
    if cp.returncode != 0:
        print(f"   failed: {cp.stderr.strip()}")
        out["primitives"] = {"kind": "primitives", "error": cp.stderr.strip()}
        return
    r = json.loads(cp.stdout)
    print(f"   floor (an empty tp_btf program on sys_enter, its call and its filter): {r['floor_ns']:.0f} ns")
    for name, ns in r["primitives"].items():
        lo, hi = r["spread"][name]
        print(f"   {name:<20} {ns:6.0f} ns  ({lo:.0f}..{hi:.0f})  {PRIMITIVE_NOTES.get(name, '')}")
    out["primitives"] = {"kind": "primitives", **r}


def agent_rate(quick, out):
    """The agent's whole cost (its process CPU plus its programs' CPU, bpf_stats) under run --all at three
    paced switch rates of a watched pipe ping-pong; the workload's own switches/s (its threads' voluntary and
    involuntary switches, from /proc) are the x axis. A least-squares line gives the cost per 10k switches/s
    and its value at 20k switches/s, a busy service's rate."""
    secs = 3 if quick else 5
    rates = (2500, 5000, 10000)  # round trips/s; each is 2 switches of the workload's threads (and 2 more to idle)
    print(f"\n== agent-rate: the agent's cost under run --all at {', '.join(map(str, rates))} paced round trips/s, {secs} s each")
    rows, errors = [], []
    for rep in range(1 if quick else 2):
        for rate in rates:
            tool = h.Waitmeter("waitmeter-all", all_processes=True)
            try:
                with h.BpfStats():
                    res = h.run_once(storm_workload("paced", rate, secs), tool, secs + 30, bpf_stats=True)
            except RuntimeError as e:
                errors.append(f"{rate}/s: {e}")
                continue
            row = {"round_trips_per_s": rate, "switches_per_s": res.get("workload_switches_per_s"),
                   "machine_ctxt_per_s": res.get("machine_ctxt_per_s"), "process": res.get("tool_cpu_per_s"),
                   "bpf": res.get("bpf_cpu_share")}
            if None in row.values():
                errors.append(f"{rate}/s: a figure is missing: {row}")
                continue
            row["total"] = row["process"] + row["bpf"]
            rows.append(row)
            print(f"   {rate}/s: {row['switches_per_s']:,.0f} switches/s of the workload ({row['machine_ctxt_per_s']:,.0f} on "
                  f"the machine): process {pct(row['process'], False)} + BPF {pct(row['bpf'], False)} = {pct(row['total'], False)}",
                  flush=True)
    fit = None
    if len({r["round_trips_per_s"] for r in rows}) >= 2:
        xs, ys = [r["switches_per_s"] for r in rows], [r["total"] for r in rows]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        fit = {"per_10k": slope * 10000, "at_0": my - slope * mx, "at_20k": my + slope * (20000 - mx)}
        fit["met"] = fit["at_20k"] <= TARGETS["agent_cpu_20k"]
        print(f"   fit: {pct(fit['at_0'], False)} of a core at rest + {pct(fit['per_10k'], False)} per 10k switches/s: "
              f"{pct(fit['at_20k'], False)} at 20k switches/s (≤ 1%: {verdict(fit['met'])})")
    out["agent-rate"] = {"kind": "agent-rate", "rows": rows, "fit": fit, "errors": errors, "seconds": secs}


# ---------------------------------------------------------------- accuracy

def accuracy_gil(minors, repeats, out):
    print(f"\n== accuracy-gil: GIL wait measured vs a C extension holding the GIL 20 × 50 ms (median of runs)")
    rows = []
    for minor in minors:
        py = h.pyenv_python(minor)
        if not py:
            print(f"   3.{minor}: not installed, skipped")
            continue
        hold = h.build_holdgil(py)
        # (tool, switch interval, runs): the default 5 ms interval, and 100 ms (one futex sleep per hold)
        plan = [("waitmeter", 0.005, repeats), ("bpftrace-gil", 0.005, 1), ("waitmeter", 0.1, 1)]
        for tool_name, interval, n in plan:
            make = python_workload(py, "gil_truth.py", hold, 50, 20, interval)
            tool = tools_for("py", [tool_name])[0]
            trials = []
            for _ in range(n):
                try:
                    trials.append(gil_trial(make, tool))
                except RuntimeError as e:
                    print(f"   3.{minor} {tool_name}: error: {e}")
            if not trials:
                continue
            errs = [(t["measured_s"] - t["truth_s"]) / t["truth_s"] for t in trials]
            row = sorted(trials, key=lambda t: (t["measured_s"] - t["truth_s"]) / t["truth_s"])[len(trials) // 2]
            row.update(python=f"3.{minor}", tool=tool_name, switch_interval_s=interval, errors=errs,
                       error=(row["measured_s"] - row["truth_s"]) / row["truth_s"], loadavg=os.getloadavg()[0])
            row["met"] = abs(row["error"]) <= TARGETS["accuracy"]
            rows.append(row)
            extra = ""
            if row.get("waiter_runqueue_s") is not None:
                extra = f"; waiter's runqueue {row['waiter_runqueue_s']:.3f} s, blamed on holder {row['blamed_on_holder_s']:.3f} s"
            print(f"   3.{minor} {tool_name:<13} interval {interval * 1e3:>3.0f} ms: truth {row['truth_s']:.4f} s, "
                  f"measured {row['measured_s']:.4f} s, error {pct(row['error'])}"
                  + (f" (runs {', '.join(pct(e) for e in errs)})" if len(errs) > 1 else "")
                  + extra + f"; load {row['loadavg']:.1f}  ±2%: {verdict(row['met'])}", flush=True)
    out["accuracy-gil"] = {"kind": "accuracy", "rows": rows}


def gil_trial(make, tool):
    """One run of gil_truth.py: the truth and what the tool measured for the waiter."""
    res = h.run_once(make, tool, timeout=60)
    trial = {"truth_s": res["held_s"]}
    if tool.name == "waitmeter":
        lines = tool.last_text.splitlines()
        waiter = [l for l in lines if l.startswith("waitmeter_gil_wait_seconds_total{") and 'thread="waiter"' in l]
        trial["measured_s"] = h.metric_sum("\n".join(waiter), "waitmeter_gil_wait_seconds_total")
        trial["blamed_on_holder_s"] = h.metric_sum("\n".join(l for l in waiter if 'holder="holder"' in l),
                                                   "waitmeter_gil_wait_seconds_total")
        trial["waiter_runqueue_s"] = h.metric_value(tool.last_text, "waitmeter_thread_seconds_total",
                                                    thread="waiter", state="runqueue")
    else:
        waits = h.parse_bpftrace_map(res.get("bpftrace_output", ""), "gil_wait_ns")
        trial["measured_s"] = waits.get(res["tids"].get("waiter"), 0) / 1e9
    return trial


def attach_json(pid, duration, *extra):
    cmd = [h.WAITMETER, "attach", "--pid", pid, "--duration", duration, "--output", "json", *extra]
    t0 = time.monotonic()
    p = h.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = p.communicate(timeout=float(duration) + 60)
    finally:
        h.reap(p)
    wall = time.monotonic() - t0
    if not stdout.strip():
        raise RuntimeError(f"attach gave no report (exit {p.returncode}): {stderr.decode()[-300:]}")
    return json.loads(stdout), wall


def partition_error(report):
    """Largest |sum of states - time the thread existed| / existed, and for threads
    that lived through the window |existed - window| / window."""
    worst = 0.0
    for t in report["threads"]:
        total = sum(t["seconds"].values())
        if t["existed_s"] > 0:
            worst = max(worst, abs(total - t["existed_s"]) / t["existed_s"])
        if not t.get("exited"):
            worst = max(worst, abs(total - report["duration_s"]) / report["duration_s"])
    return worst


def accuracy_partition(quick, out):
    print("\n== accuracy-partition: the states of every thread sum to wall time")
    rows = []
    threads_bin = h.build_c("threads", h.ROOT / "tests" / "workloads" / "threads.c")
    cases = [("C: busy, sleep, pipe, mutex", lambda: h.Workload([threads_bin, "--busy", 1, "--sleep", 1, "--pipe", 1, "--mutex"], linger=False), False)]
    py = h.pyenv_python(12)
    if py:
        cases.append(("Python 3.12 ingest/processor", python_workload(py, "ingest.py", 30, "--items", 20000), True))
    for label, make, needs_go in cases:
        w = make()
        try:
            if needs_go:
                w.go()
            report, wall = attach_json(w.pid, 2)
        except RuntimeError as e:
            print(f"   {label}: error: {e}")
            continue
        finally:
            w.close()
        err = partition_error(report)
        row = {"workload": label, "threads": len(report["threads"]), "window_s": report["duration_s"],
               "attach_wall_s": wall, "max_error": err, "met": err <= TARGETS["accuracy"]}
        rows.append(row)
        print(f"   {label:<32} {row['threads']} threads, window {report['duration_s']:.3f} s: "
              f"worst |sum - wall| {pct(err, False)}  within 2%: {verdict(row['met'])}", flush=True)
    out["accuracy-partition"] = {"kind": "accuracy", "rows": rows}


def accuracy_throttle(out):
    print("\n== accuracy-throttle: throttled time vs the cgroup's cpu.stat (v1, 20 ms per 100 ms, one busy thread)")
    rows = []
    threads_bin = h.build_c("threads", h.ROOT / "tests" / "workloads" / "threads.c")
    cg = h.make_cgroup(f"waitmeter-bench-{os.getpid()}", 20000)
    try:
        w = h.Workload([threads_bin, "--busy", 1], linger=False)
        try:
            (cg / "cgroup.procs").write_text(str(w.pid))
            before = h.cpu_stat(cg)
            report, _ = attach_json(w.pid, 3)
            after = h.cpu_stat(cg)
        finally:
            w.close()
    finally:
        h.remove_cgroup(cg)
    c = report["cgroup"] or {}
    measured = sum(t["seconds"]["throttled"] for t in report["threads"])
    truth = c.get("throttled_s") or 0.0
    bracket = (after["throttled_time"] - before["throttled_time"]) / 1e9
    err = (measured - truth) / truth if truth else None
    row = {"measured_s": measured, "cpu_stat_window_s": truth, "cpu_stat_bracket_s": bracket,
           "nr_throttled": c.get("nr_throttled"), "throttled_stretches": c.get("throttled_stretches"),
           "error": err, "met": err is not None and abs(err) <= TARGETS["accuracy"]}
    rows.append(row)
    print(f"   threads' throttled {measured:.4f} s vs cpu.stat throttled_time {truth:.4f} s over the same window "
          f"(harness bracket {bracket:.4f} s): error {pct(err)}  within 2%: {verdict(row['met'])}; "
          f"stretches {c.get('throttled_stretches')} vs nr_throttled {c.get('nr_throttled')}", flush=True)
    out["accuracy-throttle"] = {"kind": "accuracy", "rows": rows}


def first_answer(runs, out):
    print("\n== first-answer: `waitmeter attach --duration 1` wall time minus the 1 s window")
    rows = []
    threads_bin = h.build_c("threads", h.ROOT / "tests" / "workloads" / "threads.c")
    cases = [("C process, 4 threads", lambda: h.Workload([threads_bin, "--busy", 1, "--sleep", 1, "--pipe", 1], linger=False), False)]
    py = h.pyenv_python(12)
    if py:
        cases.append(("Python 3.12 ingest/processor", python_workload(py, "ingest.py", 60, "--items", 20000), True))
    for label, make, needs_go in cases:
        w = make()
        extra = []
        try:
            if needs_go:
                w.go()
            for _ in range(runs):
                _, wall = attach_json(w.pid, 1)
                extra.append(wall - 1.0)
        except RuntimeError as e:
            print(f"   {label}: error: {e}")
        finally:
            w.close()
        if not extra:
            continue
        m = median(extra)
        row = {"workload": label, "runs": len(extra), "after_window_s": extra, "median_s": m, "max_s": max(extra),
               "met": m <= TARGETS["first_answer_s"]}
        rows.append(row)
        print(f"   {label:<32} median {m:.3f} s after the window (max {max(extra):.3f} s, {len(extra)} runs)  "
              f"≤ 1 s: {verdict(row['met'])}", flush=True)
    out["first-answer"] = {"kind": "latency", "rows": rows}


def chromium_wall(url, runs):
    """Median wall time of headless Chromium loading `url` and dumping its DOM (the page's
    script has run by then), and the last DOM."""
    exe = shutil.which("chromium")
    walls, dom = [], ""
    for i in range(runs):
        profile = tempfile.mkdtemp(prefix="wm-bench-chromium-")
        t0 = time.monotonic()
        cp = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
                             "--disable-background-networking", "--window-size=1400,1500", "--dump-dom", url],
                            capture_output=True, text=True, timeout=120)
        walls.append(time.monotonic() - t0)
        shutil.rmtree(profile, ignore_errors=True)
        dom = cp.stdout
    return median(walls), dom


def page(runs, out):
    """The one-file page (issue 40) of 10 s of a 64-thread ring passing 16 tokens (a switch storm):
    its size, and the time headless Chromium takes to draw it over its time for an empty page,
    in the same run."""
    print("\n== page: `attach --html` of 10 s of a 64-thread switch storm, drawn by headless Chromium")
    if not shutil.which("chromium"):
        print("   skipped: no chromium (make setup installs it)")
        return
    ring = h.build_c("ring", h.ROOT / "tests" / "workloads" / "ring.c")
    w = h.Workload([ring, 64, 16], linger=False)
    html_path = Path(tempfile.mkdtemp(prefix="wm-bench-page-")) / "storm.html"
    try:
        attach_json(w.pid, 10, "--html", str(html_path))
    finally:
        w.close()
    text = html_path.read_text()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1))
    size_mib = html_path.stat().st_size / (1 << 20)
    empty = html_path.with_name("empty.html")
    empty.write_text("<!doctype html><title>empty</title><p>empty</p>")
    base, _ = chromium_wall(f"file://{empty}", runs)
    wall, dom = chromium_wall(f"file://{html_path}", runs)
    drawn = 'data-ready="1"' in dom
    # the page's own clock: from the start of its loading to the end of its script
    m = re.search(r'data-render-ms="(\d+)"', dom)
    render_s = int(m.group(1)) / 1000 if m else float("inf")
    row = {"switches_per_s": data["spans"] / 10 / 2, "spans": data["spans"], "folded_below_ms": data["folded_below_ms"],
           "threads": len(data["threads"]), "page_mib": size_mib, "empty_s": base, "page_s": wall, "render_s": render_s,
           "script_ms": int(ms.group(1)) if (ms := re.search(r'data-script-ms="(\d+)"', dom)) else None, "drawn": drawn,
           "met": drawn and size_mib <= TARGETS["page_mib"] and render_s <= TARGETS["page_render_s"]}
    print(f"   {row['threads']} threads, {row['switches_per_s']:,.0f} switches/s, {row['spans']:,} intervals folded below "
          f"{row['folded_below_ms']} ms: page {size_mib:.2f} MiB (≤ {TARGETS['page_mib']:.0f}); drawn {render_s:.2f} s after it "
          f"began to load, by its own clock (≤ {TARGETS['page_render_s']:.0f} s; its script {row['script_ms']} ms; Chromium's "
          f"whole run {wall:.2f} s against {base:.2f} s for an empty page, DOM dump included); drawn: {drawn}  {verdict(row['met'])}",
          flush=True)
    shutil.rmtree(html_path.parent, ignore_errors=True)
    out["page"] = {"kind": "latency", "rows": [row]}


def pod_list_memory(quick, out):
    """The agent's peak RSS fetching pod lists (tests/helpers/pod_lists.py) of the shapes and sizes
    of issue 54, over the same agent fetching a one-pod list, against each list's size."""
    print("\n== pod-list: `run --pods URL` peak RSS (VmHWM) over a one-pod list's, against the list's size")
    sys.path.insert(0, str(h.ROOT / "tests" / "helpers"))
    import pod_lists
    import socket

    def port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    sleeper = subprocess.Popen(["sleep", "600"])
    rows = []
    try:
        base = pod_lists.peak_rss_fetching(h.WAITMETER, sleeper.pid, pod_lists.body("small", 1), port())
        cases = [("ordinary", 500), ("annotated", 50), ("small", 100_000 if quick else 240_000)]
        for shape, pods in cases:
            data = pod_lists.body(shape, pods)
            peak = pod_lists.peak_rss_fetching(h.WAITMETER, sleeper.pid, data, port(), timeout=300)
            body_mib, over_mib = len(data) / (1 << 20), (peak - base) / 1024
            row = {"shape": shape, "pods": pods, "body_mib": body_mib, "base_peak_mib": base / 1024, "peak_mib": peak / 1024,
                   "over_base_mib": over_mib, "ratio": over_mib / body_mib, "met": over_mib <= TARGETS["pod_list_ratio"] * body_mib + 16}
            rows.append(row)
            print(f"   {pods:>9,} {shape:<10} pods: list {body_mib:6.1f} MiB, peak RSS {peak / 1024:6.1f} MiB, "
                  f"{over_mib:6.1f} MiB over the one-pod list's ({row['ratio']:.2f}x the list; ≤ {TARGETS['pod_list_ratio']}x + 16 MiB): "
                  f"{verdict(row['met'])}", flush=True)
    finally:
        sleeper.kill()
        sleeper.wait()
    out["pod-list"] = {"kind": "memory", "rows": rows}


# ---------------------------------------------------------------- long runs: churn and soak

LOST = "waitmeter_bpf_events_lost_total"
MAPS = "waitmeter_bpf_map_entries"


def agent_sample(tool, t0):
    """The agent's RSS, CPU, lost events by reason and map entries now, and the namespace's live threads."""
    text = tool.scrape()
    return {"t_s": round(time.monotonic() - t0, 1), "rss_mib": h.vm_rss_mib(tool.pid), "cpu_s": h.cpu_seconds(tool.pid),
            "lost": {k: v for k, v in h.metric_by(text, LOST, "probe", "reason").items() if v},
            "maps": h.metric_by(text, MAPS, "probe", "map"), "threads": h.live_threads()}


def idle_level(tool, n=4):
    """The agent's idle level before the work starts: n samples 1 s apart (its discovery rounds
    run meanwhile), each map at the highest it reached (the namespace's own jobs move it)."""
    t0 = time.monotonic()
    xs = []
    for _ in range(n):
        time.sleep(1)
        xs.append(agent_sample(tool, t0))
    idle = dict(xs[-1])
    idle["maps"] = {m: max(x["maps"].get(m, 0) for x in xs) for m in xs[-1]["maps"]}
    return idle


def maps_back(idle, now):
    """Maps whose entries exceed their idle level by more than the namespace's thread growth
    (run --all watches every thread of the namespace, other jobs' too): {map: (idle, now)}."""
    slack = max(0, now["threads"] - idle["threads"])
    return {m: (idle["maps"].get(m, 0), v) for m, v in now["maps"].items() if v > idle["maps"].get(m, 0) + slack}


def sample_for(tool, t0, secs, every, timeline, label):
    """Sample the agent every `every` s until `secs` s after t0."""
    while True:
        left = secs - (time.monotonic() - t0)
        if left <= 0:
            return
        time.sleep(min(every, left))
        try:
            timeline.append(agent_sample(tool, t0))
        except OSError as e:
            print(f"   {label}: scrape failed at {time.monotonic() - t0:.0f} s: {e}", flush=True)
            continue
        x = timeline[-1]
        print(f"   {label} {x['t_s']:>6.0f} s: RSS {x['rss_mib']:.1f} MiB, maps "
              + ", ".join(f"{k} {v:.0f}" for k, v in x["maps"].items())
              + (", lost " + ", ".join(f"{k} {v:.0f}" for k, v in x["lost"].items()) if x["lost"] else ""), flush=True)


def after_stop(tool, t0, idle, wait_s=15):
    """Samples after the work stopped until the maps are back to idle (or wait_s s)."""
    stop = time.monotonic()
    while True:
        x = agent_sample(tool, t0)
        x["after_stop_s"] = round(time.monotonic() - stop, 1)
        if not maps_back(idle, x) or time.monotonic() - stop >= wait_s:
            return x
        time.sleep(1)


def slope_per_hour(points):
    """Least-squares slope of [(t_s, y)] per hour; None under two points."""
    if len(points) < 2:
        return None
    n = len(points)
    mt, my = sum(t for t, _ in points) / n, sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / var * 3600 if var else None


def churn_long(minutes, rate, out):
    secs = minutes * 60
    print(f"\n== churn-long: thread churn under run --all for {minutes} min: 2 creator threads, "
          f"{'paced to ' + format(rate, ',') + ' exits/s' if rate else 'unpaced'}; the agent sampled every 10 s")
    storm = h.build_c("storm", h.BENCH / "workloads" / "storm.c")
    w = h.Workload([storm, "churnfor", secs, 2, rate])
    tool = h.Waitmeter("waitmeter-all", all_processes=True)
    timeline = []
    try:
        with h.BpfStats():
            tool.start(w)
            idle = idle_level(tool)
            t0, cpu0, progs0 = time.monotonic(), h.cpu_seconds(tool.pid), h.bpf_progs(tool.pid)
            w.go()
            sample_for(tool, t0, secs, 10, timeline, "churn")
            res = w.result(60)
            end = agent_sample(tool, t0)
            elapsed = end["t_s"]
            progs = h.bpf_delta(progs0, h.bpf_progs(tool.pid), elapsed)
            peak = h.peak_rss_mib(tool.pid)
            w.close()  # the churn is over: its process goes too
            after = after_stop(tool, t0, idle)
    except RuntimeError as e:
        print(f"   churn-long: error: {e}")
        out["churn-long"] = {"kind": "long", "error": str(e)}
        return
    finally:
        tool.stop()
        if w.proc.returncode is None:
            w.close()
    # RSS "at the start": after the first minute (after a quarter of the run if shorter than 4 min)
    first = next((x for x in timeline if x["t_s"] >= min(60, secs / 4)), end)
    r = {"kind": "long", "minutes": minutes, "paced_rate": rate, "exits": res["ops"], "seconds": res["seconds"],
         "exit_rate": res["ops"] / res["seconds"], "workload_cpu_s": res["cpu_s"],
         "agent_cpu": (end["cpu_s"] - cpu0) / elapsed,
         "bpf_cpu": sum(v["cpu_share"] for v in progs.values()), "bpf_progs": progs,
         "rss_start_mib": first["rss_mib"], "rss_start_t_s": first["t_s"], "rss_end_mib": end["rss_mib"],
         "peak_rss_mib": peak,
         "lost_end": end["lost"], "lost_after": after["lost"], "maps_idle": idle["maps"], "maps_end": end["maps"],
         "maps_after": after["maps"], "after_stop_s": after["after_stop_s"],
         "threads": {"idle": idle["threads"], "end": end["threads"], "after": after["threads"]},
         "maps_left": maps_back(idle, after), "idle": idle, "end": end, "after": after, "timeline": timeline}
    r["met"] = {"exit_rate": r["exit_rate"] >= TARGETS["churn_exit_rate"],
                "lost": not sum(after["lost"].values()),
                "maps": not r["maps_left"],
                "agent_cpu": r["agent_cpu"] <= TARGETS["churn_agent_cpu"],
                "rss": r["rss_end_mib"] - r["rss_start_mib"] <= TARGETS["rss_growth_mib"]}
    out["churn-long"] = r
    print(f"   {res['ops']:,} exits in {res['seconds']:.0f} s: {r['exit_rate']:,.0f}/s (≥ 20k: {verdict(r['met']['exit_rate'])}); "
          f"agent process {pct(r['agent_cpu'], False)} of a core (≤ 5%: {verdict(r['met']['agent_cpu'])}), "
          f"BPF {pct(r['bpf_cpu'], False)}")
    print(f"   RSS {r['rss_start_mib']:.1f} MiB at {r['rss_start_t_s']:.0f} s, {r['rss_end_mib']:.1f} MiB at the end "
          f"(≤ +4 MiB: {verdict(r['met']['rss'])}); lost: "
          + (", ".join(f"{k} {v:.0f}" for k, v in after["lost"].items()) or "none") + f" ({verdict(r['met']['lost'])})")
    print("   map entries idle / end of churn / " + f"{after['after_stop_s']:.0f} s after: "
          + ", ".join(f"{m} {idle['maps'].get(m, 0):.0f}/{end['maps'].get(m, 0):.0f}/{v:.0f}" for m, v in after["maps"].items())
          + f" (namespace threads {idle['threads']}/{end['threads']}/{after['threads']}; back to idle: {verdict(r['met']['maps'])})",
          flush=True)


def soak(minutes, out):
    secs = minutes * 60
    every = min(60, max(10, secs / 6))
    print(f"\n== soak: a mixed workload under run --all for {minutes} min, the agent sampled every {every:.0f} s")
    storm = h.build_c("storm", h.BENCH / "workloads" / "storm.c")
    parts = [("churn 2,000 exits/s", [storm, "churnfor", secs, 1, 2000]),
             ("futex storm: 4 threads, one mutex held across 50 us sleeps", [storm, "futexfor", secs, 4])]
    py = h.pyenv_python(12)
    if py:
        parts.insert(0, ("ingest/processor GIL workload, Python 3.12", [py, h.BENCH / "workloads" / "ingest.py", secs, "--items", 20000]))
    ws, timeline = [], []
    tool = h.Waitmeter("waitmeter-all", all_processes=True)
    try:
        for _, cmd in parts:
            ws.append(h.Workload(cmd))
        tool.start(ws[0])
        idle = idle_level(tool)
        t0, cpu0 = time.monotonic(), h.cpu_seconds(tool.pid)
        for w in ws:
            w.go()
        sample_for(tool, t0, secs, every, timeline, "soak")
        results = [w.result(120) for w in ws]
        end = agent_sample(tool, t0)
        for w in ws:
            w.close()
        after = after_stop(tool, t0, idle)
    except (RuntimeError, OSError) as e:
        print(f"   soak: error: {e}")
        out["soak"] = {"kind": "long", "error": str(e)}
        return
    finally:
        tool.stop()
        for w in ws:
            if w.proc.returncode is None:
                w.close()
    steady = [x for x in timeline + [end] if x["t_s"] >= min(60, secs / 4)] or [end]
    maps = sorted({m for x in steady for m in x["maps"]})
    r = {"kind": "long", "minutes": minutes, "workloads": [label for label, _ in parts], "results": results,
         "agent_cpu": (end["cpu_s"] - cpu0) / end["t_s"],
         "rss_first_mib": steady[0]["rss_mib"], "rss_first_t_s": steady[0]["t_s"], "rss_last_mib": end["rss_mib"],
         "rss_slope_mib_per_h": slope_per_hour([(x["t_s"], x["rss_mib"]) for x in steady]),
         "maps": {m: {"idle": idle["maps"].get(m, 0), "first": steady[0]["maps"].get(m, 0), "last": end["maps"].get(m, 0),
                      "after": after["maps"].get(m, 0),
                      "slope_per_h": slope_per_hour([(x["t_s"], x["maps"].get(m, 0)) for x in steady])} for m in maps},
         "lost": after["lost"], "maps_left": maps_back(idle, after), "after_stop_s": after["after_stop_s"],
         "idle": idle, "end": end, "after": after, "timeline": timeline}
    r["met"] = {"rss": r["rss_last_mib"] - r["rss_first_mib"] <= TARGETS["rss_growth_mib"], "maps": not r["maps_left"]}
    out["soak"] = r
    print(f"   RSS {r['rss_first_mib']:.1f} MiB at {r['rss_first_t_s']:.0f} s, {r['rss_last_mib']:.1f} MiB at the end, slope "
          f"{fmt(r['rss_slope_mib_per_h'])} MiB/h (≤ +4 MiB: {verdict(r['met']['rss'])}); agent process {pct(r['agent_cpu'], False)} of a core")
    for m, v in r["maps"].items():
        print(f"   {m}: idle {v['idle']:.0f}, first {v['first']:.0f}, last {v['last']:.0f}, after {v['after']:.0f}, "
              f"slope {fmt(v['slope_per_h'])}/h")
    print("   lost events by reason: " + (", ".join(f"{k} {v:.0f}" for k, v in r["lost"].items()) or "none")
          + f"; maps back to idle {r['after_stop_s']:.0f} s after: {verdict(r['met']['maps'])}", flush=True)


# ---------------------------------------------------------------- plan

GROUPS = {
    "gil": ["gil-3.11", "gil-3.12"],
    "pingpong": ["pingpong", "pingpong-unpinned", "pingpong-3.14"],
    "sidecar": ["pingpong-all", "condpair-all"],
    # every program's per-event cost (docs/probes/*.md are generated from these: bench/probe_docs.py)
    "cost": ["pingpong-all", "condpair-all", "churn", "pingpong-3.14", "syscalls", "agent-rate", "primitives"],
    "storms": ["ctxswitch", "futex-uncontended", "futex-contended", "churn", "syscalls"],
    "agent": ["sched-10k", "agent-rate", "idle"],
    "accuracy": ["accuracy-gil", "accuracy-partition", "accuracy-throttle"],
    "latency": ["first-answer", "page"],
    "memory": ["pod-list"],
    "long": ["churn-long", "soak"],  # only with --churn-minutes / --soak-minutes
}
ALL = list(dict.fromkeys(s for g in GROUPS.values() for s in g))


def overhead_scenarios(args):
    quick = args.quick
    R = args.rounds
    sc = {}
    gil_secs = 3 if quick else 5
    for minor in (11, 12):
        py = h.pyenv_python(minor)
        if py:
            sc[f"gil-3.{minor}"] = Overhead(
                f"gil-3.{minor}", f"ingest/processor GIL workload, Python 3.{minor}, {gil_secs} s, 500 msg/s fed",
                python_workload(py, "ingest.py", gil_secs, "--items", 20000),
                tools_for("py", ["none", "waitmeter", "waitmeter-nostacks", "waitmeter-uprobe", "py-spy", "bpftrace-gil"]),
                [("processor_rate", "processor unit/s", True), ("processor_cpu_ms_per_unit", "CPU ms/unit", False),
                 ("ingest_rate", "ingest msg/s", True), ("lag_p50", "lag p50 s", False), ("lag_p99", "lag p99 s", False)],
                R or (3 if quick else 5), timeout=gil_secs + 30, target=("gil_slowdown", "waitmeter"),
                stats_tools=("waitmeter", "waitmeter-nostacks", "waitmeter-uprobe"))
    py = h.pyenv_python(12)
    pp_tools = ["none", "waitmeter", "waitmeter-nostacks", "waitmeter-uprobe", "py-spy-nonblocking", "py-spy", "bpftrace-gil", "bpftrace-sched"]
    if py:
        sc["pingpong"] = Overhead(
            "pingpong", "GIL ping-pong, 60k round trips through queue.Queue, Python 3.12, pinned to CPU 1",
            python_workload(py, "pingpong.py", 60000, "--cpu", 1), tools_for("py", pp_tools + ["waitmeter-timeline"]),
            [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], R or (3 if quick else 5), timeout=120,
            target=("pingpong_slowdown", "waitmeter"),
            stats_tools=("waitmeter", "waitmeter-nostacks", "waitmeter-uprobe", "waitmeter-timeline"))
        # the sidecar's mode: run --all watches every process, this one and the bench's own included
        sc["pingpong-all"] = Overhead(
            "pingpong-all", "GIL ping-pong (the switch storm), 60k round trips, Python 3.12, pinned to CPU 1, under run --all",
            python_workload(py, "pingpong.py", 60000, "--cpu", 1),
            tools_for("py", ["none", "waitmeter-all", "waitmeter-all-nostacks", "waitmeter-all-uprobe", "waitmeter-all-timeline",
                             "waitmeter", "waitmeter-elsewhere", "floor"]),
            [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], R or (3 if quick else 7), timeout=120,
            target=("sidecar_slowdown", "waitmeter-all"),
            stats_tools=("waitmeter-all", "waitmeter-all-nostacks", "waitmeter-all-uprobe", "waitmeter-all-timeline", "waitmeter",
                         "waitmeter-elsewhere", "floor"),
            costs=("waitmeter-all", "waitmeter-elsewhere"), stats_rounds=1 if quick else 3)
        sc["pingpong-unpinned"] = Overhead(
            "pingpong-unpinned", "GIL ping-pong, 60k round trips, Python 3.12, unpinned (cross-CPU hand-offs: noisy)",
            python_workload(py, "pingpong.py", 60000), tools_for("py", pp_tools),
            [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], R or (2 if quick else 3), timeout=120)
    py = h.ROOT / ".pythons" / "bin" / "python3.14"
    if py.exists():
        # every Queue.get sleeps on a threading.Lock, a PyMutex since 3.14: two parks per round trip
        sc["pingpong-3.14"] = Overhead(
            "pingpong-3.14", "ping-pong, 60k round trips through queue.Queue, Python 3.14 (every wait parks: the pypark uprobes' worst case), pinned to CPU 1",
            python_workload(str(py), "pingpong.py", 60000, "--cpu", 1), tools_for("py", ["none", "waitmeter", "waitmeter-nolock"]),
            [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], R or (3 if quick else 5), timeout=120,
            stats_tools=("waitmeter", "waitmeter-nolock"), stats_rounds=1 if quick else 3)
    c_tools = ["none", "waitmeter", "waitmeter-nostacks", "bpftrace-sched"]
    rr = R or (3 if quick else 5)
    # the sidecar's mode on a C storm: a futex_wait/futex_wake hand-off through condition variables
    sc["condpair-all"] = Overhead(
        "condpair-all", "condition-variable storm: two C threads hand a turn back and forth through one mutex and two "
        "condition variables, 100k round trips, pinned to CPU 1, under run --all",
        storm_workload("condpair", 100000, 1), tools_for("c", ["none", "waitmeter-all", "waitmeter-elsewhere", "floor"]),
        [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], R or (3 if quick else 7), 120,
        target=("sidecar_slowdown", "waitmeter-all"), stats_tools=("waitmeter-all", "waitmeter-elsewhere", "floor"),
        costs=("waitmeter-all", "waitmeter-elsewhere"), stats_rounds=1 if quick else 3)
    sc["ctxswitch"] = Overhead("ctxswitch", "context-switch storm: 200k pipe round trips between two threads pinned to CPU 1",
                               storm_workload("pipe", 200000, 1), tools_for("c", c_tools), [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], rr, 120,
                               stats_tools=("waitmeter", "waitmeter-nostacks"))
    sc["futex-uncontended"] = Overhead("futex-uncontended", "uncontended pthread_mutex: 10M lock/unlock, one thread (no syscalls)",
                                       storm_workload("mutex", 10000000), tools_for("c", c_tools), [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], rr, 120)
    sc["futex-contended"] = Overhead("futex-contended", "contended pthread_mutex: 4 threads, 8M lock/unlock in all (futex storm)",
                                     storm_workload("contended", 8000000, 4), tools_for("c", c_tools), [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], rr, 120)
    sc["churn"] = Overhead("churn", "thread churn: 20k threads created and joined, 4 at a time",
                           storm_workload("churn", 20000, 4), tools_for("c", c_tools + ["waitmeter-elsewhere", "floor"]),
                           [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], rr, 120,
                           stats_tools=("waitmeter", "waitmeter-elsewhere", "floor"), costs=("waitmeter", "waitmeter-elsewhere"),
                           stats_rounds=1 if quick else 3)
    sc["syscalls"] = Overhead("syscalls", "syscall storm: one thread makes 5M getppid() syscalls (the syscall probe's worst case)",
                              storm_workload("syscalls", 5000000), tools_for("c", ["none", "waitmeter", "waitmeter-syscalls", "waitmeter-syscalls-elsewhere"]),
                              [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], rr, 120,
                              stats_tools=("waitmeter-syscalls",), stats_rounds=1 if quick else 3)
    secs = 3 if quick else 5
    sc["sched-10k"] = Overhead("sched-10k", f"the agent's own cost at ~10k scheduler events/s: a pipe ping-pong paced to 2,000 round trips/s, {secs} s",
                               storm_workload("paced", 2000, secs), tools_for("c", ["none", "waitmeter"]),
                               [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], R or (2 if quick else 3), 60)
    idle_secs = 5 if quick else 10
    # no baseline: a sleeping workload has no speed to lose; the figure is the agent's own CPU
    sc["idle"] = Overhead("idle", f"the agent's own cost on a quiet machine: a process sleeping {idle_secs} s; "
                          "run --all (the namespace's other processes are watched too) and run --pid of an idle sleep",
                          storm_workload("idle", idle_secs), tools_for("c", ["waitmeter-all", "waitmeter-elsewhere"]),
                          [("seconds", "seconds", False), ("cpu_s", "CPU s", False)], R or (2 if quick else 3), idle_secs + 30,
                          stats_tools=("waitmeter-all", "waitmeter-elsewhere"))
    return sc


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), "?")
    virt = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True).stdout.strip() or "unknown"
    mem = next((int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")), 0)
    commit = subprocess.run(["git", "-C", str(h.ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()

    def version(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return None
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(), "virtualization": virt,
            "memory_gib": round(mem / 2**20, 1), "loadavg_start": os.getloadavg(), "commit": commit,
            "waitmeter": version([h.WAITMETER, "--version"]), "py-spy": version([h.PYSPY, "--version"]),
            "bpftrace": version(["bpftrace", "--version"]),
            "pythons": {f"3.{m}": h.pyenv_python(m) for m in (8, 11, 12, 13)}}


def final_summary(out, args):
    print("\n== summary: targets")
    rows = []

    def add(what, figure, ok, note=""):
        rows.append({"what": what, "figure": figure, "met": ok, "note": note})

    for name in ("gil-3.11", "gil-3.12"):
        if name in out:
            s = out[name]["summary"].get("waitmeter", {})
            noise = out[name]["summary"].get("none", {}).get("noise")
            add(f"{name}: throughput slowdown, waitmeter default (≤ 1%; baseline noise ±{pct(noise, False)})",
                pct(s.get("slowdown")), s.get("met"))
            add(f"{name}: processor CPU per unit, waitmeter default (≤ 1%)", pct(s.get("cpu_slowdown")), s.get("cpu_met"))
    if "pingpong" in out:
        s = out["pingpong"]["summary"].get("waitmeter", {})
        noise = out["pingpong"]["summary"].get("none", {}).get("noise")
        add(f"GIL ping-pong pinned: time slowdown, waitmeter default (≤ 5%; baseline noise ±{pct(noise, False)})",
            pct(s.get("slowdown")), s.get("met"))
        add("GIL ping-pong pinned: CPU time, waitmeter default (≤ 5%)", pct(s.get("cpu_slowdown")), s.get("cpu_met"))
    if "pingpong-all" in out:
        sm = out["pingpong-all"]["summary"]
        noise = sm.get("none", {}).get("noise")
        for tool, what in (("waitmeter-all", "default"), ("waitmeter-all-nostacks", "--stacks none"),
                           ("waitmeter-all-uprobe", "--gil-probe uprobe")):
            if tool in sm:
                s = sm[tool]
                target = tool == "waitmeter-all"
                add(f"switch storm (pinned ping-pong) under run --all, {what}: time slowdown"
                    + (f" (≤ 3%; baseline noise ±{pct(noise, False)})" if target else " (reported)"),
                    pct(s.get("slowdown")), s.get("met") if target else None)
                if target:
                    add("switch storm under run --all, default: CPU time (≤ 3%)", pct(s.get("cpu_slowdown")), s.get("cpu_met"))
                    if s.get("slowdown_vs_floor") is not None:
                        add("switch storm under run --all, default: time against the floor's runs (empty programs "
                            "on the same hooks; reported)", pct(s["slowdown_vs_floor"]), None)
    if "condpair-all" in out:
        sm = out["condpair-all"]["summary"]
        s = sm.get("waitmeter-all", {})
        noise = sm.get("none", {}).get("noise")
        add(f"condition-variable storm under run --all, default: time slowdown (≤ 3%; baseline noise ±{pct(noise, False)})",
            pct(s.get("slowdown")), s.get("met"))
        add("condition-variable storm under run --all, default: CPU time (≤ 3%)", pct(s.get("cpu_slowdown")), s.get("cpu_met"))
    for name, c in out.get("per_event_costs", {}).items():
        for hook, limit in (("sched_switch", "switch_over_floor_ns"), ("sched_wakeup", "wake_over_floor_ns"),
                            ("sched_waking", "wake_over_floor_ns")):
            o = c["over_floor"].get(hook, {})
            if o.get("watched_over_floor_ns") is not None:
                add(f"{name}: {hook} per run on a watched task over the empty program's ({c['watched']}, bpf_stats; "
                    f"{fmt(o['watched_ns'])} − {fmt(o['floor_ns'])} ns) (≤ {TARGETS[limit]:.0f} ns)",
                    f"{o['watched_over_floor_ns']:+.0f} ns", o["watched_over_floor_ns"] <= TARGETS[limit])
        for hook, o in c["over_floor"].items():
            # only hooks the unwatched side and the floor both saw often enough to average
            if o.get("unwatched_over_floor_ns") is not None and min(o["unwatched_runs_per_s"],
                                                                    c["hooks"][hook]["floor"]["runs_per_s"]) >= 100:
                add(f"{name}: {hook} per run on an unwatched task over the empty program's "
                    f"({fmt(o['unwatched_ns'])} − {fmt(o['floor_ns'])} ns) (≤ 10 ns)",
                    f"{o['unwatched_over_floor_ns']:+.0f} ns", o["unwatched_over_floor_ns"] <= TARGETS["unwatched_over_floor_ns"])
    if "idle" in out:
        for tool, s in out["idle"]["summary"].items():
            total = s.get("agent_total_cpu_share")
            if total is not None:
                what = ("run --all on a quiet machine (every process of the namespace watched: the bench's, other jobs')"
                        if tool == "waitmeter-all" else "nothing watched switches (run --pid of an idle sleep)")
                add(f"agent CPU, {what} (process {pct(s.get('tool_cpu_per_s'), False)} + BPF "
                    f"{pct(s.get('bpf_cpu_share'), False)} at {fmt(s.get('bpf_runs_per_s'))} runs/s) (≤ 0.2% of a core)",
                    pct(total, False), total <= TARGETS["agent_cpu_idle"])
    c = out.get("churn-long")
    if c and "met" in c:
        m = c["met"]
        add(f"churn-long ({c['minutes']} min): thread exits/s (≥ 20k)", f"{c['exit_rate']:,.0f}", m["exit_rate"])
        add("churn-long: events lost (0)", f"{sum(c['lost_after'].values()):.0f}", m["lost"])
        add(f"churn-long: map entries back to idle {c['after_stop_s']:.0f} s after the churn", "yes" if m["maps"] else
            ", ".join(f"{k} {a:.0f}→{b:.0f}" for k, (a, b) in c["maps_left"].items()), m["maps"])
        add(f"churn-long: agent process CPU (≤ 5% of a core; BPF {pct(c['bpf_cpu'], False)} beside it)",
            pct(c["agent_cpu"], False), m["agent_cpu"])
        add(f"churn-long: RSS end − start ({c['rss_start_mib']:.1f} → {c['rss_end_mib']:.1f} MiB) (≤ 4 MiB)",
            f"{c['rss_end_mib'] - c['rss_start_mib']:+.1f} MiB", m["rss"])
    c = out.get("soak")
    if c and "met" in c:
        add(f"soak ({c['minutes']} min): RSS last − first ({c['rss_first_mib']:.1f} → {c['rss_last_mib']:.1f} MiB) (≤ 4 MiB)",
            f"{c['rss_last_mib'] - c['rss_first_mib']:+.1f} MiB", c["met"]["rss"])
        add("soak: map entries back to idle after the run", "yes" if c["met"]["maps"] else
            ", ".join(f"{k} {a:.0f}→{b:.0f}" for k, (a, b) in c["maps_left"].items()), c["met"]["maps"])
        add("soak: events lost, by reason (reported)", ", ".join(f"{k} {v:.0f}" for k, v in c["lost"].items()) or "0", None)
    fit = out.get("agent-rate", {}).get("fit")
    if fit:
        add(f"agent CPU (process + programs) under run --all at 20k switches/s of watched threads: "
            f"{pct(fit['at_0'], False)} at rest + {pct(fit['per_10k'], False)} per 10k switches/s (≤ 1% of a core)",
            pct(fit["at_20k"], False), fit["met"])
    if "sched-10k" in out:
        s = out["sched-10k"]["summary"].get("waitmeter", {})
        total, runs = s.get("agent_total_cpu_share"), s.get("bpf_runs_per_s")
        if total is not None and runs:
            add(f"agent CPU at {runs:,.0f} BPF events/s (process {pct(s.get('tool_cpu_per_s'), False)} + BPF "
                f"{pct(s.get('bpf_cpu_share'), False)}) (≤ 1% of a core)", pct(total, False), total <= TARGETS["agent_cpu_10k"])
    rss = [(n, sc["summary"]["waitmeter"].get("tool_peak_rss_mib")) for n, sc in out.items() if isinstance(sc, dict)
           if sc.get("kind") == "overhead" and "waitmeter" in sc["summary"]]
    rss = [(n, v) for n, v in rss if v]
    if rss:
        n, v = max(rss, key=lambda x: x[1])
        add(f"waitmeter peak RSS, worst scenario ({n}) (≤ 64 MiB)", f"{v:.1f} MiB", v <= TARGETS["peak_rss_mib"])
    for r in out.get("accuracy-gil", {}).get("rows", []):
        if r["tool"] == "waitmeter":
            add(f"GIL wait accuracy, Python {r['python']}, switch interval {r['switch_interval_s'] * 1e3:.0f} ms (±2%)",
                pct(r["error"]), r["met"])
    for r in out.get("accuracy-partition", {}).get("rows", []):
        add(f"partition sum vs wall, {r['workload']} (±2%)", pct(r["max_error"], False), r["met"])
    for r in out.get("accuracy-throttle", {}).get("rows", []):
        add("throttled vs cpu.stat (±2%)", pct(r["error"]), r["met"])
    for r in out.get("first-answer", {}).get("rows", []):
        add(f"first answer after the window, {r['workload']} (≤ 1 s)", f"{r['median_s']:.3f} s", r["met"])
    for r in out.get("pod-list", {}).get("rows", []):
        add(f"pod list of {r['pods']:,} {r['shape']} pods ({r['body_mib']:.1f} MiB): peak RSS over a one-pod list's (≤ 1.5x + 16 MiB)",
            f"{r['over_base_mib']:.1f} MiB", r["met"])
    for r in out.get("page", {}).get("rows", []):
        add(f"the page of 10 s of a 64-thread storm ({r['switches_per_s']:,.0f} switches/s): size (≤ 6 MiB)", f"{r['page_mib']:.2f} MiB",
            r["page_mib"] <= TARGETS["page_mib"])
        add("... drawn by headless Chromium, from the start of its loading (≤ 3 s)", f"{r['render_s']:.2f} s", r["drawn"] and r["render_s"] <= TARGETS["page_render_s"])
    width = max((len(r["what"]) for r in rows), default=10)
    for r in rows:
        print(f"   {r['what']:<{width}}  {r['figure']:>10}  {verdict(r['met']) if r['met'] is not None else 'n/a'}")

    print("\n== summary: slowdown by tool (median of paired rounds; + = slower; the baseline's noise in brackets)")
    tools = ["waitmeter", "waitmeter-uprobe", "py-spy-nonblocking", "py-spy", "bpftrace-gil", "bpftrace-sched"]
    names = [n for n, sc in out.items() if isinstance(sc, dict) and sc.get("kind") == "overhead"]
    print(f"   {'scenario':<28}" + "".join(f"{t:>20}" for t in tools))
    for n in names:
        s = out[n]["summary"]
        print(f"   {n + ' (±' + pct(s.get('none', {}).get('noise'), False) + ')':<28}"
              + "".join(f"{(pct(s[t]['slowdown']) if t in s else '-'):>20}" for t in tools))
    print("\n== summary: waitmeter's own cost (run, default mode)")
    print(f"   {'scenario':<20}{'CPU s/s':>10}{'BPF CPU':>10}{'total':>10}{'peak RSS':>10}{'BPF runs/s':>12}{'ctxt/s (machine)':>18}{'lost':>6}")
    for n in names:
        s = out[n]["summary"].get("waitmeter")
        if not s:
            continue
        print(f"   {n:<20}{pct(s.get('tool_cpu_per_s'), False):>10}{pct(s.get('bpf_cpu_share'), False):>10}"
              f"{pct(s.get('agent_total_cpu_share'), False):>10}"
              f"{mib(s.get('tool_peak_rss_mib')):>10}"
              f"{fmt(s.get('bpf_runs_per_s')):>12}{fmt(s.get('machine_ctxt_per_s')):>18}{fmt(s.get('events_lost')):>6}")
    out["targets"] = rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and scenarios (~7 min)")
    ap.add_argument("--only", help="comma-separated scenarios or groups: " + ", ".join(list(GROUPS) + ALL))
    ap.add_argument("--rounds", type=int, help="interleaved rounds per overhead scenario")
    ap.add_argument("--output", default=str(RESULTS / "latest.json"), help="results JSON (default: %(default)s)")
    ap.add_argument("--churn-minutes", type=float, default=0,
                    help="also run churn-long: thread churn under run --all for this many minutes (default 0: skipped; the issue's figure: 10)")
    ap.add_argument("--churn-rate", type=int, default=25000,
                    help="churn-long's thread exits/s, paced (0: as fast as 2 creator threads go; default %(default)s)")
    ap.add_argument("--soak-minutes", type=float, default=0,
                    help="also run soak: a mixed workload under run --all for this many minutes (default 0: skipped; e.g. 60)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (the probes need CAP_BPF and CAP_PERFMON)")
    if not h.WAITMETER.exists():
        sys.exit(f"bench: {h.WAITMETER} is not built (make build)")
    if not shutil.which("bpftool"):
        print("bench: no bpftool (make setup installs it): BPF programs will be named by id, and the per-event "
              "cost tables cannot tell the hooks apart", file=sys.stderr)
    wanted = ALL
    if args.only:
        wanted = []
        for x in args.only.split(","):
            x = x.strip()
            if x in GROUPS:
                wanted += GROUPS[x]
            elif x in ALL:
                wanted.append(x)
            else:
                sys.exit(f"bench: unknown scenario {x!r}; choose from {', '.join(list(GROUPS) + ALL)}")
    elif args.quick:
        wanted = [s for s in ALL if s not in ("gil-3.11", "pingpong-unpinned")]

    h.install_signal_handlers()
    started = time.monotonic()
    out = {"machine": machine(), "args": vars(args), "started": datetime.datetime.now().isoformat(timespec="seconds")}
    # what the programs were built from, for the generated cost sections of docs/probes/ (bench/probe_docs.py):
    # only when the binary is newer than every BPF source (else it may hold older programs)
    newest = max(p.stat().st_mtime for p in (h.ROOT / "bpf").rglob("*") if p.is_file())
    if h.WAITMETER.stat().st_mtime >= newest:
        out["bpf_digests"] = probe_docs.digests()
    else:
        print(f"bench: {h.WAITMETER} is older than bpf/: its figures are not written into docs/probes (make build)",
              file=sys.stderr)
    print(f"waitmeter bench: {out['machine']['cpu']}, {out['machine']['cpus']} CPUs, kernel {out['machine']['kernel']}, "
          f"{out['machine']['virtualization']}; load average at start {out['machine']['loadavg_start'][0]:.2f}")
    for tool, note in TOOL_NOTES.items():
        print(f"   {tool:<20} {note}")
    try:
        scenarios = overhead_scenarios(args)
        for name in wanted:
            if name in scenarios:
                run_overhead(scenarios[name], out)
            elif name == "accuracy-gil":
                accuracy_gil([12] if args.quick else [8, 11, 12, 13], 1 if args.quick else 3, out)
            elif name == "accuracy-partition":
                accuracy_partition(args.quick, out)
            elif name == "accuracy-throttle":
                accuracy_throttle(out)
            elif name == "agent-rate":
                agent_rate(args.quick, out)
            elif name == "primitives":
                primitives(args.quick, out)
            elif name == "first-answer":
                first_answer(3 if args.quick else 5, out)
            elif name == "page":
                page(2 if args.quick else 3, out)
            elif name == "pod-list":
                pod_list_memory(args.quick, out)
            elif name == "churn-long":
                if args.churn_minutes > 0:
                    churn_long(args.churn_minutes, args.churn_rate, out)
                elif args.only:
                    print("\n== churn-long: skipped (give --churn-minutes N)")
            elif name == "soak":
                if args.soak_minutes > 0:
                    soak(args.soak_minutes, out)
                elif args.only:
                    print("\n== soak: skipped (give --soak-minutes N)")
            else:
                print(f"\n== {name}: skipped (its interpreter is not installed)")
        final_summary(out, args)
    except KeyboardInterrupt:
        print("\nbench: interrupted; cleaning up", file=sys.stderr)
        out["interrupted"] = True
    finally:
        h.cleanup()
        out["machine"]["loadavg_end"] = os.getloadavg()
        out["elapsed_s"] = time.monotonic() - started
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1, default=str))
        stamp = path.parent / f"bench-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
        if path.parent == RESULTS:
            stamp.write_text(json.dumps(out, indent=1, default=str))
        print(f"\nresults: {path} ({out['elapsed_s'] / 60:.1f} min)")
    return 130 if out.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
