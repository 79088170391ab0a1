"""The Python GIL dashboard (waitmeter-gil): who waits for the GIL, and behind whom."""
from .common import RATE, T, dashboard, label, q, table, timeseries, with_profile_links


def build():
    pid, thread, holder = label("pid"), label("thread"), label("holder")
    return with_profile_links(dashboard(
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
                12,
                8,
            ),
            (
                timeseries(
                    "GIL holds others waited behind, by function (p99)",
                    "How long a holder kept the GIL while another thread waited, by the holder's function "
                    "(json.dumps, or the application's own), measured from the waiters' side in the default mode. "
                    "Holds well above the switch interval (5 ms; 10 ms and more) are C calls that do not release "
                    "the GIL: split the call, or move it to another process.",
                    [
                        q(
                            "histogram_quantile(0.99, sum by (le, pid, thread, function) "
                            f"(rate(waitmeter_gil_function_hold_seconds_bucket{{{T}}}[{RATE}])))",
                            "{{thread}} in {{function}}",
                            "A",
                        ),
                    ],
                    "s",
                ),
                12,
                8,
            ),
        ],
    ), {
        "GIL wait per thread": [
            ("Where this thread waited (wait profile)", f'pid="{pid}", thread="{thread}", role="victim", state="gil_wait"'),
            ("What the GIL holders ran meanwhile (wait profile)", f'pid="{pid}", victim="{thread}", role="holder"'),
        ],
        "GIL wait by holder": [
            ("What this holder ran meanwhile (wait profile)", f'pid="{pid}", thread="{holder}", victim="{thread}", role="holder"'),
        ],
        "GIL holds others waited behind, by function (p99)": [
            ("Where this holder held the GIL (wait profile)", f'pid="{pid}", thread="{thread}", role="holder", state="gil_wait"'),
        ],
    })
