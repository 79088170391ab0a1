"""The locks dashboard (waitmeter-locks): futex words, their waiters and who wakes them."""
from .common import P, RATE, T, dashboard, label, q, table, timeseries, with_profile_links


def build():
    pid, thread = label("pid"), label("thread")
    return with_profile_links(dashboard(
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
    ), {
        "Futex wait per thread": [
            ("Where this thread blocked (wait profile)", f'pid="{pid}", thread="{thread}", role="victim", state="futex_wait"'),
            ("What woke it: the wakers' code (wait profile)", f'pid="{pid}", victim="{thread}", role="waker"'),
        ],
    })
