"""Markdown tables for docs/performance.md from a bench results file.

  .venv/bin/python bench/report.py [bench/results/latest.json]
"""
import json
import sys
from pathlib import Path

TOOLS = ["waitmeter", "waitmeter-uprobe", "py-spy-nonblocking", "py-spy", "bpftrace-gil", "bpftrace-sched"]


def pct(x, signed=True):
    if x is None:
        return "–"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.2f}%"


def mark(ok):
    return "" if ok is None else (" ✅ met" if ok else " ❌ missed")


def main():
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "latest.json")
    d = json.loads(path.read_text())
    m = d["machine"]
    print(f"Run of {d['started']} (commit {m['commit']}, {d['elapsed_s'] / 60:.0f} min, args {d['args']}): "
          f"{m['cpu']}, {m['cpus']} vCPUs, {m['memory_gib']} GiB, kernel {m['kernel']}, "
          f"virtualization `{m['virtualization']}`; load average {m['loadavg_start'][0]:.1f} at the start, "
          f"{m['loadavg_end'][0]:.1f} at the end. {m['waitmeter']}, {m['py-spy']}, {m['bpftrace']}.\n")

    print("### Targets\n")
    print("| target | figure | |\n| --- | --- | --- |")
    for r in d.get("targets", []):
        print(f"| {r['what']} | {r['figure']} |{mark(r['met'])} |")

    names = [n for n, v in d.items() if isinstance(v, dict) and v.get("kind") == "overhead"]
    print("\n### Slowdown of the workload, by tool\n")
    print("Median of paired rounds, + = slower; the CPU-time figure (workload's own CPU for its fixed work) in brackets; "
          "the baseline's run-to-run noise in the second column.\n")
    print("| scenario | noise | " + " | ".join(TOOLS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in TOOLS) + " |")
    for n in names:
        s = d[n]["summary"]
        cells = []
        for t in TOOLS:
            if t in s:
                cells.append(f"{pct(s[t].get('slowdown'))} ({pct(s[t].get('cpu_slowdown'))})")
            else:
                cells.append("")
        print(f"| {n} | ±{pct(s.get('none', {}).get('noise'), False)} | " + " | ".join(cells) + " |")

    print("\n### Scenario figures (medians)\n")
    for n in names:
        sc = d[n]
        s = sc["summary"]
        keys = [k for k in s.get("none", {}) if k not in ("n", "noise", "machine_ctxt_per_s")]
        print(f"**{n}** — {sc['title']} ({sc['rounds']} rounds)\n")
        print("| tool | " + " | ".join(keys) + " | slowdown | tool CPU | tool peak RSS |")
        print("| --- | " + " | ".join("---" for _ in keys) + " | --- | --- | --- |")
        for t, v in s.items():
            vals = " | ".join(f"{v.get(k):.4g}" if isinstance(v.get(k), (int, float)) else "–" for k in keys)
            rss = f"{v['tool_peak_rss_mib']:.1f} MiB" if v.get("tool_peak_rss_mib") else "–"
            print(f"| {t} | {vals} | {pct(v.get('slowdown')) if t != 'none' else '–'} | "
                  f"{pct(v.get('tool_cpu_per_s'), False) if t != 'none' else '–'} | {rss} |")
        print()

    print("### waitmeter's own cost (`waitmeter run`, default mode)\n")
    print("| scenario | agent CPU (process) | BPF CPU | total, % of one core | peak RSS | BPF program runs/s | machine context switches/s | events lost |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in names:
        s = d[n]["summary"].get("waitmeter")
        if not s:
            continue
        lost = s.get("events_lost")
        reasons = ", ".join(f"{k} {v:.0f}" for k, v in (s.get("events_lost_by_reason") or {}).items())
        print(f"| {n} | {pct(s.get('tool_cpu_per_s'), False)} | {pct(s.get('bpf_cpu_share'), False)} | "
              f"{pct(s.get('agent_total_cpu_share'), False)} | "
              f"{(str(round(s['tool_peak_rss_mib'], 1)) + ' MiB') if s.get('tool_peak_rss_mib') else '–'} | "
              f"{s.get('bpf_runs_per_s') or 0:,.0f} | {s.get('machine_ctxt_per_s') or 0:,.0f} | "
              f"{lost or 0:.0f}{(' (' + reasons + ')') if reasons else ''} |")

    print("\n### waitmeter's BPF programs per scenario (bpf_stats run: runs/s × ns per run)\n")
    for n in names:
        b = d[n].get("bpf_stats", {}).get("waitmeter", {}).get("bpf_progs") or {}
        parts = [f"{p.replace('_btf', '')} {v['runs_per_s']:,.0f}/s × {v['ns_per_run']:.0f} ns"
                 for p, v in sorted(b.items(), key=lambda x: -x[1]["cpu_share"]) if v["runs_per_s"] >= 1]
        if parts:
            print(f"- {n}: " + ", ".join(parts))

    print("\n### Accuracy\n")
    rows = d.get("accuracy-gil", {}).get("rows", [])
    if rows:
        print("| GIL wait | switch interval | held (truth) | measured | error | waiter's runqueue | load avg |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            rq = f"{r['waiter_runqueue_s']:.3f} s" if r.get("waiter_runqueue_s") is not None else "–"
            runs = f" (runs: {', '.join(pct(e) for e in r['errors'])})" if len(r.get("errors", [])) > 1 else ""
            print(f"| {r['python']} {r['tool']} | {r['switch_interval_s'] * 1e3:.0f} ms | {r['truth_s']:.4f} s | "
                  f"{r['measured_s']:.4f} s | {pct(r['error'])}{runs}{mark(r['met'])} | {rq} | {r.get('loadavg', 0):.1f} |")
    for r in d.get("accuracy-partition", {}).get("rows", []):
        print(f"\n- Partition, {r['workload']}: {r['threads']} threads, window {r['window_s']:.3f} s, "
              f"worst |sum − wall| {pct(r['max_error'], False)}{mark(r['met'])}")
    for r in d.get("accuracy-throttle", {}).get("rows", []):
        print(f"- Throttled: threads {r['measured_s']:.4f} s vs cpu.stat {r['cpu_stat_window_s']:.4f} s over the window "
              f"(harness bracket {r['cpu_stat_bracket_s']:.4f} s): {pct(r['error'])}{mark(r['met'])}; "
              f"{r['throttled_stretches']} throttled stretches vs nr_throttled {r['nr_throttled']}")
    for r in d.get("first-answer", {}).get("rows", []):
        print(f"- First answer, {r['workload']}: median {r['median_s']:.3f} s after the 1 s window "
              f"(max {r['max_s']:.3f} s, {r['runs']} runs){mark(r['met'])}")


if __name__ == "__main__":
    main()
