//! "lock convoy on futex 0x…:": many threads took turns on one futex word; or on a lock whose
//! waiters each park on a word of their own (a JVM monitor, a `java.util.concurrent` lock): many
//! threads each woken from their own word by another of them, round and round.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{human_rate, per_second, ThreadRef};
use super::super::serial::{hex_some, seconds};
use super::super::ThreadRow;
use super::idle_threads::home_word;
use super::rows::thread_ref;
use super::unmeasured_gil::{on_unmeasured_gil, unmeasured_python};
use super::{Claim, Context, Repeat};
use crate::model::blame::{self, CONVOY_SHARE, CONVOY_WAITERS};
use crate::model::partition::secs;
use crate::model::stacks::{between_work, Role, WaitStacks};
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockConvoy {
    /// the word they queued on; none when each parked on a word of its own
    #[serde(serialize_with = "hex_some", skip_serializing_if = "Option::is_none")]
    pub futex: Option<u64>,
    pub waiters: Vec<u32>,
    /// the waiters' wait on it, summed
    #[serde(rename = "wait_s", serialize_with = "seconds")]
    pub wait_ns: u64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    pub wakers: Vec<ThreadRef>,
    /// how many waiters waited at a time on average: the queue behind the lock
    #[serde(serialize_with = "super::super::serial::ratio")]
    pub waiting_at_a_time: f64,
    /// how many of their waits a waker among them ended (each a hand-off of the lock), when the
    /// waits' stacks counted them, and the same a second of the window
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoffs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoffs_per_s: Option<f64>,
    /// the process runs a CPython whose GIL waitmeter does not measure, and whose symbols do
    /// not say where its GIL is: its version (this futex may be the GIL)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmeasured_python: Option<String>,
    /// the lock, as the waiters' frames name the operation they waited in (most of the hand-offs'
    /// wait): `jvm_monitor`, `java_util_concurrent`, `go_mutex`; none when no frame says
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<Mechanism>,
}

/// A lock whose waiters park each on a word of their own, as the frames of their waits say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// a `synchronized` block or method: HotSpot's monitor enter (`ObjectMonitor::enter`, the
    /// interpreter's, C1's or C2's `monitorenter`)
    JvmMonitor,
    /// a `java.util.concurrent.locks` lock (`ReentrantLock`, a `ReadWriteLock`)
    JavaUtilConcurrent,
    /// Go's `sync.Mutex` or `sync.RWMutex` (its waiters park on the runtime's semaphore)
    GoMutex,
}

impl Mechanism {
    /// What the frames of one wait say, innermost first.
    fn of(stack: &[crate::model::stacks::Frame]) -> Option<Mechanism> {
        stack.iter().find_map(|f| {
            let n = f.function.as_str();
            if n.starts_with("ObjectMonitor::") || n.contains("monitorenter") || n.contains("complete_monitor_locking") {
                Some(Mechanism::JvmMonitor)
            } else if n.starts_with("java.util.concurrent.locks.") {
                Some(Mechanism::JavaUtilConcurrent)
            } else if n.starts_with("sync.(*Mutex)") || n.starts_with("sync.(*RWMutex)") {
                Some(Mechanism::GoMutex)
            } else {
                None
            }
        })
    }

    fn said(self) -> &'static str {
        match self {
            Mechanism::JvmMonitor => "a JVM monitor: `synchronized`",
            Mechanism::JavaUtilConcurrent => "a java.util.concurrent lock",
            Mechanism::GoMutex => "a Go sync.Mutex",
        }
    }
}

/// The mechanism most of the waits of `waiters` that one of `wakers` ended name, weighed by their
/// time (`Mechanism::of`); none without the waits' stacks or when no frame says.
fn mechanism(stacks: Option<&WaitStacks>, waiters: &[u32], wakers: &[u32]) -> Option<Mechanism> {
    let mut by: BTreeMap<Mechanism, u64> = BTreeMap::new();
    for (k, ns) in stacks.into_iter().flat_map(|s| s.select_behind(waiters, State::FutexWait, Role::Victim, |b| wakers.contains(&b))) {
        if let Some(m) = Mechanism::of(&k.stack) {
            *by.entry(m).or_default() += ns;
        }
    }
    by.into_iter().max_by_key(|(m, ns)| (*ns, std::cmp::Reverse(*m))).map(|(m, _)| m)
}

/// Many threads queueing on one futex word (`CONVOY_WAITERS`, `CONVOY_SHARE` of the window),
/// not an unmeasured interpreter's GIL (`unmeasured_gil`).
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let report = cx.report;
    let window = cx.window_ns.max(1) as f64;
    // an interpreter whose GIL is not measured and not found: any convoy may be its GIL
    let unknown_gil = unmeasured_python(report).filter(|(_, r)| r.is_empty()).map(|(v, _)| v.to_string());
    report
        .top_futexes
        .iter()
        .filter(|f| !on_unmeasured_gil(report, f.addr))
        .filter_map(|f| {
            // waiting for work is idle, never contention: only the threads that took the lock in
            // the middle of their work (it is not their home wait) and were handed it (a wake
            // ended a wait of theirs on it) queue on it
            let contenders: Vec<&ThreadRow> = f
                .waiters
                .iter()
                .filter_map(|tid| cx.rows.iter().find(|r| r.tid == *tid))
                .filter(|r| !home_word(r, f.addr) && r.futex.iter().any(|w| w.addr == f.addr && w.waker != 0))
                .collect();
            let wait_ns: u64 = contenders.iter().flat_map(|r| r.futex.iter().filter(|w| w.addr == f.addr)).map(|w| w.ns).sum();
            (contenders.len() >= CONVOY_WAITERS && wait_ns as f64 >= CONVOY_SHARE * window)
                .then(|| (f, contenders.iter().map(|r| r.tid).collect::<Vec<u32>>(), wait_ns))
        })
        .map(|(f, waiters, wait_ns)| -> Box<dyn Claim> {
            let (handoffs, handoffs_per_s) = handoffs(cx, &waiters, &f.wakers);
            Box::new(LockConvoy {
                mechanism: mechanism(report.stacks.as_ref(), &waiters, &f.wakers),
                futex: Some(f.addr),
                waiting_at_a_time: wait_ns as f64 / window,
                handoffs,
                handoffs_per_s,
                waiters,
                wait_ns,
                window_ns: cx.window_ns,
                wakers: f.wakers.iter().map(|t| thread_ref(*t, cx.rows)).collect(),
                unmeasured_python: unknown_gil.clone(),
            })
        })
        .chain(parked(cx).map(|c| -> Box<dyn Claim> { Box::new(c) }))
        .collect()
}

/// The least share of the window a thread of a parked convoy waited for the others.
const PARKED_MEMBER_SHARE: f64 = 0.2;
/// The least share of a member's handed waits on one word of its own that the others ended, for
/// the waits on that word to count as waits for them.
const PARKED_BY_MEMBERS: f64 = 0.5;
/// The least time the members spent not waiting (running, runnable, in I/O), summed, as a share
/// of the window: someone held the lock and worked (a pool idle on its queue does not).
const PARKED_WORKING: f64 = 0.25;

/// The least a member worked (as `PARKED_WORKING` counts it), as a share of the members' mean: a
/// member takes the lock in turn and works while it holds it. A thread that others hand work to
/// and that wakes them when it is done (a JVM's VM thread, which runs the safepoint operations
/// the members ask for, a GC among them) is woken round with them but hardly works.
const PARKED_MEMBER_WORK: f64 = 0.1;

/// A lock has one holder at a time: the members of a convoy on it ran, in all, about one CPU's
/// worth of the window at most (the holder's turn), and at least this much of it (the lock was
/// held most of the window: its waiters queued behind a holder that ran)...
const PARKED_HELD: f64 = 0.5;
/// ... and at most this many CPUs' worth: threads that ran side by side for much of the window
/// were not taking turns on one lock; they waited for work, or for a CPU (a runtime's idle
/// threads woken to run what came, as Go's scheduler parks each M on a note of its own; a
/// pool's workers on busy CPUs). Waiting for work is idle, and a CPU's shortage is its own
/// finding.
const PARKED_SERIAL: f64 = 1.3;
/// ... and they wanted at most this many CPUs' worth, running or waiting for one: members taking
/// turns on a lock wait blocked, not runnable (the next holder may wait for a CPU once it is
/// woken, on busy CPUs), where a pool whose work needs more CPUs than it has queues for them
/// (that is run-queue saturation, its own finding).
const PARKED_WANTED: f64 = 2.5;
/// The least mean number of members waiting for the others (their waits within the group over
/// the window): a queue behind the lock. A runtime's idle threads taking turns to run one
/// request at a time (a closed-loop client) wait about one at a time; three threads on a lock
/// held without a break, each a third of its time outside it, wait 1.5 at a time.
const PARKED_QUEUE: f64 = 1.5;

/// A waiter's handed waits on one word of its own: by waker (ns), and in all.
type Handed = (BTreeMap<u32, u64>, u64);

/// A convoy on a lock whose waiters park each on a word of its own (HotSpot parks a thread on an
/// event of its own for a monitor, and on a parker of its own for `LockSupport.park`): no word
/// has many waiters, but a group of threads (≥ `CONVOY_WAITERS`) spent ≥ `CONVOY_SHARE` of the
/// window, in all, in waits that another of them ended, each of them ≥ `PARKED_MEMBER_SHARE` of
/// it, on words whose handed waits were ended so for the most part (a worker's queue word, fed
/// by a dispatcher, is not); the wakes go round (every member wakes and is woken within the
/// group: a pipeline, each stage woken by the one before, is not a convoy); each member worked
/// (`PARKED_MEMBER_WORK`), and the group worked meanwhile (a pool idle on its queue hands no
/// lock round), one at a time (`PARKED_HELD`, `PARKED_SERIAL`).
fn parked(cx: &Context) -> Option<LockConvoy> {
    let window = cx.window_ns.max(1) as f64;
    let mut waiters_of: HashMap<u64, BTreeSet<u32>> = HashMap::new();
    for r in cx.rows {
        for w in &r.futex {
            waiters_of.entry(w.addr).or_default().insert(r.tid);
        }
    }
    let own = |addr: u64| !blame::is_parked(addr) && waiters_of.get(&addr).is_some_and(|w| w.len() == 1);
    // waiting for work is idle: the part of each (waiter, waker)'s waits made between units of
    // work (their stacks hold no application code) is no wait for a lock
    let idle = between_work_shares(cx.report.stacks.as_ref());
    let for_lock = |tid: u32, waker: u32, ns: u64| (ns as f64 * (1.0 - idle.get(&(tid, waker)).copied().unwrap_or(0.0))) as u64;
    // waiter -> its words of its own -> (waker -> ns) of its handed waits on the word, and those
    // waits in all; and waiter -> (waker -> ns) over all those words
    let mut by: BTreeMap<u32, BTreeMap<u64, Handed>> = BTreeMap::new();
    let mut wakers_by: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
    for r in cx.rows {
        for w in r.futex.iter().filter(|w| w.waker != 0 && w.waker != r.tid && own(w.addr)) {
            let ns = for_lock(r.tid, w.waker, w.ns);
            let e = by.entry(r.tid).or_default().entry(w.addr).or_default();
            *e.0.entry(w.waker).or_default() += ns;
            e.1 += ns;
            *wakers_by.entry(r.tid).or_default().entry(w.waker).or_default() += ns;
        }
    }
    let mut group: BTreeSet<u32> = by.keys().copied().collect();
    // a member's waits for the others: on each word of its own whose handed waits the others
    // ended for the most part (`PARKED_BY_MEMBERS`). A thread parks on one word for a lock and
    // on another for its work queue (HotSpot: a monitor's event and LockSupport's parker): the
    // waits for work that others hand it are not its waits for the lock
    let within = |g: &BTreeSet<u32>, tid: u32| -> u64 {
        by[&tid]
            .values()
            .map(|(wakers, handed)| {
                let ns: u64 = wakers.iter().filter(|(w, _)| g.contains(w)).map(|(_, ns)| *ns).sum();
                if ns as f64 >= PARKED_BY_MEMBERS * *handed as f64 {
                    ns
                } else {
                    0
                }
            })
            .sum()
    };
    // what each candidate worked (running, runnable, in I/O), read once
    let work: HashMap<u32, u64> = cx
        .rows
        .iter()
        .filter(|r| by.contains_key(&r.tid))
        .map(|r| (r.tid, [State::Running, State::Runqueue, State::Throttled, State::IoWait].iter().map(|s| r.times.get(*s)).sum::<u64>()))
        .collect();
    let work_of = |tid: u32| work.get(&tid).copied().unwrap_or(0);
    loop {
        let mean_work = group.iter().map(|t| work_of(*t)).sum::<u64>() as f64 / group.len().max(1) as f64;
        let keep: BTreeSet<u32> = group
            .iter()
            .copied()
            .filter(|t| {
                let ns = within(&group, *t);
                ns as f64 >= PARKED_MEMBER_SHARE * window && work_of(*t) as f64 >= PARKED_MEMBER_WORK * mean_work
            })
            .collect();
        // the wakes go round: the part of the group every member reaches and is reached from
        let keep = round(&keep, |t| wakers_by[&t].keys().copied().filter(|w| keep.contains(w)).collect());
        if keep == group {
            break;
        }
        group = keep;
    }
    let wait_ns: u64 = group.iter().map(|t| within(&group, *t)).sum();
    let working: u64 = group.iter().map(|t| work_of(*t)).sum();
    // what they ran, and what they wanted of the CPUs: that and what they waited for a CPU (a
    // pool's workers on busy CPUs ran about one CPU's worth because that is what they got, not
    // because one held a lock: many of them were runnable at once)
    let (ran, wanted) = cx.rows.iter().filter(|r| group.contains(&r.tid)).fold((0u64, 0u64), |(ran, wanted), r| {
        let running = r.times.get(State::Running);
        (ran + running, wanted + running + r.times.get(State::Runqueue))
    });
    let taking_turns = (PARKED_HELD * window..=PARKED_SERIAL * window).contains(&(ran as f64)) && wanted as f64 <= PARKED_WANTED * window;
    let queued = wait_ns as f64 >= CONVOY_SHARE.max(PARKED_QUEUE) * window;
    (group.len() >= CONVOY_WAITERS && queued && working as f64 >= PARKED_WORKING * window && taking_turns).then(|| {
        // the wakers, most waking first
        let mut wakers: BTreeMap<u32, u64> = BTreeMap::new();
        for t in &group {
            for (w, ns) in wakers_by[t].iter().filter(|(w, _)| group.contains(w)) {
                *wakers.entry(*w).or_default() += ns;
            }
        }
        let mut wakers: Vec<(u32, u64)> = wakers.into_iter().collect();
        wakers.sort_by_key(|(t, ns)| (std::cmp::Reverse(*ns), *t));
        let waiters: Vec<u32> = group.iter().copied().collect();
        let (handoffs, handoffs_per_s) = handoffs(cx, &waiters, &waiters);
        LockConvoy {
            mechanism: mechanism(cx.report.stacks.as_ref(), &waiters, &waiters),
            futex: None,
            waiting_at_a_time: wait_ns as f64 / cx.window_ns.max(1) as f64,
            handoffs,
            handoffs_per_s,
            waiters,
            wait_ns,
            window_ns: cx.window_ns,
            wakers: wakers.iter().map(|(t, _)| thread_ref(*t, cx.rows)).collect(),
            unmeasured_python: None,
        }
    })
}

/// Of each (waiter, waker)'s futex waits charged to stacks, the share made between units of work
/// (`stacks::between_work`); none without the waits' stacks.
fn between_work_shares(stacks: Option<&WaitStacks>) -> HashMap<(u32, u32), f64> {
    let mut by: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
    for (k, ns) in stacks.iter().flat_map(|s| s.ns.iter()) {
        if k.state == State::FutexWait && k.role == Role::Victim && k.blamed != 0 {
            let e = by.entry((k.victim, k.blamed)).or_default();
            e.1 += ns;
            if between_work(&k.stack) {
                e.0 += ns;
            }
        }
    }
    by.into_iter().map(|(k, (idle, all))| (k, idle as f64 / all.max(1) as f64)).collect()
}

/// How many futex waits of `waiters` one of `wakers` ended, and the same a second of the window:
/// the lock's hand-offs (a lock wakes one waiter at its release). None without the waits' stacks,
/// which count them.
fn handoffs(cx: &Context, waiters: &[u32], wakers: &[u32]) -> (Option<u64>, Option<f64>) {
    let n = cx.report.stacks.as_ref().map(|s| s.waits_behind(waiters, State::FutexWait, |by| wakers.contains(&by)));
    (n, n.and_then(|n| per_second(n, cx.window_ns)))
}

/// The largest set of `nodes` in which every node reaches every other along `next` (a waiter's
/// wakers): a strongly connected part of the wake graph. The edges are listed once each way,
/// so a part costs one walk of the graph each way (a JVM may have hundreds of such threads).
fn round(nodes: &BTreeSet<u32>, next: impl Fn(u32) -> Vec<u32>) -> BTreeSet<u32> {
    let mut fwd: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut back: HashMap<u32, Vec<u32>> = HashMap::new();
    for &n in nodes {
        for m in next(n).into_iter().filter(|m| nodes.contains(m)) {
            fwd.entry(n).or_default().push(m);
            back.entry(m).or_default().push(n);
        }
    }
    let reach = |from: u32, edges: &HashMap<u32, Vec<u32>>| {
        let mut seen = BTreeSet::from([from]);
        let mut todo = vec![from];
        while let Some(t) = todo.pop() {
            for &n in edges.get(&t).into_iter().flatten() {
                if seen.insert(n) {
                    todo.push(n);
                }
            }
        }
        seen
    };
    let mut best = BTreeSet::new();
    let mut done = BTreeSet::new();
    for &n in nodes {
        if done.contains(&n) {
            continue;
        }
        let part: BTreeSet<u32> = reach(n, &fwd).intersection(&reach(n, &back)).copied().collect();
        done.extend(part.iter().copied());
        if part.len() > best.len() {
            best = part;
        }
    }
    best
}

impl Claim for LockConvoy {
    fn kind(&self) -> &'static str {
        "lock_convoy"
    }
    fn explains_ns(&self) -> u64 {
        self.wait_ns
    }
    fn precedence(&self) -> u8 {
        5
    }
    /// The waiters' own blocked lines.
    fn repeats(&self) -> Vec<Repeat> {
        self.waiters.iter().map(|tid| Repeat { tid: Some(*tid), states: &[State::FutexWait, State::IoWait] }).collect()
    }
    fn together(&self) -> &[u32] {
        &self.waiters
    }
    /// The lock's releasers.
    fn culprits(&self) -> Vec<u32> {
        self.wakers.iter().map(|t| t.tid).collect()
    }
    fn code(&self, stacks: &WaitStacks, _switch_ns: u64) -> Option<Code> {
        code::convoy(&self.waiters, &self.culprits(), stacks)
    }
}

impl fmt::Display for LockConvoy {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let LockConvoy {
            futex,
            waiters,
            wait_ns,
            window_ns,
            wakers,
            waiting_at_a_time,
            handoffs,
            handoffs_per_s,
            unmeasured_python,
            mechanism,
        } = self;
        let wakers: Vec<String> = wakers.iter().take(4).map(ThreadRef::or_thread_tid).collect();
        // the queue, and how often the lock changed hands
        let queue = match (handoffs.filter(|n| *n > 0), handoffs_per_s) {
            (Some(_), Some(rate)) => format!(" ({waiting_at_a_time:.1} waiting at a time; handed on {}/s)", human_rate(*rate)),
            _ => format!(" ({waiting_at_a_time:.1} waiting at a time)"),
        };
        let Some(futex) = futex else {
            // the lock as the waiters' frames name it, else only what was seen
            let lock = match mechanism {
                Some(m) => format!("one lock, {}, whose waiters each park on a word of their own", m.said()),
                None => "one lock whose waiters each park on a word of their own".to_string(),
            };
            return write!(
                f,
                "lock convoy: {} threads waited {:.1} s in total in {:.1} s{queue}, each woken by another of them ({}): they take turns on {lock}",
                waiters.len(),
                secs(*wait_ns),
                secs(*window_ns),
                wakers.join(", ")
            );
        };
        let word = if blame::is_parked(*futex) { "CPython lock" } else { "futex" };
        write!(
            f,
            "lock convoy on {word} {:#x}: {} threads waited {:.1} s in total in {:.1} s{queue}, woken by {}: they take turns on one lock",
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    /// Three threads waiting 3 s of 4 on one word, each woken by the next; the last by `last`.
    fn three_on_one_word(last: u32) -> Vec<ThreadRow> {
        (1..=3)
            .map(|i| {
                let mut r = row(i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, S)]);
                r.futex.push(FutexWait { addr: 0xabc, waker: if i == 3 { last } else { i + 1 }, ns: 3 * S });
                r
            })
            .collect()
    }

    #[test]
    fn lock_convoy() {
        let rows = three_on_one_word(99);
        let f = every_finding_of(rows.clone(), 4 * S);
        assert_eq!(kinds(&f), ["lock_convoy", "blocked", "blocked", "blocked"]);
        // as shown, the convoy's waiters are in its line
        assert_eq!(kinds(&findings_of(rows, 4 * S, 4.0, None)), ["lock_convoy"]);
        let wakers = vec![named(2, "w2"), named(3, "w3"), ThreadRef { tid: 99, name: None, folded: 0 }];
        let convoy = LockConvoy {
            futex: Some(0xabc),
            waiters: vec![1, 2, 3],
            wait_ns: 9 * S,
            window_ns: 4 * S,
            wakers,
            waiting_at_a_time: 2.25,
            handoffs: None,
            handoffs_per_s: None,
            unmeasured_python: None,
            mechanism: None,
        };
        check(
            &f[0],
            convoy,
            9 * S,
            "lock convoy on futex 0xabc: 3 threads waited 9.0 s in total in 4.0 s (2.2 waiting at a time), woken by w2 (2), w3 (3), thread 99: they take turns on one lock",
        );
    }

    /// With the waits' stacks, which count each wait, the line says how often the lock changed
    /// hands: the waiters' futex waits a waker of the lock ended, not those it did not (a timeout,
    /// another thread).
    #[test]
    fn a_convoy_says_how_often_the_lock_was_handed_on() {
        use crate::model::stacks::{Frame, Key, Lengths, Role};
        let mut r = ProcessReport::new(1, "svc".into(), None, 4 * S, None, three_on_one_word(1));
        r.cpu_limit_cores = 4.0;
        let mut w = WaitStacks::default();
        let stack: crate::model::stacks::Stack = vec![Frame::native("pthread_mutex_lock".into(), "/lib/libc.so.6".into())].into();
        for (victim, blamed, waits) in [(1, 2, 300), (2, 3, 300), (3, 1, 300), (3, 0, 1000), (2, 77, 1000)] {
            let key = Key { victim, blamed, state: State::FutexWait, role: Role::Victim, stack: stack.clone() };
            w.add_waits(key, S, &Lengths { waits, ..Default::default() });
        }
        r.stacks = Some(w);
        let f = crate::report::fixtures::all_findings(&r);
        let convoy = f.iter().find(|f| f.claim.kind() == "lock_convoy").expect("the convoy");
        let json = serde_json::to_value(convoy).unwrap();
        assert_eq!((json["handoffs"].as_u64(), json["handoffs_per_s"].as_f64()), (Some(900), Some(225.0)), "{json}");
        assert!(convoy.to_string().contains("in 4.0 s (2.2 waiting at a time; handed on 225/s), woken by"), "{convoy}");
    }

    /// Threads that each park on a word of their own (a JVM monitor's waiters), woken by one
    /// another round and round while they work: a convoy. The same waits as a pipeline (each
    /// stage woken by the one before, none back), as a pool woken by its producer, or with
    /// nobody working: none.
    #[test]
    fn a_convoy_on_a_lock_whose_waiters_park_on_words_of_their_own() {
        let rows = |wakes: &[(u32, u32)], running: u64| -> Vec<ThreadRow> {
            (1..=4)
                .map(|i| {
                    let mut r = row(i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, running)]);
                    let mine: Vec<u32> = wakes.iter().filter(|(v, _)| *v == i).map(|(_, w)| *w).collect();
                    for w in &mine {
                        r.futex.push(FutexWait { addr: 0x1000 * i as u64, waker: *w, ns: 3 * S / mine.len() as u64 });
                    }
                    r
                })
                .collect()
        };
        let ring = [(1, 2), (1, 3), (2, 3), (3, 4), (4, 1)];
        let f = findings_of(rows(&ring, S), 4 * S, 4.0, None);
        assert_eq!(kinds(&f), ["lock_convoy"]);
        let wakers = vec![named(3, "w3"), named(1, "w1"), named(4, "w4"), named(2, "w2")];
        let convoy = LockConvoy {
            futex: None,
            waiters: vec![1, 2, 3, 4],
            wait_ns: 12 * S,
            window_ns: 4 * S,
            wakers,
            waiting_at_a_time: 3.0,
            handoffs: None,
            handoffs_per_s: None,
            unmeasured_python: None,
            mechanism: None,
        };
        check(
            &f[0],
            convoy.clone(),
            12 * S,
            "lock convoy: 4 threads waited 12.0 s in total in 4.0 s (3.0 waiting at a time), each woken by another of them (w3 (3), w1 (1), w4 (4), w2 (2)): they take turns on one lock whose waiters each park on a word of their own",
        );
        // the lock as the frames of the waits name it: a JVM monitor's enter, on most of them
        let frames = |names: &[&str]| -> Vec<crate::model::stacks::Frame> {
            names.iter().map(|n| crate::model::stacks::Frame::jit((*n).into())).collect()
        };
        let mut w = WaitStacks::default();
        let key = |victim, blamed, stack: Vec<crate::model::stacks::Frame>| crate::model::stacks::Key {
            victim,
            blamed,
            state: State::FutexWait,
            role: Role::Victim,
            stack: stack.into(),
        };
        w.add(key(1, 2, frames(&["ObjectMonitor::EnterI", "Pool.reprice"])), 3 * S);
        w.add(key(2, 3, frames(&["ObjectMonitor::EnterI", "Pool.reprice"])), 3 * S);
        w.add(key(3, 4, frames(&["java.util.concurrent.locks.ReentrantLock.lock", "Pool.other"])), S);
        // a wait no member ended (a dispatcher's hand of work) says nothing of the lock
        w.add(key(4, 9, frames(&["java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire"])), 9 * S);
        assert_eq!(mechanism(Some(&w), &[1, 2, 3, 4], &[1, 2, 3, 4]), Some(Mechanism::JvmMonitor));
        assert_eq!(mechanism(None, &[1, 2, 3, 4], &[1, 2, 3, 4]), None);
        let named_lock = LockConvoy { mechanism: Some(Mechanism::JvmMonitor), ..convoy.clone() };
        assert!(
            named_lock
                .to_string()
                .ends_with("they take turns on one lock, a JVM monitor: `synchronized`, whose waiters each park on a word of their own"),
            "{named_lock}"
        );
        let convoy_of = |rows: Vec<ThreadRow>| kinds(&every_finding_of(rows, 4 * S)).iter().filter(|k| *k == "lock_convoy").count();
        assert_eq!(convoy_of(rows(&[(2, 1), (3, 2), (4, 3)], S)), 0, "a pipeline");
        assert_eq!(convoy_of(rows(&[(1, 2), (2, 1), (3, 4), (4, 3)], S)), 0, "two pairs, each handing work back and forth");
        assert_eq!(convoy_of(rows(&[(1, 9), (2, 9), (3, 9), (4, 9)], S)), 0, "a pool and its producer");
        assert_eq!(convoy_of(rows(&ring, 0)), 0, "nobody worked");
        // a thread the members hand work to, which wakes them when it is done (a JVM's VM thread
        // and the GCs they ask it for), woken round with them but hardly working: not a member
        let mut with_vm = rows(&ring, S);
        let mut vm = row(9, "VM Thread", &[(State::FutexWait, 4 * S - S / 100), (State::Running, S / 100)]);
        for m in 1..=4u32 {
            vm.futex.push(FutexWait { addr: 0x9000, waker: m, ns: S - S / 400 });
            with_vm[m as usize - 1].futex.push(FutexWait { addr: 0x1000 * m as u64 + 8, waker: 9, ns: S / 2 });
        }
        with_vm.push(vm);
        let f = every_finding_of(with_vm, 4 * S);
        let convoy = f.iter().find(|f| f.claim.kind() == "lock_convoy").expect("the convoy");
        assert_eq!(convoy.claim.together(), [1, 2, 3, 4]);
        // a word two of them wait on is not a word of their own: the convoy rule on one word's
        let mut shared = rows(&ring, S);
        shared[1].futex[0].addr = 0x1000;
        assert_eq!(convoy_of(shared), 0);
    }

    /// Threads woken round by one another, each parked on a word of its own, whose waits hold no
    /// application code (a Go runtime's idle threads, parked in its scheduler until one that
    /// found work wakes another): waiting for work, no convoy. The same waits made from the
    /// application's code, taking a lock: the convoy.
    #[test]
    fn threads_woken_round_between_units_of_work_are_no_convoy() {
        use crate::model::stacks::{Frame, Key, Stack};
        let ring = [(1u32, 2u32), (2, 3), (3, 4), (4, 1)];
        let of = |stack: Stack| {
            let rows: Vec<ThreadRow> = ring
                .iter()
                .map(|(i, w)| {
                    let mut r = row(*i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, S)]);
                    r.futex.push(FutexWait { addr: 0x1000 * *i as u64, waker: *w, ns: 3 * S });
                    r
                })
                .collect();
            let mut r = ProcessReport::new(1, "svc".into(), None, 4 * S, None, rows);
            r.cpu_limit_cores = 4.0;
            let mut w = WaitStacks::default();
            for (victim, blamed) in ring {
                w.add(Key { victim, blamed, state: State::FutexWait, role: Role::Victim, stack: stack.clone() }, 3 * S);
            }
            r.stacks = Some(w);
            crate::report::fixtures::all_findings(&r).iter().filter(|f| f.claim.kind() == "lock_convoy").count()
        };
        let lib = |f: &str| Frame::native_library(f.into(), "/srv/svc".into());
        let parked: Stack = vec![lib("runtime.futex.abi0"), lib("runtime.notesleep"), lib("runtime.stopm"), lib("runtime.schedule")].into();
        assert_eq!(of(parked), 0, "waiting for work");
        let locking: Stack =
            vec![lib("runtime.futex.abi0"), lib("sync.(*Mutex).lockSlow"), Frame::native("main.reprice".into(), "/srv/svc".into())].into();
        assert_eq!(of(locking), 1, "a lock taken in the middle of the work");
    }

    /// A pool on a quiet machine whose every task passes one lock: each worker parks on its
    /// queue's word, woken by the dispatcher with work, for most of its waits, and on its lock
    /// word, woken by the worker that let go, for a third of its time, holding it a fifth. No
    /// worker waits the most of its time for the others, yet 2 of them wait at a time: the lock
    /// is one convoy, and its waits are the lock words' alone. A word woken by the others for
    /// less than half of its waits is no lock word.
    #[test]
    fn a_pool_whose_tasks_pass_one_lock_is_a_convoy_though_it_waits_mostly_for_work() {
        let pool = |peers_on_lock: u64| -> Vec<ThreadRow> {
            (1..=6u32)
                .map(|i| {
                    let mut r =
                        row(i, &format!("pool-{i}"), &[(State::FutexWait, 38 * S / 10), (State::Running, S), (State::Runqueue, S / 5)]);
                    // the queue word: 2 s, ended by the dispatcher (99)
                    r.futex.push(FutexWait { addr: 0x2000 * i as u64, waker: 99, ns: 2 * S });
                    // the lock word: 1.8 s, ended by the next worker round, or by the dispatcher
                    let next = if i == 6 { 1 } else { i + 1 };
                    r.futex.push(FutexWait { addr: 0x2000 * i as u64 + 8, waker: next, ns: peers_on_lock });
                    r.futex.push(FutexWait { addr: 0x2000 * i as u64 + 8, waker: 99, ns: 18 * S / 10 - peers_on_lock });
                    r
                })
                .collect()
        };
        let f = every_finding_of(pool(18 * S / 10), 5 * S);
        let convoy = f.iter().find(|f| f.claim.kind() == "lock_convoy").expect("the convoy");
        assert_eq!(convoy.claim.together(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(convoy.claim.explains_ns(), 6 * 18 * S / 10, "the lock words' waits, not the queue's");
        let lock_convoys = |rows| every_finding_of(rows, 5 * S).iter().filter(|f| f.claim.kind() == "lock_convoy").count();
        assert_eq!(lock_convoys(pool(8 * S / 10)), 0, "a word the others ended 44% of the waits on");
    }
}
