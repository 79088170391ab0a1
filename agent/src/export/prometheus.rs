//! Prometheus exposition of the session, built at scrape time from fresh map
//! reads: the label bookkeeping (bounded thread, holder, waker and preemptor
//! labels; exited threads folded into their series). `encode.rs` writes the text.
use crate::idhash::IdMap;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use super::encode::{Exposition, Labels};
use super::futex_words::FutexWords;
use crate::model::blame::{Preemptor, Waker};
use crate::model::each_other;
use crate::model::hist::HoldHist;
use crate::model::labels::{busiest_apart, sanitize, LabelBook, BUSIEST, OTHER};
use crate::model::loss::Lost;
use crate::model::partition::{secs, Snapshot, ThreadSample, Times};
use crate::model::stacks::{site_function, Lengths, WaitStacks};
use crate::model::state::State;
use crate::model::stretches::{self, Hist, ThreadStretches, WaitKey};

/// The agent's own windows, for the values that are ratios or counts over
/// time (`waitmeter_thread_wait_ratio`, `waitmeter_futex_word_waiters`): a
/// boundary every WINDOW_STEP_NS of the agent's clock, values over the last
/// WINDOW_SPAN_NS. Every scraper sees the same value whenever and however
/// often it scrapes (two HA replicas agree).
pub const WINDOW_STEP_NS: u64 = 10_000_000_000;
pub const WINDOW_SPAN_NS: u64 = 60_000_000_000;

/// Distinct functions per process with their own `function` label in
/// `waitmeter_gil_function_hold_seconds`; the rest are "other".
pub const MAX_FUNCTION_LABELS: usize = 10;

/// Processes per watched process with their own `waker_pid` label in
/// `waitmeter_woken_by_process_seconds_total` (the first to wake it); the rest are "other".
pub const MAX_WAKER_PROCESSES: usize = 10;

/// How long the series of an exited process are still served.
pub const EXITED_RETENTION_NS: u64 = 300 * 1_000_000_000;

/// A label value, shared: every exited thread's numbers are added under its
/// series' labels, and a clone is a count, not a copy (thread churn).
type Label = std::sync::Arc<str>;

/// One `waitmeter_thread_seconds_total` series family (without `state`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct SeriesKey {
    target: u64,
    thread: Label,
    tid: Option<u32>,
}

/// Per-process facts for labels.
#[derive(Clone, Debug)]
pub struct ProcessInfo {
    /// session target id
    pub id: u64,
    pub pid: u32,
    pub comm: String,
    pub alive: bool,
    /// CPUs it may use: its cgroup's CFS quota, else the online CPUs
    pub cpu_limit_cores: f64,
    /// its container and pod
    pub identity: crate::identity::Identity,
}

/// A cgroup of the watched processes, read at scrape time.
#[derive(Clone, Debug)]
pub struct CgroupInfo {
    pub path: String,
    pub stat: crate::cgroup::CpuStat,
    pub quota_cores: Option<f64>,
}

/// Age inputs at scrape time.
#[derive(Clone, Debug, Default)]
pub struct AgeExport {
    /// (pid, latest age) from the endpoint
    pub process: Option<(u32, f64)>,
    /// (pid, tid, latest age) from waitmeter_client
    pub threads: Vec<(u32, u32, f64)>,
    /// endpoint poll errors (by reason), client records not taken (by reason)
    pub errors: Option<crate::model::age::AgeErrors>,
}

/// Self-metric inputs.
#[derive(Clone, Debug, Default)]
pub struct AgentStatus {
    pub attached: Vec<String>,
    pub expected: Vec<&'static str>,
    pub variant: &'static str,
    /// (feature, the kernel has it) for each feature above the floor (probes/kernel.rs)
    pub kernel_features: Vec<(&'static str, bool)>,
    /// (probe, reason, events)
    pub lost: Vec<Lost>,
    /// (probe, map, entries)
    pub maps: Vec<(&'static str, &'static str, usize)>,
    /// the endpoint's answers by status code
    pub http_codes: Vec<(u16, u64)>,
    /// the endpoint's connections closed without an answer, by reason
    pub http_drops: Vec<(&'static str, u64)>,
    /// changes of the --web.config.file by result (empty: none given)
    pub web_reloads: Vec<(&'static str, u64)>,
    /// profile pushes by result (empty: no pushing)
    pub pushes: Vec<(&'static str, u64)>,
    /// (target, syscall label, calls): `run --syscalls on` only
    pub syscalls: Vec<(u64, String, u64)>,
    /// pod list fetches by result, and entries skipped (None: no --pods source)
    pub pod_lists: Option<(Vec<(&'static str, u64)>, u64)>,
}

/// A thread's cumulative numbers, summed into the series they label: the
/// exited threads' (kept across scrapes), or those plus the live ones.
#[derive(Clone, Debug, Default)]
struct Totals {
    times: BTreeMap<SeriesKey, Times>,
    /// (waiter series, holder label) -> GIL wait ns
    gil: BTreeMap<(SeriesKey, Label), u64>,
    holds: BTreeMap<SeriesKey, HoldHist>,
    /// (waiter series, waker label) -> futex wait ns
    futex: BTreeMap<(SeriesKey, Label), u64>,
    /// (waiter series, preemptor label) -> run-queue ns
    runqueue: BTreeMap<(SeriesKey, Label), u64>,
    /// (process, blocked state, waking process' labels) -> ns its threads were blocked until it
    /// woke them (no thread label: a thread's numbers stay counted whatever its label)
    woken: BTreeMap<(u64, State, ProcessLabels), u64>,
    /// (process, waking process' PID) -> the same, for `each_other`: of every waker, not only
    /// those with labels (the exited threads' kept for the wakers still watched)
    woken_pids: BTreeMap<(u64, u32), u64>,
}

/// The numbers at one window boundary of the agent's clock.
#[derive(Debug)]
struct Boundary {
    at: u64,
    /// each series' times
    times: BTreeMap<SeriesKey, Times>,
    /// (process, waking process' PID) -> ns blocked until it woke them
    woken: BTreeMap<(u64, u32), u64>,
}

/// A waking process' labels: its PID and its name ("other", "other" past the bound).
type ProcessLabels = (Label, Label);

impl Totals {
    fn forget(&mut self, target: u64) {
        self.times.retain(|k, _| k.target != target);
        self.gil.retain(|k, _| k.0.target != target);
        self.holds.retain(|k, _| k.target != target);
        self.futex.retain(|k, _| k.0.target != target);
        self.runqueue.retain(|k, _| k.0.target != target);
        self.woken.retain(|k, _| k.0 != target);
        self.woken_pids.retain(|k, _| k.0 != target);
    }
}

/// Keeps counters monotonic across thread exits: exited threads' final times
/// are folded into their series, and every thread keeps its first label.
pub struct Exporter {
    max_labels: usize,
    tid_labels: bool,
    books: HashMap<u64, LabelBook>,
    /// (target, host TID, start) -> label
    thread_labels: IdMap<(u64, u32, u64), Label>,
    /// exited threads' numbers
    folded: Totals,
    /// per target: bounded labels for preempting processes
    preemptor_books: HashMap<u64, LabelBook>,
    /// per target: the processes that woke its threads with labels of their own (PID, name;
    /// at most MAX_WAKER_PROCESSES, kept while the target is: every counter only grows)
    waker_processes: HashMap<u64, Vec<(u32, Label)>>,
    /// futex wait by word, for waitmeter_futex_word_*
    words: FutexWords,
    /// each series' times at the window boundaries of the last WINDOW_SPAN_NS
    /// (oldest first; the first is the baseline of the wait ratio)
    windows: VecDeque<Boundary>,
    /// (target, TID) -> thread label, for naming GIL holders (also after they exit)
    tid_labels_by_target: IdMap<(u64, u32), Label>,
    /// (target, holder label, function label) -> the GIL holds ended there
    gil_functions: BTreeMap<(u64, String, String), Lengths>,
    /// per target: bounded labels for the holders' functions
    function_books: HashMap<u64, LabelBook>,
    /// thread incarnation -> its sample when its label last changed: its numbers up to then
    /// stay in the old series, the new one counts from there (every counter only grows)
    baselines: HashMap<Incarnation, ThreadSample>,
    /// thread incarnation -> (when, busy ns then, cores busy since: a moving average)
    busy: HashMap<Incarnation, (u64, u64, f64)>,
    /// (target, name) -> the thread of that name labelled `NAME#busiest`
    apart: HashMap<(u64, String), Incarnation>,
    /// target -> thread name -> its label, for threads not labelled apart, until the
    /// target's labels are next given by impact (thread churn: one lookup per exit)
    name_labels: HashMap<u64, HashMap<String, Label>>,
    /// target -> when its labels were last given by impact
    rebalanced_at: HashMap<u64, u64>,
    /// (target, name) -> when the name lost its own label (`drop_demoted`)
    demoted: HashMap<(u64, String), u64>,
    /// waitmeter_thread_stretch_seconds: (series, home wait's name) -> the stretches counted
    /// there, added to only (every counter only grows, whatever threads come, go or move)
    stretch_totals: BTreeMap<(SeriesKey, String), Hist>,
    /// per thread (host TID, incarnation) with a home: its process, series, home and that
    /// home's reading when last counted
    stretch_seen: HashMap<(u32, u32), StretchSeen>,
    /// threads that exited since the last reading of the stretches: (target, series)
    stretch_exited: HashMap<(u32, u32), (u64, SeriesKey)>,
    /// threads with entries in the stretches map at the last reading that were neither live
    /// nor known to have exited (started after the snapshot, or their exit record was lost)
    stretch_strangers: HashSet<(u32, u32)>,
}

/// A live thread's stretches as last read.
#[derive(Debug)]
struct StretchSeen {
    target: u64,
    key: SeriesKey,
    /// its home, and the home's cumulative reading when last counted
    home: Option<(WaitKey, Hist)>,
    /// its other waits' entries: (count at the last reading, when it last changed)
    others: HashMap<WaitKey, (u64, u64)>,
}

/// A live thread's entry of a wait other than its home that did not change for this long is
/// deleted (a thread that joins threads, or waits on a new futex word per request, makes one
/// each time); its home's stays while it lives.
pub const STRETCH_QUIET_NS: u64 = 2_000_000_000;

/// A thread incarnation: (target, host TID, start).
type Incarnation = (u64, u32, u64);

/// Thread names whose labels are remembered per process between two rebalances.
const MAX_NAME_LABELS: usize = 4096;

/// Labels are given by impact at most this often per process.
pub const REBALANCE_EVERY_NS: u64 = 1_000_000_000;

/// What a thread has done that makes it worth a label: running, and waiting with work to do.
fn busy_ns(s: &ThreadSample) -> u64 {
    s.times.get(State::Running) + s.times.waiting()
}

impl Exporter {
    pub fn new(max_labels: usize, tid_labels: bool) -> Self {
        Exporter {
            max_labels,
            tid_labels,
            books: HashMap::new(),
            thread_labels: IdMap::default(),
            folded: Totals::default(),
            preemptor_books: HashMap::new(),
            waker_processes: HashMap::new(),
            words: FutexWords::default(),
            windows: VecDeque::new(),
            tid_labels_by_target: IdMap::default(),
            gil_functions: BTreeMap::new(),
            function_books: HashMap::new(),
            baselines: HashMap::new(),
            busy: HashMap::new(),
            apart: HashMap::new(),
            name_labels: HashMap::new(),
            rebalanced_at: HashMap::new(),
            demoted: HashMap::new(),
            stretch_totals: BTreeMap::new(),
            stretch_seen: HashMap::new(),
            stretch_exited: HashMap::new(),
            stretch_strangers: HashSet::new(),
        }
    }

    /// The name a thread's label is given by: its name, or `NAME#busiest` for the one of
    /// several same-named threads labelled apart.
    fn label_name(&self, target: u64, s: &ThreadSample) -> String {
        let name = sanitize(s.name());
        match self.apart.get(&(target, name.clone())) {
            Some(id) if *id == (target, s.host_tid, s.start_ns) => format!("{name}{BUSIEST}"),
            _ => name,
        }
    }

    fn key(&mut self, target: u64, s: &ThreadSample) -> SeriesKey {
        self.key_of(target, s, true)
    }

    /// The series of a thread; `remember`: keep its label for later calls
    /// (not for a thread folded at its exit: nothing asks again).
    fn key_of(&mut self, target: u64, s: &ThreadSample, remember: bool) -> SeriesKey {
        let id = (target, s.host_tid, s.start_ns);
        let apart = || self.apart.values().any(|a| *a == id);
        let thread = match self.thread_labels.get(&id) {
            Some(l) => l.clone(),
            None => match self.name_labels.get(&target).and_then(|m| m.get(s.name())).filter(|_| !apart()) {
                Some(l) => {
                    let l = l.clone();
                    if remember {
                        self.thread_labels.insert(id, l.clone());
                    }
                    l
                }
                None => {
                    let name = self.label_name(target, s);
                    let book = self.books.entry(target).or_insert_with(|| LabelBook::new(self.max_labels));
                    let l: Label = book.label(&name).into();
                    if !apart() {
                        let m = self.name_labels.entry(target).or_default();
                        if m.len() >= MAX_NAME_LABELS {
                            // unique names (worker-1, worker-2, ...): a cache of no use
                            m.clear();
                        }
                        m.insert(s.name().to_string(), l.clone());
                    }
                    if remember {
                        self.thread_labels.insert(id, l.clone());
                    }
                    l
                }
            },
        };
        self.tid_labels_by_target.insert((target, s.tid), thread.clone());
        SeriesKey { target, thread, tid: self.tid_labels.then_some(s.tid) }
    }

    /// A thread's numbers that belong to its present label: all of them, or those since its
    /// label last changed.
    fn counted(&self, target: u64, s: &ThreadSample) -> ThreadSample {
        match self.baselines.get(&(target, s.host_tid, s.start_ns)) {
            Some(b) => s.since(b),
            None => s.clone(),
        }
    }

    /// Give each process' thread labels to the threads with the most impact (running and
    /// waiting, cores, a moving average), at most every `REBALANCE_EVERY_NS`, with hysteresis
    /// (`LabelBook::rebalance`); label the busiest of same-named threads apart when it is far
    /// busier (`labels::busiest_apart`). A thread that changes label leaves its numbers so far
    /// in the old series (monotonic counters both).
    pub fn rebalance(&mut self, now: u64, snap: &Snapshot) {
        for (target, threads) in &snap.live {
            let target = *target;
            if self.rebalanced_at.get(&target).is_some_and(|t| now < t + REBALANCE_EVERY_NS) {
                continue;
            }
            self.rebalanced_at.insert(target, now);
            // cores busy per thread: since the last look, averaged with the look before
            let mut rate: HashMap<Incarnation, f64> = HashMap::new();
            for s in threads {
                let id = (target, s.host_tid, s.start_ns);
                let b = busy_ns(s);
                let r = match self.busy.get(&id) {
                    Some((at, then, r)) if s.at_ns > *at => 0.5 * r + 0.5 * b.saturating_sub(*then) as f64 / (s.at_ns - at) as f64,
                    Some((_, _, r)) => *r,
                    None => b as f64 / s.existed_ns().max(1) as f64,
                };
                self.busy.insert(id, (s.at_ns, b, r));
                rate.insert(id, r);
            }
            // the busiest of same-named threads apart
            let mut by_name: HashMap<String, Vec<(Incarnation, f64)>> = HashMap::new();
            for s in threads {
                let id = (target, s.host_tid, s.start_ns);
                by_name.entry(sanitize(s.name())).or_default().push((id, rate[&id]));
            }
            for (name, loads) in &by_name {
                let key = (target, name.clone());
                match busiest_apart(loads, self.apart.get(&key).copied()) {
                    Some(id) => self.apart.insert(key, id),
                    None => self.apart.remove(&key),
                };
            }
            let mut impact: HashMap<String, f64> = HashMap::new();
            for s in threads {
                *impact.entry(self.label_name(target, s)).or_default() += rate[&(target, s.host_tid, s.start_ns)];
            }
            self.name_labels.remove(&target);
            let book = self.books.entry(target).or_insert_with(|| LabelBook::new(self.max_labels));
            for name in book.rebalance(&impact) {
                if book.owns(&name) {
                    self.demoted.remove(&(target, name));
                } else {
                    self.demoted.insert((target, name), now);
                }
            }
            let labels: Vec<(Incarnation, Label)> = threads
                .iter()
                .map(|s| {
                    let name = self.label_name(target, s);
                    let book = self.books.entry(target).or_insert_with(|| LabelBook::new(self.max_labels));
                    ((target, s.host_tid, s.start_ns), book.label(&name).into())
                })
                .collect();
            if labels.iter().all(|(id, l)| self.thread_labels.get(id).is_none_or(|old| old == l)) {
                continue;
            }
            // a label moves: every thread's numbers so far stay in the series they are in now
            // (its own, and those of the waits it names the holder, waker or preemptor of),
            // and all count afresh from here
            let mut folded = std::mem::take(&mut self.folded);
            for s in threads {
                let k = self.key(target, s);
                let counted = self.counted(target, s);
                self.add(&mut folded, target, &k, &counted);
                self.baselines.insert((target, s.host_tid, s.start_ns), s.clone());
            }
            self.folded = folded;
            for (s, (id, label)) in threads.iter().zip(labels) {
                self.tid_labels_by_target.insert((target, s.tid), label.clone());
                self.thread_labels.insert(id, label);
            }
        }
    }

    /// Drop the series of names that lost their label `WINDOW_SPAN_NS` ago (their counters
    /// stood still since; the threads count under `other` or a new label): the series a
    /// process has stay bounded by its labels, however often the busiest threads change.
    fn drop_demoted(&mut self, now: u64) {
        let due: Vec<(u64, String)> = self.demoted.iter().filter(|(_, at)| **at + WINDOW_SPAN_NS <= now).map(|(k, _)| k.clone()).collect();
        for (target, name) in due {
            self.demoted.remove(&(target, name.clone()));
            let gone = |k: &SeriesKey| k.target == target && *k.thread == *name;
            let f = &mut self.folded;
            f.times.retain(|k, _| !gone(k));
            f.holds.retain(|k, _| !gone(k));
            f.gil.retain(|(k, by), _| !(gone(k) || k.target == target && **by == *name));
            f.futex.retain(|(k, by), _| !(gone(k) || k.target == target && **by == *name));
            f.runqueue.retain(|(k, by), _| !(gone(k) || k.target == target && **by == *name));
            self.stretch_totals.retain(|(k, _), _| !gone(k));
            for b in self.windows.iter_mut() {
                b.times.retain(|k, _| !gone(k));
            }
        }
    }

    fn holder_label(&self, target: u64, holder: u32) -> Label {
        if holder == 0 {
            return "unknown".into();
        }
        self.tid_labels_by_target.get(&(target, holder)).cloned().unwrap_or_else(|| "unknown".into())
    }

    /// A waker's thread label; "timeout" when no thread woke the waiter,
    /// "other" for a thread that is not one of the process' (another process).
    fn waker_label(&self, target: u64, waker: u32) -> Label {
        if waker == 0 {
            return "timeout".into();
        }
        self.tid_labels_by_target.get(&(target, waker)).cloned().unwrap_or_else(|| "other".into())
    }

    /// What had the CPU while a thread waited in the run queue: a thread of the
    /// process (its label), "idle", or "process:<comm>" for another process
    /// (bounded per process like thread labels; the rest "other").
    fn preemptor_label(&mut self, target: u64, p: &Preemptor) -> Label {
        match p {
            Preemptor::Thread(tid) => self.tid_labels_by_target.get(&(target, *tid)).cloned().unwrap_or_else(|| "other".into()),
            Preemptor::Idle => "idle".into(),
            Preemptor::Process { comm, .. } => {
                let book = self.preemptor_books.entry(target).or_insert_with(|| LabelBook::new(self.max_labels));
                book.label(&format!("process:{}", sanitize(comm))).into()
            }
        }
    }

    /// The labels of a process that woke a thread of `target`: its own while there is room
    /// (a PID reused by another program is another process), else "other".
    fn waker_process_labels(&mut self, target: u64, pid: u32, comm: &str) -> ProcessLabels {
        let other = || -> ProcessLabels { (OTHER.into(), OTHER.into()) };
        if pid == 0 {
            return other();
        }
        let known = self.waker_processes.entry(target).or_default();
        if let Some((_, name)) = known.iter().find(|(p, name)| *p == pid && &**name == comm) {
            return (pid.to_string().into(), name.clone());
        }
        if known.len() >= MAX_WAKER_PROCESSES {
            return other();
        }
        let name: Label = comm.into();
        known.push((pid, name.clone()));
        (pid.to_string().into(), name)
    }

    /// Add a thread's numbers to the series labelled `k`.
    fn add(&mut self, into: &mut Totals, target: u64, k: &SeriesKey, s: &ThreadSample) {
        into.times.entry(k.clone()).or_default().add(&s.times);
        for (holder, ns) in &s.gil_by_holder {
            *into.gil.entry((k.clone(), self.holder_label(target, *holder))).or_default() += ns;
        }
        if let Some(h) = &s.gil_hold {
            into.holds.entry(k.clone()).or_default().add(h);
        }
        for (waker, ns) in crate::model::blame::by_waker(&s.futex) {
            *into.futex.entry((k.clone(), self.waker_label(target, waker))).or_default() += ns;
        }
        for (p, ns) in &s.runqueue_by {
            *into.runqueue.entry((k.clone(), self.preemptor_label(target, p))).or_default() += ns;
        }
        for ((state, waker), ns) in &s.woken_by {
            if let Waker::Process { pid, comm } = waker {
                let by = self.waker_process_labels(target, *pid, comm);
                *into.woken.entry((target, *state, by)).or_default() += ns;
                if *pid != 0 {
                    *into.woken_pids.entry((target, *pid)).or_default() += ns;
                }
            }
        }
    }

    /// Label the live threads of a snapshot now, as the next render would:
    /// wait profiles name threads as the metrics do.
    pub fn label_threads(&mut self, snap: &Snapshot) {
        for (t, threads) in &snap.live {
            for s in threads {
                self.key(*t, s);
            }
        }
    }

    /// Count the GIL holds in a target's drained wait stacks by holder and
    /// function (after `label_threads` of the same sample, which names the
    /// holders).
    pub fn add_gil_holds(&mut self, target: u64, w: &WaitStacks) {
        // new functions are labelled most holds first (the bound keeps the biggest)
        let mut holds: Vec<(String, &crate::model::stacks::Key, &Lengths)> =
            w.lengths.iter().filter(|(_, l)| l.waits > 0).map(|(k, l)| (sanitize(&site_function(&k.stack)), k, l)).collect();
        holds.sort_by(|a, b| b.2.waits.cmp(&a.2.waits).then_with(|| a.0.cmp(&b.0)));
        for (function, k, l) in holds {
            let holder = self.holder_label(target, k.blamed);
            let book = self.function_books.entry(target).or_insert_with(|| LabelBook::new(MAX_FUNCTION_LABELS));
            let function = book.label(&function).to_string();
            self.gil_functions.entry((target, holder.to_string(), function)).or_default().add(l);
        }
    }

    /// A thread's label (by its TID as the agent sees it), once labelled.
    pub fn thread_label(&self, target: u64, tid: u32) -> Option<String> {
        self.tid_labels_by_target.get(&(target, tid)).map(|l| l.to_string())
    }

    /// Fold the final samples of exited threads into their series (once each).
    pub fn fold_exits(&mut self, exits: &BTreeMap<u64, Vec<ThreadSample>>) {
        let mut folded = std::mem::take(&mut self.folded);
        for (target, threads) in exits {
            for s in threads {
                let k = self.key_of(*target, s, false);
                let id = (*target, s.host_tid, s.start_ns);
                let since;
                let counted = match self.baselines.remove(&id) {
                    Some(b) => {
                        since = s.since(&b);
                        &since
                    }
                    None => s,
                };
                self.add(&mut folded, *target, &k, counted);
                // its stretches are counted at the next reading of the probe's map (their last)
                self.stretch_exited.insert((s.host_tid, s.start_ns as u32), (*target, k));
                self.words.fold_exit(*target, s);
                self.thread_labels.remove(&id);
                self.busy.remove(&id);
            }
        }
        self.folded = folded;
    }

    /// Forget everything about processes that are no longer served.
    pub fn forget(&mut self, targets: &[u64]) {
        for t in targets {
            self.books.remove(t);
            self.name_labels.remove(t);
            self.folded.forget(*t);
            self.preemptor_books.remove(t);
            self.waker_processes.remove(t);
            self.words.forget(*t);
            self.function_books.remove(t);
            self.gil_functions.retain(|k, _| k.0 != *t);
            self.thread_labels.retain(|k, _| k.0 != *t);
            self.tid_labels_by_target.retain(|k, _| k.0 != *t);
            self.baselines.retain(|k, _| k.0 != *t);
            self.busy.retain(|k, _| k.0 != *t);
            self.apart.retain(|k, _| k.0 != *t);
            self.demoted.retain(|k, _| k.0 != *t);
            self.rebalanced_at.remove(t);
            for b in self.windows.iter_mut() {
                b.times.retain(|k, _| k.target != *t);
                b.woken.retain(|k, _| k.0 != *t);
            }
            self.stretch_totals.retain(|(k, _), _| k.target != *t);
            self.stretch_seen.retain(|_, s| s.target != *t);
            self.stretch_exited.retain(|_, (target, _)| target != t);
        }
    }

    /// Count a reading of the probe's stretches map (cumulative per thread incarnation and wait)
    /// taken after `snap` (whose exits are folded and threads labelled): each thread's stretches
    /// at its home since its last reading go to its series. Returns the entries to delete from
    /// the map, which keeps what is still of use: those of a gone thread (an exited one, or one
    /// no longer live) after this reading, its last; those of a live thread's other waits that
    /// did not change for `STRETCH_QUIET_NS`; those of threads still unknown after two readings.
    pub fn note_stretches(&mut self, snap: &Snapshot, reading: Vec<stretches::StretchRecord>) -> Vec<(u32, u32, WaitKey)> {
        let mut by_thread: HashMap<(u32, u32), Vec<(WaitKey, Hist)>> = HashMap::new();
        for ((tid, gen, wait), h) in reading {
            by_thread.entry((tid, gen)).or_default().push((wait, h));
        }
        let mut live: HashMap<(u32, u32), (u64, SeriesKey)> = HashMap::new();
        for (target, threads) in &snap.live {
            for s in threads {
                let id = (s.host_tid, s.start_ns as u32);
                if by_thread.contains_key(&id) {
                    let k = self.key(*target, s);
                    live.insert(id, (*target, k));
                }
            }
        }
        let mut gone = vec![];
        let mut strangers = HashSet::new();
        for (id, waits) in by_thread {
            let all: Vec<(u32, u32, WaitKey)> = waits.iter().map(|(w, _)| (id.0, id.1, *w)).collect();
            if let Some((target, key)) = live.remove(&id) {
                gone.extend(self.count_stretches(id, target, key, waits, snap.at_ns).into_iter().map(|w| (id.0, id.1, w)));
                continue;
            }
            match self.stretch_exited.remove(&id).or_else(|| self.stretch_seen.get(&id).map(|s| (s.target, s.key.clone()))) {
                // gone: this reading is its last
                Some((target, key)) => {
                    self.count_stretches(id, target, key, waits, snap.at_ns);
                    self.stretch_seen.remove(&id);
                }
                // not known yet: it may have started after the snapshot
                None if !self.stretch_strangers.contains(&id) => {
                    strangers.insert(id);
                    continue;
                }
                None => {}
            }
            gone.extend(all);
        }
        self.stretch_strangers = strangers;
        self.stretch_exited.clear();
        // threads gone without a reading (their entries deleted with another's, or none)
        let live_ids: HashSet<(u32, u32)> = snap.live.values().flatten().map(|s| (s.host_tid, s.start_ns as u32)).collect();
        self.stretch_seen.retain(|id, _| live_ids.contains(id));
        crate::shrink::shrink(&mut self.stretch_seen);
        crate::shrink::shrink(&mut self.stretch_exited);
        gone
    }

    /// Count one thread's reading (its waits, cumulative) at `now`: its home's stretches since
    /// they were last counted, in its series now. The stretches of a wait are counted from its
    /// first reading as the thread's home (the thread's first reading: all of them); when the
    /// home moves, what was counted stays where it is. Returns the waits whose entries are of
    /// no use any more: the other waits' that did not change for `STRETCH_QUIET_NS`.
    fn count_stretches(&mut self, id: (u32, u32), target: u64, key: SeriesKey, waits: Vec<(WaitKey, Hist)>, now: u64) -> Vec<WaitKey> {
        let counts: Vec<(WaitKey, u64)> = waits.iter().map(|(w, h)| (*w, h.count)).collect();
        let t = ThreadStretches::new(waits, stretches::STALL_OBJECTIVE_NS);
        let home = t.at_home().map(|(w, h)| (w, h.clone()));
        let before = self.stretch_seen.remove(&id);
        if let Some((wait, h)) = &home {
            let add = match &before {
                None => Some(h.clone()),
                Some(StretchSeen { home: Some((was, last)), .. }) if was == wait => Some(h.since(last)),
                // its home moved (or it had none): from now on
                Some(_) => None,
            };
            let total = self.stretch_totals.entry((key.clone(), wait.name())).or_default();
            if let Some(add) = add {
                total.add(&add);
            }
        }
        let others_before = before.map(|s| s.others).unwrap_or_default();
        let mut others = HashMap::new();
        let mut quiet = vec![];
        for (w, n) in counts.into_iter().filter(|(w, _)| home.as_ref().is_none_or(|(h, _)| h != w)) {
            match others_before.get(&w) {
                Some((was, since)) if *was == n && now >= since + STRETCH_QUIET_NS => quiet.push(w),
                Some((was, since)) if *was == n => {
                    others.insert(w, (n, *since));
                }
                _ => {
                    others.insert(w, (n, now));
                }
            }
        }
        self.stretch_seen.insert(id, StretchSeen { target, key, home, others });
        quiet
    }

    /// Every series' numbers now: the exited threads' plus the live ones'.
    fn totals(&mut self, snap: &Snapshot) -> Totals {
        let mut totals = self.folded.clone();
        // labels first, so that holders are named whatever the order of threads
        let keyed: Vec<(u64, SeriesKey, &ThreadSample)> =
            snap.live.iter().flat_map(|(t, threads)| threads.iter().map(move |s| (*t, s))).map(|(t, s)| (t, self.key(t, s), s)).collect();
        for (target, k, s) in keyed {
            let counted = self.counted(target, s);
            self.add(&mut totals, target, &k, &counted);
        }
        totals
    }

    /// A window boundary of the agent's clock (every WINDOW_STEP_NS, whether
    /// or not anyone scrapes): the numbers the windowed values are computed from.
    pub fn window(&mut self, now: u64, snap: &Snapshot) {
        let Totals { times, woken_pids: woken, .. } = self.totals(snap);
        self.windows.push_back(Boundary { at: now, times, woken });
        // keep one boundary at or before now - span: the baseline
        while self.windows.len() > 2 && self.windows[1].at + WINDOW_SPAN_NS <= now {
            self.windows.pop_front();
        }
        self.words.window(now, snap.live.iter().flat_map(|(t, threads)| threads.iter().map(move |s| (*t, s))));
        self.prune(snap);
        self.drop_demoted(now);
    }

    /// Forget the labels of threads that are gone and that no live thread
    /// names any more (as a GIL holder, waker or preemptor): the maps hold
    /// what is live, not every thread ever seen.
    fn prune(&mut self, snap: &Snapshot) {
        let live: HashSet<(u64, u32, u64)> =
            snap.live.iter().flat_map(|(t, threads)| threads.iter().map(move |s| (*t, s.host_tid, s.start_ns))).collect();
        self.thread_labels.retain(|k, _| live.contains(k));
        self.baselines.retain(|k, _| live.contains(k));
        self.busy.retain(|k, _| live.contains(k));
        self.apart.retain(|_, id| live.contains(id));
        let mut named: HashSet<(u64, u32)> = HashSet::new();
        for (target, threads) in &snap.live {
            for s in threads {
                named.insert((*target, s.tid));
                named.extend(s.gil_by_holder.keys().map(|h| (*target, *h)));
                named.extend(s.futex.iter().map(|w| (*target, w.waker)));
                named.extend(s.runqueue_by.keys().filter_map(|p| match p {
                    Preemptor::Thread(tid) => Some((*target, *tid)),
                    _ => None,
                }));
            }
        }
        self.tid_labels_by_target.retain(|k, _| named.contains(k));
        // exited threads' waits ended by a process matter while it is watched (`each_other`)
        let watched: HashSet<u32> = snap.live.values().flatten().map(|s| s.pid).collect();
        self.folded.woken_pids.retain(|(_, pid), _| watched.contains(pid));
        crate::shrink::shrink(&mut self.thread_labels);
        crate::shrink::shrink(&mut self.baselines);
        crate::shrink::shrink(&mut self.busy);
        crate::shrink::shrink(&mut self.tid_labels_by_target);
    }

    /// Each series' times over the agent's window: since its oldest boundary (all of them for a
    /// series younger than that).
    fn windowed(&self) -> impl Iterator<Item = (&SeriesKey, Times)> + '_ {
        let base = (self.windows.len() > 1).then(|| &self.windows[0].times);
        self.windows.back().into_iter().flat_map(|b| b.times.iter()).map(move |(k, t)| {
            let window = match base.and_then(|b| b.get(k)) {
                Some(before) => t.since(before),
                None => *t,
            };
            (k, window)
        })
    }

    /// `waitmeter_process_wait_on_each_other_ratio`: over the agent's window, the watched processes
    /// that waited on each other (`model::each_other`), each with the share of its threads' time
    /// that the others ended by waking them.
    fn waiting_on_each_other(&self, procs: &[ProcessInfo]) -> Vec<(Labels, f64)> {
        let Some(newest) = self.windows.back() else { return vec![] };
        let base = (self.windows.len() > 1).then(|| &self.windows[0]);
        let mut thread_ns: HashMap<u64, u64> = HashMap::new();
        for (k, window) in self.windowed() {
            *thread_ns.entry(k.target).or_default() += window.total();
        }
        let mut woken: HashMap<u64, BTreeMap<u32, u64>> = HashMap::new();
        for ((target, by), ns) in &newest.woken {
            let before = base.and_then(|b| b.woken.get(&(*target, *by))).copied().unwrap_or(0);
            woken.entry(*target).or_default().insert(*by, ns.saturating_sub(before));
        }
        let measured: Vec<each_other::Process> = procs
            .iter()
            .filter(|p| p.alive)
            .map(|p| each_other::Process {
                pid: p.pid,
                thread_ns: thread_ns.get(&p.id).copied().unwrap_or(0),
                woken_by: woken.remove(&p.id).unwrap_or_default(),
            })
            .collect();
        let set = each_other::waiting(&measured);
        measured
            .iter()
            .filter(|p| set.contains(&p.pid))
            .map(|p| {
                let by_others: u64 = p.woken_by.iter().filter(|(by, _)| **by != p.pid && set.contains(by)).map(|(_, ns)| ns).sum();
                (vec![("pid".to_string(), p.pid.to_string())], by_others as f64 / p.thread_ns.max(1) as f64)
            })
            .collect()
    }

    /// Entries of the exporter's maps (for tests and the churn benchmark).
    #[cfg(test)]
    fn sizes(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("thread_labels", self.thread_labels.len()),
            ("tid_labels_by_target", self.tid_labels_by_target.len()),
            ("windows", self.windows.iter().map(|b| b.times.len() + b.woken.len()).sum()),
            ("words", self.words.len()),
            ("baselines", self.baselines.len()),
            ("busy", self.busy.len()),
            ("apart", self.apart.len()),
            ("demoted", self.demoted.len()),
            ("stretch_seen", self.stretch_seen.len()),
            ("stretch_exited", self.stretch_exited.len()),
            ("stretch_strangers", self.stretch_strangers.len()),
        ]
    }

    /// The exposition text for this scrape. `snap.exited` must already be folded.
    pub fn render(
        &mut self,
        procs: &[ProcessInfo],
        cgroups: &[CgroupInfo],
        ages: &AgeExport,
        snap: &Snapshot,
        status: &AgentStatus,
    ) -> String {
        let totals = self.totals(snap);
        let Totals { times: series, gil, holds, futex, runqueue, woken, .. } = totals;
        let mut futex_seconds = vec![];
        let words = self.words.render(snap.live.iter().flat_map(|(t, threads)| threads.iter().map(move |s| (*t, s))));
        self.prune(snap);
        let by_id: HashMap<u64, &ProcessInfo> = procs.iter().map(|p| (p.id, p)).collect();
        let mut gil_holds = vec![];
        for (k, h) in &holds {
            let Some(p) = by_id.get(&k.target) else { continue };
            gil_holds.push((series_labels(p, k, false, &[]), *h));
        }
        let mut gil_function_holds = vec![];
        for ((target, holder, function), l) in &self.gil_functions {
            let Some(p) = by_id.get(target) else { continue };
            let labels = [("pid", p.pid.to_string()), ("thread", holder.clone()), ("function", function.clone())];
            gil_function_holds.push((labels.into_iter().map(|(n, v)| (n.to_string(), v)).collect(), l.clone()));
        }
        let mut gil_seconds = vec![];
        for ((k, holder), ns) in &gil {
            let Some(p) = by_id.get(&k.target) else { continue };
            gil_seconds.push((series_labels(p, k, false, &[("holder", holder)]), secs(*ns)));
        }
        let mut runqueue_seconds = vec![];
        for ((k, preemptor), ns) in &runqueue {
            let Some(p) = by_id.get(&k.target) else { continue };
            runqueue_seconds.push((series_labels(p, k, false, &[("preemptor", preemptor)]), secs(*ns)));
        }
        for ((k, waker), ns) in &futex {
            let Some(p) = by_id.get(&k.target) else { continue };
            futex_seconds.push((series_labels(p, k, false, &[("waker", waker)]), secs(*ns)));
        }
        let woken_by_process = woken
            .into_iter()
            .filter_map(|((target, state, (pid, comm)), ns)| {
                let p = by_id.get(&target)?;
                let labels = [
                    ("pid", p.pid.to_string()),
                    ("state", state.name().to_string()),
                    ("waker_pid", pid.to_string()),
                    ("waker_comm", comm.to_string()),
                ];
                Some((labels.into_iter().map(|(n, v)| (n.to_string(), v)).collect(), secs(ns)))
            })
            .collect();
        let word_labels = |target: u64, futex: &str| {
            let p = by_id.get(&target)?;
            Some(vec![("pid".to_string(), p.pid.to_string()), ("futex".to_string(), futex.to_string())])
        };
        let futex_word_seconds = words.seconds.iter().filter_map(|(t, f, v)| Some((word_labels(*t, f)?, *v))).collect();
        let futex_word_waiters = words.waiters.iter().filter_map(|(t, f, v)| Some((word_labels(*t, f)?, *v))).collect();
        let cpu_limit =
            procs.iter().filter(|p| p.alive).map(|p| (vec![("pid".to_string(), p.pid.to_string())], p.cpu_limit_cores)).collect();
        let cg = |c: &CgroupInfo| vec![("cgroup".to_string(), c.path.clone())];
        let cgroup_throttled = cgroups.iter().map(|c| (cg(c), c.stat.throttled_ns as f64 / 1e9)).collect();
        let cgroup_throttled_periods = cgroups.iter().map(|c| (cg(c), c.stat.nr_throttled as f64)).collect();
        let cgroup_periods = cgroups.iter().map(|c| (cg(c), c.stat.nr_periods as f64)).collect();
        let cgroup_quota = cgroups.iter().filter_map(|c| Some((cg(c), c.quota_cores?))).collect();
        let mut wait_ratio = vec![];
        for (k, window) in self.windowed() {
            let Some(p) = by_id.get(&k.target) else { continue };
            if let Some(r) = window.wait_ratio() {
                wait_ratio.push((series_labels(p, k, false, &[]), r));
            }
        }
        let each_other_ratio = self.waiting_on_each_other(procs);
        let mut thread_stretches = vec![];
        for ((k, wait), h) in &self.stretch_totals {
            let Some(p) = by_id.get(&k.target) else { continue };
            thread_stretches.push((series_labels(p, k, true, &[("wait", wait)]), h.clone()));
        }
        let mut app_age = vec![];
        if let Some((pid, age)) = ages.process {
            app_age.push((vec![("pid".to_string(), pid.to_string())], age));
        }
        for (pid, tid, age) in &ages.threads {
            let Some(p) = procs.iter().find(|p| p.pid == *pid) else { continue };
            let thread = self.tid_labels_by_target.get(&(p.id, *tid)).map_or_else(|| "unknown".to_string(), |l| l.to_string());
            app_age.push((vec![("pid".to_string(), pid.to_string()), ("thread".to_string(), thread)], *age));
        }
        let age_errors = match &ages.errors {
            Some(e) => vec![
                (vec![("source".to_string(), "endpoint".to_string())], e.endpoint as f64),
                (vec![("source".to_string(), "client".to_string())], e.client as f64),
            ],
            None => vec![],
        };
        let by_reason = |counts: &[(&'static str, u64)]| -> Vec<(Labels, f64)> {
            counts.iter().map(|(r, n)| (vec![("reason".to_string(), r.to_string())], *n as f64)).collect()
        };
        let age_scrape_errors = ages.errors.as_ref().map_or(vec![], |e| by_reason(&e.scrape));
        let age_client_rejected = ages.errors.as_ref().map_or(vec![], |e| by_reason(&e.rejected));
        let mut thread_seconds = vec![];
        for (k, t) in &series {
            let Some(p) = by_id.get(&k.target) else { continue };
            for st in State::ALL {
                thread_seconds.push((series_labels(p, k, true, &[("state", st.name())]), secs(t.get(st))));
            }
        }
        let live_threads: usize = snap.live.values().map(Vec::len).sum();
        let attached = status
            .expected
            .iter()
            .map(|p| {
                let on = status.attached.iter().any(|a| a == p);
                (vec![("probe".to_string(), p.to_string()), ("variant".to_string(), status.variant.to_string())], on as i64)
            })
            .collect();
        let kernel_features =
            status.kernel_features.iter().map(|(f, on)| (vec![("feature".to_string(), f.to_string())], *on as i64)).collect();
        let lost = status
            .lost
            .iter()
            .map(|l| {
                (
                    vec![("probe".to_string(), l.probe.label().to_string()), ("reason".to_string(), l.reason.label().to_string())],
                    l.count as f64,
                )
            })
            .collect();
        let map_entries = status
            .maps
            .iter()
            .map(|(probe, map, n)| (vec![("probe".to_string(), probe.to_string()), ("map".to_string(), map.to_string())], *n as i64))
            .collect();
        let http_requests = status.http_codes.iter().map(|(c, n)| (vec![("code".to_string(), c.to_string())], *n as f64)).collect();
        let http_dropped = status.http_drops.iter().map(|(r, n)| (vec![("reason".to_string(), r.to_string())], *n as f64)).collect();
        let web_config_reloads = status.web_reloads.iter().map(|(r, n)| (vec![("result".to_string(), r.to_string())], *n as f64)).collect();
        let profile_pushes = status.pushes.iter().map(|(r, n)| (vec![("result".to_string(), r.to_string())], *n as f64)).collect();
        let process_syscalls = status
            .syscalls
            .iter()
            .filter_map(|(target, syscall, n)| {
                let p = by_id.get(target)?;
                let labels = [("pid", p.pid.to_string()), ("comm", p.comm.clone()), ("syscall", syscall.clone())];
                Some((labels.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), *n as f64))
            })
            .collect();
        let process_info = procs
            .iter()
            .filter(|p| p.alive)
            .map(|p| {
                let mut labels = vec![("pid".to_string(), p.pid.to_string()), ("comm".to_string(), p.comm.clone())];
                labels.extend(p.identity.labels().into_iter().map(|(k, v)| (k.to_string(), v)));
                (labels, 1i64)
            })
            .collect();
        let (pod_list_fetches, pod_list_skipped) = match &status.pod_lists {
            Some((by, skipped)) => {
                (by.iter().map(|(r, n)| (vec![("result".to_string(), r.to_string())], *n as f64)).collect(), Some(*skipped as f64))
            }
            None => (vec![], None),
        };
        let exposition = Exposition {
            thread_seconds,
            gil_seconds,
            gil_holds,
            gil_function_holds,
            runqueue_seconds,
            futex_seconds,
            futex_word_seconds,
            futex_word_waiters,
            woken_by_process,
            each_other_ratio,
            cgroup_throttled,
            cgroup_throttled_periods,
            cgroup_periods,
            cgroup_quota,
            cpu_limit,
            wait_ratio,
            process_syscalls,
            app_age,
            thread_stretches,
            age_scrape_errors,
            age_errors,
            age_client_rejected,
            watched_processes: procs.iter().filter(|p| p.alive).count() as i64,
            watched_threads: live_threads as i64,
            lost,
            attached,
            kernel_features,
            map_entries,
            http_requests,
            http_dropped,
            web_config_reloads,
            profile_pushes,
            process_info,
            pod_list_fetches,
            pod_list_skipped,
        };
        exposition.encode()
    }
}

/// `pid`, `comm` (if asked), `thread`, then `extra`, then `tid` when TID labels are on.
fn series_labels(p: &ProcessInfo, k: &SeriesKey, comm: bool, extra: &[(&str, &str)]) -> Labels {
    let mut labels = vec![("pid".to_string(), p.pid.to_string())];
    if comm {
        labels.push(("comm".to_string(), p.comm.clone()));
    }
    labels.push(("thread".to_string(), k.thread.to_string()));
    labels.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    if let Some(tid) = k.tid {
        labels.push(("tid".to_string(), tid.to_string()));
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::loss::{Probe, Reason};

    fn sample(tid: u32, comm: &str, start: u64, running: u64, exited: bool) -> ThreadSample {
        let mut t = Times::default();
        t.0[State::Running.index()] = running;
        let base = crate::model::partition::test_sample(tid, t, start + running);
        ThreadSample { host_tid: tid + 1000, pid: 10, comm: comm.into(), start_ns: start, exited, ..base }
    }

    fn value(text: &str, thread: &str, state: &str) -> Option<f64> {
        text.lines()
            .find(|l| {
                l.starts_with("waitmeter_thread_seconds_total{")
                    && l.contains(&format!("thread=\"{thread}\""))
                    && l.contains(&format!("state=\"{state}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    #[test]
    fn same_named_threads_sum_and_exits_stay_counted() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let status = AgentStatus {
            attached: vec!["sched_switch".into()],
            expected: vec!["sched_switch", "sched_wakeup"],
            variant: "tp_btf",
            kernel_features: vec![("bpf_loop", false), ("task_storage", true)],
            lost: vec![Lost::new(Probe::Sched, Reason::ThreadMapFull, 3)],
            maps: vec![("sched", "threads", 12)],
            http_codes: vec![(200, 7), (401, 2)],
            http_drops: vec![("head_timeout", 64), ("evicted", 0)],
            web_reloads: vec![("ok", 1), ("refused_weaker", 2)],
            pushes: vec![],
            syscalls: vec![(1, "clock_gettime".into(), 42), (1, "other".into(), 7)],
            pod_lists: Some((vec![("ok", 2), ("forbidden", 1)], 3)),
        };
        let id = "a".repeat(64);
        let placement = crate::identity::container::from_proc_cgroup(&format!("0::/system.slice/docker-{id}.scope\n"));
        let procs = [
            ProcessInfo { identity: crate::identity::Identity { placement, names: None }, ..procs[0].clone() },
            ProcessInfo { id: 2, pid: 11, comm: "gone".into(), alive: false, cpu_limit_cores: 1.0, identity: Default::default() },
        ];
        let mut e = Exporter::new(1, false);
        let mut snap = Snapshot::default();
        snap.live.insert(
            1,
            vec![
                sample(1, "worker", 0, 2_000_000_000, false),
                sample(2, "worker", 0, 1_000_000_000, false),
                sample(3, "io\"er", 0, 500_000_000, false),
            ],
        );
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &status);
        assert_eq!(value(&text, "worker", "running"), Some(3.0), "{text}");
        // beyond the bound of 1 distinct name per process: "other"
        assert_eq!(value(&text, "other", "running"), Some(0.5), "{text}");
        assert!(text.contains("waitmeter_bpf_events_lost_total{probe=\"sched\",reason=\"thread_map_full\"} 3"), "{text}");
        assert!(text.contains("waitmeter_probe_attached{probe=\"sched_wakeup\",variant=\"tp_btf\"} 0"), "{text}");
        assert!(text.contains("waitmeter_build_info{version="), "{text}");
        assert!(text.contains("waitmeter_kernel_feature{feature=\"bpf_loop\"} 0"), "{text}");
        assert!(text.contains("waitmeter_kernel_feature{feature=\"task_storage\"} 1"), "{text}");
        assert!(text.contains("waitmeter_bpf_map_entries{probe=\"sched\",map=\"threads\"} 12"), "{text}");
        assert!(text.contains("waitmeter_http_requests_total{code=\"401\"} 2"), "{text}");
        assert!(text.contains("waitmeter_http_connections_dropped_total{reason=\"head_timeout\"} 64"), "{text}");
        assert!(text.contains("waitmeter_web_config_reloads_total{result=\"refused_weaker\"} 2"), "{text}");
        assert!(text.contains("# TYPE waitmeter_thread_seconds counter"), "{text}");
        assert!(text.contains("waitmeter_process_syscalls_total{pid=\"10\",comm=\"svc\",syscall=\"clock_gettime\"} 42"), "{text}");
        assert!(text.contains("waitmeter_process_syscalls_total{pid=\"10\",comm=\"svc\",syscall=\"other\"} 7"), "{text}");
        // the info series of the live process, its empty labels left out; none of the exited one
        let info = format!("waitmeter_process_info{{pid=\"10\",comm=\"svc\",cgroup=\"/system.slice/docker-{id}.scope\",runtime=\"docker\",container_id=\"{id}\"}} 1");
        assert!(text.contains(&info), "{text}");
        assert!(!text.contains("waitmeter_process_info{pid=\"11\""), "{text}");
        assert!(text.contains("waitmeter_pod_list_fetches_total{result=\"forbidden\"} 1"), "{text}");
        assert!(text.contains("waitmeter_pod_list_skipped_total 3"), "{text}");

        // thread 2 exits: its time stays in the "worker" series
        let mut exits = BTreeMap::new();
        exits.insert(1, vec![sample(2, "worker", 0, 1_200_000_000, true)]);
        e.fold_exits(&exits);
        snap.live.insert(1, vec![sample(1, "worker", 0, 2_500_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &status);
        assert_eq!(value(&text, "worker", "running"), Some(3.7), "{text}");
        e.forget(&[1]);
        let text = e.render(&[], &[], &AgeExport::default(), &Snapshot::default(), &status);
        assert_eq!(value(&text, "worker", "running"), None);
    }

    /// Every `waitmeter_thread_seconds_total` series of the exposition: (thread, state) -> value.
    fn series(text: &str) -> BTreeMap<(String, String), f64> {
        text.lines()
            .filter(|l| l.starts_with("waitmeter_thread_seconds_total{"))
            .filter_map(|l| {
                let label = |n: &str| Some(l.split(&format!("{n}=\"")).nth(1)?.split('"').next()?.to_string());
                Some(((label("thread")?, label("state")?), l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn labels_go_to_the_busiest_threads_and_every_counter_only_grows() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "java".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let s = 1_000_000_000u64;
        let mut e = Exporter::new(20, false);
        // 40 idle JVM threads started first take the 20 labels; then the busy processor and
        // five same-named session threads, one of them far busier than the rest
        let at = |t: u64| -> Vec<ThreadSample> {
            let mut v: Vec<ThreadSample> = (0..40).map(|i| sample(i + 1, &format!("GC Thread#{i}"), 0, t / 1000, false)).collect();
            v.push(sample(100, "QFJ Message Pro", s, t.saturating_sub(s) * 97 / 100, false));
            v.extend((0..5).map(|i| {
                sample(200 + i, "session", s, if i == 2 { t.saturating_sub(s) * 3 / 4 } else { t.saturating_sub(s) / 50 }, false)
            }));
            v
        };
        let mut last: BTreeMap<(String, String), f64> = BTreeMap::new();
        let mut before_last = BTreeMap::new();
        let mut first_own = None;
        for step in 1..=6u64 {
            let mut snap = Snapshot::default();
            let mut threads = at(step * s);
            for t in threads.iter_mut() {
                t.at_ns = step * s;
            }
            snap.live.insert(1, threads);
            e.label_threads(&snap);
            e.rebalance(step * s, &snap);
            let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
            let now = series(&text);
            for (k, v) in &last {
                assert!(now.get(k).copied().unwrap_or(0.0) >= *v, "{k:?} went down from {v} at step {step}:\n{text}");
            }
            if first_own.is_none() && now.contains_key(&("QFJ Message Pro".to_string(), "running".to_string())) {
                first_own = Some(step);
            }
            before_last = std::mem::replace(&mut last, now);
        }
        // the busy thread has its own series from the first look after it started (2 s in)
        assert!(first_own.is_some_and(|s| s <= 3), "{first_own:?}");
        // the busiest session thread apart; the other four still share "session" (in the last second)
        let grew = |thread: &str| {
            let k = (thread.to_string(), "running".to_string());
            last.get(&k).copied().unwrap_or(0.0) - before_last.get(&k).copied().unwrap_or(0.0)
        };
        assert!((grew("session#busiest") - 0.75).abs() < 1e-6 && (grew("session") - 0.08).abs() < 1e-6, "{last:?}");
        assert!((grew("QFJ Message Pro") - 0.97).abs() < 1e-6 && grew("other") < 0.05, "{last:?}");
        // nothing is lost: the series add up to the threads' time
        let total: f64 = last.iter().filter(|((_, st), _)| st == "running").map(|(_, v)| v).sum();
        let truth: f64 = at(6 * s).iter().map(|t| t.times.get(State::Running) as f64 / 1e9).sum();
        assert!((total - truth).abs() < 1e-6, "{total} vs {truth}");
        // the series of names that lost their label stand still for a minute, then go: at
        // most 20 own labels and "other" are left
        let mut snap = Snapshot::default();
        snap.live.insert(1, at(6 * s).into_iter().map(|t| ThreadSample { at_ns: 6 * s, ..t }).collect());
        e.window(6 * s + WINDOW_SPAN_NS, &snap);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        let now = series(&text);
        let labels: HashSet<&String> = now.keys().map(|(t, _)| t).collect();
        assert!(labels.len() <= 21 && labels.contains(&"other".to_string()), "{labels:?}");
        assert!(labels.contains(&"QFJ Message Pro".to_string()) && labels.contains(&"session#busiest".to_string()), "{labels:?}");
    }

    #[test]
    fn maps_return_to_their_idle_size_after_thread_churn() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let mut e = Exporter::new(20, false);
        let steady = |at: u64| vec![sample(1, "main", 0, at, false), sample(2, "holder", 0, at, false)];
        let mut snap = Snapshot::default();
        snap.live.insert(1, steady(1));
        e.window(0, &snap);
        e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        e.rebalance(0, &snap);
        let idle = e.sizes();
        // short-lived threads, TIDs reused every 100, each waiting on a futex word of its own
        let mut churn = |e: &mut Exporter, from: u64, to: u64| {
            for i in from..to {
                let tid = 100 + (i % 100) as u32;
                let mut t = sample(tid, "worker", i * 10, 1_000_000, false);
                t.gil_by_holder.insert(2, 1_000);
                t.futex.push(crate::model::blame::FutexWait { addr: 0x10_0000 + i * 64, waker: 1, ns: 2_000 });
                snap.live.insert(1, [steady(i + 2), vec![t.clone()]].concat());
                e.rebalance(i * 1_000_000_000, &snap);
                e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
                if i % 10 == 0 {
                    e.window(i * 1_000_000_000, &snap);
                }
                t.exited = true;
                e.fold_exits(&BTreeMap::from([(1, vec![t])]));
            }
            snap.live.insert(1, steady(to + 2));
            // as `run` samples: the exits folded, then the stretches read (none in the kernel here)
            e.note_stretches(&snap, vec![]);
            e.window(to * 2_000_000_000, &snap);
            e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
            e.sizes()
        };
        let after = churn(&mut e, 0, 5_000);
        let after_twice = churn(&mut e, 5_000, 10_000);
        // what depends on live threads is back to idle; the rest is bounded, not growing with churn
        assert_eq!(after[..2], idle[..2]);
        assert_eq!(after[4..], idle[4..]);
        assert_eq!(after, after_twice);
        assert!(after[3].1 <= super::super::futex_words::MAX_FOLDED_WORDS + 10, "{after:?}");
        // one label remembered per thread name (main, holder, worker), not per thread
        assert!(e.name_labels.values().map(|m| m.len()).sum::<usize>() <= 3, "{:?}", e.name_labels);
    }

    #[test]
    fn gil_holds_by_function_are_bounded_histograms() {
        use crate::model::stacks::{Frame, Key, Role, Stack};
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let mut e = Exporter::new(20, false);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![sample(1, "ingest", 0, 1, false), sample(2, "processor", 0, 1, false)]);
        e.label_threads(&snap);
        let mut w = WaitStacks::default();
        // 12 functions of processor's, each with two holds of 64-128 ms, a third of 300 ms for f0
        for i in 0..12 {
            let stack: Stack = vec![Frame::python(format!("f{i}"), "/srv/app.py".into(), 10 + i)].into();
            let mut l = Lengths { waits: 2, sum_ns: 140_000_000, max_ns: 70_000_000, ..Default::default() };
            l.buckets[7] = 2;
            if i == 0 {
                l.waits += 1;
                l.sum_ns += 300_000_000;
                l.max_ns = 300_000_000;
                l.buckets[9] = 1;
            }
            w.add_waits(Key { victim: 1, blamed: 2, state: State::GilWait, role: Role::Holder, stack }, 1_000, &l);
        }
        e.add_gil_holds(1, &w);
        e.add_gil_holds(1, &w);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        let line = |name: &str, function: &str, le: Option<&str>| -> f64 {
            let le = le.map(|l| format!("le=\"{l}\"")).unwrap_or_default();
            text.lines()
                .find(|l| {
                    l.starts_with(&format!("{name}{{"))
                        && l.contains(&format!("function=\"{function}\""))
                        && l.contains("thread=\"processor\"")
                        && l.contains(&le)
                })
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} {function} {le} in\n{text}"))
        };
        let h = "waitmeter_gil_function_hold_seconds";
        // cumulative buckets, seconds; counted twice
        assert_eq!(line(&format!("{h}_bucket"), "f0", Some("0.064")), 0.0);
        assert_eq!(line(&format!("{h}_bucket"), "f0", Some("0.128")), 4.0);
        assert_eq!(line(&format!("{h}_bucket"), "f0", Some("0.256")), 4.0);
        assert_eq!(line(&format!("{h}_bucket"), "f0", Some("+Inf")), 6.0);
        assert_eq!(line(&format!("{h}_count"), "f0", None), 6.0);
        assert!((line(&format!("{h}_sum"), "f0", None) - 0.88).abs() < 1e-9);
        // ten functions keep their names, two share "other"
        let functions: HashSet<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{h}_count{{")))
            .filter_map(|l| l.split("function=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(functions.len(), MAX_FUNCTION_LABELS + 1, "{functions:?}");
        assert_eq!(line(&format!("{h}_count"), "other", None), 8.0);
        e.forget(&[1]);
        let text = e.render(&procs, &[], &AgeExport::default(), &Snapshot::default(), &AgentStatus::default());
        assert!(!text.contains(&format!("{h}_count{{")), "{text}");
    }

    #[test]
    fn gil_wait_is_labelled_with_the_holder_name() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let mut e = Exporter::new(20, false);
        let mut victim = sample(1, "ingest", 0, 100_000_000, false);
        victim.gil_by_holder.insert(2, 900_000_000);
        victim.gil_by_holder.insert(0, 50_000_000);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![victim, sample(2, "processor", 0, 1_000_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert!(text.contains("waitmeter_gil_wait_seconds_total{pid=\"10\",thread=\"ingest\",holder=\"processor\"} 0.9"), "{text}");
        assert!(text.contains("waitmeter_gil_wait_seconds_total{pid=\"10\",thread=\"ingest\",holder=\"unknown\"} 0.05"), "{text}");
    }

    #[test]
    fn runqueue_wait_is_labelled_with_the_preemptor() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let mut e = Exporter::new(2, false);
        let mut victim = sample(1, "ingest", 0, 100_000_000, false);
        victim.runqueue_by.insert(Preemptor::Thread(2), 300_000_000);
        victim.runqueue_by.insert(Preemptor::Idle, 1_000_000);
        victim.runqueue_by.insert(Preemptor::Process { pid: 99, comm: "hog\n".into() }, 500_000_000);
        victim.runqueue_by.insert(Preemptor::Process { pid: 98, comm: "a".into() }, 1_000_000);
        victim.runqueue_by.insert(Preemptor::Process { pid: 97, comm: "b".into() }, 2_000_000);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![victim, sample(2, "spin", 0, 1_000_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        for line in [
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"spin\"} 0.3",
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"idle\"} 0.001",
            // two preempting processes keep their names (the bound is 2), the third is "other"
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"process:a\"} 0.001",
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"process:b\"} 0.002",
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"other\"} 0.5",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
    }

    /// `waitmeter_woken_by_process_seconds_total` of pid 10: (state, waker_pid, waker_comm) -> value.
    fn woken(text: &str) -> BTreeMap<(String, String, String), f64> {
        text.lines()
            .filter(|l| l.starts_with("waitmeter_woken_by_process_seconds_total{pid=\"10\""))
            .filter_map(|l| {
                let label = |n: &str| Some(l.split(&format!("{n}=\"")).nth(1)?.split('"').next()?.to_string());
                Some(((label("state")?, label("waker_pid")?, label("waker_comm")?), l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn waits_another_process_ended_are_summed_by_that_process_bounded_and_only_grow() {
        let procs =
            [ProcessInfo { id: 1, pid: 10, comm: "postgres".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let ms = 1_000_000u64;
        let by = |pid: u32, comm: &str| Waker::Process { pid, comm: comm.into() };
        let mut e = Exporter::new(1, false);
        // two threads (one of them past the thread-label bound): the process' sum, whatever their labels
        let mut a = sample(1, "backend", 0, 100 * ms, false);
        a.woken_by.insert((State::IoWait, by(20, "postgres")), 300 * ms);
        a.woken_by.insert((State::FutexWait, by(20, "postgres")), 50 * ms);
        // a thread of its own, an interrupt, a softirq: no other process woke these
        a.woken_by.insert((State::FutexWait, Waker::Thread(2)), 900 * ms);
        a.woken_by.insert((State::Sleep, Waker::Interrupt), 900 * ms);
        a.woken_by.insert((State::IoWait, Waker::Softirq), 900 * ms);
        let mut b = sample(2, "bgworker", 0, 100 * ms, false);
        b.woken_by.insert((State::IoWait, by(20, "postgres")), 100 * ms);
        // the probe's merged wakers, and a PID of the same number that is another program now
        b.woken_by.insert((State::IoWait, Waker::merged()), 7 * ms);
        b.woken_by.insert((State::IoWait, by(20, "cron")), 2 * ms);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![a.clone(), b.clone()]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        let key = |state: &str, pid: &str, comm: &str| (state.to_string(), pid.to_string(), comm.to_string());
        let first = woken(&text);
        assert_eq!(
            first,
            BTreeMap::from([
                (key("io_wait", "20", "postgres"), 0.4),
                (key("futex_wait", "20", "postgres"), 0.05),
                (key("io_wait", "20", "cron"), 0.002),
                (key("io_wait", "other", "other"), 0.007),
            ]),
            "{text}"
        );
        assert!(text.contains("# TYPE waitmeter_woken_by_process_seconds counter"), "{text}");

        // more wakers than MAX_WAKER_PROCESSES: the first ones keep their labels, the rest are
        // "other"; thread b exits with a little more, and its seconds stay counted
        for i in 0..MAX_WAKER_PROCESSES as u32 {
            a.woken_by.insert((State::IoWait, by(100 + i, "peer")), ms);
        }
        b.woken_by.insert((State::IoWait, by(20, "postgres")), 150 * ms);
        b.exited = true;
        e.fold_exits(&BTreeMap::from([(1, vec![b])]));
        snap.live.insert(1, vec![a]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        let now = woken(&text);
        let own = now.keys().filter(|k| k.1 != "other").map(|k| (k.1.clone(), k.2.clone())).collect::<HashSet<_>>();
        assert_eq!(own.len(), MAX_WAKER_PROCESSES, "{now:?}");
        assert!((now[&key("io_wait", "20", "postgres")] - 0.45).abs() < 1e-9, "{now:?}");
        let others = now[&key("io_wait", "other", "other")];
        // two of the ten new ones past the bound of ten, beside the merged
        assert!((others - 0.009).abs() < 1e-9, "{now:?}");
        for (k, v) in &first {
            assert!(now[k] >= *v, "{k:?} went down: {first:?} then {now:?}");
        }
        e.forget(&[1]);
        let text = e.render(&[], &[], &AgeExport::default(), &Snapshot::default(), &AgentStatus::default());
        assert!(woken(&text).is_empty() && e.waker_processes.is_empty(), "{text}");
    }

    #[test]
    fn processes_that_wake_one_another_are_judged_over_the_agents_window() {
        let s = 1_000_000_000u64;
        let info = |id: u64, pid: u32| ProcessInfo {
            id,
            pid,
            comm: "postgres".into(),
            alive: true,
            cpu_limit_cores: 2.0,
            identity: Default::default(),
        };
        // three backends (21-23) that wake one another; a server (30) and its two clients (31, 32)
        let procs = [info(1, 21), info(2, 22), info(3, 23), info(4, 30), info(5, 31), info(6, 32)];
        let by = |pid: u32| Waker::Process { pid, comm: "postgres".into() };
        // each process one thread that existed `at` s, woken by each of `wakers` for `share` of it
        let snapshot = |at: u64, share: f64| {
            let mut snap = Snapshot::default();
            let shape: [(u64, u32, &[u32]); 6] =
                [(1, 21, &[22, 23]), (2, 22, &[21, 23]), (3, 23, &[21, 22]), (4, 30, &[31, 32]), (5, 31, &[30]), (6, 32, &[30])];
            for (id, pid, wakers) in shape {
                let mut t = sample(pid, "backend", 0, at * s, false);
                t.pid = pid;
                for w in wakers {
                    t.woken_by.insert((State::IoWait, by(*w)), (share * (at * s) as f64) as u64 / wakers.len() as u64);
                }
                snap.live.insert(id, vec![t]);
            }
            snap
        };
        let gauge = |text: &str| -> BTreeMap<String, f64> {
            text.lines()
                .filter_map(|l| l.strip_prefix("waitmeter_process_wait_on_each_other_ratio{pid=\""))
                .filter_map(|l| Some((l.split('"').next()?.to_string(), l.rsplit(' ').next()?.parse().ok()?)))
                .collect()
        };
        let mut e = Exporter::new(10, false);
        // the first 100 s: 10% of their time (below the share); the next 60 s (the window): 70%
        e.window(0, &snapshot(100, 0.1));
        let text = e.render(&procs, &[], &AgeExport::default(), &snapshot(100, 0.1), &AgentStatus::default());
        assert!(gauge(&text).is_empty(), "{text}");
        let mut snap = snapshot(100, 0.1);
        for threads in snap.live.values_mut() {
            let t = &mut threads[0];
            t.times = sample(t.pid, "backend", 0, 160 * s, false).times;
            for ns in t.woken_by.values_mut() {
                *ns += 42 * s / 2;
            }
        }
        e.window(WINDOW_SPAN_NS, &snap);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        // in the window: 42 s of 60 woken by the others, for the backends only (the server's clients
        // never wake one another)
        let g = gauge(&text);
        assert_eq!(g.keys().cloned().collect::<Vec<_>>(), ["21", "22", "23"], "{text}");
        assert!(g.values().all(|v| (v - 0.7).abs() < 1e-6), "{g:?}");
        assert!(text.contains("# TYPE waitmeter_process_wait_on_each_other_ratio gauge"), "{text}");
    }

    #[test]
    fn tid_labels_are_opt_in() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let mut e = Exporter::new(20, true);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![sample(1, "w", 0, 1_000_000_000, false), sample(2, "w", 0, 1_000_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert!(text.contains("tid=\"1\"") && text.contains("tid=\"2\""), "{text}");
    }

    #[test]
    fn age_errors_by_source_and_by_reason() {
        let errors = crate::model::age::AgeErrors {
            endpoint: 3,
            client: 1,
            scrape: vec![("connect", 0), ("timeout", 3), ("bad_line", 7)],
            rejected: vec![("malformed", 1), ("wrong_pid", 4)],
        };
        let ages = AgeExport { process: Some((10, 2.5)), threads: vec![], errors: Some(errors) };
        let text = Exporter::new(20, false).render(&[], &[], &ages, &Snapshot::default(), &AgentStatus::default());
        for line in [
            "waitmeter_age_scrape_errors_total{reason=\"connect\"} 0.0",
            "waitmeter_age_scrape_errors_total{reason=\"timeout\"} 3.0",
            "waitmeter_age_scrape_errors_total{reason=\"bad_line\"} 7.0",
            "waitmeter_age_source_errors_total{source=\"endpoint\"} 3.0",
            "waitmeter_age_source_errors_total{source=\"client\"} 1.0",
            "waitmeter_age_client_rejected_total{reason=\"malformed\"} 1.0",
            "waitmeter_age_client_rejected_total{reason=\"wrong_pid\"} 4.0",
            "waitmeter_app_age_seconds{pid=\"10\"} 2.5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // no age source: no age series
        let text = Exporter::new(20, false).render(&[], &[], &AgeExport::default(), &Snapshot::default(), &AgentStatus::default());
        assert!(!text.contains("waitmeter_age_scrape_errors_total{"), "{text}");
        assert!(!text.contains("waitmeter_age_client_rejected_total{"), "{text}");
    }

    /// A thread's stretches away from one wait: `lens_ms` each, after `wait_ns` blocked in it.
    fn stretched(lens_ms: &[f64], wait_ns: u64) -> Hist {
        let mut h = Hist { wait_ns, ..Hist::default() };
        for l in lens_ms {
            let ns = (l * 1e6) as u64;
            h.count += 1;
            h.ns += ns;
            h.max_ns = h.max_ns.max(ns);
            h.buckets[stretches::bucket(ns)] += 1;
        }
        h
    }

    const EPOLL: u32 = 232;
    const FUTEX: u32 = 202;

    /// Every `waitmeter_thread_stretch_seconds` sample: (suffix, thread, wait, le) -> value.
    fn stretch_series(text: &str) -> BTreeMap<(String, String, String, String), f64> {
        text.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("waitmeter_thread_stretch_seconds_")?;
                let (suffix, rest) = rest.split_once('{')?;
                let label = |n: &str| rest.split(&format!("{n}=\"")).nth(1).and_then(|v| v.split('"').next()).unwrap_or("").to_string();
                Some(((suffix.to_string(), label("thread"), label("wait"), label("le")), l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    fn stretch(text: &str, what: &str, thread: &str, le: &str) -> Option<f64> {
        stretch_series(text).into_iter().find(|((s, t, _, l), _)| s == what && t == thread && l == le).map(|(_, v)| v)
    }

    #[test]
    fn a_thread_has_a_stretch_histogram_at_its_home_wait_only() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let mut e = Exporter::new(20, false);
        let mut snap = Snapshot::default();
        // the loop (1001) blocks mostly in epoll_wait; a lock of its own (futex) now and then.
        // "pool" (1002) waits as long on three waits: no home, no series
        snap.live.insert(1, vec![sample(1, "loop", 0, 1, false), sample(2, "pool", 0, 1, false)]);
        let home = stretched(&[0.5, 0.9, 1.5, 3.0, 150.0, 200.0, 300.0], 9_000_000_000);
        let reading = vec![
            ((1001, 0, WaitKey::new(EPOLL, 0)), home.clone()),
            ((1001, 0, WaitKey::new(FUTEX, 0x7f00_1000)), stretched(&[400.0], 100_000_000)),
            ((1002, 0, WaitKey::new(FUTEX, 0x1000)), stretched(&[1.0], 1_000_000_000)),
            ((1002, 0, WaitKey::new(FUTEX, 0x2000)), stretched(&[1.0], 1_000_000_000)),
            ((1002, 0, WaitKey::new(0, 0)), stretched(&[1.0], 1_000_000_000)),
        ];
        assert!(e.note_stretches(&snap, reading.clone()).is_empty(), "entries in use stay");
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert!(text.contains("# TYPE waitmeter_thread_stretch_seconds histogram"), "{text}");
        let le = |ms: &str| stretch(&text, "bucket", "loop", ms);
        assert_eq!(le("0.001"), Some(2.0), "{text}");
        assert_eq!(le("0.002"), Some(3.0));
        assert_eq!(le("0.004"), Some(4.0));
        assert_eq!(le("0.128"), Some(4.0));
        assert_eq!(le("0.256"), Some(6.0));
        assert_eq!(le("0.512"), Some(7.0));
        assert_eq!(le("16.384"), Some(7.0));
        assert_eq!(le("+Inf"), Some(7.0));
        assert_eq!(stretch(&text, "count", "loop", ""), Some(7.0));
        assert!((stretch(&text, "sum", "loop", "").unwrap() - 0.6559).abs() < 1e-9, "{text}");
        // its lock's 400 ms stretch is not at home; pool has no home
        let series = stretch_series(&text);
        assert!(series.keys().all(|(_, t, w, _)| t == "loop" && w == "epoll_wait"), "{series:?}");
        assert_eq!(series.keys().filter(|(s, ..)| s == "bucket").count(), 16, "15 bounds and +Inf");
        assert!(
            text.contains("waitmeter_thread_stretch_seconds_count{pid=\"10\",comm=\"svc\",thread=\"loop\",wait=\"epoll_wait\"} 7"),
            "{text}"
        );
        // a second later, and then as long as STRETCH_QUIET_NS, nothing changed: the entries of
        // waits other than a home go (the loop's lock, all of pool's), the home's stays (and
        // counts nothing twice)
        snap.at_ns += 1_000_000_000;
        assert!(e.note_stretches(&snap, reading.clone()).is_empty());
        snap.at_ns += STRETCH_QUIET_NS;
        let mut forget = e.note_stretches(&snap, reading);
        forget.sort();
        let lock = WaitKey::new(FUTEX, 0x7f00_1000);
        assert_eq!(
            forget,
            [
                (1001, 0, lock),
                (1002, 0, WaitKey::new(0, 0)),
                (1002, 0, WaitKey::new(FUTEX, 0x1000)),
                (1002, 0, WaitKey::new(FUTEX, 0x2000))
            ]
        );
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert_eq!(stretch(&text, "count", "loop", ""), Some(7.0));
    }

    #[test]
    fn stretches_of_exited_threads_stay_counted_and_their_entries_go() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let mut e = Exporter::new(20, false);
        let q = WaitKey::new(FUTEX, 0x5000);
        let worker = |tid: u32, start: u64| sample(tid, "worker", start, 1, false);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![worker(1, 0), worker(2, 0)]);
        let mut one = stretched(&[10.0, 20.0], 1_000_000_000);
        let two = stretched(&[300.0], 1_000_000_000);
        e.note_stretches(&snap, vec![((1001, 0, q), one.clone()), ((1002, 0, q), two.clone())]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert_eq!(stretch(&text, "count", "worker", ""), Some(3.0), "{text}");
        // worker 1 closes two more stretches and exits: its final reading is counted, then its
        // entry deleted; worker 2's stays
        one.add(&stretched(&[30.0, 40.0], 1_000_000_000));
        let mut gone = worker(1, 0);
        gone.exited = true;
        snap.exited.insert(1, vec![gone]);
        snap.live.insert(1, vec![worker(2, 0)]);
        e.fold_exits(&snap.exited);
        let forget = e.note_stretches(&snap, vec![((1001, 0, q), one.clone()), ((1002, 0, q), two.clone())]);
        assert_eq!(forget, [(1001, 0, q)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert_eq!(stretch(&text, "count", "worker", ""), Some(5.0), "{text}");
        // deleted: no longer read, still counted; a new worker reusing TID 1001 counts from zero
        snap.exited.clear();
        snap.live.insert(1, vec![worker(2, 0), worker(1, 7)]);
        let forget = e.note_stretches(&snap, vec![((1002, 0, q), two.clone()), ((1001, 7, q), stretched(&[5.0], 1_000_000_000))]);
        assert!(forget.is_empty(), "{forget:?}");
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert_eq!(stretch(&text, "count", "worker", ""), Some(6.0), "{text}");
        assert_eq!(stretch(&text, "bucket", "worker", "0.256"), Some(5.0), "{text}");
        // a thread whose exit record was lost: live before, gone now, its reading final
        snap.live.insert(1, vec![worker(2, 0)]);
        let forget = e.note_stretches(&snap, vec![((1002, 0, q), two.clone()), ((1001, 7, q), stretched(&[5.0, 6.0], 1_000_000_000))]);
        assert_eq!(forget, [(1001, 7, q)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert_eq!(stretch(&text, "count", "worker", ""), Some(7.0), "{text}");
        // entries of a thread never seen: kept one reading (it may have started after the
        // snapshot), deleted at the second, uncounted
        let stranger = ((4242, 3, q), stretched(&[1.0], 1_000_000_000));
        assert!(e.note_stretches(&snap, vec![((1002, 0, q), two.clone()), stranger.clone()]).is_empty());
        assert_eq!(e.note_stretches(&snap, vec![((1002, 0, q), two.clone()), stranger]), [(4242, 3, q)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert_eq!(stretch(&text, "count", "worker", ""), Some(7.0), "{text}");
        // the process is forgotten: its series go
        e.forget(&[1]);
        let text = e.render(&procs, &[], &AgeExport::default(), &Snapshot::default(), &AgentStatus::default());
        assert!(stretch_series(&text).is_empty(), "{text}");
        assert!(e.stretch_seen.is_empty() && e.stretch_exited.is_empty());
    }

    #[test]
    fn stretch_counters_only_grow_when_labels_fold_and_homes_move() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let s = 1_000_000_000u64;
        // one own label: "idle" takes it first, then "loop", once busy, takes it from it
        let mut e = Exporter::new(1, false);
        let epoll = WaitKey::new(EPOLL, 0);
        let lock = WaitKey::new(FUTEX, 0x9000);
        let mut last: BTreeMap<(String, String, String, String), f64> = BTreeMap::new();
        let mut lp = Hist::default();
        let mut other = Hist::default();
        let mut moved_home = false;
        for step in 1..=8u64 {
            let mut snap = Snapshot::default();
            let idle = ThreadSample { at_ns: step * s, ..sample(1, "idle", 0, step, false) };
            // the loop is busy from step 3: it has its label from then
            let busy = ThreadSample { at_ns: step * s, ..sample(2, "loop", 0, step.saturating_sub(2) * s * 9 / 10, false) };
            snap.live.insert(1, vec![idle, busy]);
            e.label_threads(&snap);
            e.rebalance(step * s, &snap);
            lp.add(&stretched(&[2.0, 3.0, 150.0], 2 * s));
            // from step 5 the loop blocks mostly on a lock: its home moves
            if step >= 5 {
                other.add(&stretched(&[1.0; 4], 10 * s));
            }
            let reading = vec![((1001, 0, epoll), stretched(&[1.0], s)), ((1002, 0, epoll), lp.clone()), ((1002, 0, lock), other.clone())];
            e.note_stretches(&snap, reading);
            let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
            let now = stretch_series(&text);
            for (k, v) in &last {
                assert!(now.get(k).copied().unwrap_or(0.0) >= *v, "{k:?} went down from {v} at step {step}:\n{text}");
            }
            moved_home |= now.keys().any(|(_, t, w, _)| t == "loop" && w == "futex");
            last = now;
        }
        assert!(moved_home, "{last:?}");
        // the loop's 3 stretches a step at epoll_wait: steps 1-2 under "other", 3-4 under its own
        // label; then its home is the lock (from step 5, counted from step 6: 4 a step). idle's
        // one stretch was counted under its own label before it lost it
        let count = |thread: &str, wait: &str| last.get(&("count".into(), thread.into(), wait.into(), String::new())).copied();
        assert_eq!(count("other", "epoll_wait"), Some(6.0), "{last:?}");
        assert_eq!(count("loop", "epoll_wait"), Some(6.0), "{last:?}");
        assert_eq!(count("loop", "futex"), Some(12.0), "{last:?}");
        assert_eq!(count("idle", "epoll_wait"), Some(1.0), "{last:?}");
    }

    #[test]
    fn the_stretch_bookkeeping_returns_to_idle_after_thread_churn() {
        let mut e = Exporter::new(20, false);
        let q = WaitKey::new(FUTEX, 0x5000);
        let steady = sample(1, "main", 0, 1, false);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![steady.clone()]);
        let main_reading = ((1001, 0, q), stretched(&[1.0], 1_000_000_000));
        e.note_stretches(&snap, vec![main_reading.clone()]);
        let idle = e.sizes();
        let mut in_kernel: BTreeMap<(u32, u32, WaitKey), Hist> = BTreeMap::from([main_reading.clone()]);
        for i in 0..2_000u64 {
            let tid = 100 + (i % 50) as u32;
            let mut t = sample(tid, "worker", i * 10, 1, false);
            in_kernel.insert((t.host_tid, t.start_ns as u32, q), stretched(&[2.0], 1_000_000_000));
            // main joins each worker: a futex word of its own (the worker's TID word), a new entry
            // each time beside its home's
            let joined = (1001, 0, WaitKey::new(FUTEX, 0x7000_0000 + (i % 700) * 64));
            in_kernel.entry(joined).or_default().add(&stretched(&[0.1], 1_000_000));
            snap.live.insert(1, vec![steady.clone(), t.clone()]);
            snap.at_ns = i * 100_000_000;
            for k in e.note_stretches(&snap, in_kernel.clone().into_iter().collect()) {
                in_kernel.remove(&k);
            }
            t.exited = true;
            e.fold_exits(&BTreeMap::from([(1, vec![t])]));
            snap.live.insert(1, vec![steady.clone()]);
            if i % 3 == 0 {
                for k in e.note_stretches(&snap, in_kernel.clone().into_iter().collect()) {
                    in_kernel.remove(&k);
                }
            }
        }
        // one reading STRETCH_QUIET_NS after the churn: the last joins' entries did not change
        let during = in_kernel.len();
        for _ in 0..2 {
            for k in e.note_stretches(&snap, in_kernel.clone().into_iter().collect()) {
                in_kernel.remove(&k);
            }
            snap.at_ns += STRETCH_QUIET_NS;
        }
        // (at most the joins of the last STRETCH_QUIET_NS, 20 a second, were in the kernel at the end)
        assert!(during <= 1 + 2 * 20 + 2, "{during}");
        assert_eq!(in_kernel.keys().collect::<Vec<_>>(), [&(1001, 0, q)], "only the live thread's home is left");
        // the stretch bookkeeping (the rest is pruned at windows and renders)
        assert_eq!(e.sizes()[8..], idle[8..]);
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0, identity: Default::default() }];
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert_eq!(stretch(&text, "count", "worker", ""), Some(2_000.0), "{text}");
        assert_eq!(stretch_series(&text).keys().filter(|(s, ..)| s == "count").count(), 2, "{text}");
    }
}
