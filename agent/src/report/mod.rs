//! The attach report: per-thread partition of one process over the window,
//! with a plain-words verdict; rendered as text (live and final) or JSON.
pub mod code;
pub mod dump;
pub mod environment;
pub mod evidence;
pub mod family;
pub mod finding;
#[cfg(test)]
mod fixtures;
pub mod fold;
pub mod html;
pub mod json;
pub mod rules;
pub mod serial;
pub mod text;
pub mod trace;
pub mod verdict;

use std::collections::{BTreeMap, HashMap};

use crate::model::age::{AgeReport, AgeSummary};
use crate::model::blame::{self, FutexWait, Preemptor, TopFutex};
use crate::model::loss::Lost;
use crate::model::partition::{ThreadSample, Times};
use crate::model::state::State;

/// Futex words listed per process.
pub const TOP_FUTEXES: usize = 5;

/// One thread over the report's window.
#[derive(Clone, Debug, Default)]
pub struct ThreadRow {
    pub tid: u32,
    /// Python thread name when known (GIL issue), else the OS comm
    pub name: String,
    pub comm: String,
    pub times: Times,
    /// how long the thread existed within the window
    pub existed_ns: u64,
    pub exited: bool,
    /// gil_wait per holder TID (0: not known)
    pub gil_by_holder: BTreeMap<u32, u64>,
    /// GIL hold times (precise GIL probe only)
    pub gil_hold: Option<crate::model::hist::HoldHist>,
    /// closed futex waits by word and waker
    pub futex: Vec<FutexWait>,
    /// run-queue wait by what had the CPU
    pub runqueue_by: BTreeMap<Preemptor, u64>,
    /// closed waits of each blocked state (not the GIL's) by what woke them
    pub woken_by: BTreeMap<(State, crate::model::blame::Waker), u64>,
    /// the age of what this thread handled (waitmeter_client samples)
    pub age: Option<AgeSummary>,
    /// times it gave the CPU away with sched_yield(2)
    pub yields: u64,
    /// times it went to wait for the GIL (hand-offs to it, and CPython's timed re-waits)
    pub gil_waits: u64,
    /// its worst interval in each state (None: not followed interval by interval)
    pub peaks: Option<crate::model::peaks::Peaks>,
    /// its CPU time in the window in user and in kernel mode, ns, at /proc's clock-tick
    /// resolution (None: not read, or it exited before the end)
    pub cpu_split: Option<(u64, u64)>,
    /// its syscalls in the window, most calls first (empty: not counted; the syscall probe)
    pub syscalls: Vec<crate::model::syscalls::SyscallCount>,
    /// a row of this many short-lived threads of one role, summed (`fold`); 0: one thread
    pub folded: u32,
    /// its stretches away from each of its waits, and its home wait (None: it closed none)
    pub stretches: Option<crate::model::stretches::ThreadStretches>,
}

impl ThreadRow {
    /// The row's name in a table or a verdict line: "1612× Thread-* (process_request_thread)"
    /// for a folded row.
    pub fn label(&self) -> String {
        if self.folded > 0 {
            format!("{}× {}", self.folded, self.name)
        } else {
            self.name.clone()
        }
    }
}

/// The entry with the most time among `candidates`, and its share of `all`'s total.
fn top<K>(candidates: impl Iterator<Item = (K, u64)>, all: impl Iterator<Item = u64>) -> Option<(K, f64)> {
    let total: u64 = all.sum();
    let (k, ns) = candidates.max_by_key(|(_, ns)| *ns)?;
    (total > 0).then(|| (k, ns as f64 / total as f64))
}

impl ThreadRow {
    /// futex_wait per waker TID (0: timeout).
    pub fn futex_by_waker(&self) -> BTreeMap<u32, u64> {
        blame::by_waker(&self.futex)
    }

    /// The known thread that held the GIL longest while this one waited, and
    /// the share of its whole GIL wait spent behind it.
    pub fn top_gil_holder(&self) -> Option<(u32, f64)> {
        top(self.gil_by_holder.iter().filter(|(t, _)| **t != 0).map(|(t, ns)| (*t, *ns)), self.gil_by_holder.values().copied())
    }

    /// What had the CPU longest while this thread waited in the run queue, and its share.
    pub fn top_preemptor(&self) -> Option<(&Preemptor, f64)> {
        top(self.runqueue_by.iter().map(|(p, ns)| (p, *ns)), self.runqueue_by.values().copied())
    }

    /// The waker (0: timeout or signal) that ended most of this thread's futex wait, and its share.
    pub fn top_waker(&self) -> Option<(u32, f64)> {
        let by = self.futex_by_waker();
        top(by.iter().map(|(t, ns)| (*t, *ns)), by.values().copied())
    }
}

/// The cgroup of the process over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct CgroupReport {
    pub path: String,
    pub quota_cores: Option<f64>,
    pub period_s: Option<f64>,
    /// deltas of cpu.stat over the window
    pub throttled_s: f64,
    pub nr_throttled: u64,
    pub nr_periods: u64,
}

/// Throttled stretches of the process' threads in the window, and whether
/// they end on the CFS period's beat.
#[derive(Clone, Debug, PartialEq)]
pub struct Throttling {
    pub stretches: usize,
    pub concentration: Option<f64>,
    pub signature: bool,
    pub period_s: f64,
}

impl CgroupReport {
    /// The cgroup at `path` over the window: its quota, and `delta` of its cpu.stat.
    pub fn of(path: String, quota: Option<crate::cgroup::Quota>, delta: crate::cgroup::CpuStat) -> CgroupReport {
        CgroupReport {
            path,
            quota_cores: quota.and_then(|q| q.cores()),
            period_s: quota.map(|q| q.period_us as f64 / 1e6),
            throttled_s: delta.throttled_ns as f64 / 1e9,
            nr_throttled: delta.nr_throttled,
            nr_periods: delta.nr_periods,
        }
    }
}

impl Throttling {
    /// The throttled stretches of a CFS period `period_ns` (100 ms when the quota is unknown).
    pub fn of(stretches: &[crate::model::throttle::Stretch], period_ns: Option<u64>) -> Throttling {
        let period_ns = period_ns.unwrap_or(100_000_000);
        Throttling {
            stretches: stretches.len(),
            concentration: crate::model::throttle::phase_concentration(stretches, period_ns),
            signature: crate::model::throttle::signature(stretches, period_ns),
            period_s: period_ns as f64 / 1e9,
        }
    }
}

/// The rows of a window that began with the threads' numbers `base`, of the threads live now and
/// of those that exited since: each one's numbers since then (a thread that began since: all of
/// them). `run`'s timeline views (`model::history`).
pub fn rows_since(base: &[ThreadSample], live: &[ThreadSample], exited: &[ThreadSample]) -> Vec<ThreadRow> {
    let base: HashMap<(u32, u64), &ThreadSample> = base.iter().map(|b| ((b.host_tid, b.start_ns), b)).collect();
    live.iter()
        .chain(exited)
        .map(|s| {
            let d = match base.get(&(s.host_tid, s.start_ns)) {
                Some(b) => s.since(b),
                None => s.clone(),
            };
            ThreadRow::from_sample(&d, d.times, d.times.total())
        })
        .collect()
}

impl ThreadRow {
    /// A row for `times` of thread `s` over a window it existed in for `existed_ns`.
    pub fn from_sample(s: &ThreadSample, times: Times, existed_ns: u64) -> ThreadRow {
        ThreadRow {
            tid: s.tid,
            name: s.name().to_string(),
            comm: s.comm.clone(),
            times,
            existed_ns,
            exited: s.exited,
            gil_by_holder: s.gil_by_holder.clone(),
            gil_hold: s.gil_hold,
            futex: s.futex.clone(),
            runqueue_by: s.runqueue_by.clone(),
            woken_by: s.woken_by.clone(),
            age: None,
            yields: s.yields,
            gil_waits: s.gil_waits,
            peaks: None,
            cpu_split: None,
            syscalls: vec![],
            folded: 0,
            stretches: None,
        }
    }
}

/// The interpreter of a Python target, as reported (the JSON `python` block).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PythonInfo {
    pub version: String,
    /// enabled / disabled (free-threaded build without the GIL) / unknown (unsupported version)
    pub gil: &'static str,
    /// futex: GIL waits recognised by futex word at switch-out; uprobe: also
    /// hold times from take_gil/drop_gil uprobes; none: not measured
    pub gil_probe: &'static str,
    /// uprobe: waits in CPython's parking lot (3.13+: PyMutex, threading.Lock,
    /// events) are charged to the address parked on; none: to the futex word
    pub lock_probe: &'static str,
    pub free_threaded: bool,
    /// the file holding _PyRuntime, as the target names it
    pub binary: String,
    /// that file has a symbol table (.symtab)
    pub symbols: bool,
    /// `sys.getswitchinterval()` in µs, read from the GIL (None: not read)
    pub switch_interval_us: Option<u64>,
    /// an interpreter whose GIL is not measured (`gil` unknown): the address ranges of its GIL's
    /// futex words, when its symbols tell (the verdict's `unmeasured_gil`)
    #[serde(skip)]
    pub unmeasured_gil: Vec<(u64, u64)>,
}

impl PythonInfo {
    /// The switch interval, ns (CPython's default, 5 ms, when it was not read).
    pub fn switch_ns(&self) -> u64 {
        self.switch_interval_us.unwrap_or(5000) * 1000
    }
}

/// One process over the report's window.
#[derive(Clone, Debug)]
pub struct ProcessReport {
    pub pid: u32,
    pub comm: String,
    pub python: Option<PythonInfo>,
    pub duration_ns: u64,
    /// when the window opened, in ns since the Unix epoch (None: not known)
    pub started_unix_ns: Option<i64>,
    /// seconds after the window opened at which the process exited
    pub exited_after_ns: Option<u64>,
    pub threads: Vec<ThreadRow>,
    pub top_futexes: Vec<TopFutex>,
    pub cgroup: Option<CgroupReport>,
    pub throttling: Option<Throttling>,
    pub age: Option<AgeReport>,
    /// CPUs the process may use: its cgroup quota, else the machine's CPUs
    pub cpu_limit_cores: f64,
    /// wait time by stack (None: stacks were not taken)
    pub stacks: Option<crate::model::stacks::WaitStacks>,
    /// how the verdict is drawn
    pub verdict: VerdictOptions,
    /// the machine's and the process' facts that decide waits (None: not read)
    pub environment: Option<environment::Environment>,
    /// events lost during the window, by probe and reason (non-zero only)
    pub events_lost: Vec<Lost>,
    /// the process and those it started, measured with it (`attach --children`; None: not asked)
    pub family: Option<family::Family>,
    /// the container (and pod) it runs in, as `identity::Identity::describe` says it; None: the host
    pub container: Option<String>,
}

/// How the verdict is drawn from a report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VerdictOptions {
    /// every finding, one line each (`-v`); else idle threads in one line and at
    /// most `verdict::MAX_LINES` lines
    pub all: bool,
    /// the level the application's age should stay under (`--age-slo`); None: from the window's spread
    pub age_slo_s: Option<f64>,
}

impl ProcessReport {
    /// Rows sorted by TID. The verdict is drawn once for the renderers (`verdict::analyse`),
    /// from the rows and what `with_cgroup`/`with_age` add.
    pub fn new(
        pid: u32,
        comm: String,
        python: Option<PythonInfo>,
        duration_ns: u64,
        exited_after_ns: Option<u64>,
        mut threads: Vec<ThreadRow>,
    ) -> Self {
        threads.sort_by_key(|t| (t.tid, t.exited));
        let per_thread: Vec<(u32, &[FutexWait])> = threads.iter().map(|t| (t.tid, t.futex.as_slice())).collect();
        let top_futexes = blame::top_futexes(&per_thread, TOP_FUTEXES);
        // a futex the threads take turns on is a lock, never a thread's home
        let waits: Vec<(u32, Vec<crate::model::stretches::FutexWaitOf>)> =
            threads.iter().map(|t| (t.tid, t.futex.iter().map(|w| (w.addr, w.waker, w.ns)).collect())).collect();
        let locks = crate::model::stretches::lock_blocks(waits.iter().map(|(t, w)| (*t, w.as_slice())));
        for t in threads.iter_mut() {
            t.stretches = t.stretches.take().map(|s| s.without_locks(&locks));
        }
        ProcessReport {
            pid,
            comm,
            python,
            duration_ns,
            started_unix_ns: None,
            exited_after_ns,
            threads,
            top_futexes,
            cgroup: None,
            throttling: None,
            age: None,
            // unknown until `with_online_cpus` (then `with_cgroup`/`with_allowed_cpus` narrow it)
            cpu_limit_cores: f64::INFINITY,
            stacks: None,
            verdict: VerdictOptions::default(),
            environment: None,
            events_lost: vec![],
            family: None,
            container: None,
        }
    }

    /// The processes it started, measured with it (`family::Family::of`).
    pub fn with_family(mut self, family: Option<family::Family>) -> Self {
        self.family = family;
        self
    }

    /// Events lost during the window: (probe, reason, count), zeros left out.
    pub fn with_events_lost(mut self, lost: Vec<Lost>) -> Self {
        self.events_lost = lost.into_iter().filter(|l| l.count > 0).collect();
        self
    }

    /// Add the cgroup's numbers.
    pub fn with_cgroup(mut self, cgroup: Option<CgroupReport>, throttling: Option<Throttling>) -> Self {
        if let Some(q) = cgroup.as_ref().and_then(|c| c.quota_cores) {
            self.cpu_limit_cores = q.min(self.cpu_limit_cores);
        }
        self.cgroup = cgroup;
        self.throttling = throttling;
        self
    }

    /// Fold the exited threads that lived less than `verdict::MIN_PRESENCE` of the window into
    /// a row per role (`fold`).
    pub fn with_short_lived_folded(mut self) -> Self {
        let short_ns = (verdict::MIN_PRESENCE * self.duration_ns as f64) as u64;
        let (threads, under) = fold::fold(std::mem::take(&mut self.threads), short_ns);
        self.threads = threads;
        if let Some(s) = self.stacks.as_mut().filter(|_| !under.is_empty()) {
            s.remap(|tid| under.get(&tid).copied().unwrap_or(tid));
        }
        self
    }

    /// The machine's CPUs (`procfs::online_cpus`): the CPU limit until a quota or an
    /// affinity narrows it.
    pub fn with_online_cpus(mut self, cpus: f64) -> Self {
        self.cpu_limit_cores = self.cpu_limit_cores.min(cpus);
        self
    }

    /// Limit the CPUs to those the process may run on (its affinity or cpuset).
    pub fn with_allowed_cpus(mut self, cpus: Option<usize>) -> Self {
        if let Some(n) = cpus.filter(|n| *n > 0) {
            self.cpu_limit_cores = self.cpu_limit_cores.min(n as f64);
        }
        self
    }

    /// Draw the verdict so.
    pub fn with_verdict(mut self, options: VerdictOptions) -> Self {
        self.verdict = options;
        self
    }

    /// Add the wait stacks.
    pub fn with_stacks(mut self, stacks: Option<crate::model::stacks::WaitStacks>) -> Self {
        self.stacks = stacks;
        self
    }

    /// Add the environment's facts.
    pub fn with_environment(mut self, e: environment::Environment) -> Self {
        self.environment = Some(e);
        self
    }

    /// The container (and pod) it runs in.
    pub fn with_container(mut self, container: Option<String>) -> Self {
        self.container = container;
        self
    }

    /// When the window opened (ns since the Unix epoch).
    pub fn with_start(mut self, unix_ns: i64) -> Self {
        self.started_unix_ns = Some(unix_ns);
        self
    }

    /// Add the application's age.
    pub fn with_age(mut self, age: Option<AgeReport>) -> Self {
        self.age = age;
        self
    }

    /// Cores the process used on average over the window.
    pub fn cpu_used_cores(&self) -> f64 {
        let running: u64 = self.threads.iter().map(|t| t.times.get(State::Running)).sum();
        running as f64 / self.duration_ns.max(1) as f64
    }
}
