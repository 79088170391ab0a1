//! The evidence findings quote: the threads they name, what the threads waited behind, their
//! time in a state, the age and the CPU used; and the words every finding's line is made of.
use std::fmt;

use serde::Serialize;

use super::serial::{is_zero_u32, ratio, rounded, seconds, state_name};
use crate::model::blame::{self, Preemptor};
use crate::model::partition::secs;
use crate::model::state::State;

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

/// A number of cores as the verdict says it: "2", "2.50".
pub fn cores(c: f64) -> String {
    if (c - c.round()).abs() < 1e-9 {
        format!("{c:.0}")
    } else {
        format!("{c:.2}")
    }
}

/// `n` a second of a window of `window_ns`, to a tenth (as the JSON gives a rate); none for an
/// empty window.
pub fn per_second(n: u64, window_ns: u64) -> Option<f64> {
    (window_ns > 0).then(|| (n as f64 / (window_ns as f64 / 1e9) * 10.0).round() / 10.0)
}

/// A count or a rate as people say it: "850", "12k", "1.3M".
pub fn human_rate(x: f64) -> String {
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
pub fn unresolved_part(share: f64) -> String {
    if share >= 0.005 {
        format!(", {:.0}% behind a holder not resolved (hand-offs too fast to follow)", 100.0 * share)
    } else {
        String::new()
    }
}

/// The state as the verdict says it.
pub fn what(state: State) -> &'static str {
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
            Some(name) if self.tid == blame::GONE => name.clone(),
            Some(name) if self.folded > 0 => format!("{}× {name}", self.folded),
            Some(name) => format!("{name} ({})", self.tid),
            None => unknown(self.tid),
        }
    }

    /// "processor (12)", or "a thread (12)".
    pub fn or_a_thread(&self) -> String {
        self.or(|tid| format!("a thread ({tid})"))
    }

    /// "processor (12)", or "thread 12".
    pub fn or_thread_tid(&self) -> String {
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
    pub fn long(&self) -> String {
        match self {
            Culprit::Thread(t) => t.or_a_thread(),
            other => other.short(),
        }
    }
}

impl ThreadTime {
    pub fn share(&self) -> f64 {
        self.ns as f64 / self.total_ns as f64
    }

    /// "ingest (11) spent 9.0 s of 10.0 s waiting for the Python GIL (90%)"
    pub fn spent(&self) -> String {
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
pub fn growth(age: &Option<AgeFacts>) -> String {
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
pub fn age_head(age: &Option<AgeFacts>) -> &'static str {
    if age.as_ref().is_some_and(|a| !a.rising) {
        "age above its objective"
    } else {
        "age rising"
    }
}

/// The age as a headline quotes it; a thread's own age (waitmeter_client) when the process has none.
pub fn age_words(age: &Option<AgeFacts>) -> String {
    match age {
        Some(_) => growth(age).trim_start_matches("; ").to_string(),
        None => "a thread's message age rose".to_string(),
    }
}

/// "; the longest wait: thread worker (1), 9.0 s blocked on I/O", or nothing.
pub fn longest(w: &Option<ThreadTime>) -> String {
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

/// Names and, past the first few, how many more: "a (1), b (2), 3 more".
pub fn and_more(mut names: Vec<String>, count: usize) -> String {
    if count > names.len() {
        names.push(format!("{} more", count - names.len()));
    }
    names.join(", ")
}

/// The line of a waiting thread: "{kind}: thread … ({share}%){behind}, wait ratio …".
pub fn waiting(f: &mut fmt::Formatter, kind: &str, victim: &ThreadTime, behind: &str, wait_ratio: f64) -> fmt::Result {
    write!(f, "{kind}: thread {}{behind}, wait ratio {wait_ratio:.2}: it had work and could not do it", victim.spent())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::thread;
    use serde_json::json;

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
}
