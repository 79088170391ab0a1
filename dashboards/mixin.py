#!/usr/bin/env python3
"""The waitmeter monitoring mixin: Grafana dashboards, Prometheus recording
rules and alert rules, generated from one place so that they agree.

    python dashboards/mixin.py           regenerate the committed files
    python dashboards/mixin.py --check   exit 1 if a committed file is stale

Thresholds come from dashboards/config.yaml. Outputs:
    dashboards/rules/waitmeter-rules.yaml     recording + alert rules (promtool-checked)
    dashboards/json/<uid>.json                Grafana dashboards
    helm/waitmeter/files/...                  the Helm chart's copies of both

Dashboards are built with the official grafana-foundation-sdk; queries use the
metrics of docs/metrics.md only, so every panel works without the recording
rules too. Every selector carries the `namespace` and `pod` variables: with
"All" they match ".*", which also matches series without those labels (a
Prometheus outside Kubernetes).
"""
import argparse
import json
import pathlib
import sys

import yaml
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as statb
from grafana_foundation_sdk.builders import table as tableb
from grafana_foundation_sdk.builders import timeseries as tsb
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
CHART_FILES = ROOT / "helm" / "waitmeter" / "files"
CFG = yaml.safe_load((HERE / "config.yaml").read_text())

# ---------------------------------------------------------------- rules

WAITING = "runqueue|throttled|gil_wait"


def runbook(alert):
    return f"{CFG['runbookBase']}#{alert.lower()}"


def recording_rules():
    r = [
        # share of each thread's time in each state (seconds per second)
        ("waitmeter:thread_state:rate5m", "sum without (comm, tid) (rate(waitmeter_thread_seconds_total[5m]))"),
        ("waitmeter:thread_waiting:rate5m", f'sum without (state) (waitmeter:thread_state:rate5m{{state=~"{WAITING}"}})'),
        ("waitmeter:thread_running:rate5m", 'sum without (state) (waitmeter:thread_state:rate5m{state="running"})'),
        (
            "waitmeter:thread_wait_ratio:rate5m",
            "waitmeter:thread_waiting:rate5m / ((waitmeter:thread_waiting:rate5m + waitmeter:thread_running:rate5m) > 0)",
        ),
        (
            "waitmeter:process_wait_ratio:rate5m",
            "sum without (thread) (waitmeter:thread_waiting:rate5m)"
            " / (sum without (thread) (waitmeter:thread_waiting:rate5m + waitmeter:thread_running:rate5m) > 0)",
        ),
        ("waitmeter:process_running_cores:rate5m", "sum without (thread) (waitmeter:thread_running:rate5m)"),
        (
            "waitmeter:cgroup_throttled_periods:ratio_rate5m",
            "rate(waitmeter_cgroup_throttled_periods_total[5m]) / (rate(waitmeter_cgroup_periods_total[5m]) > 0)",
        ),
        ("waitmeter:futex_word_blocked_threads:rate5m", 'rate(waitmeter_futex_word_wait_seconds_total{futex!="other"}[5m])'),
    ]
    return [{"record": name, "expr": expr} for name, expr in r]


def alert_rules():
    a = CFG["alerts"]
    pod = "{{ with $labels.pod }}, pod {{ $labels.namespace }}/{{ . }}{{ end }}"
    g, i, t, q, c = a["gilStarvation"], a["ageRisingWhileIdle"], a["cpuThrottling"], a["runqueueSaturation"], a["lockConvoy"]
    holder = (
        '{{ with printf "topk(1, sum by (holder) (rate(waitmeter_gil_wait_seconds_total{pid=%q, thread=%q, instance=%q}[5m])))"'
        " $labels.pid $labels.thread $labels.instance | query }}{{ with . | first }}, mostly behind thread"
        ' {{ label "holder" . }}{{ end }}{{ end }}'
    )
    rules = [
        (
            "WaitmeterGILStarvation",
            f'waitmeter:thread_state:rate5m{{state="gil_wait"}} >= {g["share"]}',
            g["for"],
            "warning",
            "A Python thread spends most of its time waiting for the GIL.",
            f"Thread {{{{ $labels.thread }}}} of pid {{{{ $labels.pid }}}}{pod} waited for the GIL"
            f" {{{{ $value | humanizePercentage }}}} of its time over 5 minutes (threshold {g['share']:.0%}){holder}."
            " It has work and cannot run it: another thread holds the GIL in long stretches.",
        ),
        (
            "WaitmeterAgeRisingWhileIdle",
            f"(max without (thread) (delta(waitmeter_app_age_seconds[{i['window']}])) > {i['growthSeconds']})"
            f" and (waitmeter:process_running_cores:rate5m < {i['idleCpuShare']} * waitmeter_process_cpu_limit_cores)",
            i["for"],
            "warning",
            "Message age is rising while the process leaves its CPUs idle.",
            f"The application age of pid {{{{ $labels.pid }}}}{pod} grew {{{{ $value | humanizeDuration }}}} in {i['window']}"
            f" while the process used less than {i['idleCpuShare']:.0%} of the CPUs it may use. Work meters look"
            " healthy: the work is waiting (GIL, locks, I/O, a downstream), not computing.",
        ),
        (
            "WaitmeterCPUThrottling",
            f"waitmeter:cgroup_throttled_periods:ratio_rate5m >= {t['throttledPeriodShare']}",
            t["for"],
            "warning",
            "A watched cgroup is throttled by its CPU quota.",
            "Cgroup {{ $labels.cgroup }}" + pod + " was throttled in {{ $value | humanizePercentage }} of its CFS"
            f" periods over 5 minutes (threshold {t['throttledPeriodShare']:.0%}): its threads wait for the next"
            " period with work to do; latencies cluster at multiples of the period (usually 100 ms).",
        ),
        (
            "WaitmeterRunqueueSaturation",
            f'waitmeter:thread_state:rate5m{{state="runqueue"}} >= {q["share"]}',
            q["for"],
            "warning",
            "A thread waits for a CPU a large share of its time.",
            f"Thread {{{{ $labels.thread }}}} of pid {{{{ $labels.pid }}}}{pod} was runnable but waited in the run queue"
            f" {{{{ $value | humanizePercentage }}}} of its time over 5 minutes (threshold {q['share']:.0%}): the CPUs it"
            " may run on are busy with other work (waitmeter_runqueue_wait_seconds_total names what had them).",
        ),
        (
            "WaitmeterLockConvoy",
            f"(waitmeter:futex_word_blocked_threads:rate5m >= {c['blockedThreads']})"
            f" and (max_over_time(waitmeter_futex_word_waiters[5m]) >= {c['waiters']})",
            c["for"],
            "warning",
            "Threads queue on one lock.",
            f"On average {{{{ $value | printf \"%.1f\" }}}} threads of pid {{{{ $labels.pid }}}}{pod} were blocked on futex"
            f" word {{{{ $labels.futex }}}} over 5 minutes, with {c['waiters']} or more distinct waiters: a lock convoy.",
        ),
        (
            "WaitmeterAgentDown",
            f"(up{{{CFG['agentSelector']}}} == 0) or absent(up{{{CFG['agentSelector']}}})",
            a["agentDown"]["for"],
            "warning",
            "waitmeter is not being scraped.",
            "{{ with $labels.instance }}The waitmeter target {{ . }} is down{{ else }}No waitmeter target is scraped"
            "{{ end }}: waiting is not measured and the other waitmeter alerts cannot fire.",
        ),
        (
            "WaitmeterProbeDetached",
            "waitmeter_probe_attached == 0",
            a["probeDetached"]["for"],
            "warning",
            "A waitmeter kernel hook is not attached.",
            "Probe {{ $labels.probe }} ({{ $labels.variant }}) of {{ $labels.instance }} is not attached:"
            " the time partition is incomplete; the agent's log says why.",
        ),
        (
            "WaitmeterEventsLost",
            "increase(waitmeter_bpf_events_lost_total[10m]) > 0",
            a["eventsLost"]["for"],
            "info",
            "waitmeter dropped kernel events.",
            "{{ $value | printf \"%.0f\" }} {{ $labels.probe }} events were lost ({{ $labels.reason }}) in 10 minutes"
            " on {{ $labels.instance }}: the numbers are incomplete. Raise --max-threads for *_map_full.",
        ),
    ]
    out = []
    for name, expr, for_, severity, summary, description in rules:
        r = {"alert": name, "expr": expr}
        if for_ not in ("0m", "0s", 0):
            r["for"] = for_
        r["labels"] = {"severity": severity}
        r["annotations"] = {"summary": summary, "description": description, "runbook_url": runbook(name)}
        out.append(r)
    return out


def rules_file():
    return {
        "groups": [
            {"name": "waitmeter.rules", "rules": recording_rules()},
            {"name": "waitmeter.alerts", "rules": alert_rules()},
        ]
    }


# ---------------------------------------------------------------- dashboards

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
K = 'namespace=~"$namespace", pod=~"$pod"'
P = K + ', pid=~"$pid"'
T = P + ', thread=~"$thread"'
RATE = "$__rate_interval"


def q(expr, legend, ref, instant=False, table=False):
    b = pb.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    if instant:
        b = b.instant()
    else:
        b = b.range()
    if table:
        b = b.format(pm.PromQueryFormat.TABLE)
    return b


class Layout:
    """Panels left to right, wrapping at 24 columns; unique ids per dashboard."""

    def __init__(self):
        self.x = self.y = self.row_h = 0
        self.next_id = 1

    def place(self, panel, w, h):
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel = panel.id(self.next_id).grid_pos(dm.GridPos(h=h, w=w, x=self.x, y=self.y))
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        return panel

    def row(self, title):
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        r = db.Row(title).id(self.next_id).grid_pos(dm.GridPos(h=1, w=24, x=0, y=self.y))
        self.next_id += 1
        self.y += 1
        return r


def timeseries(title, description, targets, unit, stacked=False, fill=10, max_=None):
    p = (
        tsb.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .fill_opacity(60 if stacked else fill)
        .line_width(1)
        .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE).placement(cm.LegendPlacement.RIGHT).show_legend(True))
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if stacked:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if max_ is not None:
        p = p.max(max_)
    p = p.min(0)
    for t in targets:
        p = p.with_target(t)
    return p


def table(title, description, targets, unit, matrix=None):
    p = tableb.Panel().title(title).description(description).datasource(DS).unit(unit)
    for t in targets:
        p = p.with_target(t)
    if matrix:
        row, col = matrix
        p = p.with_transformation(
            dm.DataTransformerConfig(id_val="groupingToMatrix", options={"rowField": row, "columnField": col, "valueField": "Value"})
        )
    return p


def stat(title, description, target, unit, thresholds):
    steps = [dm.Threshold(value=None, color="green")] + [dm.Threshold(value=v, color=c) for v, c in thresholds]
    return (
        statb.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .with_target(target)
        .thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
    )


def variable(name, label, query, multi=True):
    return (
        db.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": query, "refId": f"{name}-var"})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(True)
        .all_value(".*")
        .current(dm.VariableOption(selected=True, text="All", value="$__all"))
    )


def dashboard(uid, title, description, panels):
    d = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["waitmeter"])
        .editable()
        .timezone("browser")
        .time("now-1h", "now")
        .refresh("30s")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(variable("namespace", "Namespace", "label_values(waitmeter_build_info, namespace)"))
        .with_variable(variable("pod", "Pod", 'label_values(waitmeter_build_info{namespace=~"$namespace"}, pod)'))
        .with_variable(variable("pid", "Process (pid)", f"label_values(waitmeter_thread_seconds_total{{{K}}}, pid)"))
        .with_variable(variable("thread", "Thread", f"label_values(waitmeter_thread_seconds_total{{{P}}}, thread)"))
        .link(
            db.DashboardLink("waitmeter").type(dm.DashboardLinkType.DASHBOARDS).tags(["waitmeter"]).as_dropdown(True)
            .include_vars(True).keep_time(True)
        )
    )
    lay = Layout()
    for item in panels:
        if isinstance(item, str):
            d = d.with_row(lay.row(item))
        else:
            panel, w, h = item
            d = d.with_panel(lay.place(panel, w, h))
    return d.build()


def overview():
    waiting = f'sum by (pid, thread) (rate(waitmeter_thread_seconds_total{{{T}, state=~"{WAITING}"}}[{RATE}]))'
    working = f'sum by (pid, thread) (rate(waitmeter_thread_seconds_total{{{T}, state=~"{WAITING}|running"}}[{RATE}]))'
    return dashboard(
        "waitmeter-overview",
        "waitmeter / Waiting vs working",
        "Where the threads' wall time goes: running, or waiting for a CPU, the CPU quota, the GIL, a lock, I/O, or asleep.",
        [
            "Processes",
            (
                stat(
                    "Wait ratio",
                    "waiting / (waiting + running) of the selected processes over the time range, where waiting is "
                    "run queue + throttled + GIL wait: the share of the time the threads had work and could not do it. "
                    "Above 20%: open the GIL or CPU dashboard to see what they wait for.",
                    q(
                        f'sum(increase(waitmeter_thread_seconds_total{{{T}, state=~"{WAITING}"}}[$__range]))'
                        f' / sum(increase(waitmeter_thread_seconds_total{{{T}, state=~"{WAITING}|running"}}[$__range]))',
                        "wait ratio",
                        "A",
                        instant=True,
                    ),
                    "percentunit",
                    [(0.2, "orange"), (0.5, "red")],
                ),
                6,
                6,
            ),
            (
                timeseries(
                    "CPU used vs the CPUs it may use",
                    "Cores the process ran on (its running time per second) against its limit (its cgroup's quota, "
                    "else the node's CPUs). Waiting while far below the limit means the CPU is not the bottleneck: "
                    "look at GIL, lock and I/O waits.",
                    [
                        q(f'sum by (pid) (rate(waitmeter_thread_seconds_total{{{T}, state="running"}}[{RATE}]))', "pid {{pid}} used", "A"),
                        q(f"max by (pid) (waitmeter_process_cpu_limit_cores{{{P}}})", "pid {{pid}} limit", "B"),
                    ],
                    "cores",
                ),
                18,
                6,
            ),
            (
                timeseries(
                    "Time partition per process",
                    "Average number of threads in each state (seconds per second, stacked): running and the waits. "
                    "A growing gil_wait, runqueue or throttled band is lost work; futex_wait, io_wait and sleep may be "
                    "idle threads: check the Locks dashboard before acting on them.",
                    [q(f"sum by (pid, state) (rate(waitmeter_thread_seconds_total{{{T}}}[{RATE}]))", "{{pid}} {{state}}", "A")],
                    "short",
                    stacked=True,
                ),
                12,
                9,
            ),
            (
                timeseries(
                    "Waiting and the application age",
                    "Threads waiting (run queue + throttled + GIL, left axis) and the application's end-to-end age "
                    "(right axis, from --age-url or waitmeter_client). Age rising together with waiting points at the "
                    "wait; age rising while nothing waits points elsewhere (a downstream, I/O).",
                    [
                        q(f'sum by (pid) (rate(waitmeter_thread_seconds_total{{{T}, state=~"{WAITING}"}}[{RATE}]))', "pid {{pid}} waiting threads", "A"),
                        q(f"max by (pid) (waitmeter_app_age_seconds{{{P}}})", "pid {{pid}} age", "B"),
                    ],
                    "short",
                ).override_by_query("B", [dm.DynamicConfigValue(id_val="custom.axisPlacement", value="right"), dm.DynamicConfigValue(id_val="unit", value="s")]),
                12,
                9,
            ),
            "Threads",
            (
                timeseries(
                    "Wait ratio per thread",
                    "waiting / (waiting + running) of each thread. A thread near 100% had work almost all the time "
                    "and could not run it; the thread's row in the time partition below says what it waited for.",
                    [q(f"{waiting} / ({working} > 0)", "{{pid}} {{thread}}", "A")],
                    "percentunit",
                    max_=1,
                ),
                12,
                9,
            ),
            (
                table(
                    "Threads: seconds per state over the range",
                    "Each thread's wall time in the selected range by state; sort by a column to find the thread "
                    "that waits most. `waitmeter attach --pid PID` gives the same table live with the culprit named.",
                    [q(f"sum by (pid, thread, state) (increase(waitmeter_thread_seconds_total{{{T}}}[$__range]))", "", "A", instant=True, table=True)],
                    "s",
                    matrix=("thread", "state"),
                ),
                12,
                9,
            ),
            (
                timeseries(
                    "Time partition of $thread",
                    "The selected thread's states (stacked, in threads: 1 = the whole time). Repeated for each selected thread.",
                    [q(f"sum by (state) (rate(waitmeter_thread_seconds_total{{{P}, thread=~\"$thread\"}}[{RATE}]))", "{{state}}", "A")],
                    "short",
                    stacked=True,
                ).repeat("thread").repeat_direction("h"),
                8,
                8,
            ),
            "Agent",
            (
                stat(
                    "Probes detached",
                    "Kernel hooks that are not attached (waitmeter_probe_attached == 0). Anything above 0 means part of "
                    "the partition is missing: the agent's log names the hook and the reason.",
                    q(f"count(waitmeter_probe_attached{{{K}}} == 0) or vector(0)", "detached", "A", instant=True),
                    "short",
                    [(1, "red")],
                ),
                6,
                5,
            ),
            (
                timeseries(
                    "Events lost",
                    "Kernel events the agent could not record, by probe and reason. Any non-zero rate makes the numbers "
                    "incomplete: raise --max-threads for *_map_full.",
                    [q(f"sum by (probe, reason) (rate(waitmeter_bpf_events_lost_total{{{K}}}[{RATE}]))", "{{probe}} {{reason}}", "A")],
                    "short",
                ),
                6,
                5,
            ),
            (
                timeseries(
                    "Watched processes and threads",
                    "What the agent measures now. A drop to 0 while the application runs means the agent lost its targets "
                    "(PID namespace, permissions): see its log.",
                    [
                        q(f"sum(waitmeter_watched_processes{{{K}}})", "processes", "A"),
                        q(f"sum(waitmeter_watched_threads{{{K}}})", "threads", "B"),
                    ],
                    "short",
                ),
                6,
                5,
            ),
            (
                timeseries(
                    "Age source errors",
                    "Failed polls of the --age-url endpoint and malformed waitmeter_client datagrams per second. Non-zero: "
                    "the age panels are stale; check the URL and the metric name.",
                    [q(f"sum by (source) (rate(waitmeter_age_source_errors_total{{{K}}}[{RATE}]))", "{{source}}", "A")],
                    "short",
                ),
                6,
                5,
            ),
        ],
    )


def gil():
    return dashboard(
        "waitmeter-gil",
        "waitmeter / Python GIL",
        "Who waits for the CPython GIL, and behind whom.",
        [
            "GIL",
            (
                timeseries(
                    "GIL waiters",
                    "Average number of threads waiting for the GIL, per process. Above 1 for long: threads take turns "
                    "on one core's worth of Python; move CPU-heavy work to another process (multiprocessing) or into "
                    "code that releases the GIL.",
                    [q(f'sum by (pid) (rate(waitmeter_thread_seconds_total{{{T}, state="gil_wait"}}[{RATE}]))', "pid {{pid}}", "A")],
                    "short",
                ),
                12,
                8,
            ),
            (
                timeseries(
                    "GIL wait per thread",
                    "Share of each thread's time spent waiting for the GIL. A latency-sensitive thread (ingest, "
                    "event loop) above 50% is starved: the blame matrix names the holder.",
                    [q(f'sum by (pid, thread) (rate(waitmeter_thread_seconds_total{{{T}, state="gil_wait"}}[{RATE}]))', "{{pid}} {{thread}}", "A")],
                    "percentunit",
                    max_=1,
                ),
                12,
                8,
            ),
            (
                table(
                    "Blame matrix: GIL wait, victim (row) behind holder (column)",
                    "Seconds each thread waited for the GIL while another held it, over the range. A column that "
                    "dominates is the thread to fix: shorten its GIL-holding C calls (json.dumps of big objects, "
                    "regex, pure-Python loops) or move it out of the process. holder=unknown: the GIL was free.",
                    [q(f"sum by (thread, holder) (increase(waitmeter_gil_wait_seconds_total{{{T}}}[$__range]))", "", "A", instant=True, table=True)],
                    "s",
                    matrix=("thread", "holder"),
                ),
                12,
                9,
            ),
            (
                timeseries(
                    "GIL wait by holder",
                    "GIL wait per second of the selected threads, by the thread that held the GIL meanwhile: when it "
                    "started and who caused it.",
                    [q(f"sum by (pid, thread, holder) (rate(waitmeter_gil_wait_seconds_total{{{T}}}[{RATE}]))", "{{thread}} behind {{holder}}", "A")],
                    "short",
                    stacked=True,
                ),
                12,
                9,
            ),
            (
                timeseries(
                    "GIL hold time (p50, p99)",
                    "How long threads hold the GIL each time (only with --gil-probe uprobe). Holds of tens of ms starve "
                    "other threads even at low CPU: CPython asks for the GIL back every 5 ms, but a C call does not yield.",
                    [
                        q(f"histogram_quantile(0.5, sum by (le, pid, thread) (rate(waitmeter_gil_hold_seconds_bucket{{{T}}}[{RATE}])))", "p50 {{thread}}", "A"),
                        q(f"histogram_quantile(0.99, sum by (le, pid, thread) (rate(waitmeter_gil_hold_seconds_bucket{{{T}}}[{RATE}])))", "p99 {{thread}}", "B"),
                    ],
                    "s",
                ),
                24,
                8,
            ),
        ],
    )


def cpu():
    return dashboard(
        "waitmeter-cpu",
        "waitmeter / CPU quota and run queue",
        "Waiting for a CPU: the cgroup's CFS quota (throttling) and busy CPUs (run queue), with who had the CPU.",
        [
            "CPU quota (CFS throttling)",
            (
                timeseries(
                    "Throttled periods",
                    "Share of the cgroup's CFS periods in which it ran out of quota. Above 25%: requests see delays in "
                    "multiples of the period (100 ms); raise the CPU limit or cut the work that bursts.",
                    [
                        q(
                            f"sum by (cgroup) (rate(waitmeter_cgroup_throttled_periods_total{{{K}}}[{RATE}]))"
                            f" / (sum by (cgroup) (rate(waitmeter_cgroup_periods_total{{{K}}}[{RATE}])) > 0)",
                            "{{cgroup}}",
                            "A",
                        )
                    ],
                    "percentunit",
                    max_=1,
                ),
                12,
                8,
            ),
            (
                timeseries(
                    "Throttled time against the quota",
                    "Seconds per second the cgroup was throttled (cpu.stat) and its quota in cores. Throttling with "
                    "usage well below the quota: short bursts over many threads; the quota's period is too long for them.",
                    [
                        q(f"sum by (cgroup) (rate(waitmeter_cgroup_throttled_seconds_total{{{K}}}[{RATE}]))", "{{cgroup}} throttled", "A"),
                        q(f"max by (cgroup) (waitmeter_cgroup_cpu_quota_cores{{{K}}})", "{{cgroup}} quota (cores)", "B"),
                    ],
                    "short",
                ),
                12,
                8,
            ),
            (
                timeseries(
                    "Throttled time per thread",
                    "Share of each thread's time spent runnable while its cgroup was throttled: the threads that pay for the quota.",
                    [q(f'sum by (pid, thread) (rate(waitmeter_thread_seconds_total{{{T}, state="throttled"}}[{RATE}]))', "{{pid}} {{thread}}", "A")],
                    "percentunit",
                ),
                24,
                8,
            ),
            "Run queue",
            (
                timeseries(
                    "Run-queue time per thread",
                    "Share of each thread's time spent runnable, waiting for a CPU (not throttled). Above 20%: the CPUs "
                    "it may run on are busy; the next panel says with what.",
                    [q(f'sum by (pid, thread) (rate(waitmeter_thread_seconds_total{{{T}, state="runqueue"}}[{RATE}]))', "{{pid}} {{thread}}", "A")],
                    "percentunit",
                ),
                12,
                9,
            ),
            (
                timeseries(
                    "Run-queue wait by preemptor",
                    "Run-queue wait per second by what had the CPU: a thread of the process, another process "
                    "(process:<comm>) or idle (pure wake-up latency). A noisy neighbour shows up as one process: pin or "
                    "move it; the process' own threads: fewer runnable threads than CPUs.",
                    [q(f"sum by (thread, preemptor) (rate(waitmeter_runqueue_wait_seconds_total{{{T}}}[{RATE}]))", "{{thread}} behind {{preemptor}}", "A")],
                    "short",
                    stacked=True,
                ),
                12,
                9,
            ),
        ],
    )


def locks():
    return dashboard(
        "waitmeter-locks",
        "waitmeter / Locks (futex)",
        "Threads blocked on user-space locks, conditions and semaphores (futexes): which lock, how many waiters, who wakes them.",
        [
            "Futex words",
            (
                timeseries(
                    "Top futex words by blocked threads",
                    "Average number of threads blocked on each futex word (lock or condition address). Above 1 with "
                    "several waiters: threads queue on one lock; find the lock with `waitmeter attach --pid PID` (it "
                    "prints the address and the waiters) and shorten its critical section or shard it.",
                    [q(f'topk(10, sum by (pid, futex) (rate(waitmeter_futex_word_wait_seconds_total{{{P}, futex!="other"}}[{RATE}])))', "{{pid}} {{futex}}", "A")],
                    "short",
                ),
                12,
                8,
            ),
            (
                timeseries(
                    "Waiters per futex word",
                    "Distinct threads that waited on each word between scrapes. Three or more with a high blocked count: "
                    "a lock convoy (the WaitmeterLockConvoy alert).",
                    [q(f"max by (pid, futex) (waitmeter_futex_word_waiters{{{P}}})", "{{pid}} {{futex}}", "A")],
                    "short",
                ),
                12,
                8,
            ),
            "Waiters and wakers",
            (
                timeseries(
                    "Futex wait per thread",
                    "Share of each thread's time blocked on futexes. Idle worker threads waiting for work also show up "
                    "here: it is contention only when the thread had work (the wakers table tells them apart: an idle "
                    "worker is woken by the producer, a contended lock by its peers).",
                    [q(f"sum by (pid, thread) (rate(waitmeter_futex_wait_seconds_total{{{T}}}[{RATE}]))", "{{pid}} {{thread}}", "A")],
                    "percentunit",
                ),
                12,
                9,
            ),
            (
                table(
                    "Wakers: futex wait of each thread (row) ended by (column)",
                    "Seconds of futex wait by the thread whose wake-up ended it, over the range. waker=timeout: the wait "
                    "ended by a timeout or signal (polling). A thread mostly woken by its peers is contending with them.",
                    [q(f"sum by (thread, waker) (increase(waitmeter_futex_wait_seconds_total{{{T}}}[$__range]))", "", "A", instant=True, table=True)],
                    "s",
                    matrix=("thread", "waker"),
                ),
                12,
                9,
            ),
        ],
    )


DASHBOARDS = [overview, gil, cpu, locks]

# ---------------------------------------------------------------- output


def rendered():
    """{path: content} of every generated file."""
    header = "# Generated by dashboards/mixin.py from dashboards/config.yaml: edit those, then run `make mixin`.\n"
    rules = header + yaml.safe_dump(rules_file(), sort_keys=False, width=10_000, allow_unicode=True)
    out = {
        HERE / "rules" / "waitmeter-rules.yaml": rules,
        CHART_FILES / "rules" / "waitmeter-rules.yaml": rules,
    }
    for build in DASHBOARDS:
        d = build()
        text = JSONEncoder(sort_keys=True, indent=2).encode(d) + "\n"
        obj = json.loads(text)
        # alert annotations (the SDK's annotation builder has no Prometheus title/text formats)
        obj["annotations"] = {
            "list": [
                {
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "enable": True,
                    "expr": 'ALERTS{alertname=~"Waitmeter.*", alertstate="firing", ' + K + "}",
                    "iconColor": "red",
                    "name": "waitmeter alerts",
                    "step": "60s",
                    "textFormat": "{{alertname}} pid {{pid}} {{thread}}",
                    "titleFormat": "{{alertname}}",
                    "useValueForTime": False,
                }
            ]
        }
        # the SDK leaves unset panel options as null; Grafana expects objects
        for p in obj["panels"]:
            if p.get("options") is None and p.get("type") != "row":
                p["options"] = {}
        text = json.dumps(obj, sort_keys=True, indent=2) + "\n"
        out[HERE / "json" / f"{obj['uid']}.json"] = text
        out[CHART_FILES / "dashboards" / f"{obj['uid']}.json"] = text
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is missing or stale")
    args = ap.parse_args()
    files = rendered()
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    # generated directories hold nothing else (a removed dashboard must not linger)
    for d in {p.parent for p in files}:
        if d.exists():
            stale += [p for p in d.iterdir() if p not in files]
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (run `make mixin`)", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        if p in files:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(files[p])
        else:
            p.unlink()
        print(f"wrote {p.relative_to(ROOT)}" if p in files else f"removed {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
