//! `attach --output json`: the stable object of docs/architecture.md.
//! Keys may be added, never renamed.
use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::finding::Finding;
use super::serial::{hex_addr, is_zero_u32, round4, round6};
use super::verdict::Verdict;
use super::{ProcessReport, PythonInfo, ThreadRow};
use crate::model::blame;
use crate::model::partition::{secs, Times};
use crate::model::state::State;

/// Seconds per state: an object keyed by `State::name()`, in the time model's order (`State::ALL`).
#[derive(Debug, PartialEq)]
pub struct Seconds(pub Times);

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(State::ALL.len()))?;
        for state in State::ALL {
            map.serialize_entry(state.name(), &round6(secs(self.0.get(state))))?;
        }
        map.end()
    }
}

#[derive(Serialize, Debug)]
pub struct JsonThread {
    pub tid: u32,
    pub name: String,
    pub comm: String,
    pub seconds: Seconds,
    /// waiting / (waiting + running); null when the thread neither ran nor waited
    pub wait_ratio: Option<f64>,
    /// holder TID -> seconds of gil_wait ("unknown": the GIL was free or unreadable at the wait's start)
    pub gil_wait_by_holder: BTreeMap<String, f64>,
    /// futex_wait per waker TID ("timeout": ended by a timeout or signal; "other": wakers beyond
    /// the 64 kept by name per thread, exited or quiet), closed waits only
    pub futex_wait_by_waker: BTreeMap<String, f64>,
    /// run-queue wait per what had the CPU: a TID of this process, "pid N (comm)", or "idle"
    pub runqueue_by_preemptor: BTreeMap<String, f64>,
    /// closed waits of each blocked state but the GIL's per what woke them: `{state: {waker:
    /// seconds}}`, the waker a TID of this process, "pid N (comm)" (another process, a kernel
    /// thread), "softirq" or "interrupt" (charged to no task), "other" (past those kept by
    /// name); absent when none was seen
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub woken_by: BTreeMap<&'static str, BTreeMap<String, f64>>,
    /// the age of what this thread handled (waitmeter_client samples), if any
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age: Option<JsonAge>,
    /// times the thread gave the CPU away with sched_yield(2) (its `yield` time
    /// followed them); absent when it never did
    #[serde(skip_serializing_if = "is_zero")]
    pub yields: u64,
    /// times the thread went to wait for the GIL in the window (each ends with the GIL handed
    /// to it, or CPython's timed re-wait); absent when it never did
    #[serde(skip_serializing_if = "is_zero")]
    pub gil_waits: u64,
    /// the worst interval (`attach --interval`, 1 s) in each waiting or blocked state it was in:
    /// `{state: {share, at_s, interval_s, stretch_s}}`; absent when not followed interval by interval
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peaks: Option<BTreeMap<&'static str, JsonPeak>>,
    /// its CPU time in the window in user and in kernel mode (/proc's ticks, 10 ms each);
    /// absent for a thread that exited before the end
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_s: Option<f64>,
    /// its most frequent syscalls (at most `TOP_SYSCALLS`, most calls first); absent when not
    /// counted (`run` without --syscalls) or none returned
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub syscalls: Vec<JsonSyscall>,
    /// GIL hold times, with --gil-probe uprobe only
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gil_hold: Option<JsonHold>,
    /// its stretches away from its home wait (the wait it spent most of its blocked time in):
    /// how long it was kept from it each time; absent when it has no home (docs/verdicts.md)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stretches: Option<JsonStretches>,
    /// time the thread existed within the window (the sum of `seconds`)
    pub existed_s: f64,
    pub exited: bool,
    /// a row of this many short-lived threads of one role, summed (`name` is the role, `tid`
    /// the first of them; `attach --each-thread` keeps a row each); absent: one thread
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub folded_threads: u32,
}

#[derive(Serialize, Debug)]
pub struct JsonAge {
    /// endpoint (--age-url) or client (waitmeter_client)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    pub samples: usize,
    pub first_s: f64,
    pub last_s: f64,
    pub max_s: f64,
    pub mean_s: f64,
    pub growth_s: f64,
    /// seconds of age per second (least squares)
    pub slope: f64,
    pub rising: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_s: Option<f64>,
    /// endpoint: malformed lines of its expositions skipped, since the start
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_lines: Option<u64>,
    /// endpoint: polls that gave no reading, since the start
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_polls: Option<u64>,
}

fn age(source: Option<&'static str>, a: &crate::model::age::AgeSummary, p50: Option<f64>, p99: Option<f64>) -> JsonAge {
    JsonAge {
        source,
        samples: a.samples,
        first_s: round6(a.first_s),
        last_s: round6(a.last_s),
        max_s: round6(a.max_s),
        mean_s: round6(a.mean_s),
        growth_s: round6(a.growth_s),
        slope: round6(a.slope),
        rising: a.rising,
        p50_s: p50.map(round6),
        p99_s: p99.map(round6),
        skipped_lines: None,
        failed_polls: None,
    }
}

#[derive(Serialize, Debug)]
pub struct JsonFutex {
    /// the futex word's address in the process, hex; of a `parked` wait, the address parked on
    pub addr: String,
    /// "futex": a futex word; "parked": what CPython 3.13+ threads parked on (a PyMutex, threading.Lock, event)
    pub kind: &'static str,
    pub wait_s: f64,
    pub waiters: Vec<u32>,
    pub wakers: Vec<u32>,
}

#[derive(Serialize, Debug)]
pub struct JsonCgroup {
    pub path: String,
    /// CFS quota in cores; null: unlimited
    pub quota_cores: Option<f64>,
    pub period_s: Option<f64>,
    /// over the window, from cpu.stat
    pub throttled_s: f64,
    pub nr_throttled: u64,
    pub nr_periods: u64,
    /// throttled stretches of the process' threads in the window
    pub throttled_stretches: usize,
    /// they end on the CFS period boundary (the throttling signature)
    pub period_signature: bool,
}

/// GIL holds of a thread: how many, how long in total, and quantiles (upper
/// bounds of log2 buckets).
#[derive(Serialize, Debug)]
pub struct JsonHold {
    pub count: u64,
    pub total_s: f64,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
}

/// A thread's stretches away from its home wait over the window (`model::stretches`).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct JsonStretches {
    /// the home wait: its syscall ("epoll_wait", "futex")
    pub home: String,
    /// the futex word or parked address of a futex home
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::report::serial::hex_some")]
    pub futex: Option<u64>,
    /// time blocked in the home wait (waiting for work)
    pub home_wait_s: f64,
    /// stretches that ended in the window (the thread blocked at home again), their sum and
    /// quantiles (within a quarter octave), and the longest
    pub count: u64,
    pub total_s: f64,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub max_s: f64,
    /// the stalls: stretches at least the objective long, and the thread's time per state in them
    pub objective_s: f64,
    pub stalls: u64,
    pub stall_s: f64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub stall_states: BTreeMap<&'static str, f64>,
    /// its other waits that closed stretches, most blocked time first (how the home was chosen)
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_waits: Vec<JsonWait>,
}

/// One of a thread's waits besides its home: the syscall, the futex block, the time blocked in
/// it before each stretch, and the stretches.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct JsonWait {
    pub wait: String,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::report::serial::hex_some")]
    pub futex: Option<u64>,
    pub blocked_s: f64,
    pub count: u64,
}

/// Syscalls listed per thread in the JSON.
pub const TOP_SYSCALLS: usize = 8;

/// One syscall of a thread over the window (`model::syscalls::SyscallCount`).
#[derive(Serialize, Debug)]
pub struct JsonSyscall {
    pub name: String,
    pub nr: u32,
    /// calls that returned in the window, and per second of the thread's time in it
    pub calls: u64,
    pub per_s: f64,
    /// entry to return, summed: in the kernel, blocked time included
    pub seconds: f64,
}

/// A thread's worst interval in one state (`model::peaks::Peak`).
#[derive(Serialize, Debug)]
pub struct JsonPeak {
    /// the share of the interval spent in the state
    pub share: f64,
    /// when the interval began, after the window opened, and its length
    pub at_s: f64,
    pub interval_s: f64,
    /// the longest run of consecutive intervals at least half in the state
    pub stretch_s: f64,
}

/// The states whose peaks the JSON carries: the waits, and the blocked states a stall shows in.
pub const PEAK_STATES: [State; 5] = [State::Runqueue, State::Throttled, State::GilWait, State::FutexWait, State::IoWait];

#[derive(Serialize, Debug)]
pub struct JsonReport {
    pub pid: u32,
    pub comm: String,
    /// the container (and pod) it runs in; absent: the host
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub duration_s: f64,
    /// when the window opened, in seconds since the Unix epoch (to join with other data)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_unix_s: Option<f64>,
    /// Python interpreter facts; null for a non-Python process
    pub python: Option<PythonInfo>,
    /// the facts that decide waits: clock source, allowed and isolated CPUs
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<super::environment::Environment>,
    /// the CPU cgroup: quota and throttling over the window; null when not found
    pub cgroup: Option<JsonCgroup>,
    pub threads: Vec<JsonThread>,
    /// the futex words with the most wait
    pub top_futexes: Vec<JsonFutex>,
    /// the application's age over the window; null without an age source (or samples)
    pub age: Option<JsonAge>,
    /// cores used on average, and the cores it may use (quota, else the machine's CPUs)
    pub cpu_used_cores: f64,
    pub cpu_limit_cores: f64,
    /// the findings in plain words, most important first, as the text report shows them:
    /// idle threads in one line, at most `verdict::MAX_LINES` lines (every finding with `-v`)
    pub verdict: Vec<String>,
    /// every finding as a typed value, ranked the same way: `kind`, the evidence, `explains_s`
    /// (idle threads one by one: `blocked` with `idle: true`)
    pub findings: Vec<Finding>,
    /// the process exited during the window
    pub exited: bool,
    pub exited_after_s: Option<f64>,
    /// wait time by the code each side ran (`model::stacks::site_of`), most
    /// first, at most WAIT_SITES entries; absent when stacks were not taken
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_sites: Option<Vec<JsonSite>>,
    /// where GIL holders were while others waited behind them, with the
    /// lengths of those waits (each at least the hold it sat behind), most
    /// first, at most HOLD_SITES entries; absent without stacks or GIL
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gil_holds_by_function: Option<Vec<JsonHoldSite>>,
    /// kernel events lost during the window (the numbers are incomplete by
    /// them), by probe and reason as `waitmeter_bpf_events_lost_total` names
    /// them; empty when nothing was lost
    pub events_lost: Vec<JsonLost>,
    /// the process and those it started, each with the CPU time it wanted and its run-queue
    /// wait (`attach --children`); absent otherwise
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<super::family::Family>,
}

#[derive(Serialize, Debug)]
pub struct JsonLost {
    pub probe: &'static str,
    pub reason: &'static str,
    pub count: u64,
}

/// Entries of `gil_holds_by_function`.
pub const HOLD_SITES: usize = 50;

#[derive(Serialize, Debug)]
pub struct JsonHoldSite {
    /// the GIL holder (TID) and its name
    pub holder: u32,
    pub holder_name: Option<String>,
    /// its code (`wait_sites`' form)
    pub function: String,
    /// time threads waited behind it there
    pub waited_s: f64,
    /// holds that ended there, as the waiters saw them: from a waiter's first
    /// wait behind it to the release that woke it (at least that long)
    pub holds: u64,
    /// their mean length (summed in the kernel)
    pub mean_s: f64,
    /// their lengths' quantiles, interpolated within power-of-two buckets (so a p50 is only
    /// known within its bucket: holds all of 36 ms read as a p50 of 48 ms; `mean_s` is exact)
    pub p50_s: f64,
    pub p99_s: f64,
    pub max_s: f64,
    /// holds of two switch intervals or more: the GIL held without a switch
    pub without_switch: u64,
}

fn holds_by_function(r: &ProcessReport, w: &crate::model::stacks::WaitStacks) -> Option<Vec<JsonHoldSite>> {
    let switch_ns = r.python.as_ref()?.switch_ns();
    let names: std::collections::HashMap<u32, &str> = r.threads.iter().map(|t| (t.tid, t.name.as_str())).collect();
    let secs6 = |ns: f64| round6(ns / 1e9);
    Some(
        w.holds_by_site(None)
            .into_iter()
            .take(HOLD_SITES)
            .map(|h| JsonHoldSite {
                holder: h.holder,
                holder_name: names.get(&h.holder).map(|n| n.to_string()),
                waited_s: round6(secs(h.ns)),
                holds: h.lengths.waits,
                mean_s: secs6(h.lengths.sum_ns as f64 / h.lengths.waits.max(1) as f64),
                p50_s: secs6(h.lengths.quantile(0.5).unwrap_or(0.0)),
                p99_s: secs6(h.lengths.quantile(0.99).unwrap_or(0.0)),
                max_s: secs6(h.lengths.max_ns as f64),
                without_switch: h.lengths.at_least(2.0 * switch_ns as f64).round() as u64,
                function: h.site,
            })
            .collect(),
    )
}

/// Entries of `wait_sites`.
pub const WAIT_SITES: usize = 200;

#[derive(Serialize, Debug)]
pub struct JsonSite {
    /// the thread that waited
    pub tid: u32,
    pub state: &'static str,
    /// whose code `site` is: victim (the thread that waited), holder, waker, preemptor
    pub role: &'static str,
    /// who it waited behind (TID); null: unknown or nobody
    pub blamed: Option<u32>,
    pub site: String,
    pub seconds: f64,
}

fn wait_sites(w: &crate::model::stacks::WaitStacks) -> Vec<JsonSite> {
    let mut by: std::collections::HashMap<(u32, State, crate::model::stacks::Role, u32, String), u64> = Default::default();
    for (k, ns) in &w.ns {
        *by.entry((k.victim, k.state, k.role, k.blamed, crate::model::stacks::site_of(&k.stack))).or_default() += ns;
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter()
        .take(WAIT_SITES)
        .map(|((tid, state, role, blamed, site), ns)| JsonSite {
            tid,
            state: state.name(),
            role: role.label(),
            blamed: (blamed != 0).then_some(blamed),
            site,
            seconds: round6(secs(ns)),
        })
        .collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A thread's stretches at home as the JSON has them (None: it has no home).
pub fn stretches(row: &ThreadRow) -> Option<JsonStretches> {
    row.stretches.as_ref().and_then(|s| Some((s.at_home()?, s))).map(|((k, h), all)| JsonStretches {
        other_waits: all
            .waits
            .iter()
            .filter(|(w, _)| *w != k)
            .map(|(w, h)| JsonWait {
                wait: w.name(),
                futex: w.is_futex().then_some(w.word()),
                blocked_s: round6(secs(h.wait_ns)),
                count: h.count,
            })
            .collect(),
        home: k.name(),
        futex: k.is_futex().then_some(k.word()),
        home_wait_s: round6(secs(h.wait_ns)),
        count: h.count,
        total_s: round6(secs(h.ns)),
        p50_s: h.quantile_ns(0.5, 0).map(|n| round6(secs(n))),
        p99_s: h.quantile_ns(0.99, 0).map(|n| round6(secs(n))),
        max_s: round6(secs(h.max_ns)),
        objective_s: round6(secs(all.objective_ns)),
        stalls: h.long_count,
        stall_s: round6(secs(h.long_ns)),
        stall_states: State::ALL
            .into_iter()
            .filter(|s| h.long_state_ns[*s as usize] > 0)
            .map(|s| (s.name(), round6(secs(h.long_state_ns[s as usize]))))
            .collect(),
    })
}

pub fn thread(row: &ThreadRow) -> JsonThread {
    JsonThread {
        tid: row.tid,
        name: row.name.clone(),
        comm: row.comm.clone(),
        seconds: Seconds(row.times),
        wait_ratio: row.times.wait_ratio_shown().map(round4),
        gil_wait_by_holder: row
            .gil_by_holder
            .iter()
            .filter(|(_, ns)| **ns > 0)
            .map(|(tid, ns)| (if *tid == 0 { "unknown".to_string() } else { tid.to_string() }, round6(secs(*ns))))
            .collect(),
        futex_wait_by_waker: row
            .futex_by_waker()
            .iter()
            .map(|(tid, ns)| {
                let who = match *tid {
                    0 => "timeout".to_string(),
                    crate::model::blame::GONE => "other".to_string(),
                    t => t.to_string(),
                };
                (who, round6(secs(*ns)))
            })
            .collect(),
        runqueue_by_preemptor: row.runqueue_by.iter().map(|(p, ns)| (p.key(), round6(secs(*ns)))).collect(),
        woken_by: row.woken_by.iter().fold(BTreeMap::new(), |mut m, ((s, w), ns)| {
            *m.entry(s.name()).or_insert_with(BTreeMap::new).entry(w.key()).or_insert(0.0) += round6(secs(*ns));
            m
        }),
        age: row.age.as_ref().map(|a| age(None, a, None, None)),
        yields: row.yields,
        gil_waits: row.gil_waits,
        user_s: row.cpu_split.map(|(u, _)| round6(secs(u))),
        system_s: row.cpu_split.map(|(_, k)| round6(secs(k))),
        syscalls: row
            .syscalls
            .iter()
            .take(TOP_SYSCALLS)
            .map(|c| JsonSyscall {
                name: crate::model::syscalls::name(c.nr),
                nr: c.nr,
                calls: c.calls,
                per_s: round4(c.calls as f64 / secs(row.times.total()).max(1e-9)),
                seconds: round6(secs(c.ns)),
            })
            .collect(),
        stretches: stretches(row),
        peaks: row.peaks.as_ref().map(|p| {
            PEAK_STATES
                .into_iter()
                .filter(|s| p.get(*s).ns > 0)
                .map(|s| {
                    let k = p.get(s);
                    (
                        s.name(),
                        JsonPeak {
                            share: round4(k.share()),
                            at_s: round6(secs(k.at_ns)),
                            interval_s: round6(secs(k.len_ns)),
                            stretch_s: round6(secs(k.stretch_ns)),
                        },
                    )
                })
                .collect()
        }),
        gil_hold: row.gil_hold.map(|h| JsonHold {
            count: h.count,
            total_s: round6(secs(h.sum_ns)),
            p50_s: h.quantile_ns(0.5).map(|n| round6(secs(n))),
            p99_s: h.quantile_ns(0.99).map(|n| round6(secs(n))),
        }),
        existed_s: round6(secs(row.existed_ns)),
        exited: row.exited,
        folded_threads: row.folded,
    }
}

/// The JSON object of `r`, whose verdict `v` is (`verdict::analyse`).
pub fn report(r: &ProcessReport, v: &Verdict) -> JsonReport {
    JsonReport {
        pid: r.pid,
        comm: r.comm.clone(),
        container: r.container.clone(),
        duration_s: round6(secs(r.duration_ns)),
        started_unix_s: r.started_unix_ns.map(|n| round6(n as f64 / 1e9)),
        python: r.python.clone(),
        environment: r.environment.clone(),
        cgroup: r.cgroup.as_ref().map(|c| JsonCgroup {
            path: c.path.clone(),
            quota_cores: c.quota_cores,
            period_s: c.period_s,
            throttled_s: round6(c.throttled_s),
            nr_throttled: c.nr_throttled,
            nr_periods: c.nr_periods,
            throttled_stretches: r.throttling.as_ref().map_or(0, |t| t.stretches),
            period_signature: r.throttling.as_ref().is_some_and(|t| t.signature),
        }),
        threads: r.threads.iter().map(thread).collect(),
        age: r.age.as_ref().map(|a| JsonAge {
            skipped_lines: a.skipped_lines,
            failed_polls: a.failed_polls,
            ..age(Some(a.source), &a.summary, a.p50_s, a.p99_s)
        }),
        cpu_used_cores: round6(r.cpu_used_cores()),
        cpu_limit_cores: r.cpu_limit_cores,
        top_futexes: r
            .top_futexes
            .iter()
            .map(|f| JsonFutex {
                addr: hex_addr(f.addr),
                kind: if blame::is_parked(f.addr) { "parked" } else { "futex" },
                wait_s: round6(secs(f.wait_ns)),
                waiters: f.waiters.clone(),
                wakers: f.wakers.clone(),
            })
            .collect(),
        verdict: v.shown.iter().map(Finding::to_string).collect(),
        findings: v.all.clone(),
        exited: r.exited_after_ns.is_some(),
        exited_after_s: r.exited_after_ns.map(|n| round6(secs(n))),
        wait_sites: r.stacks.as_ref().map(wait_sites),
        gil_holds_by_function: r.stacks.as_ref().and_then(|w| holds_by_function(r, w)),
        events_lost: r.events_lost.iter().map(|l| JsonLost { probe: l.probe.label(), reason: l.reason.label(), count: l.count }).collect(),
        family: r.family.clone(),
    }
}

pub fn render(r: &ProcessReport, v: &Verdict) -> String {
    serde_json::to_string_pretty(&report(r, v)).expect("a report always serializes")
}

/// `render` on one line (JSON Lines: a report per process of `attach -p A,B`).
pub fn render_line(r: &ProcessReport, v: &Verdict) -> String {
    serde_json::to_string(&report(r, v)).expect("a report always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::partition::Times;

    #[test]
    fn shape_is_the_documented_one() {
        let mut t = Times::default();
        t.0[State::Running.index()] = 200_000_000;
        t.0[State::GilWait.index()] = 9_500_000_000;
        t.0[State::Runqueue.index()] = 100_000_000;
        let row = ThreadRow {
            tid: 1234,
            name: "MainThread".into(),
            comm: "python3.11".into(),
            times: t,
            existed_ns: t.total(),
            ..Default::default()
        };
        let r = ProcessReport::new(1234, "python3.11".into(), None, 10_000_000_000, None, vec![row]);
        let v: serde_json::Value = serde_json::from_str(&render(&r, &crate::report::verdict::analyse(&r))).unwrap();
        for key in ["pid", "comm", "duration_s", "python", "cgroup", "threads", "top_futexes", "verdict"] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["pid"], 1234);
        assert_eq!(v["duration_s"], 10.0);
        assert!(v["python"].is_null());
        let th = &v["threads"][0];
        assert_eq!(th["tid"], 1234);
        assert_eq!(th["name"], "MainThread");
        let secs = th["seconds"].as_object().unwrap();
        let keys: Vec<_> = secs.keys().cloned().collect();
        let mut want: Vec<_> = State::ALL.iter().map(|s| s.name().to_string()).collect();
        want.sort();
        let mut got = keys.clone();
        got.sort();
        assert_eq!(got, want);
        assert_eq!(th["seconds"]["gil_wait"], 9.5);
        assert_eq!(th["wait_ratio"], 0.9796); // (9.5 + 0.1) / (9.5 + 0.1 + 0.2)
        assert!(th["gil_wait_by_holder"].is_object());
        assert!(v["verdict"].is_array());
        assert_eq!(v["exited"], false);
    }

    #[test]
    fn the_json_is_pinned() {
        let r = crate::report::fixtures::full_report();
        let json = render(&r, &crate::report::verdict::analyse(&r));
        crate::report::fixtures::bless("full_report.json", &json);
        assert_eq!(json, include_str!("testdata/full_report.json"));
    }
}
