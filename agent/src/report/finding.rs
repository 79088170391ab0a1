//! A verdict finding as a typed value: the kind of problem with the evidence it
//! quotes, and the wall time it explains. `verdict.rs` decides the findings once
//! per report; they are put in words only here, at the edge (`Display`: the text
//! report's verdict and the JSON `verdict` strings), and serialised as they are
//! for the JSON `findings` (docs/architecture.md).
use std::fmt;

use serde::Serialize;

use super::json::{hex, hex_some, is_zero_u32, ratio, rounded, seconds, state_name};
use crate::model::blame::{self, Preemptor};
use crate::model::partition::secs;
use crate::model::state::State;

/// One finding: what it found, and how much of the window's wall time that accounts for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    #[serde(flatten)]
    pub kind: Kind,
    /// the wall time the finding accounts for (`Kind::explains_ns`)
    #[serde(rename = "explains_s", serialize_with = "seconds")]
    pub explains_ns: u64,
    /// the code on both sides of the wait, when stacks were taken
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<super::code::Code>,
    /// the application's age beside a finding whose kind does not quote it itself
    /// (`Kind::quotes_age`), when an age source is joined
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age: Option<AgeFacts>,
    /// the threads others waited behind (a GIL holder, a lock's releasers, a waker) that were
    /// themselves throttled or queued for a CPU a large share of their time (linked findings)
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub culprits_off_cpu: Vec<OffCpu>,
}

/// A culprit thread kept off the CPU: throttled by the cgroup's quota or queued for a CPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OffCpu {
    pub thread: ThreadRef,
    #[serde(rename = "throttled_s", serialize_with = "seconds")]
    pub throttled_ns: u64,
    #[serde(rename = "runqueue_s", serialize_with = "seconds")]
    pub runqueue_ns: u64,
    /// (throttled + runqueue) / the time it existed in the window
    #[serde(serialize_with = "ratio")]
    pub share: f64,
}

impl fmt::Display for OffCpu {
    /// "worker0 (12) 31% of its time (throttled 0.61 s, queued for a CPU 0.02 s)"
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut parts = vec![];
        // what rounds to 0.00 s is left out
        if self.throttled_ns >= 5_000_000 {
            parts.push(format!("throttled {:.2} s", secs(self.throttled_ns)));
        }
        if self.runqueue_ns >= 5_000_000 {
            parts.push(format!("queued for a CPU {:.2} s", secs(self.runqueue_ns)));
        }
        write!(f, "{} {:.0}% of its time ({})", self.thread.or_thread_tid(), 100.0 * self.share, parts.join(", "))
    }
}

impl From<Kind> for Finding {
    fn from(kind: Kind) -> Self {
        Finding { explains_ns: kind.explains_ns(), kind, code: None, age: None, culprits_off_cpu: vec![] }
    }
}

/// The kinds of findings, each with the evidence its line quotes. The JSON `kind` is
/// the variant's name in snake case; the line starts with the kind in words.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    /// "healthy:": no thread waited `waiting_share` of its time, and the age (if any) is flat
    Healthy {
        age: Option<AgeFacts>,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
        /// the waiting share below which a thread is not reported (`verdict::WAITING_SHARE`)
        waiting_share: f64,
    },
    /// "head-of-line:": a thread running or runnable nearly all of the window while its
    /// process had CPU to spare: one thread is the limit, and what it serves queues behind it
    SaturatedThread {
        thread: ThreadRef,
        /// running, in the run queue or throttled
        #[serde(rename = "busy_s", serialize_with = "seconds")]
        busy_ns: u64,
        #[serde(rename = "running_s", serialize_with = "seconds")]
        running_ns: u64,
        #[serde(rename = "total_s", serialize_with = "seconds")]
        total_ns: u64,
        cpu: CpuUse,
    },
    /// "GIL starvation:": age rising (or above its objective) while a thread spent most of its time waiting for the GIL
    GilStarvation {
        #[serde(flatten)]
        victim: ThreadTime,
        holder: Option<Behind>,
        /// the share of the GIL wait whose holder was not resolved (hand-offs too fast)
        #[serde(rename = "holder_unresolved_share", serialize_with = "ratio")]
        unresolved: f64,
        age: Option<AgeFacts>,
        cpu: CpuUse,
        /// the causal chain's middle link: the victim (`state` futex_wait) waited on a lock
        /// whose holder was itself waiting for the GIL (`holder` and `holder_unresolved_share`
        /// are of that thread's GIL wait); null: the victim waited for the GIL itself
        lock_holder: Option<LockHolder>,
        /// the age says the work falls behind (rising or above its objective); false: no age
        /// source is joined, and the share of time lost to the GIL alone says so
        age_confirmed: bool,
    },
    /// "CPU quota throttling:": the process' cgroup was throttled in the window
    CpuQuotaThrottling {
        cgroup: String,
        /// the quota now, in cores; null: none
        quota_cores: Option<f64>,
        /// periods throttled and seconds, from the cgroup's cpu.stat
        nr_throttled: u64,
        #[serde(serialize_with = "rounded")]
        cgroup_throttled_s: f64,
        /// the process' threads' time runnable but throttled
        #[serde(rename = "throttled_s", serialize_with = "seconds")]
        throttled_ns: u64,
        /// the throttled stretches end on the CFS period boundary; null: they do not
        period_signature: Option<PeriodSignature>,
        age: Option<AgeFacts>,
    },
    /// "age rising while the CPU is idle:" (or "age above its objective …"): and no starvation,
    /// saturation, throttling or run-queue finding explains it
    AgeRisingCpuIdle {
        age: Option<AgeFacts>,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
        cpu: CpuUse,
        /// the longest GIL, futex, I/O or other wait of a thread
        longest_wait: Option<ThreadTime>,
    },
    /// "age rising while the process used most of its CPU:": and no starvation, saturation,
    /// throttling or run-queue finding explains it
    AgeRisingCpuBusy {
        age: Option<AgeFacts>,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
        cpu: CpuUse,
        /// the thread that ran most (`wait_s`: its running time)
        busiest: Option<ThreadTime>,
        /// the longest GIL, futex, I/O or other wait of a thread that is not idle
        longest_wait: Option<ThreadTime>,
    },
    /// "lock convoy on futex 0x…:": many threads took turns on one futex word
    LockConvoy {
        #[serde(serialize_with = "hex")]
        futex: u64,
        waiters: Vec<u32>,
        /// the waiters' wait on it, summed
        #[serde(rename = "wait_s", serialize_with = "seconds")]
        wait_ns: u64,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
        wakers: Vec<ThreadRef>,
        /// the process runs a CPython whose GIL waitmeter does not measure, and whose symbols do
        /// not say where its GIL is: its version (this futex may be the GIL)
        #[serde(skip_serializing_if = "Option::is_none")]
        unmeasured_python: Option<String>,
    },
    /// "GIL (not measured):": threads of a CPython whose GIL waitmeter does not measure (2.x,
    /// 3.0–3.7) waited on its GIL's futex words: GIL contention, not a lock convoy
    UnmeasuredGil {
        version: String,
        /// how many threads waited, and the first few, most wait first
        count: usize,
        threads: Vec<ThreadRef>,
        #[serde(rename = "wait_s", serialize_with = "seconds")]
        wait_ns: u64,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
    },
    /// "GIL ping-pong:": threads that take the GIL thousands of times a second for microseconds
    /// each (busy-polling event loops, tight loops of tiny GIL-releasing calls): their GIL
    /// waits are not work kept waiting
    GilPingPong {
        /// how many threads, and the first few, most hand-offs first
        count: usize,
        threads: Vec<ThreadRef>,
        /// the times they went to wait for the GIL, per second of the window (summed)
        #[serde(serialize_with = "rounded")]
        handoffs_per_s: f64,
        /// their mean time on the CPU between two waits for the GIL
        #[serde(rename = "mean_hold_s", serialize_with = "seconds")]
        mean_hold_ns: u64,
        /// their summed GIL wait and running time (what their polling cost)
        #[serde(rename = "gil_wait_s", serialize_with = "seconds")]
        gil_wait_ns: u64,
        #[serde(rename = "running_s", serialize_with = "seconds")]
        running_ns: u64,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
    },
    /// "oversubscribed:": a process and the processes it started (`attach --children`) wanted
    /// more CPUs than they may use, and waited for them behind each other (`family`)
    Oversubscribed {
        /// how many processes were busy, and the first few, most demand first
        count: usize,
        processes: Vec<super::family::ProcessDemand>,
        /// the CPUs they may use, and the CPUs they wanted (running, queued, throttled)
        #[serde(serialize_with = "rounded")]
        cpus: f64,
        #[serde(serialize_with = "rounded")]
        demand_cores: f64,
        /// their summed run-queue wait, its share of their demand, and the share of that wait
        /// behind the family itself
        #[serde(rename = "runqueue_s", serialize_with = "seconds")]
        runqueue_ns: u64,
        #[serde(serialize_with = "ratio")]
        runqueue_share: f64,
        #[serde(serialize_with = "ratio")]
        behind_family_share: f64,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
    },
    /// "GIL wait:": a thread waited for the GIL a large share of its time
    GilWait {
        #[serde(flatten)]
        victim: ThreadTime,
        #[serde(serialize_with = "ratio")]
        wait_ratio: f64,
        holder: Option<Behind>,
        /// the share of the GIL wait whose holder was not resolved (hand-offs too fast)
        #[serde(rename = "holder_unresolved_share", serialize_with = "ratio")]
        unresolved: f64,
    },
    /// "run-queue saturation:": a thread waited for a CPU a large share of its time
    RunQueueSaturation {
        #[serde(flatten)]
        victim: ThreadTime,
        #[serde(serialize_with = "ratio")]
        wait_ratio: f64,
        preemptor: Option<Behind>,
    },
    /// "CPU quota:": a thread was throttled a large share of its time
    CpuQuota {
        #[serde(flatten)]
        victim: ThreadTime,
        #[serde(serialize_with = "ratio")]
        wait_ratio: f64,
    },
    /// "thread … blocked on …": most of a thread's time blocked on a futex or I/O (idle or contended)
    Blocked {
        #[serde(flatten)]
        victim: ThreadTime,
        waker: Option<Behind>,
        /// the CPython lock (parking-lot address) most of a futex wait was on
        #[serde(skip_serializing_if = "Option::is_none", serialize_with = "hex_some")]
        lock: Option<u64>,
        /// nobody waited on the thread and it hardly ran: blocked for want of work
        /// (`verdict::is_idle`); summarised in one `idle_threads` line unless all findings are asked for
        idle: bool,
    },
    /// "idle:": threads blocked or asleep nearly all the window that nobody waited on, in one line
    IdleThreads {
        count: usize,
        /// the first few, by TID
        threads: Vec<ThreadRef>,
    },
    /// "…": findings the verdict's line cap left out (`-v` lists them)
    More { findings: usize },
    /// "burst:": a thread's worst interval was nearly all waiting, though its window share
    /// was below the thresholds (a stall the window's average hides)
    Burst {
        thread: ThreadRef,
        #[serde(serialize_with = "state_name")]
        state: State,
        /// the worst interval: its share in `state`, when it began, its length
        #[serde(serialize_with = "ratio")]
        share: f64,
        #[serde(rename = "at_s", serialize_with = "seconds")]
        at_ns: u64,
        #[serde(rename = "interval_s", serialize_with = "seconds")]
        interval_ns: u64,
        /// the longest run of intervals at least half in `state`
        #[serde(rename = "stretch_s", serialize_with = "seconds")]
        stretch_ns: u64,
        /// the thread's share of the whole window in `state`
        #[serde(serialize_with = "ratio")]
        window_share: f64,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
    },
    /// "clock source:": the kernel's clock source is one the vDSO cannot read, so every
    /// clock_gettime and gettimeofday is a system call (the doctor check of the environment)
    ClockSource { clocksource: String },
    /// "clock syscalls:": a thread read the clock with real syscalls (clock_gettime,
    /// gettimeofday, time) at a high rate, and they took a share of its time: what the vDSO
    /// answers in ~25 ns in user space cost a kernel entry each (the syscall probe)
    ClockSyscalls {
        thread: ThreadRef,
        /// the calls, per second of the thread's time in the window, and the time inside them
        calls: u64,
        #[serde(serialize_with = "rounded")]
        per_s: f64,
        #[serde(rename = "kernel_s", serialize_with = "seconds")]
        kernel_ns: u64,
        #[serde(rename = "running_s", serialize_with = "seconds")]
        running_ns: u64,
        /// the machine's clock source, and whether the vDSO can read it (None: not known)
        clocksource: Option<String>,
        vdso: Option<bool>,
    },
    /// "yielding:": threads runnable after sched_yield(2) much of their time (a spin-then-yield
    /// wait strategy): idle by choice, not waiting; what their spinning cost in CPU
    Yielding {
        count: usize,
        /// the first few, most yield time first
        threads: Vec<ThreadRef>,
        /// their summed `yield` time, and how often they gave the CPU away
        #[serde(rename = "yield_s", serialize_with = "seconds")]
        yield_ns: u64,
        yields: u64,
        /// their summed running time (the spinning's cost) and the window
        #[serde(rename = "running_s", serialize_with = "seconds")]
        running_ns: u64,
        #[serde(rename = "window_s", serialize_with = "seconds")]
        window_ns: u64,
    },
}

/// The thread whose release ended most of a victim's lock wait, while itself waiting for the
/// GIL: the middle of "ingest waits on a lock held by worker, which waits for the GIL behind processor".
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockHolder {
    /// the lock holder's GIL wait (its `thread`, `wait_s` and `total_s`)
    pub gil_wait: ThreadTime,
    /// the futex word (or CPython lock) most of the victim's wait behind it was on
    #[serde(serialize_with = "hex")]
    pub lock: u64,
    /// the share of the victim's futex wait that this thread's wake-ups ended
    #[serde(serialize_with = "ratio")]
    pub share: f64,
    /// the victim's own GIL wait besides (its time waiting for the GIL directly), and what held
    /// the GIL then
    #[serde(rename = "waiter_gil_wait_s", serialize_with = "seconds")]
    pub waiter_gil_ns: u64,
    pub waiter_gil_holder: Option<Behind>,
}

/// " held by processor (12)" when `b` is a named thread of the report.
fn held_by(b: &Option<Behind>) -> String {
    match b {
        Some(Behind { culprit: Culprit::Thread(ThreadRef { tid, name: Some(name), folded: 0 }), .. }) if *tid != blame::GONE => {
            format!(" held by {name} ({tid})")
        }
        _ => String::new(),
    }
}

/// A chain's waiting end is said to wait for the GIL itself too from this share of its time.
pub const OWN_GIL_SHARE: f64 = 0.05;

/// A thread a finding names: its TID, and its name when it is one of the report's threads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadRef {
    pub tid: u32,
    pub name: Option<String>,
    /// a row of this many short-lived threads of one role (`tid` is the first of them); absent: one thread
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub folded: u32,
}

/// What had what a thread waited for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Culprit {
    /// a thread of the process: the GIL's holder, the preemptor, the futex's waker
    Thread(ThreadRef),
    /// another process had the CPU
    Process { pid: u32, comm: String },
    /// the CPU was idle (the run-queue wait was the wakeup itself)
    Idle,
    /// nothing woke the futex wait: it ended by a timeout or a signal
    Timeout,
}

/// The culprit of most of a wait, and its share of the wait.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Behind {
    #[serde(flatten)]
    pub culprit: Culprit,
    #[serde(serialize_with = "ratio")]
    pub share: f64,
}

/// A thread's time in one state, of its time in the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadTime {
    pub thread: ThreadRef,
    #[serde(serialize_with = "state_name")]
    pub state: State,
    #[serde(rename = "wait_s", serialize_with = "seconds")]
    pub ns: u64,
    #[serde(rename = "total_s", serialize_with = "seconds")]
    pub total_ns: u64,
}

/// The application's age over the window, and how it stands against its objective.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgeFacts {
    #[serde(serialize_with = "rounded")]
    pub growth_s: f64,
    #[serde(serialize_with = "rounded")]
    pub last_s: f64,
    #[serde(serialize_with = "rounded")]
    pub max_s: f64,
    #[serde(serialize_with = "rounded")]
    pub mean_s: f64,
    /// least-squares slope, seconds of age per second
    #[serde(rename = "trend", serialize_with = "rounded")]
    pub slope: f64,
    pub rising: bool,
    /// the level the age should stay under: `--age-slo`, else twice the window's median
    /// age plus 100 ms (a spike or a step above the usual level)
    #[serde(serialize_with = "rounded")]
    pub objective_s: f64,
    /// "slo" (--age-slo) or "spread" (from the window's own median)
    pub objective: &'static str,
    /// the age's maximum was above the objective
    pub over_objective: bool,
}

impl AgeFacts {
    /// Rising, or above its objective: the age says something is wrong.
    pub fn bad(&self) -> bool {
        self.rising || self.over_objective
    }
}

/// Cores the process used on average, of the cores it may use.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CpuUse {
    #[serde(serialize_with = "rounded")]
    pub used_cores: f64,
    pub limit_cores: f64,
}

/// Throttled stretches that end on the CFS period's beat.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PeriodSignature {
    pub stretches: usize,
    pub period_s: f64,
}

impl Kind {
    /// The wall time the finding accounts for: the victim's wait, the threads' throttled
    /// time, the convoy's summed wait, the longest wait an idle-CPU finding points at;
    /// nothing for "healthy".
    pub fn explains_ns(&self) -> u64 {
        match self {
            Kind::Healthy { .. } | Kind::IdleThreads { .. } | Kind::More { .. } | Kind::Yielding { .. } | Kind::ClockSource { .. } => 0,
            Kind::SaturatedThread { busy_ns, .. } => *busy_ns,
            Kind::GilStarvation { victim, lock_holder, .. } => {
                lock_holder.as_ref().map_or(victim.ns, |l| (victim.ns + l.waiter_gil_ns).max(l.gil_wait.ns))
            }
            Kind::GilWait { victim, .. }
            | Kind::RunQueueSaturation { victim, .. }
            | Kind::CpuQuota { victim, .. }
            | Kind::Blocked { victim, .. } => victim.ns,
            Kind::CpuQuotaThrottling { throttled_ns, .. } => *throttled_ns,
            Kind::AgeRisingCpuIdle { longest_wait, .. } => longest_wait.as_ref().map_or(0, |w| w.ns),
            Kind::AgeRisingCpuBusy { busiest, .. } => busiest.as_ref().map_or(0, |w| w.ns),
            Kind::LockConvoy { wait_ns, .. } | Kind::UnmeasuredGil { wait_ns, .. } => *wait_ns,
            Kind::GilPingPong { gil_wait_ns, .. } => *gil_wait_ns,
            Kind::Oversubscribed { runqueue_ns, .. } => *runqueue_ns,
            Kind::Burst { stretch_ns, share, interval_ns, .. } => (*stretch_ns).max((share * *interval_ns as f64) as u64),
            Kind::ClockSyscalls { kernel_ns, .. } => *kernel_ns,
        }
    }

    /// Among findings that explain the same wall time, the process-wide headlines come
    /// before the per-thread lines (`verdict::rank` orders by the time explained first).
    pub fn precedence(&self) -> u8 {
        match self {
            Kind::Healthy { .. } => 0,
            Kind::SaturatedThread { .. } | Kind::Oversubscribed { .. } => 1,
            Kind::GilStarvation { .. } => 2,
            Kind::CpuQuotaThrottling { .. } => 3,
            Kind::AgeRisingCpuIdle { .. } | Kind::AgeRisingCpuBusy { .. } => 4,
            Kind::LockConvoy { .. } | Kind::UnmeasuredGil { .. } | Kind::GilPingPong { .. } => 5,
            Kind::GilWait { .. } | Kind::RunQueueSaturation { .. } | Kind::CpuQuota { .. } | Kind::Blocked { .. } => 6,
            Kind::Yielding { .. } | Kind::Burst { .. } | Kind::ClockSource { .. } | Kind::ClockSyscalls { .. } => 6,
            Kind::IdleThreads { .. } => 7,
            Kind::More { .. } => 8,
        }
    }

    /// The kind quotes the application's age in its own words (and JSON `age`).
    pub fn quotes_age(&self) -> bool {
        matches!(
            self,
            Kind::Healthy { .. }
                | Kind::GilStarvation { .. }
                | Kind::CpuQuotaThrottling { .. }
                | Kind::AgeRisingCpuIdle { .. }
                | Kind::AgeRisingCpuBusy { .. }
        )
    }

    /// The kind is about lost or busy time (not the all-clear, the idle summary or the cap).
    pub fn is_problem(&self) -> bool {
        !matches!(
            self,
            Kind::Healthy { .. } | Kind::IdleThreads { .. } | Kind::More { .. } | Kind::Yielding { .. } | Kind::ClockSource { .. }
        ) && !matches!(self, Kind::Blocked { idle: true, .. })
    }
}

/// A number of cores as the verdict says it: "2", "2.50".
fn cores(c: f64) -> String {
    if (c - c.round()).abs() < 1e-9 {
        format!("{c:.0}")
    } else {
        format!("{c:.2}")
    }
}

/// A count or a rate as people say it: "850", "12k", "1.3M".
fn human_rate(x: f64) -> String {
    match x {
        x if x >= 1e6 => format!("{:.1}M", x / 1e6),
        x if x >= 1e4 => format!("{:.0}k", x / 1e3),
        x if x >= 1e3 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

/// ", 17% behind a holder not resolved": the share of a GIL wait whose holder the probes could
/// not name (the GIL changed hands again before the wait's holder was read), said whenever it
/// rounds to 1% or more.
fn unresolved_part(share: f64) -> String {
    if share >= 0.005 {
        format!(", {:.0}% behind a holder not resolved (hand-offs too fast to follow)", 100.0 * share)
    } else {
        String::new()
    }
}

/// The state as the verdict says it.
fn what(state: State) -> &'static str {
    match state {
        State::Runqueue => "waiting for a CPU (run queue)",
        State::Throttled => "throttled by its cgroup's CPU quota",
        State::GilWait => "waiting for the Python GIL",
        State::FutexWait => "blocked on a lock or condition (futex)",
        State::IoWait => "blocked on I/O",
        State::Sleep => "asleep",
        State::Other => "blocked (other)",
        State::Running => "running",
        State::Yield => "yielding the CPU (sched_yield)",
    }
}

impl ThreadRef {
    /// "processor (12)", or `unknown` for a thread outside the report.
    fn or(&self, unknown: impl FnOnce(u32) -> String) -> String {
        match &self.name {
            Some(name) if self.tid == crate::model::blame::GONE => name.clone(),
            Some(name) if self.folded > 0 => format!("{}× {name}", self.folded),
            Some(name) => format!("{name} ({})", self.tid),
            None => unknown(self.tid),
        }
    }

    /// "processor (12)", or "a thread (12)".
    fn or_a_thread(&self) -> String {
        self.or(|tid| format!("a thread ({tid})"))
    }

    /// "processor (12)", or "thread 12".
    fn or_thread_tid(&self) -> String {
        self.or(|tid| format!("thread {tid}"))
    }
}

impl Culprit {
    /// The culprit in a table cell: "processor", "12" (a thread outside the report),
    /// "pid 42 (nginx)", "idle", "timeout".
    pub fn short(&self) -> String {
        match self {
            Culprit::Thread(t) => t.name.clone().unwrap_or_else(|| t.tid.to_string()),
            Culprit::Process { pid, comm } => Preemptor::Process { pid: *pid, comm: comm.clone() }.key(),
            Culprit::Idle => Preemptor::Idle.key(),
            Culprit::Timeout => "timeout".into(),
        }
    }

    /// The culprit in a verdict line: a thread by name and TID, else as in a table cell.
    fn long(&self) -> String {
        match self {
            Culprit::Thread(t) => t.or_a_thread(),
            other => other.short(),
        }
    }
}

impl ThreadTime {
    fn share(&self) -> f64 {
        self.ns as f64 / self.total_ns as f64
    }

    /// "ingest (11) spent 9.0 s of 10.0 s waiting for the Python GIL (90%)"
    fn spent(&self) -> String {
        format!(
            "{} spent {:.1} s of {:.1} s {} ({:.0}%)",
            self.thread.or_a_thread(),
            secs(self.ns),
            secs(self.total_ns),
            what(self.state),
            100.0 * self.share()
        )
    }
}

/// The age beside a finding: "; message age grew 6.1 s (to 6.2 s; mean 3.2 s, max 6.2 s)",
/// "; message age flat, mean 1.40 s, max 1.52 s, above its 0.50 s objective", or nothing without an age.
fn growth(age: &Option<AgeFacts>) -> String {
    let Some(a) = age else { return String::new() };
    let over = if a.over_objective { format!(", above its {:.2} s objective", a.objective_s) } else { String::new() };
    if a.rising {
        format!("; message age grew {:.1} s (to {:.1} s; mean {:.2} s, max {:.2} s){over}", a.growth_s, a.last_s, a.mean_s, a.max_s)
    } else {
        let trend = if a.slope.abs() < 0.01 { "flat".to_string() } else { format!("trend {:+.2} s/s", a.slope) };
        format!("; message age {trend}, mean {:.2} s, max {:.2} s{over}", a.mean_s, a.max_s)
    }
}

/// "age rising", or "age above its objective" when it breaks the objective without rising.
fn age_head(age: &Option<AgeFacts>) -> &'static str {
    if age.as_ref().is_some_and(|a| !a.rising) {
        "age above its objective"
    } else {
        "age rising"
    }
}

/// The age as a headline quotes it; a thread's own age (waitmeter_client) when the process has none.
fn age_words(age: &Option<AgeFacts>) -> String {
    match age {
        Some(_) => growth(age).trim_start_matches("; ").to_string(),
        None => "a thread's message age rose".to_string(),
    }
}

/// "; the longest wait: thread worker (1), 9.0 s blocked on I/O", or nothing.
fn longest(w: &Option<ThreadTime>) -> String {
    w.as_ref()
        .map(|w| format!("; the longest wait: thread {}, {:.1} s {}", w.thread.or_a_thread(), secs(w.ns), what(w.state)))
        .unwrap_or_default()
}

impl fmt::Display for CpuUse {
    /// "CPU 1.1 of 4 cores", "CPU 0.1 of 2.50 cores"
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let c = self.limit_cores;
        write!(f, "CPU {:.1} of {} core{}", self.used_cores, cores(c), if c == 1.0 { "" } else { "s" })
    }
}

/// The line of a waiting thread: "{kind}: thread … ({share}%){behind}, wait ratio …".
fn waiting(f: &mut fmt::Formatter, kind: &str, victim: &ThreadTime, behind: &str, wait_ratio: f64) -> fmt::Result {
    write!(f, "{kind}: thread {}{behind}, wait ratio {wait_ratio:.2}: it had work and could not do it", victim.spent())
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut line = self.kind.to_string();
        if !self.culprits_off_cpu.is_empty() {
            let who: Vec<String> = self.culprits_off_cpu.iter().map(ToString::to_string).collect();
            line = format!(
                "{}. Kept off the CPU {}: {}: a holder that cannot run keeps every thread behind it waiting",
                line.trim_end_matches('.'),
                if who.len() == 1 { "itself" } else { "themselves" },
                who.join(", ")
            );
        }
        let line = format!("{line}{}", growth(&self.age));
        match &self.code {
            Some(c) => write!(f, "{}. {c}", line.trim_end_matches('.')),
            None => f.write_str(&line),
        }
    }
}

impl fmt::Display for Kind {
    /// The finding in plain words, as the verdict prints it.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Kind::Healthy { age, window_ns, waiting_share } => {
                let age = match age {
                    Some(a) => format!(
                        "age flat at {:.2} s (mean {:.2} s, max {:.2} s, objective {:.2} s)",
                        a.last_s, a.mean_s, a.max_s, a.objective_s
                    ),
                    None => "no age source".to_string(),
                };
                write!(
                    f,
                    "healthy: {age}; no thread waited for a CPU, quota or the GIL for {:.0}% or more of its time, and none was busy all of the {:.1} s",
                    100.0 * waiting_share,
                    secs(*window_ns)
                )
            }
            Kind::SaturatedThread { thread, busy_ns, running_ns, total_ns, cpu } => {
                let pct = |ns: u64| 100.0 * ns as f64 / (*total_ns).max(1) as f64;
                let queued = busy_ns.saturating_sub(*running_ns);
                let split = if pct(queued) >= 1.0 {
                    format!(" (running {:.0}%, runnable {:.0}%)", pct(*running_ns), pct(queued))
                } else {
                    String::new()
                };
                write!(
                    f,
                    "head-of-line: thread {} was busy {:.0}% of {:.1} s{split} while the process used {cpu}: one thread is the limit, and everything it serves queues behind it. Spread its work over more threads or make each item cheaper",
                    thread.or_a_thread(),
                    pct(*busy_ns),
                    secs(*total_ns),
                )
            }
            Kind::IdleThreads { count, threads } => {
                let mut names: Vec<String> = threads.iter().map(|t| t.name.clone().unwrap_or_else(|| t.tid.to_string())).collect();
                if *count > names.len() {
                    names.push(format!("{} more", count - names.len()));
                }
                let (n, were, them) =
                    if *count == 1 { ("1 thread".to_string(), "was", "it") } else { (format!("{count} threads"), "were", "them") };
                write!(
                    f,
                    "idle: {n} ({}) {were} blocked or asleep nearly all the window, and no thread waited on {them}; -v lists {them}",
                    names.join(", ")
                )
            }
            Kind::More { findings } => write!(f, "… and {findings} more finding{}; -v lists them", if *findings == 1 { "" } else { "s" }),
            Kind::ClockSource { clocksource } => write!(
                f,
                "clock source: the kernel reads time from {clocksource}, which the vDSO cannot use: every clock_gettime and gettimeofday is a system call (about 1 µs instead of 25 ns); expected tsc (dmesg: look for 'clocksource' and 'TSC unstable'; --syscalls on counts the process' clock syscalls)"
            ),
            Kind::Burst { thread, state, share, at_ns, interval_ns, stretch_ns, window_share, window_ns } => {
                let stretch = if *stretch_ns > *interval_ns {
                    format!(" ({:.1} s in a row at half or more)", secs(*stretch_ns))
                } else {
                    String::new()
                };
                write!(
                    f,
                    "burst: thread {} was {} {:.0}% of the {:.1} s at {:.1} s{stretch}, though {:.0}% of the {:.1} s window: a stall the window's average hides",
                    thread.or_a_thread(),
                    what(*state),
                    100.0 * share,
                    secs(*interval_ns),
                    secs(*at_ns),
                    100.0 * window_share,
                    secs(*window_ns),
                )
            }
            Kind::ClockSyscalls { thread, calls, per_s, kernel_ns, running_ns, clocksource, vdso } => {
                let why = match (clocksource, vdso) {
                    (Some(cs), Some(false)) => format!(
                        "the kernel reads time from {cs}, which the vDSO cannot use, so every clock read is a system call (about 1 µs instead of 25 ns); expected tsc (dmesg: look for 'clocksource' and 'TSC unstable')"
                    ),
                    (Some(cs), Some(true)) => format!(
                        "the clock source ({cs}) is one the vDSO reads in user space, so this code makes the syscall itself (syscall(2), a static or old C library, a seccomp filter or a runtime that bypasses the vDSO): call clock_gettime through the C library"
                    ),
                    _ => "either the clock source is one the vDSO cannot read or this code bypasses the vDSO".to_string(),
                };
                write!(
                    f,
                    "clock syscalls: thread {} read the clock with {} system calls ({}/s), {:.2} s inside them, {:.0}% of its {:.2} s running: {why}",
                    thread.or_a_thread(),
                    human_rate(*calls as f64),
                    human_rate(*per_s),
                    secs(*kernel_ns),
                    100.0 * *kernel_ns as f64 / (*running_ns).max(1) as f64,
                    secs(*running_ns),
                )
            }
            Kind::Yielding { count, threads, yield_ns, yields, running_ns, window_ns } => {
                let mut names: Vec<String> = threads.iter().map(|t| t.or_a_thread()).collect();
                if *count > names.len() {
                    names.push(format!("{} more", count - names.len()));
                }
                let (n, them) = if *count == 1 { ("1 thread".to_string(), "it") } else { (format!("{count} threads"), "them") };
                write!(
                    f,
                    "yielding: {n} ({}) gave the CPU away {yields} times with sched_yield and spent {:.1} s runnable after it: a spin-then-yield wait strategy, idle by choice, not waiting (their spinning used {:.2} CPU; a thread queued behind {them} shows as run-queue wait)",
                    names.join(", "),
                    secs(*yield_ns),
                    *running_ns as f64 / (*window_ns).max(1) as f64,
                )
            }
            Kind::GilStarvation { victim, holder, unresolved, age, cpu, lock_holder, age_confirmed } => {
                let holder = holder.as_ref().and_then(|h| match &h.culprit {
                    Culprit::Thread(ThreadRef { tid, name: Some(name), folded: 0 }) => Some((name, tid)),
                    _ => None,
                });
                let behind = holder.map(|(name, tid)| format!(" held by {name} ({tid})")).unwrap_or_default() + &unresolved_part(*unresolved);
                let fix = holder.map_or_else(
                    || " Move the GIL-heavy work to its own process".into(),
                    |(name, _)| format!(" Move {name} to its own process"),
                );
                let (head, confirm) = if *age_confirmed {
                    ("GIL starvation", "")
                } else {
                    (
                        "GIL starvation (likely: no age source)",
                        "; join the work's age (--age-url, waitmeter_client: docs/age.md) to see whether it falls behind",
                    )
                };
                let lost = match lock_holder {
                    None => format!("lost {:.1} s of {:.1} s waiting for the GIL{behind}", secs(victim.ns), secs(victim.total_ns)),
                    Some(l) => format!(
                        "lost {:.1} s of {:.1} s {}blocked on {} released by {} ({:.0}% of that wait), which itself lost {:.1} s of {:.1} s waiting for the GIL{behind}",
                        secs(victim.ns + l.waiter_gil_ns),
                        secs(victim.total_ns),
                        if l.waiter_gil_ns as f64 >= OWN_GIL_SHARE * victim.total_ns as f64 {
                            format!(
                                "to the GIL: {:.1} s waiting for it{}, {:.1} s ",
                                secs(l.waiter_gil_ns),
                                held_by(&l.waiter_gil_holder),
                                secs(victim.ns)
                            )
                        } else {
                            String::new()
                        },
                        if blame::is_parked(l.lock) {
                            format!("CPython lock {:#x}", blame::address(l.lock))
                        } else {
                            format!("futex {:#x} (a lock or condition)", blame::address(l.lock))
                        },
                        l.gil_wait.thread.or_a_thread(),
                        100.0 * l.share,
                        secs(l.gil_wait.ns),
                        secs(l.gil_wait.total_ns),
                    ),
                };
                write!(
                    f,
                    "{head}: thread {} {lost}{}; {cpu}: this is waiting, not working.{fix}{confirm}",
                    victim.thread.or_a_thread(),
                    growth(age),
                )
            }
            Kind::CpuQuotaThrottling { cgroup, quota_cores, nr_throttled, cgroup_throttled_s, throttled_ns, period_signature, age } => {
                let quota = match quota_cores {
                    Some(q) => format!("quota {q:.2} cores"),
                    None => "no quota now".to_string(),
                };
                write!(
                    f,
                    "CPU quota throttling: the cgroup {cgroup} ({quota}) was throttled in {nr_throttled} periods, {cgroup_throttled_s:.2} s; its threads lost {:.2} s runnable but throttled",
                    secs(*throttled_ns)
                )?;
                if let Some(p) = period_signature {
                    write!(
                        f,
                        "; {} throttled stretches ended on the {:.0} ms CFS period boundary: waits cluster at multiples of the period",
                        p.stretches,
                        p.period_s * 1e3
                    )?;
                }
                write!(f, "{}: raise the quota or lower the parallelism", growth(age))
            }
            Kind::AgeRisingCpuIdle { age, window_ns, cpu, longest_wait } => {
                write!(
                    f,
                    "{} while the CPU is idle: {} in {:.1} s; {cpu}: the work is waiting for something other than the CPU{}",
                    age_head(age),
                    age_words(age),
                    secs(*window_ns),
                    longest(longest_wait)
                )
            }
            Kind::AgeRisingCpuBusy { age, window_ns, cpu, busiest, longest_wait } => {
                let busiest = busiest
                    .as_ref()
                    .map(|b| format!("; the busiest thread: {}, running {:.0}%", b.thread.or_a_thread(), 100.0 * b.share()))
                    .unwrap_or_default();
                write!(
                    f,
                    "{} while the process used most of its CPU: {} in {:.1} s; {cpu}{busiest}{}: give it more CPU or make each item cheaper",
                    age_head(age),
                    age_words(age),
                    secs(*window_ns),
                    longest(longest_wait)
                )
            }
            Kind::LockConvoy { futex, waiters, wait_ns, window_ns, wakers, unmeasured_python } => {
                let wakers: Vec<String> = wakers.iter().take(4).map(ThreadRef::or_thread_tid).collect();
                let word = if blame::is_parked(*futex) { "CPython lock" } else { "futex" };
                write!(
                    f,
                    "lock convoy on {word} {:#x}: {} threads waited {:.1} s in total in {:.1} s, woken by {}: they take turns on one lock",
                    blame::address(*futex),
                    waiters.len(),
                    secs(*wait_ns),
                    secs(*window_ns),
                    if wakers.is_empty() { "timeouts".to_string() } else { wakers.join(", ") }
                )?;
                if let Some(v) = unmeasured_python {
                    write!(
                        f,
                        ", or this is the GIL: waitmeter does not measure the GIL of CPython {v} (it measures {}), and this interpreter's symbols do not say where its GIL is",
                        crate::python::MEASURED
                    )?;
                }
                Ok(())
            }
            Kind::Oversubscribed { count, processes, cpus, demand_cores, runqueue_share, behind_family_share, window_ns, .. } => {
                let mut names: Vec<String> =
                    processes.iter().map(|p| format!("{} ({}) {:.2} CPU", p.comm, p.pid, p.cores)).collect();
                if *count > names.len() {
                    names.push(format!("{} more", count - names.len()));
                }
                write!(
                    f,
                    "oversubscribed: {count} processes on {} CPU{} want {demand_cores:.1} CPUs: {:.1}× oversubscribed; they waited {:.0}% of that time for a CPU ({:.0}% of it behind each other) in {:.1} s: {}. Size the pool or worker count to the CPUs it may use ({}: `len(os.sched_getaffinity(0))`, within the cgroup's quota), or give it more CPUs",
                    cores(*cpus),
                    if *cpus == 1.0 { "" } else { "s" },
                    demand_cores / cpus,
                    100.0 * runqueue_share,
                    100.0 * behind_family_share,
                    secs(*window_ns),
                    names.join(", "),
                    cores(*cpus),
                )
            }
            Kind::GilPingPong { count, threads, handoffs_per_s, mean_hold_ns, gil_wait_ns, running_ns, window_ns } => {
                let mut names: Vec<String> = threads.iter().map(ThreadRef::or_a_thread).collect();
                if *count > names.len() {
                    names.push(format!("{} more", count - names.len()));
                }
                let hold = if *mean_hold_ns < 1_000_000 {
                    format!("{:.0} µs", *mean_hold_ns as f64 / 1e3)
                } else {
                    format!("{:.1} ms", *mean_hold_ns as f64 / 1e6)
                };
                write!(
                    f,
                    "GIL ping-pong: {count} thread{} ({}) {} the GIL over {}/s in {hold} holds, {:.1} s waiting for it and {:.2} CPU spent in {:.1} s: threads that take the GIL only to give it up again (busy-polling event loops: `await asyncio.sleep(0)` or `queue.empty()` in a loop; or a tight loop of tiny calls that release it), not work kept waiting. Make them block until there is work (an awaited queue or event, a memory stream); pinning the process to one CPU trades these GIL waits for run-queue waits",
                    if *count == 1 { "" } else { "s" },
                    names.join(", "),
                    if *count == 1 { "took" } else { "hand" },
                    human_rate(*handoffs_per_s),
                    secs(*gil_wait_ns),
                    *running_ns as f64 / (*window_ns).max(1) as f64,
                    secs(*window_ns),
                )
            }
            Kind::UnmeasuredGil { version, count, threads, wait_ns, window_ns } => {
                let mut names: Vec<String> = threads.iter().map(ThreadRef::or_thread_tid).collect();
                if *count > names.len() {
                    names.push(format!("{} more", count - names.len()));
                }
                write!(
                    f,
                    "GIL (not measured): {count} thread{} ({}) waited {:.1} s in total in {:.1} s on the GIL of CPython {version}, whose GIL waitmeter does not measure (it measures {}): GIL contention, not a lock convoy; these waits count as futex_wait, with no holder named. Fewer threads running Python code at once (processes for CPU work) is the fix; on {} the GIL's holders are named",
                    if *count == 1 { "" } else { "s" },
                    names.join(", "),
                    secs(*wait_ns),
                    secs(*window_ns),
                    crate::python::MEASURED,
                    crate::python::MEASURED,
                )
            }
            Kind::GilWait { victim, wait_ratio, holder, unresolved } => {
                let behind = holder.as_ref().map(|h| format!(", {:.0}% of it behind {}", 100.0 * h.share, h.culprit.long()));
                waiting(f, "GIL wait", victim, &(behind.unwrap_or_default() + &unresolved_part(*unresolved)), *wait_ratio)
            }
            Kind::RunQueueSaturation { victim, wait_ratio, preemptor } => {
                let behind = preemptor.as_ref().map(|p| format!(", mostly behind {} ({:.0}%)", p.culprit.long(), 100.0 * p.share));
                waiting(f, "run-queue saturation", victim, &behind.unwrap_or_default(), *wait_ratio)
            }
            Kind::CpuQuota { victim, wait_ratio } => waiting(f, "CPU quota", victim, "", *wait_ratio),
            Kind::Blocked { victim, waker, lock, idle } => {
                let on = lock.map(|a| format!(", on CPython lock {:#x}", blame::address(a))).unwrap_or_default();
                let woken = match waker {
                    Some(Behind { culprit: Culprit::Thread(t), share }) => {
                        format!(", woken by {} {:.0}% of the time", t.or_thread_tid(), 100.0 * share)
                    }
                    Some(Behind { share, .. }) => format!(", {:.0}% of it ended by a timeout or signal, not a wake-up", 100.0 * share),
                    None => String::new(),
                };
                let what = if *idle { "idle (it hardly ran, and no thread waited on it)" } else { "idle or contended" };
                write!(f, "thread {}{on}{woken}: {what}", victim.spent())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn thread(tid: u32, name: Option<&str>) -> ThreadRef {
        ThreadRef { tid, name: name.map(Into::into), folded: 0 }
    }

    #[test]
    fn a_finding_serialises_as_its_kind_its_evidence_and_the_time_it_explains() {
        let victim =
            ThreadTime { thread: thread(31, Some("waiter")), state: State::FutexWait, ns: 9_000_000_000, total_ns: 10_000_000_000 };
        let f = Finding::from(Kind::Blocked {
            victim,
            waker: Some(Behind { culprit: Culprit::Timeout, share: 2.0 / 3.0 }),
            lock: None,
            idle: false,
        });
        assert_eq!(
            serde_json::to_value(&f).unwrap(),
            json!({"kind": "blocked", "thread": {"tid": 31, "name": "waiter"}, "state": "futex_wait", "wait_s": 9.0, "total_s": 10.0,
                   "waker": {"type": "timeout", "share": 0.6667}, "idle": false, "explains_s": 9.0})
        );
        assert_eq!(f.to_string(), "thread waiter (31) spent 9.0 s of 10.0 s blocked on a lock or condition (futex) (90%), 67% of it ended by a timeout or signal, not a wake-up: idle or contended");
    }

    #[test]
    fn culprits_serialise_with_their_type() {
        let behind = |culprit| serde_json::to_value(Behind { culprit, share: 0.5 }).unwrap();
        assert_eq!(behind(Culprit::Thread(thread(12, None))), json!({"type": "thread", "tid": 12, "name": null, "share": 0.5}));
        assert_eq!(
            behind(Culprit::Process { pid: 9, comm: "hog".into() }),
            json!({"type": "process", "pid": 9, "comm": "hog", "share": 0.5})
        );
        assert_eq!(behind(Culprit::Idle), json!({"type": "idle", "share": 0.5}));
        assert_eq!(behind(Culprit::Timeout), json!({"type": "timeout", "share": 0.5}));
    }

    #[test]
    fn culprits_in_words() {
        assert_eq!(Culprit::Thread(thread(12, Some("processor"))).short(), "processor");
        assert_eq!(Culprit::Thread(thread(12, None)).short(), "12");
        assert_eq!(Culprit::Thread(thread(12, None)).long(), "a thread (12)");
        assert_eq!(Culprit::Process { pid: 9, comm: "hog".into() }.long(), "pid 9 (hog)");
        assert_eq!(Culprit::Idle.long(), "idle");
        assert_eq!(Culprit::Timeout.short(), "timeout");
        assert_eq!(thread(12, None).or_thread_tid(), "thread 12");
        // a folded row: its count and role, not the first TID
        let folded = ThreadRef { tid: 100, name: Some("Thread-* (process_request_thread)".into()), folded: 300 };
        assert_eq!(folded.or_a_thread(), "300× Thread-* (process_request_thread)");
        assert_eq!(serde_json::to_value(&folded).unwrap()["folded"], 300);
        assert!(serde_json::to_value(thread(12, None)).unwrap().get("folded").is_none());
    }

    #[test]
    fn states_are_named_as_in_the_time_model() {
        for state in State::ALL {
            let t = ThreadTime { thread: thread(1, None), state, ns: 0, total_ns: 1 };
            assert_eq!(serde_json::to_value(t).unwrap()["state"], state.name());
        }
    }

    #[test]
    fn cpu_use_prints_whole_cores_without_decimals() {
        assert_eq!(CpuUse { used_cores: 1.04, limit_cores: 4.0 }.to_string(), "CPU 1.0 of 4 cores");
        assert_eq!(CpuUse { used_cores: 0.05, limit_cores: 2.5 }.to_string(), "CPU 0.1 of 2.50 cores");
    }

    #[test]
    fn the_starvation_line_names_no_holder_outside_the_report() {
        let victim = ThreadTime { thread: thread(11, Some("ingest")), state: State::GilWait, ns: 9_000_000_000, total_ns: 10_000_000_000 };
        let holder = Some(Behind { culprit: Culprit::Thread(thread(77, None)), share: 1.0 });
        let kind = Kind::GilStarvation {
            victim,
            holder,
            unresolved: 0.0,
            age: None,
            cpu: CpuUse { used_cores: 0.1, limit_cores: 2.0 },
            lock_holder: None,
            age_confirmed: true,
        };
        assert_eq!(kind.explains_ns(), 9_000_000_000);
        assert_eq!(
            kind.to_string(),
            "GIL starvation: thread ingest (11) lost 9.0 s of 10.0 s waiting for the GIL; CPU 0.1 of 2 cores: this is waiting, not working. Move the GIL-heavy work to its own process"
        );
    }
}
