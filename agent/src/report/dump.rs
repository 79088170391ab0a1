//! `waitmeter dump`: what every thread of a process is waiting on now, who it waits behind and
//! the code on both sides, from a short window (the blame needs one) and /proc at its end.
use std::collections::BTreeMap;

use serde::Serialize;

use super::ProcessReport;
use crate::model::blame::Preemptor;
use crate::model::stacks::{Frame, Key, Kind, Role, WaitStacks};
use crate::model::state::State;

/// A thread is listed as blocking another when it is behind this share of that one's wait.
const BLOCKING_SHARE: f64 = 0.01;

/// A thread's state at the end of the window, from /proc (untrusted text, bounded).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Now {
    /// the kernel's state letter (R running or runnable, S sleeping, D disk, T stopped, ...)
    pub state: String,
    /// the syscall it is blocked in, if any
    pub syscall: Option<String>,
    /// the futex word it waits on (futex syscalls)
    pub futex_word: Option<String>,
    /// the kernel function it sleeps in (needs root; None when hidden)
    pub wchan: Option<String>,
}

/// Who a thread waited behind in the window, and the share of that wait.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Behind {
    /// a thread of the process (None: another process, or not known)
    pub tid: Option<u32>,
    pub name: String,
    pub share: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DumpThread {
    pub tid: u32,
    pub name: String,
    pub now: Now,
    /// its state for most of the window, and that state's share of the window
    pub state: State,
    pub share: f64,
    /// each state's seconds in the window (nonzero only)
    pub seconds: BTreeMap<&'static str, f64>,
    /// whom it waited behind in that state, most first
    pub behind: Vec<Behind>,
    /// where it was while in that state, innermost frame first (empty: no stack in the window)
    pub stack: Vec<String>,
    /// what the first of `behind` ran meanwhile, innermost first
    pub behind_stack: Vec<String>,
    /// threads that waited behind this one in the window (TIDs, most first)
    pub blocking: Vec<u32>,
    /// its stretches away from its home wait (as the attach JSON has them); absent: no home
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stretches: Option<super::json::JsonStretches>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Dump {
    pub pid: u32,
    pub comm: String,
    /// the container (and pod) it runs in; absent: the host
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub python: Option<String>,
    pub window_s: f64,
    pub threads: Vec<DumpThread>,
}

/// States in which a thread waits behind someone waitmeter can name.
fn blamed_state(s: State) -> bool {
    matches!(s, State::GilWait | State::FutexWait | State::Runqueue)
}

fn say(s: State) -> &'static str {
    match s {
        State::Running => "running",
        State::Runqueue => "waiting for a CPU",
        State::Throttled => "throttled (CPU quota)",
        State::GilWait => "waiting for the GIL",
        State::FutexWait => "blocked on a lock (futex)",
        State::IoWait => "in I/O",
        State::Sleep => "asleep",
        State::Other => "blocked",
        State::Yield => "yielding",
    }
}

/// The frames worth showing, innermost first: Python frames and native ones outside the C
/// library and the interpreter; a stack of only those shows its innermost frame.
fn frames(stack: &[Frame]) -> Vec<String> {
    let shown: Vec<String> = stack.iter().filter(|f| f.kind == Kind::Python || !f.is_library()).map(Frame::display_at).collect();
    match (shown.is_empty(), stack.first()) {
        (true, Some(f)) => vec![f.display_at()],
        _ => shown,
    }
}

/// The stack (`frames`) with the most time among `entries`.
fn heaviest<'a>(entries: impl Iterator<Item = (&'a Key, u64)>) -> Vec<String> {
    let mut by: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for (k, ns) in entries {
        *by.entry(frames(&k.stack)).or_default() += ns;
    }
    by.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0))).map(|(s, _)| s).unwrap_or_default()
}

/// The heaviest stack of one side of `tid`'s waits in `state`.
fn top_stack(stacks: Option<&WaitStacks>, tid: u32, state: State, role: Role, blamed: Option<u32>) -> Vec<String> {
    stacks.map(|st| heaviest(st.select(tid, state, role, blamed))).unwrap_or_default()
}

/// The heaviest stack charged to `culprit` as the other side of others' waits.
fn culprit_stack(stacks: Option<&WaitStacks>, culprit: u32) -> Vec<String> {
    stacks
        .map(|st| {
            heaviest(
                st.ns.iter().filter(|(k, _)| k.blamed == culprit && k.role != Role::Victim && k.victim != culprit).map(|(k, ns)| (k, *ns)),
            )
        })
        .unwrap_or_default()
}

impl Dump {
    /// `now`: each thread's /proc state at the end (TID -> Now).
    pub fn new(report: &ProcessReport, now: &BTreeMap<u32, Now>) -> Dump {
        let names: BTreeMap<u32, &str> = report.threads.iter().map(|t| (t.tid, t.name.as_str())).collect();
        let name_of = |tid: u32| names.get(&tid).map_or_else(|| format!("thread {tid}"), |n| n.to_string());
        let stacks = report.stacks.as_ref();
        // who waited behind whom (GIL, futex and CPU), for `blocking`
        let mut blocked_by: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
        let mut threads: Vec<DumpThread> = report
            .threads
            .iter()
            .filter(|t| !t.exited)
            .map(|t| {
                let total = t.times.total().max(1) as f64;
                let state = State::ALL.into_iter().max_by_key(|s| t.times.get(*s)).unwrap_or(State::Other);
                // whom it waited behind: in its main state, or in its main wait when it mostly ran
                let wait = if blamed_state(state) {
                    state
                } else {
                    [State::GilWait, State::FutexWait, State::Runqueue]
                        .into_iter()
                        .max_by_key(|s| t.times.get(*s))
                        .filter(|s| t.times.get(*s) as f64 >= 0.2 * total)
                        .unwrap_or(state)
                };
                let mut culprits: Vec<(Option<u32>, String, u64)> = match wait {
                    State::GilWait => t
                        .gil_by_holder
                        .iter()
                        .map(|(h, ns)| (Some(*h).filter(|h| *h != 0), if *h == 0 { "unknown".into() } else { name_of(*h) }, *ns))
                        .collect(),
                    State::FutexWait => t
                        .futex_by_waker()
                        .into_iter()
                        .map(|(w, ns)| (Some(w).filter(|w| *w != 0), if w == 0 { "timeout or signal".into() } else { name_of(w) }, ns))
                        .collect(),
                    State::Runqueue => t
                        .runqueue_by
                        .iter()
                        .map(|(p, ns)| match p {
                            Preemptor::Thread(tid) => (Some(*tid), name_of(*tid), *ns),
                            Preemptor::Process { pid, comm } => (None, format!("pid {pid} ({comm})"), *ns),
                            Preemptor::Idle => (None, "an idle CPU (the wakeup)".into(), *ns),
                        })
                        .collect(),
                    _ => vec![],
                };
                culprits.retain(|c| c.2 > 0 && c.0 != Some(t.tid));
                culprits.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
                let all: u64 = culprits.iter().map(|c| c.2).sum();
                // a culprit for a hundredth of the wait or more (a thread that held the GIL for
                // microseconds as it woke once a second is not blocking anyone)
                for (tid, _, ns) in culprits.iter().filter(|c| c.2 as f64 >= BLOCKING_SHARE * all as f64) {
                    if let Some(c) = tid {
                        blocked_by.entry(*c).or_default().push((*ns, t.tid));
                    }
                }
                let role = match wait {
                    State::GilWait => Some(Role::Holder),
                    State::FutexWait => Some(Role::Waker),
                    State::Runqueue => Some(Role::Preemptor),
                    _ => None,
                };
                let first = culprits.first().and_then(|c| c.0);
                let behind_stack = match (role, first) {
                    (Some(r), Some(c)) => top_stack(stacks, t.tid, wait, r, Some(c)),
                    _ => vec![],
                };
                // where it was: in its main state (for a running thread, where it was kept waiting)
                let mut stack = top_stack(stacks, t.tid, state, Role::Victim, None);
                if stack.is_empty() && wait != state {
                    stack = top_stack(stacks, t.tid, wait, Role::Victim, None);
                }
                if stack.is_empty() {
                    // a culprit that never left the CPU: what it ran while others waited behind it
                    stack = culprit_stack(stacks, t.tid);
                }
                DumpThread {
                    stretches: super::json::stretches(t),
                    tid: t.tid,
                    name: t.name.clone(),
                    now: now.get(&t.tid).cloned().unwrap_or_default(),
                    state,
                    share: t.times.get(state) as f64 / total,
                    seconds: State::ALL
                        .into_iter()
                        .filter(|s| t.times.get(*s) > 0)
                        .map(|s| (s.name(), t.times.get(s) as f64 / 1e9))
                        .collect(),
                    behind: culprits
                        .into_iter()
                        .take(3)
                        .map(|(tid, name, ns)| Behind { tid, name, share: ns as f64 / all.max(1) as f64 })
                        .collect(),
                    stack,
                    behind_stack,
                    blocking: vec![],
                }
            })
            .collect();
        for t in &mut threads {
            if let Some(mut v) = blocked_by.remove(&t.tid) {
                v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                t.blocking = v.into_iter().map(|(_, tid)| tid).collect();
            }
        }
        // threads kept waiting first (most of the window first), then those that kept others
        // waiting, then the busy ones, then the idle
        let rank = |t: &DumpThread| match t.state {
            s if s.is_waiting() || s == State::FutexWait => 0,
            _ if !t.blocking.is_empty() => 1,
            State::Running => 2,
            _ => 3,
        };
        threads.sort_by(|a, b| rank(a).cmp(&rank(b)).then(b.share.total_cmp(&a.share)).then(a.tid.cmp(&b.tid)));
        Dump {
            pid: report.pid,
            comm: report.comm.clone(),
            container: report.container.clone(),
            python: report.python.as_ref().map(|p| p.version.clone()),
            window_s: report.duration_ns as f64 / 1e9,
            threads,
        }
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// py-spy dump's shape: a header, then each thread with what it does and its frames.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let clean = crate::model::stacks::clean;
        let mut out = String::new();
        let py = self.python.as_ref().map(|v| format!(", Python {v}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "waitmeter dump: PID {} ({}{py}){}, {} threads, over the last {:.1} s",
            self.pid,
            clean(&self.comm),
            self.container.as_ref().map(|c| format!(", {c}")).unwrap_or_default(),
            self.threads.len(),
            self.window_s
        );
        let names: BTreeMap<u32, &str> = self.threads.iter().map(|t| (t.tid, t.name.as_str())).collect();
        for t in &self.threads {
            let mut line = format!("\nThread {} {}: {} {:.0}%", t.tid, clean(&t.name), say(t.state), t.share * 100.0);
            if let Some(b) = t.behind.first() {
                let who = match b.tid {
                    Some(tid) => format!("{} ({tid})", clean(&b.name)),
                    None => clean(&b.name),
                };
                let _ = write!(line, ", behind {who} ({:.0}%)", b.share * 100.0);
            }
            if !t.blocking.is_empty() {
                let who: Vec<String> =
                    t.blocking.iter().take(4).map(|tid| format!("{} ({tid})", clean(names.get(tid).unwrap_or(&"?")))).collect();
                let more = if t.blocking.len() > 4 { format!(" and {} more", t.blocking.len() - 4) } else { String::new() };
                let _ = write!(line, "; kept waiting: {}{more}", who.join(", "));
            }
            let mut now = format!("now {}", t.now.state);
            if let Some(s) = &t.now.syscall {
                let _ = write!(now, " in {s}");
                if let Some(w) = &t.now.futex_word {
                    let _ = write!(now, "({w})");
                }
            }
            if let Some(w) = &t.now.wchan {
                let _ = write!(now, " [{}]", clean(w));
            }
            let _ = writeln!(out, "{line}  ({now})");
            if let Some(s) = &t.stretches {
                let ms = |x: f64| x * 1e3;
                let _ = writeln!(
                    out,
                    "  home {}: {} stretches away, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} over the {:.0} ms objective ({:.2} s)",
                    s.home,
                    s.count,
                    ms(s.p50_s.unwrap_or(0.0)),
                    ms(s.p99_s.unwrap_or(0.0)),
                    ms(s.max_s),
                    s.stalls,
                    ms(s.objective_s),
                    s.stall_s
                );
            }
            if t.stack.is_empty() {
                let _ = writeln!(out, "    (no stack: it did not switch state in the window)");
            }
            for f in &t.stack {
                let _ = writeln!(out, "    {}", clean(f));
            }
            if let (Some(b), false) = (t.behind.first(), t.behind_stack.is_empty()) {
                let tid = b.tid.map(|t| format!(" ({t})")).unwrap_or_default();
                let _ = writeln!(out, "  {}{tid} meanwhile:", clean(&b.name));
                for f in &t.behind_stack {
                    let _ = writeln!(out, "    {}", clean(f));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_keep_python_and_extension_code_innermost_first() {
        let stack = vec![
            Frame::native("__futex_abstimed_wait_common".into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            Frame::native("take_gil".into(), "/usr/lib/libpython3.12.so.1.0".into()),
            Frame::native("encoder_listencode_obj".into(), "/usr/lib/python3.12/lib-dynload/_json.cpython-312.so".into()),
            Frame::python("blocking_call".into(), "/app/gil_holder.py".into(), 70),
            Frame::python("run".into(), "/usr/lib/python3.12/threading.py".into(), 1010),
        ];
        assert_eq!(
            frames(&stack),
            ["encoder_listencode_obj (_json.cpython-312.so)", "blocking_call (gil_holder.py:70)", "threading.run (threading.py:1010)"]
        );
        // only the C library: its innermost frame, not nothing
        assert_eq!(frames(&stack[..1]), ["__futex_abstimed_wait_common (libc.so.6)"]);
        assert!(frames(&[]).is_empty());
    }
}
