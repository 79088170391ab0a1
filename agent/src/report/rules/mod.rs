//! The verdict's rules, one file per kind of finding. A file holds the evidence its finding
//! quotes (serialised as the JSON `findings` show it), its detection, the wall time it explains,
//! its rank, what it claims for the other findings (`Claim`) and its words (`Display`).
//!
//! The rules run in the order of `ORDER`, each seeing the findings before it (`Context`):
//! adding a kind of finding is a file here and a line in `ORDER`. The file has a struct of the
//! evidence (`#[derive(Clone, Debug, PartialEq, Serialize)]`: its fields are the JSON's, after
//! `"kind"`), `find(&Context) -> Vec<Box<dyn Claim>>` (or, for a thread's own line, `of` in
//! `PER_THREAD`), `impl Claim` (its `kind`, and of the other methods those whose defaults do not
//! fit) and `impl Display` (its line); its line in `ORDER` comes after the rules whose findings
//! it reads.
use std::any::Any;
use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::code::Code;
use super::evidence::{AgeFacts, CpuUse, ThreadTime};
use super::serial::Fields;
use super::{ProcessReport, ThreadRow};
use crate::model::stacks::WaitStacks;
use crate::model::state::State;

pub mod age_rising;
pub mod blocked;
pub mod burst;
pub mod clock_source;
pub mod clock_syscalls;
pub mod cpu_quota;
pub mod cpu_quota_throttling;
pub mod gil_contention;
pub mod gil_ping_pong;
pub mod gil_starvation;
pub mod gil_wait;
pub mod healthy;
pub mod idle_threads;
pub mod lock_convoy;
pub mod more;
pub mod oversubscribed;
pub mod rows;
pub mod run_queue;
pub mod saturated_thread;
pub mod stall;
pub mod unmeasured_gil;
pub mod waiting_on_each_other;
pub mod yielding;

/// A thread is reported when this share of its time was involuntary waiting.
pub const WAITING_SHARE: f64 = 0.20;
/// ... or this share was blocked on one kind of resource.
pub const BLOCKED_SHARE: f64 = 0.50;
/// ... and only threads that existed for at least this share of the window
/// (short-lived helpers' few milliseconds are noise, not findings).
pub const MIN_PRESENCE: f64 = 0.10;
/// Threads named in a line that sums up several (the idle, the yielding, the polling ones).
pub const IDLE_NAMED: usize = 4;

/// A rule: the findings it makes of the window, seeing those of the rules before it.
pub type Rule = fn(&Context) -> Vec<Box<dyn Claim>>;

/// A rule of one thread: its own line, if it has one.
pub type ThreadRule = fn(&ThreadRow, &Context) -> Option<Box<dyn Claim>>;

/// The rules in the order they run. A rule that asks about the findings before it comes after
/// the rules that make them; among findings ranked alike (`verdict::rank`), the earlier first.
pub const ORDER: &[Rule] = &[
    unmeasured_gil::find,
    // the convoys' waiters are not idle: before any rule that asks which threads are (`Context::idle`)
    lock_convoy::find,
    gil_starvation::find,
    cpu_quota_throttling::find,
    oversubscribed::find,
    waiting_on_each_other::find,
    // each thread's own line: the first of `PER_THREAD` that has one
    per_thread,
    // a serving thread kept from its home: after the GIL starvation, which says a starving
    // thread's stalls itself, and after the CPU's findings, which say a stall spent waiting
    // for a CPU (one finding per cause)
    stall::find,
    // after the GIL findings: the GIL holder they name is not a bottleneck of its own
    saturated_thread::find,
    // after every finding that may explain a bad age
    age_rising::find,
    yielding::find,
    gil_ping_pong::find,
    // the GIL waits no GIL line or stall says, summed: after every GIL finding and the stalls
    gil_contention::find,
    clock_syscalls::find,
    // after the clock syscalls: the clock source alone when no thread's line says it
    clock_source::find,
    // after every finding that names a thread's wait
    burst::find,
    // last: when the findings before are all quiet
    healthy::find,
];

/// A thread's own line: the first of these that has one for it (its worst involuntary wait,
/// else what it blocked on).
pub const PER_THREAD: &[ThreadRule] = &[gil_wait::of, run_queue::of, cpu_quota::of, blocked::of];

/// The threads' own lines (`PER_THREAD`), in the rows' order, of the threads present in the window.
fn per_thread(cx: &Context) -> Vec<Box<dyn Claim>> {
    cx.rows
        .iter()
        .filter(|r| r.times.total() > 0 && rows::present(r, cx.window_ns))
        .filter_map(|r| PER_THREAD.iter().find_map(|of| of(r, cx)))
        .collect()
}

/// What a rule sees: the window, the facts every rule reads, and the findings before it.
pub struct Context<'a> {
    pub report: &'a ProcessReport,
    pub rows: &'a [ThreadRow],
    pub window_ns: u64,
    /// the age as findings quote it (`rows::age_facts`), and whether it says something is wrong
    pub age: Option<AgeFacts>,
    pub bad_age: bool,
    pub cpu: CpuUse,
    /// the findings of the rules before, in the order they were found
    pub found: Vec<Box<dyn Claim>>,
    idle: OnceCell<BTreeSet<u32>>,
}

impl<'a> Context<'a> {
    pub fn new(report: &'a ProcessReport) -> Self {
        Context {
            report,
            rows: &report.threads,
            window_ns: report.duration_ns,
            age: rows::age_facts(report),
            bad_age: rows::age_bad(report),
            cpu: CpuUse { used_cores: report.cpu_used_cores(), limit_cores: report.cpu_limit_cores },
            found: vec![],
            idle: OnceCell::new(),
        }
    }

    /// Run the rules of `ORDER`: every finding, in the order found.
    pub fn run(mut self) -> Self {
        for rule in ORDER {
            let found = rule(&self);
            self.found.extend(found);
        }
        self
    }

    /// The threads that blocked for want of work (`idle_threads::idle`), decided once, from
    /// the findings before the first rule that asks.
    pub fn idle(&self) -> &BTreeSet<u32> {
        self.idle.get_or_init(|| idle_threads::idle(self))
    }

    /// The findings before of kind `T`.
    pub fn found<T: Claim>(&self) -> impl Iterator<Item = &T> {
        self.found.iter().filter_map(|c| c.get::<T>())
    }
}

/// A line that a finding says already: a thread's own line (`Claim::line_of`) of `tid` (None:
/// of any thread) in one of `states`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Repeat {
    pub tid: Option<u32>,
    pub states: &'static [State],
}

impl Repeat {
    /// `line` (a thread and a state) is this repeat's.
    pub fn covers(&self, (tid, state): (u32, State)) -> bool {
        self.tid.is_none_or(|t| t == tid) && self.states.contains(&state)
    }
}

/// A finding's kind with its evidence: what a rule found. Its words are its `Display`; what it
/// is to the other findings (the verdict's rank, the threads it names, the lines it repeats)
/// are these methods, whose defaults suit a finding that names no thread.
pub trait Claim: Evidence + fmt::Display + fmt::Debug {
    /// The JSON `kind`: the finding's name in snake case.
    fn kind(&self) -> &'static str;
    /// The thread whose wait it is about, with its time in the state of that wait.
    fn victim(&self) -> Option<&ThreadTime> {
        None
    }
    /// The wall time it accounts for (`explains_s`): its victim's wait; nothing for what is
    /// not a wait.
    fn explains_ns(&self) -> u64 {
        self.victim().map_or(0, |v| v.ns)
    }
    /// The verdict's tier (`verdict::rank`): 0 the all-clear, 1 lost or busy time, 2 blocked
    /// threads and what is not a wait, 3 the lines that sum up others.
    fn tier(&self) -> u8 {
        1
    }
    /// Among findings that explain the same wall time, lower first: the process-wide headlines
    /// (0 to 5) before the per-thread lines and the other lines of their own (6).
    fn precedence(&self) -> u8 {
        6
    }
    /// It quotes the application's age in its own words (and JSON `age`); else the age is
    /// quoted beside it (`Finding::age`) when it is a problem.
    fn quotes_age(&self) -> bool {
        false
    }
    /// It is about lost or busy time (not the all-clear, the idle threads, the cap).
    fn is_problem(&self) -> bool {
        true
    }
    /// It is a limit of the CPU that explains a bad age (the age rules say nothing then).
    fn explains_age(&self) -> bool {
        false
    }
    /// It leaves the process healthy (blocked threads may be idle or contended; yielding
    /// ones are idle by choice).
    fn quiet(&self) -> bool {
        false
    }
    /// The thread it is about and the state of its wait (None: all its time): a burst of it
    /// is not said again.
    fn names(&self) -> Option<(u32, Option<State>)> {
        self.victim().map(|v| (v.thread.tid, Some(v.state)))
    }
    /// It is a thread's own line, of its victim: the thread, and the state it waited in (a
    /// headline about a victim says None).
    fn line_of(&self) -> Option<(u32, State)> {
        self.victim().map(|v| (v.thread.tid, v.state))
    }
    /// The threads' own lines it says already: left out of the shown verdict.
    fn repeats(&self) -> Vec<Repeat> {
        vec![]
    }
    /// The threads it says waited together (a convoy's waiters): none of them is idle.
    fn together(&self) -> &[u32] {
        &[]
    }
    /// The GIL holder it names: not a bottleneck of its own (`saturated_thread`).
    fn gil_holder(&self) -> Option<u32> {
        None
    }
    /// The threads it names as culprits (a GIL holder, a lock's releasers, a waker): their time
    /// off the CPU is said beside it (`Finding::culprits_off_cpu`).
    fn culprits(&self) -> Vec<u32> {
        vec![]
    }
    /// A thread blocked for want of work: summed up in one `idle_threads` line unless every
    /// finding is asked for.
    fn idle(&self) -> bool {
        false
    }
    /// The code on both sides of its wait (`code.rs`), when stacks were taken; `switch_ns`:
    /// the target's GIL switch interval.
    fn code(&self, _stacks: &WaitStacks, _switch_ns: u64) -> Option<Code> {
        None
    }
}

/// What every claim is by being serialisable, comparable and clonable: given to each once.
pub trait Evidence: Any {
    /// Its evidence as it serialises, in order.
    fn fields(&self) -> Fields;
    fn as_any(&self) -> &dyn Any;
    fn boxed(&self) -> Box<dyn Claim>;
    fn same(&self, other: &dyn Claim) -> bool;
}

impl<T: Claim + Serialize + Clone + PartialEq> Evidence for T {
    fn fields(&self) -> Fields {
        Fields::of(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn boxed(&self) -> Box<dyn Claim> {
        Box::new(self.clone())
    }

    fn same(&self, other: &dyn Claim) -> bool {
        other.get::<T>() == Some(self)
    }
}

impl dyn Claim {
    /// The claim as the finding it is, if it is a `T`.
    pub fn get<T: Claim>(&self) -> Option<&T> {
        self.as_any().downcast_ref()
    }

    pub fn is<T: Claim>(&self) -> bool {
        self.as_any().is::<T>()
    }
}

impl PartialEq for dyn Claim {
    fn eq(&self, other: &dyn Claim) -> bool {
        self.same(other)
    }
}

impl Clone for Box<dyn Claim> {
    fn clone(&self) -> Self {
        self.boxed()
    }
}
