"""The CPU dashboard (waitmeter-cpu): CFS quota throttling and the run queue, with who had the CPU."""
from .common import CG, RATE, T, dashboard, q, timeseries


def build():
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
                            f"sum by (cgroup) (rate(waitmeter_cgroup_throttled_periods_total{{{CG}}}[{RATE}]))"
                            f" / (sum by (cgroup) (rate(waitmeter_cgroup_periods_total{{{CG}}}[{RATE}])) > 0)",
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
                        q(f"sum by (cgroup) (rate(waitmeter_cgroup_throttled_seconds_total{{{CG}}}[{RATE}]))", "{{cgroup}} throttled", "A"),
                        q(f"max by (cgroup) (waitmeter_cgroup_cpu_quota_cores{{{CG}}})", "{{cgroup}} quota (cores)", "B"),
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
