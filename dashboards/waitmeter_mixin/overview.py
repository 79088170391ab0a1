"""The overview dashboard (waitmeter-overview): waiting vs working per process and
thread, the application age and the serving threads' stretches, and the health of the agent itself.
"""
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from .common import CFG, K, P, RATE, T, WAITING, dashboard, q, stat, table, timeseries


def build():
    waiting = f'sum by (pid, thread) (rate(waitmeter_thread_seconds_total{{{T}, state=~"{WAITING}"}}[{RATE}]))'
    working = f'sum by (pid, thread) (rate(waitmeter_thread_seconds_total{{{T}, state=~"{WAITING}|running"}}[{RATE}]))'
    # the stretches of each serving thread (never summed across threads), and the alert's objective
    stretch = f"sum by (pid, thread, wait, le) (rate(waitmeter_thread_stretch_seconds_bucket{{{T}}}[{RATE}]))"
    objective = CFG["alerts"]["servingThreadStall"]["objectiveSeconds"]
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
                24,
                8,
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
            (
                timeseries(
                    "Serving threads: stretch p50/p99/max-bucket",
                    "For a thread that serves input (it waits for work in one place, its home wait: an event loop in "
                    "epoll_wait, a worker on its queue's futex), a stretch is the time from leaving that wait (work "
                    "arrived) to blocking there again: how long it was kept from its poll, and so how long what arrived "
                    "meanwhile waited. The dashed red line is the objective (WaitmeterServingThreadStalled fires when a "
                    "thread's p99 stays above it); max-bucket is the upper bound of the longest stretch's log2 bucket. "
                    "p99 high with the thread otherwise idle is a stall (one long handler or blocking call), not "
                    "saturation: `waitmeter attach --pid PID` names what it ran meanwhile.",
                    [
                        q(f"histogram_quantile({qt}, {stretch})", "{{pid}} {{thread}} ({{wait}}) " + name, ref)
                        for qt, name, ref in ((0.5, "p50", "A"), (0.99, "p99", "B"), (1, "max-bucket", "C"))
                    ],
                    "s",
                )
                .thresholds(
                    db.ThresholdsConfig()
                    .mode(dm.ThresholdsMode.ABSOLUTE)
                    .steps([dm.Threshold(value=None, color="green"), dm.Threshold(value=objective, color="red")])
                )
                .thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphTresholdsStyleMode.DASHED)),
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
