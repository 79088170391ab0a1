//! "stall:": a thread that serves input (it waits for work in one place, its home: an event
//! loop's poll, a server's accept or read, a worker's queue) was kept from that wait for long
//! stretches; what arrived meanwhile waited that long. The stretches are the probe's
//! (`model::stretches`); the home is found from where the thread blocked, on any runtime.
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{Behind, Culprit, ThreadRef, ThreadTime};
use super::super::serial::{hex_some, seconds, state_name};
use super::super::ThreadRow;
use super::cpu_quota::CpuQuota;
use super::cpu_quota_throttling::CpuQuotaThrottling;
use super::gil_starvation::GilStarvation;
use super::oversubscribed::Oversubscribed;
use super::rows::{busy_ns, gil_holder, off_cpu_share, preemptor, row_of, row_ref, waker};
use super::run_queue::RunQueueSaturation;
use super::saturated_thread::SATURATED_SHARE;
use super::{Claim, Context, Repeat};
use crate::model::partition::secs;
use crate::model::stacks::{Role, WaitStacks};
use crate::model::state::State;
use crate::model::stretches::WaitKey;

/// A thread stalls when at least this many of its stretches away from home were over the
/// objective...
pub const MIN_STALLS: u64 = 2;
/// ... and they add up to this share of the window (what arrives at a random moment waits
/// behind a stall this often).
pub const STALL_TIME_SHARE: f64 = 0.01;
/// The stalls' time the thread spent kept from its home (working, or waiting for a CPU, the quota,
/// the GIL, I/O, a lock another thread released) must be at least this share of them: a thread
/// away from its home mostly asleep or in timed waits elsewhere was idle there, not stalled.
pub const KEPT_SHARE: f64 = 0.5;
/// A stall spent at least this share waiting for a CPU (run queue, quota), or behind threads that
/// waited for one at least this share of their time, is the CPU's doing:
/// when a finding says the CPU is short (run-queue saturation, the quota, an oversubscribed
/// machine), that finding is the line, not a stall of each thread it delayed.
pub const CPU_SHARE: f64 = 0.5;
/// A state of the stalls is named (with its culprit) from this share of their time.
pub const STALL_PART_SHARE: f64 = 0.25;
/// A futex word whose waits ended by a timeout at least this share of their time is a timed
/// condition wait, not a lock (`behind_locks`).
pub const TIMED_WORD_SHARE: f64 = 0.25;

/// One of the states the stalls were spent in, and who the thread waited behind in it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StallPart {
    #[serde(serialize_with = "state_name")]
    pub state: State,
    #[serde(rename = "seconds", serialize_with = "seconds")]
    pub ns: u64,
    pub behind: Option<Behind>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stall {
    pub thread: ThreadRef,
    /// the home wait: its syscall, and the futex word of a futex home
    pub home: String,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "hex_some")]
    pub futex: Option<u64>,
    /// the stretches over the objective: how many, their time, their middle and the longest
    #[serde(rename = "objective_s", serialize_with = "seconds")]
    pub objective_ns: u64,
    pub stalls: u64,
    #[serde(rename = "stall_s", serialize_with = "seconds")]
    pub stall_ns: u64,
    #[serde(rename = "p50_s", serialize_with = "seconds")]
    pub p50_ns: u64,
    #[serde(rename = "max_s", serialize_with = "seconds")]
    pub max_ns: u64,
    /// every stretch that ended in the window
    pub stretches: u64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    /// what the thread did during its stalls, most first
    pub parts: Vec<StallPart>,
    /// the threads alike (same name less its numbers, same home) said in this one line
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alike: Vec<ThreadRef>,
}

/// Homes that serve input: multiplexers, accepts and reads (I/O waits), queues (futexes). A
/// sleep is a timer's home: kept from it is its own work, not a delay of anything that arrived.
fn serves(home: WaitKey) -> bool {
    matches!(crate::model::syscalls::syscall_state(home.syscall()), State::IoWait | State::FutexWait)
}

/// The role a home gives its thread, in words.
fn role(home: &str) -> &'static str {
    match home {
        "epoll_wait" | "epoll_pwait" | "epoll_pwait2" | "poll" | "ppoll" | "select" | "pselect6" | "io_getevents" | "io_uring_enter" => {
            "event loop"
        }
        "accept" | "accept4" => "acceptor",
        "futex" | "futex_wait" | "futex_waitv" => "worker",
        _ => "reader",
    }
}

/// "224–270 ms" (p50–max of stalls), or one length when they are alike.
pub(super) fn lengths(p50_ns: u64, max_ns: u64) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    if p50_ns + p50_ns / 20 >= max_ns {
        format!("{:.0} ms", ms(max_ns))
    } else {
        format!("{:.0}–{:.0} ms", ms(p50_ns), ms(max_ns))
    }
}

/// The role with its article: "an event loop".
fn a_role(home: &str) -> String {
    let r = role(home);
    let article = if r.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {r}")
}

/// What it was kept from, in words.
pub(super) fn from_what(home: &str) -> &'static str {
    match role(home) {
        "event loop" => "its poll",
        "acceptor" => "its accept",
        "worker" => "its queue",
        _ => "its read",
    }
}

/// The thread whose wakes ended most of `r`'s futex waits at its home (its producer), if any.
fn producer(r: &ThreadRow, home: WaitKey) -> Option<u32> {
    let mut by: std::collections::BTreeMap<u32, u64> = Default::default();
    for w in r.futex.iter().filter(|w| w.waker != 0 && home.holds(w.addr)) {
        *by.entry(w.waker).or_default() += w.ns;
    }
    by.into_iter().max_by_key(|(t, ns)| (*ns, std::cmp::Reverse(*t))).map(|(t, _)| t)
}

/// Of `r`'s futex wait away from its home, the share behind a lock: released by another thread,
/// on a word it did not leave by a timeout for `TIMED_WORD_SHARE` of its wait there. A lock's
/// waiter waits until the lock is let go; a word waited on with a deadline that often passes is
/// a timed condition wait (a queue polled with a timeout, a monitor's timed wait: a JVM's VM
/// Thread on its operations' queue), where a thread woken by another was handed something to
/// do, not let go. (A contended monitor's JVM thread parks with short timeouts now and then:
/// their share stays small.)
fn behind_locks(r: &ThreadRow, home: WaitKey) -> f64 {
    let mut by_word: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for w in r.futex.iter().filter(|w| !home.holds(w.addr) && w.waker != r.tid) {
        let e = by_word.entry(w.addr).or_default();
        if w.waker == 0 {
            e.0 += w.ns;
        } else {
            e.1 += w.ns;
        }
    }
    let all: u64 = by_word.values().map(|(t, w)| t + w).sum();
    let locked: u64 = by_word.values().filter(|(t, w)| (*t as f64) < TIMED_WORD_SHARE * (t + w) as f64).map(|(_, w)| w).sum();
    if all == 0 {
        0.0
    } else {
        locked as f64 / all as f64
    }
}

/// Threads that wait for work on a futex handed to them by a producer that feeds others the
/// same way: a pool's workers. One of them away from its queue delays nothing while the others
/// take the work; the pool's stalls are its producer's (a dispatcher kept from its poll).
///
/// Peers that park each on a word of their own and wake each other with work (a runtime's
/// scheduler threads: Go parks each M on a note of its own, and the M that finds work wakes an
/// idle one) are a pool too: a thread whose home's main waker is another such thread.
fn pool_workers(rows: &[ThreadRow]) -> Vec<u32> {
    let mut fed: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    let mut producer_of: std::collections::BTreeMap<u32, u32> = Default::default();
    for r in rows {
        let Some(home) = r.stretches.as_ref().and_then(|s| s.home).filter(|k| k.is_futex()) else { continue };
        if let Some(p) = producer(r, home) {
            fed.entry(p).or_default().push(r.tid);
            producer_of.insert(r.tid, p);
        }
    }
    let peers: Vec<u32> = producer_of.iter().filter(|(_, p)| producer_of.contains_key(p)).map(|(t, _)| *t).collect();
    let peers = if peers.len() >= 2 { peers } else { vec![] };
    fed.into_values().filter(|v| v.len() >= 2).flatten().chain(peers).collect()
}

/// A stall of each serving thread whose stretches away from home went over the objective;
/// threads alike (same role name and home) are one line.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let mut out: Vec<Stall> = vec![];
    let pool = pool_workers(cx.rows);
    let starving: Vec<u32> = cx.found::<GilStarvation>().map(|s| s.victim.thread.tid).collect();
    let cpu_short = cx.found::<RunQueueSaturation>().next().is_some()
        || cx.found::<CpuQuota>().next().is_some()
        || cx.found::<CpuQuotaThrottling>().next().is_some()
        || cx.found::<Oversubscribed>().next().is_some();
    for r in cx.rows.iter().filter(|r| !pool.contains(&r.tid)) {
        let Some(st) = &r.stretches else { continue };
        let Some((home, h)) = st.at_home() else { continue };
        if !serves(home) || h.long_count < MIN_STALLS || (h.long_ns as f64) < STALL_TIME_SHARE * cx.window_ns as f64 {
            continue;
        }
        // busy nearly all the time: saturated, not stalled now and then (`saturated_thread`)
        if busy_ns(r) as f64 >= SATURATED_SHARE * r.times.total() as f64 {
            continue;
        }
        // starving for the GIL, itself or through a lock: the GIL starvation says it with the
        // stalls' lengths, through to the GIL's holder (one finding per cause)
        if starving.contains(&r.tid) {
            continue;
        }
        let mut parts: Vec<StallPart> = State::ALL
            .into_iter()
            .map(|s| (s, h.long_state_ns[s as usize]))
            .filter(|(_, ns)| *ns > 0)
            .map(|(state, ns)| {
                let named = ns as f64 >= STALL_PART_SHARE * h.long_ns as f64;
                let behind = match state {
                    State::GilWait if named => gil_holder(r, cx.rows),
                    State::Runqueue if named => preemptor(r, cx.rows),
                    State::FutexWait if named => waker(r, cx.rows),
                    _ => None,
                };
                StallPart { state, ns, behind }
            })
            .collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.ns));
        let kept: u64 = parts
            .iter()
            .map(|p| match p.state {
                State::Running | State::Runqueue | State::Throttled | State::GilWait | State::IoWait => p.ns,
                // behind a lock another thread released; not a timed wait nothing woke, nor one
                // another thread ended by handing it something to do
                State::FutexWait => (p.ns as f64 * behind_locks(r, home)) as u64,
                _ => 0,
            })
            .sum();
        if (kept as f64) < KEPT_SHARE * h.long_ns as f64 {
            continue;
        }
        // waiting for a CPU itself, or behind a thread that waited for one half its time (a
        // JVM's VM Thread waiting for spinning threads to reach a safepoint on a full core)
        let off_cpu = |p: &StallPart| match p.behind.as_ref().map(|b| &b.culprit) {
            Some(Culprit::Thread(t)) => row_of(t.tid, cx.rows).is_some_and(|c| off_cpu_share(c) >= CPU_SHARE),
            _ => false,
        };
        let cpu: u64 = parts.iter().filter(|p| matches!(p.state, State::Runqueue | State::Throttled) || off_cpu(p)).map(|p| p.ns).sum();
        if cpu_short && cpu as f64 >= CPU_SHARE * h.long_ns as f64 {
            continue;
        }
        let stall = Stall {
            thread: row_ref(r),
            home: home.name(),
            futex: home.is_futex().then_some(home.word()),
            objective_ns: st.objective_ns,
            stalls: h.long_count,
            stall_ns: h.long_ns,
            p50_ns: h.quantile_ns(0.5, st.objective_ns).unwrap_or(h.max_ns),
            max_ns: h.max_ns,
            stretches: h.count,
            window_ns: cx.window_ns,
            parts,
            alike: vec![],
        };
        // threads alike: one line, its numbers summed
        let role_name = |t: &ThreadRef| {
            t.name.as_deref().unwrap_or("").trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '_').to_string()
        };
        match out
            .iter_mut()
            .find(|s| s.home == stall.home && role_name(&s.thread) == role_name(&stall.thread) && !role_name(&s.thread).is_empty())
        {
            Some(s) => {
                s.alike.push(stall.thread.clone());
                s.stalls += stall.stalls;
                s.stall_ns += stall.stall_ns;
                s.stretches += stall.stretches;
                s.max_ns = s.max_ns.max(stall.max_ns);
                s.p50_ns = s.p50_ns.max(stall.p50_ns);
                for p in stall.parts {
                    match s.parts.iter_mut().find(|q| q.state == p.state) {
                        Some(q) => q.ns += p.ns,
                        None => s.parts.push(p),
                    }
                }
            }
            None => out.push(stall),
        }
    }
    out.into_iter().map(|s| -> Box<dyn Claim> { Box::new(s) }).collect()
}

impl Stall {
    /// The threads it is about: the thread, and those alike.
    pub fn threads(&self) -> Vec<u32> {
        std::iter::once(self.thread.tid).chain(self.alike.iter().map(|t| t.tid)).collect()
    }

    fn part(&self, state: State) -> Option<&StallPart> {
        self.parts.iter().find(|p| p.state == state)
    }

    /// The culprit of its largest named wait, if any.
    fn main_wait(&self) -> Option<&StallPart> {
        self.parts.iter().find(|p| p.state != State::Running && p.behind.is_some())
    }

    fn victim(&self, state: State) -> ThreadTime {
        ThreadTime { thread: self.thread.clone(), state, ns: self.part(state).map_or(0, |p| p.ns), total_ns: self.stall_ns }
    }
}

impl Claim for Stall {
    fn kind(&self) -> &'static str {
        "stall"
    }
    fn explains_ns(&self) -> u64 {
        self.stall_ns
    }
    fn precedence(&self) -> u8 {
        0
    }
    fn explains_age(&self) -> bool {
        true
    }
    fn names(&self) -> Option<(u32, Option<State>)> {
        Some((self.thread.tid, None))
    }
    fn repeats(&self) -> Vec<Repeat> {
        self.threads()
            .into_iter()
            .map(|tid| Repeat {
                tid: Some(tid),
                states: &[State::GilWait, State::Runqueue, State::FutexWait, State::IoWait, State::Throttled],
            })
            .collect()
    }
    fn gil_holder(&self) -> Option<u32> {
        self.part(State::GilWait).and_then(|p| p.behind.as_ref()).and_then(|b| match &b.culprit {
            Culprit::Thread(t) => Some(t.tid),
            _ => None,
        })
    }
    fn culprits(&self) -> Vec<u32> {
        self.parts
            .iter()
            .filter_map(|p| match p.behind.as_ref().map(|b| &b.culprit) {
                Some(Culprit::Thread(t)) => Some(t.tid),
                _ => None,
            })
            .collect()
    }
    fn code(&self, stacks: &WaitStacks, switch_ns: u64) -> Option<Code> {
        // a wait it spent the stalls in names its culprit's code; else what it ran
        if let Some(p) = self.main_wait().filter(|p| p.ns as f64 >= 0.5 * self.stall_ns as f64) {
            let role = match p.state {
                State::GilWait => Role::Holder,
                State::Runqueue => Role::Preemptor,
                _ => Role::Waker,
            };
            if let Some(c) = code::of_wait(&self.victim(p.state), p.behind.as_ref(), p.state, role, stacks, switch_ns) {
                return Some(c);
            }
        }
        // a wait no thread ended (I/O, a sleep) it spent the stalls in: where it waited then, among
        // its sites with no more of that state than the stalls had (its home wait's site has more)
        let own = self.parts.iter().find(|p| p.state != State::Running && p.behind.is_none());
        if let Some(p) = own.filter(|p| p.ns as f64 >= 0.5 * self.stall_ns as f64) {
            if let Some(c) = code::own_wait(&self.thread, p.state, p.ns + p.ns / 5, stacks) {
                return Some(c);
            }
        }
        code::busy(&self.thread, stacks)
    }
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        let who = match self.alike.len() {
            0 => format!("{}, {},", self.thread.or_a_thread(), a_role(&self.home)),
            n => format!("{} threads alike ({} and {n} more, {}s)", n + 1, self.thread.or_a_thread(), role(&self.home)),
        };
        let verb = if self.alike.is_empty() { "was" } else { "were" };
        let lengths = lengths(self.p50_ns, self.max_ns);
        write!(
            f,
            "stall: {who} {verb} kept from {} ({}) for {lengths} at a time (p50–max, {} times in {:.1} s over the {:.0} ms objective, {:.1} s in all); what arrived meanwhile waited up to {:.0} ms.",
            from_what(&self.home),
            self.home,
            self.stalls,
            secs(self.window_ns),
            ms(self.objective_ns),
            secs(self.stall_ns),
            ms(self.max_ns),
        )?;
        let pct = |ns: u64| 100.0 * ns as f64 / self.stall_ns.max(1) as f64;
        let said: Vec<String> = self
            .parts
            .iter()
            .filter(|p| pct(p.ns) >= 5.0)
            .take(3)
            .map(|p| {
                let what = match p.state {
                    State::Running => "running".to_string(),
                    s => super::super::evidence::what(s).to_string(),
                };
                let behind = p.behind.as_ref().map(|b| format!(" behind {}", b.culprit.long())).unwrap_or_default();
                format!("{:.0}% {what}{behind}", pct(p.ns))
            })
            .collect();
        if !said.is_empty() {
            write!(f, " Of those stretches, {}.", said.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::model::stretches::{Hist, ThreadStretches, WaitKey};
    use crate::report::fixtures::*;

    const MS: u64 = 1_000_000;

    /// A thread back at its home (a futex word it waits on briefly) 3 times in 8 s, each time
    /// after ~1.9 s blocked on another word: there a 1 s timed wait ended by its deadline 4 times
    /// and by other threads' wakes for the rest (a JVM's VM Thread on its operations' queue).
    fn away(other_word: &[(u32, u64)]) -> ThreadRow {
        const FUTEX: u32 = 202;
        let (home, other) = (WaitKey::new(FUTEX, 0x1000), 0x2000u64);
        let mut r = row(7, "VM Thread", &[(State::FutexWait, 7_900 * MS), (State::Running, 100 * MS)]);
        let mut h = Hist {
            count: 20,
            ns: 5_600 * MS,
            max_ns: 2_000 * MS,
            wait_ns: 5 * MS,
            long_count: 3,
            long_ns: 5_500 * MS,
            ..Default::default()
        };
        h.long_state_ns[State::FutexWait.index()] = 5_500 * MS;
        h.buckets[crate::model::stretches::bucket(1_900 * MS)] = 3;
        r.stretches = Some(ThreadStretches { home: Some(home), waits: vec![(home, h)], objective_ns: 100 * MS });
        r.futex = other_word.iter().map(|&(waker, ns)| FutexWait { addr: other, waker, ns }).collect();
        r.futex.push(FutexWait { addr: 0x1000, waker: 9, ns: 5 * MS });
        r
    }

    #[test]
    fn a_timed_wait_others_end_is_not_a_stall_and_a_lock_is() {
        let waker = row(9, "QFJ Message Processor", &[(State::Running, 8 * S)]);
        // woken by another thread for more of it than by its deadline: the top waker is a thread
        let timed = away(&[(0, 3_000 * MS), (9, 3_500 * MS), (8, 1_400 * MS)]);
        let f = every_finding_of(vec![timed, waker.clone()], 8 * S);
        assert!(!kinds(&f).contains(&"stall".to_string()), "a timed condition wait is no stall: {f:?}");
        // the control: the same stretches behind a lock the other thread let go (no deadline)
        let locked = away(&[(9, 6_500 * MS), (8, 1_400 * MS)]);
        let f = every_finding_of(vec![locked, waker], 8 * S);
        let stall = f.iter().find(|f| f.claim.kind() == "stall").unwrap_or_else(|| panic!("a lock's stall: {f:?}"));
        assert!(stall.to_string().contains("behind QFJ Message Processor (9)"), "{stall}");
    }
}
