//! The metric catalogue: every metric waitmeter exports, in one place.
//! `docs/metrics.md` is generated from it (`waitmeter metrics-doc`); a test
//! fails when the committed file is stale.
use std::fmt::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Debug)]
pub struct Metric {
    /// name without the unit and type suffixes the encoder adds
    pub base: &'static str,
    pub kind: Kind,
    pub unit: Option<&'static str>,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

impl Metric {
    /// The sample name as scraped.
    pub fn exposed(&self) -> String {
        let mut n = self.base.to_string();
        if let Some(u) = self.unit {
            n = format!("{n}_{u}");
        }
        match self.kind {
            Kind::Counter => n + "_total",
            Kind::Gauge | Kind::Histogram => n,
        }
    }
}

pub const THREAD_SECONDS: Metric = Metric {
    base: "waitmeter_thread",
    kind: Kind::Counter,
    unit: Some("seconds"),
    labels: &["pid", "comm", "thread", "state"],
    help: "Wall time of a process' threads by state of the time model (running, runqueue, throttled, gil_wait, futex_wait, io_wait, sleep, other, yield: runnable after sched_yield, not waiting); the states of a thread sum to the time it existed. Threads with the same name are summed (the busiest apart as NAME#busiest when it is far busier); past the per-process label bound (given to the busiest names) they are summed as thread=\"other\".",
};

pub const GIL_WAIT_SECONDS: Metric = Metric {
    base: "waitmeter_gil_wait",
    kind: Kind::Counter,
    unit: Some("seconds"),
    labels: &["pid", "thread", "holder"],
    help: "Time Python threads spent waiting for the GIL, by the thread that held it meanwhile (holder=\"unknown\": the GIL was free or unreadable when the wait began). Thread and holder labels are bounded like waitmeter_thread_seconds_total.",
};

pub const GIL_HOLD_SECONDS: Metric = Metric {
    base: "waitmeter_gil_hold",
    kind: Kind::Histogram,
    unit: Some("seconds"),
    labels: &["pid", "thread"],
    help: "How long Python threads held the GIL each time (log2 buckets from 1 µs). Only with --gil-probe uprobe on interpreters with symbols.",
};

pub const GIL_FUNCTION_HOLD_SECONDS: Metric = Metric {
    base: "waitmeter_gil_function_hold",
    kind: Kind::Histogram,
    unit: Some("seconds"),
    labels: &["pid", "thread", "function"],
    help: "GIL holds that other threads waited behind, by the holder (thread) and the function it was in (function: the library call the application was in, e.g. json.dumps, else its own innermost function; the first 10 per process, the rest \"other\"), in log2 buckets from 1 ms. A hold is measured from the holder's take of the GIL when known (the release that handed it over was seen and nobody held it since), else from its waiter's first wait of a streak of timed-out GIL waits, to the release that ended it (a hold nobody waited behind is not seen); holds much longer than the switch interval (python.switch_interval_us, 5 ms by default) are calls that do not release the GIL. Needs stacks (--stacks, on by default).",
};

pub const RUNQUEUE_WAIT_SECONDS: Metric = Metric {
    base: "waitmeter_runqueue_wait",
    kind: Kind::Counter,
    unit: Some("seconds"),
    labels: &["pid", "thread", "preemptor"],
    help: "Run-queue time of threads (runnable, cgroup not throttled), by what had their CPU when they got it back: a thread of the process (its label), another process (preemptor=\"process:<comm>\", bounded like thread labels) or nothing (preemptor=\"idle\": the wake-up latency itself).",
};

pub const FUTEX_WAIT_SECONDS: Metric = Metric {
    base: "waitmeter_futex_wait",
    kind: Kind::Counter,
    unit: Some("seconds"),
    labels: &["pid", "thread", "waker"],
    help: "Time threads spent blocked on futexes (locks, conditions, semaphores; not the GIL), by the thread whose wake-up ended the wait (waker=\"timeout\": a timeout or signal ended it). Labels bounded like waitmeter_thread_seconds_total.",
};

pub const FUTEX_WORD_WAIT_SECONDS: Metric = Metric {
    base: "waitmeter_futex_word_wait",
    kind: Kind::Counter,
    unit: Some("seconds"),
    labels: &["pid", "futex"],
    help: "Time threads of a process spent blocked on one futex word (a lock, condition or semaphore; not the GIL), by its address (futex=\"0x7f...\"; for a lock of CPython 3.13+, the lock's address rather than the waiter's own semaphore). Its rate is the average number of threads blocked on the word. A word gets its own label once it has 10 ms of wait, at most 10 words per process; the rest are summed as futex=\"other\".",
};

pub const FUTEX_WORD_WAITERS: Metric = Metric {
    base: "waitmeter_futex_word_waiters",
    kind: Kind::Gauge,
    unit: None,
    labels: &["pid", "futex"],
    help: "Distinct threads that waited on the futex word in the agent's last 60 s (a window of the agent's clock, moved every 10 s: the same for every scraper). Three or more, blocked most of the time and waking each other (waitmeter_futex_wait_seconds_total by waker): a lock convoy.",
};

pub const WOKEN_BY_PROCESS_SECONDS: Metric = Metric {
    base: "waitmeter_woken_by_process",
    kind: Kind::Counter,
    unit: Some("seconds"),
    labels: &["pid", "state", "waker_pid", "waker_comm"],
    help: "Time a process' threads spent blocked (state: futex_wait, io_wait, sleep, other) until a thread of another process woke them, whatever the wait (a lock's release in shared memory, a latch set by a signal, a pipe or socket written, a futex), by that process (waker_pid, waker_comm: PIDs of the agent's namespace; the first 10 per process, the rest summed as waker_pid=\"other\"), summed over the threads. Wakeups from an interrupt (a timer, the network, a disk) are no process' and are not counted. Watched processes that wake one another a large share of their time wait on each other (a database's backends queued on one row's lock): waitmeter_process_wait_on_each_other_ratio; a process woken by another that it does not wake back waits for work from it.",
};

pub const PROCESS_WAIT_ON_EACH_OTHER_RATIO: Metric = Metric {
    base: "waitmeter_process_wait_on_each_other_ratio",
    kind: Kind::Gauge,
    unit: None,
    labels: &["pid"],
    help: "Of watched processes that waited on each other in the agent's last 60 s (a window of the agent's clock, moved every 10 s: the same for every scraper), the share of each one's threads' time blocked until another of them woke them; absent for the other processes. They are those of `waitmeter attach`'s finding \"waiting on each other\" (docs/verdicts.md): three or more, each woken by the others for at least 20% of its time, waking them in turn, by processes that wake one another (not a consumer and its producer, a server and its clients, two tiers of workers). Its series are few: they are what WaitmeterProcessesWaitOnEachOther alerts on.",
};

pub const CGROUP_THROTTLED_SECONDS: Metric = Metric {
    base: "waitmeter_cgroup_throttled",
    kind: Kind::Counter,
    unit: Some("seconds"),
    labels: &["cgroup"],
    help: "Time the cgroup of a watched process was throttled by its CFS CPU quota (cpu.stat throttled_time / throttled_usec).",
};

pub const CGROUP_THROTTLED_PERIODS: Metric = Metric {
    base: "waitmeter_cgroup_throttled_periods",
    kind: Kind::Counter,
    unit: None,
    labels: &["cgroup"],
    help: "CFS periods in which the cgroup was throttled (cpu.stat nr_throttled).",
};

pub const CGROUP_PERIODS: Metric = Metric {
    base: "waitmeter_cgroup_periods",
    kind: Kind::Counter,
    unit: None,
    labels: &["cgroup"],
    help: "CFS periods in which the cgroup had runnable tasks (cpu.stat nr_periods).",
};

pub const CGROUP_QUOTA_CORES: Metric = Metric {
    base: "waitmeter_cgroup_cpu_quota_cores",
    kind: Kind::Gauge,
    unit: None,
    labels: &["cgroup"],
    help: "The cgroup's CFS CPU quota in cores (quota / period); absent when unlimited.",
};

pub const PROCESS_CPU_LIMIT_CORES: Metric = Metric {
    base: "waitmeter_process_cpu_limit_cores",
    kind: Kind::Gauge,
    unit: None,
    labels: &["pid"],
    help: "CPUs a watched process may use: its cgroup's CFS quota in cores when it has one, else the online CPUs. Compare with the process' running time to tell \"the CPU is saturated\" from \"the CPU is idle\".",
};

pub const APP_AGE_SECONDS: Metric = Metric {
    base: "waitmeter_app_age",
    kind: Kind::Gauge,
    unit: Some("seconds"),
    labels: &["pid", "thread"],
    help: "The application's end-to-end age (now - send time of what it handles): from its own endpoint (--age-url; no thread label) or from waitmeter_client samples (latest per thread).",
};

pub const THREAD_STRETCH_SECONDS: Metric = Metric {
    base: "waitmeter_thread_stretch",
    kind: Kind::Histogram,
    unit: Some("seconds"),
    labels: &["pid", "comm", "thread", "wait"],
    help: "Stretches of a thread away from its home wait: a stretch is the time from the end of one block in a wait (the thread was woken: work arrived) to the start of its next block in that same wait, i.e. how long the thread was kept from the wait it came back to, and so how long what arrived meanwhile waited. A thread's home is the wait it spent most of its blocked time in (at least half of it; an event loop's epoll_wait, a worker's queue futex, an acceptor's accept4), and only its stretches at home are counted; wait is the home's syscall (wait=\"epoll_wait\", \"futex\"). A thread with no such wait has no series. Buckets at 1 ms to 16.384 s in powers of two (exact boundaries of the probe's buckets; a stretch of exactly 2^k ms counts in the bucket above). Thread labels are bounded and folded like waitmeter_thread_seconds_total (same-named threads summed, NAME#busiest, thread=\"other\" past the bound); the stretches of threads that exited stay counted in their series.",
};

pub const THREAD_WAIT_RATIO: Metric = Metric {
    base: "waitmeter_thread_wait_ratio",
    kind: Kind::Gauge,
    unit: None,
    labels: &["pid", "thread"],
    help: "waiting / (waiting + running) of a thread over the agent's last 60 s (a window of the agent's clock, moved every 10 s: the same for every scraper), where waiting = runqueue + throttled + gil_wait (absent when the thread neither ran nor waited). For other windows use the recording rule waitmeter:thread_wait_ratio:rate5m.",
};

pub const PROCESS_SYSCALLS: Metric = Metric {
    base: "waitmeter_process_syscalls",
    kind: Kind::Counter,
    unit: None,
    labels: &["pid", "comm", "syscall"],
    help: "System calls made by a process' threads (those that returned), with `run --syscalls on` only: the clock reads by name (syscall=\"clock_gettime\", \"gettimeofday\", \"time\": calls the vDSO answers in user space when it can read the clock source, so a high rate means it cannot, or the code bypasses it), the rest as syscall=\"other\". `attach` lists each thread's syscalls by name.",
};

pub const AGE_SCRAPE_ERRORS: Metric = Metric {
    base: "waitmeter_age_scrape_errors",
    kind: Kind::Counter,
    unit: None,
    labels: &["reason"],
    help: "Problems reading the --age-url endpoint, by reason. Failed polls (each also counts in waitmeter_age_source_errors_total{source=\"endpoint\"}): connect (no connection: refused, unreachable, name not resolved), timeout (no whole answer within --age-timeout, connect to last byte), http_status (a status other than 200), too_large (a response head over 16 KiB or a body over 16 MiB), encoding (a Content-Encoding other than identity or a Transfer-Encoding other than chunked), bad_response (not well-formed HTTP/1.x: a malformed head or chunk, a body cut short), metric_missing (no series of --age-metric with the --age-labels, or a histogram or summary without its _sum or _count), out_of_range (the metric was read but its value is no age: below 0, above a week, NaN or infinite; not taken). Lines: bad_line (malformed lines skipped in expositions that were read; a skipped line of the metric costs that sample only). Every reason is exported from the start, at 0.",
};

pub const AGE_SOURCE_ERRORS: Metric = Metric {
    base: "waitmeter_age_source_errors",
    kind: Kind::Counter,
    unit: None,
    labels: &["source"],
    help: "Failed polls of the --age-url endpoint (source=\"endpoint\") and malformed datagrams on the --age-socket (source=\"client\").",
};

pub const AGE_CLIENT_REJECTED: Metric = Metric {
    base: "waitmeter_age_client_rejected",
    kind: Kind::Counter,
    unit: None,
    labels: &["reason"],
    help: "Datagrams on the --age-socket that were not taken, by reason. A record is taken only from the process it speaks of, as the kernel names the sender (docs/age.md): malformed (not a waitmeter_client record; also counted in waitmeter_age_source_errors_total{source=\"client\"}), out_of_range (an age below 0, above a week, NaN or infinite), no_credentials (the sender is not visible in the agent's PID namespace), wrong_pid (the record claims a process other than its sender), unknown_thread (its thread is not a thread of the sender), sender_exited (the sender had exited when the agent read the record), state_full (a thread more than the --age-max-threads, default 4096, whose ages the agent keeps). Every reason is exported from the start, at 0.",
};

pub const HTTP_REQUESTS: Metric = Metric {
    base: "waitmeter_http_requests",
    kind: Kind::Counter,
    unit: None,
    labels: &["code"],
    help: "Requests the endpoint answered, by HTTP status code (401: no or wrong basic-auth credentials; 429: 8 profile requests were open already, 4 profiles were being recorded, or 8 basic-auth checks were waiting; 503 on /metrics: the agent could not render in time).",
};

pub const HTTP_CONNECTIONS_DROPPED: Metric = Metric {
    base: "waitmeter_http_connections_dropped",
    kind: Kind::Counter,
    unit: None,
    labels: &["reason"],
    help: "Connections the endpoint closed without an answer, by reason: head_timeout (the request head, TLS handshake included, was not complete 5 s after accept), evicted (closed to make room: the oldest connection still sending its head, when 256 were open), over_limit (256 connections busy answering: answered 503 with Retry-After at once), write_timeout (the response was not taken within 30 s), tls_handshake (the TLS handshake failed: no or untrusted client certificate, plain HTTP on a TLS port), client_gone (the client of a /debug/pprof/wait request hung up before its profile was ready: its recording stopped). A steady rise of head_timeout or evicted is a slow or hostile client.",
};

pub const WEB_CONFIG_RELOADS: Metric = Metric {
    base: "waitmeter_web_config_reloads",
    kind: Kind::Counter,
    unit: None,
    labels: &["result"],
    help: "Changes of the --web.config.file (or the files it names) the endpoint saw, by result: ok (in force for new connections), failed (it did not load: empty, unreadable, malformed, a certificate missing; the last good configuration stays), refused_weaker (it loaded but would turn TLS, client certificate verification or basic auth off: a reload never weakens the endpoint; restart waitmeter to serve it that way). Each failure is also an error line in the log. Absent without --web.config.file.",
};

pub const PROFILE_PUSHES: Metric = Metric {
    base: "waitmeter_profile_pushes",
    kind: Kind::Counter,
    unit: None,
    labels: &["result"],
    help: "Wait-profile pushes to Pyroscope (--pyroscope-url), by result: ok, rejected (a 4xx answer other than 429: labels or profile refused; see the agent's log), failed (429 or 5xx: the server could not take it), unreachable (no connection, TLS failure, no answer within 10 s), queue_full (two pushes were already waiting: the server is slower than --pyroscope-interval). A push that did not land is not retried: its seconds are missing from Pyroscope. Absent without --pyroscope-url.",
};

/// A gauge of value 1, one series per watched process: what joins its series to its container
/// and pod (labels on every series would start new series when the names arrive).
pub const PROCESS_INFO: Metric = Metric {
    base: "waitmeter_process_info",
    kind: Kind::Gauge,
    unit: None,
    labels: &["pid", "comm", "cgroup", "runtime", "container_id", "pod_uid", "namespace", "pod", "container", "service_name"],
    help: "Who a watched process is; always 1. cgroup: its CPU cgroup as the waitmeter_cgroup_* series name it (else the path its container was read from); runtime: the container runtime its cgroup path names (containerd, crio, docker, podman; unknown: a bare container ID, as the kubelet's cgroupfs driver writes it) or host (a process outside any container); container_id: the runtime's 64-hex-digit ID; pod_uid: its Kubernetes pod's UID (joins kube-state-metrics' kube_pod_info{uid}); namespace, pod, container, service_name: from the node's pod list (--pods), absent until it names them (a container newer than the list has its pod's names and no container). Join on it: `waitmeter_thread_seconds_total * on(instance, pid) group_left(namespace, pod, container) waitmeter_process_info`. Empty labels are left out.",
};

pub const POD_LIST_FETCHES: Metric = Metric {
    base: "waitmeter_pod_list_fetches",
    kind: Kind::Counter,
    unit: None,
    labels: &["result"],
    help: "Fetches of the node's pod list (--pods), by result: ok, unreachable (no connection, TLS failed), timeout (no whole answer within 10 s), forbidden (401 or 403: the token is missing, expired or lacks list on pods), http_status (another status than 200), too_large (over 64 MiB), bad_response (not HTTP, not a PodList). A failed fetch keeps the last list: processes keep their names, a new container has its container_id and pod_uid only until a fetch succeeds. Every result is exported from the start, at 0. Absent without a --pods source.",
};

pub const POD_LIST_SKIPPED: Metric = Metric {
    base: "waitmeter_pod_list_skipped",
    kind: Kind::Counter,
    unit: None,
    labels: &[],
    help: "Entries of the fetched pod lists skipped as malformed (a pod whose namespace or name is not a Kubernetes name, a container status whose ID is not 64 hex digits or whose name is not a Kubernetes name) or dropped past what a list may name (5000 pods, 20000 container statuses, 256 a pod; a warning says so): their containers go unnamed. Absent without a --pods source.",
};

pub const WATCHED_PROCESSES: Metric =
    Metric { base: "waitmeter_watched_processes", kind: Kind::Gauge, unit: None, labels: &[], help: "Processes being measured." };

pub const WATCHED_THREADS: Metric =
    Metric { base: "waitmeter_watched_threads", kind: Kind::Gauge, unit: None, labels: &[], help: "Live threads being measured." };

pub const EVENTS_LOST: Metric = Metric {
    base: "waitmeter_bpf_events_lost",
    kind: Kind::Counter,
    unit: None,
    labels: &["probe", "reason"],
    help: "Kernel events that could not be recorded, by probe and reason (thread_map_full, holds_map_full: raise --max-threads; exit_ringbuf_full: a thread's final record was lost; blame_map_full: a GIL wait was not charged to its holder; blame_taken: a wait charged to a blame entry in the instant the agent took it out of the kernel; stretch_map_full: a stretch was not counted in waitmeter_thread_stretch_seconds, raise --max-threads; probe stacks: a wait not charged to its stacks, or, counted in user space, thread_gone: a wait drained after its thread was forgotten, perf_map_refused: a JIT's perf map not read (not a regular file, not the process's user's, past 256 MiB), perf_map_bad_line: its lines skipped (malformed, past the bound of ranges), that code unnamed; unwind_no_room, unwind_maps_full: code built without frame pointers the native walk cannot step through (its unwind rows did not fit, or the process maps more than 32 such objects), stacks stop there; debuginfod_refused: a debuginfod server's answer that was not the debug file asked for, deleted; debuginfod_failed: no server in DEBUGINFOD_URLS had a stripped object's debug file or answered; thread_unsettled: a thread's entry being written through every copy the agent took of it, its last copy used as it was; span_ringbuf_full: an interval of attach's timeline (--trace, --html) not drawn; probe syscalls: a syscall not counted, syscall_map_full or task_storage_failed). Any increase means the numbers are incomplete.",
};

pub const BPF_MAP_ENTRIES: Metric = Metric {
    base: "waitmeter_bpf_map_entries",
    kind: Kind::Gauge,
    unit: None,
    labels: &["probe", "map"],
    help: "Entries in each kernel map that grows with threads and processes (threads, blame, GIL holds, stretches). They are cleaned by thread lifetime: with no thread churn the value returns to its idle level; near --max-threads, events are lost.",
};

pub const PROBE_ATTACHED: Metric = Metric {
    base: "waitmeter_probe_attached",
    kind: Kind::Gauge,
    unit: None,
    labels: &["probe", "variant"],
    help: "1 when the probe's hook is attached, 0 when it is not (degraded).",
};

pub const KERNEL_FEATURE: Metric = Metric {
    base: "waitmeter_kernel_feature",
    kind: Kind::Gauge,
    unit: None,
    labels: &["feature"],
    help: "1 when the running kernel has the feature, 0 when it lacks it and the probes run a fallback (bpf_loop, Linux 5.17: without it native stacks are walked by frame pointers only and the blame maps are read whole; task_storage, 5.11: without it --syscalls on is refused; irq_context, the per-CPU preempt count among the kernel's symbols (CONFIG_KALLSYMS_ALL): without it a wakeup from an interrupt is told apart only where it interrupted a task outside a system call). docs/deployment.md lists the kernels.",
};

/// A gauge of value 1 (not the OpenMetrics `info` type, which the classic
/// Prometheus text format and promtool reject).
pub const BUILD_INFO: Metric = Metric {
    base: "waitmeter_build_info",
    kind: Kind::Gauge,
    unit: None,
    labels: &["version"],
    help: "waitmeter build information; always 1.",
};

pub const ALL: &[&Metric] = &[
    &THREAD_SECONDS,
    &GIL_WAIT_SECONDS,
    &GIL_HOLD_SECONDS,
    &GIL_FUNCTION_HOLD_SECONDS,
    &RUNQUEUE_WAIT_SECONDS,
    &FUTEX_WAIT_SECONDS,
    &FUTEX_WORD_WAIT_SECONDS,
    &FUTEX_WORD_WAITERS,
    &WOKEN_BY_PROCESS_SECONDS,
    &PROCESS_WAIT_ON_EACH_OTHER_RATIO,
    &CGROUP_THROTTLED_SECONDS,
    &CGROUP_THROTTLED_PERIODS,
    &CGROUP_PERIODS,
    &CGROUP_QUOTA_CORES,
    &PROCESS_CPU_LIMIT_CORES,
    &APP_AGE_SECONDS,
    &THREAD_STRETCH_SECONDS,
    &THREAD_WAIT_RATIO,
    &PROCESS_SYSCALLS,
    &AGE_SCRAPE_ERRORS,
    &AGE_SOURCE_ERRORS,
    &AGE_CLIENT_REJECTED,
    &HTTP_REQUESTS,
    &HTTP_CONNECTIONS_DROPPED,
    &WEB_CONFIG_RELOADS,
    &PROFILE_PUSHES,
    &PROCESS_INFO,
    &POD_LIST_FETCHES,
    &POD_LIST_SKIPPED,
    &WATCHED_PROCESSES,
    &WATCHED_THREADS,
    &EVENTS_LOST,
    &BPF_MAP_ENTRIES,
    &PROBE_ATTACHED,
    &KERNEL_FEATURE,
    &BUILD_INFO,
];

/// docs/metrics.md
pub fn markdown() -> String {
    let mut out = String::from(
        "# Metrics reference\n\n\
         Generated from `agent/src/export/catalogue.rs` by `waitmeter metrics-doc`; do not edit by hand\n\
         (`make docs` regenerates it, and `make test` fails when it is stale).\n\n\
         All metrics are served by `waitmeter run` on `/metrics` (default `127.0.0.1:9747`), in the\n\
         Prometheus text format. Base units; counters end in `_total`. No node or cluster labels:\n\
         add them in the scrape configuration. Label values taken from the target (`comm`, `thread`)\n\
         are untrusted text: control characters are replaced and the length is capped at 64 characters.\n\n\
         | metric | type | labels | meaning |\n|---|---|---|---|\n",
    );
    for m in ALL {
        let kind = match m.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let labels =
            if m.labels.is_empty() { "—".to_string() } else { m.labels.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ") };
        let _ = writeln!(out, "| `{}` | {} | {} | {} |", m.exposed(), kind, labels, m.help);
    }
    out.push_str(
        "\n## Label bounds\n\n\
         - `thread`: the thread's name (the Python thread name when known, else the OS comm). Threads of\n  \
         one process with the same name are summed, except the busiest of them when it is far busier\n  \
         than the rest (at least 0.5 core and 4 times the next; it keeps it down to half of that):\n  \
         `thread=\"NAME#busiest\"`. A process has at most `--max-thread-labels` (default 20) own\n  \
         labels; the other threads are summed as `thread=\"other\"`. The labels go to the names with the\n  \
         most running and waiting time (a moving average, looked at every second): names seen first\n  \
         get them while there are free ones, and a name without a label takes the place of the\n  \
         labelled one with the least when it is more than twice as busy plus 0.05 core (so two names\n  \
         of about the same load do not trade places). A series may so move to `other` and back. When\n  \
         labels move, every thread's time so far stays in the series it was counted in and the\n  \
         threads count afresh from there: every counter only grows, and the series of a process add\n  \
         up to its threads' time. A name that lost its label keeps its series (standing still) for 60 s;\n  \
         then it is dropped, so a process has at most its labels' series.\n\
         - `pid`: the PID as seen in the agent's PID namespace (the pod's, for a sidecar).\n\
         - `futex`: the address of a futex word in the process (`0x7f3a...`). A word gets its own label once\n  \
         it has 10 ms of wait, at most 10 words per process; the rest, and a labelled word's wait before\n  \
         it got its label, are summed as `futex=\"other\"`, so every counter only grows and the rates of\n  \
         all of a process' series add up to its futex wait rate.\n\
         - `function` (`waitmeter_gil_function_hold_seconds`): the first 10 distinct functions of a process\n  \
         keep their own label, later ones are summed as `function=\"other\"`; `thread` there is the holder's label.\n\
         - `wait` (`waitmeter_thread_stretch_seconds`): the syscall of the thread's home wait (`epoll_wait`,\n  \
         `futex`, ...), one series per thread label and home (same-named threads with different homes have one\n  \
         each). A thread's home is decided on its stretches since it was watched (a wait other than its home\n  \
         counts while the thread keeps coming back to it: one it has not come back to for 2 s is forgotten);\n  \
         when it moves to another wait, what the thread has counted stays in the old series and the new one\n  \
         counts from then on.\n\
         - `--tid-labels` adds a `tid` label to `waitmeter_thread_seconds_total` (one series per thread: use\n  \
         it for debugging, not for long-term storage).\n\
         - Series of a process that exited are kept for 5 minutes, then dropped.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_conventions() {
        for m in ALL {
            assert!(m.base.starts_with("waitmeter_"), "{}", m.base);
            assert!(!m.base.ends_with("_total") && !m.base.ends_with("_seconds"), "{}", m.base);
        }
        assert_eq!(THREAD_SECONDS.exposed(), "waitmeter_thread_seconds_total");
        assert_eq!(BUILD_INFO.exposed(), "waitmeter_build_info");
        assert_eq!(EVENTS_LOST.exposed(), "waitmeter_bpf_events_lost_total");
    }

    #[test]
    fn docs_metrics_md_is_up_to_date() {
        let path = format!("{}/../docs/metrics.md", crate::manifest_dir());
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == markdown(),
            "docs/metrics.md is stale: run `make docs` (waitmeter metrics-doc > docs/metrics.md) and commit it"
        );
    }
}
