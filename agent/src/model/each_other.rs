//! Processes that wait on each other: which of the processes measured together spent their time
//! blocked until another of them woke them, taking turns on something one holds while the others
//! wait (a database's backends queued on one row's lock, workers on a lock in shared memory).
//! One rule, for `attach`'s finding (`report::rules::waiting_on_each_other`) and for the
//! exporter's gauge (`waitmeter_process_wait_on_each_other_ratio`).
//!
//! Who woke a wait is known whatever the wait; why it slept is not. Three shapes wake each other
//! that are not this, and the rule keeps each of them out by what the wakeups show:
//! - **waiting for work**: a writer or a consumer woken by the others with work to do wakes none
//!   of them back (`MUTUAL`);
//! - **a server and its clients** (a star): the server is woken by each client's request and
//!   wakes it with the answer, so each pair wakes each other, but the clients never wake one
//!   another;
//! - **two tiers** (a web server's workers and an application server's, a proxy and its
//!   upstreams): each side's processes wake the other side's, never their own.
//!
//! In the last two the processes that wake a member are not woken by one another. Processes
//! that take turns on one thing are: whoever holds it wakes whoever is next, so a member's wakers
//! wake each other too (`PEERS`). This needs three of them: two processes that wake each other
//! are as often a client and its server as two that share a lock, and are not judged.
use std::collections::{BTreeMap, BTreeSet};

/// A process is one of the waiting when its waits ended by another of the processes hold at
/// least this share of its threads' time (as a thread's waiting share).
pub const SHARE: f64 = 0.2;
/// ... it woke the others in turn: the waits of the others it ended hold at least this share of
/// its own (a producer's consumers are woken by it and wake none of it back) ...
pub const MUTUAL: f64 = 0.1;
/// ... and the processes that woke it were woken by one another: of the waits they ended, weighed
/// by how many of its own each ended, at least this share were waits of theirs that another of its
/// wakers ended (none in a star or between two tiers; (n-2)/(n-1) when n take turns evenly).
pub const PEERS: f64 = 0.1;

/// A process as the rule sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Process {
    pub pid: u32,
    /// its threads' time in the window, summed
    pub thread_ns: u64,
    /// its threads' blocked time (not on the GIL) that another process ended by waking them,
    /// by that process' PID
    pub woken_by: BTreeMap<u32, u64>,
}

/// The processes of `all` that waited on each other (`SHARE`, `MUTUAL`, `PEERS`): at least three,
/// or none.
pub fn waiting(all: &[Process]) -> BTreeSet<u32> {
    let by_pid: BTreeMap<u32, &Process> = all.iter().map(|p| (p.pid, p)).collect();
    // waits of `a` ended by `b`
    let ended = |a: u32, b: u32| -> u64 {
        if a == b {
            0
        } else {
            by_pid.get(&a).and_then(|p| p.woken_by.get(&b)).copied().unwrap_or(0)
        }
    };
    // of the processes measured: waits another of them ended
    let woken = |a: u32| -> u64 {
        by_pid.get(&a).map_or(0, |p| p.woken_by.iter().filter(|(b, _)| **b != a && by_pid.contains_key(b)).map(|(_, ns)| ns).sum())
    };
    let mut set: BTreeSet<u32> =
        all.iter().filter(|p| p.thread_ns > 0 && woken(p.pid) as f64 >= SHARE * p.thread_ns as f64).map(|p| p.pid).collect();
    // drop those that did not wake the others in turn, or whose wakers did not wake one another,
    // until every one left did
    loop {
        let woke = |a: u32| -> u64 { set.iter().map(|b| ended(*b, a)).sum() };
        // each one's waits that another of the set ended
        let of: BTreeMap<u32, u64> = set.iter().map(|b| (*b, set.iter().map(|c| ended(*b, *c)).sum())).collect();
        let peers = |a: u32| -> f64 {
            let wakers: Vec<(u32, u64)> = set.iter().map(|b| (*b, ended(a, *b))).filter(|(_, ns)| *ns > 0).collect();
            let weight: u64 = wakers.iter().map(|(_, ns)| ns).sum();
            if weight == 0 {
                return 0.0;
            }
            let among = wakers
                .iter()
                .map(|(b, ns)| {
                    let by_wakers: u64 = wakers.iter().filter(|(c, _)| c != b).map(|(c, _)| ended(*b, *c)).sum();
                    *ns as f64 * by_wakers as f64 / of[b].max(1) as f64
                })
                .sum::<f64>();
            among / weight as f64
        };
        let keep: BTreeSet<u32> =
            set.iter().copied().filter(|a| woke(*a) as f64 >= MUTUAL * woken(*a) as f64 && peers(*a) >= PEERS).collect();
        if keep.len() == set.len() {
            break;
        }
        set = keep;
    }
    if set.len() < 3 {
        return BTreeSet::new();
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// A process of one thread over 10 s, blocked `woken` ns in all, woken by each of `by` in
    /// equal parts.
    fn process(pid: u32, woken: u64, by: &[u32]) -> Process {
        Process { pid, thread_ns: 10 * S, woken_by: by.iter().map(|b| (*b, woken / by.len() as u64)).collect() }
    }

    fn others(pids: std::ops::Range<u32>, of: u32) -> Vec<u32> {
        pids.filter(|p| *p != of).collect()
    }

    #[test]
    fn processes_that_take_turns_wait_on_each_other_from_three_on() {
        for n in [3, 4, 8, 30] {
            let all: Vec<Process> = (100..100 + n).map(|p| process(p, 6 * S, &others(100..100 + n, p))).collect();
            assert_eq!(waiting(&all), (100..100 + n).collect(), "{n} processes");
        }
        // two alone are not judged: as often a client and its server
        let pair = [process(1, 6 * S, &[2]), process(2, 6 * S, &[1])];
        assert!(waiting(&pair).is_empty());
        // below the share, or woken by processes not measured: none
        let light: Vec<Process> = (100..104).map(|p| process(p, S, &others(100..104, p))).collect();
        assert!(waiting(&light).is_empty());
        let outside: Vec<Process> = (100..104).map(|p| process(p, 6 * S, &[7, 8, 9])).collect();
        assert!(waiting(&outside).is_empty());
    }

    #[test]
    fn waiting_for_work_a_server_and_its_clients_and_two_tiers_do_not() {
        // a producer wakes four consumers with work; they wake it for a moment now and then
        let mut fed: Vec<Process> = (101..105).map(|p| process(p, 9 * S, &[100])).collect();
        fed.push(process(100, S / 100, &[101]));
        assert!(waiting(&fed).is_empty());
        // a server woken by each of five clients' requests, each client by its answer
        let mut star: Vec<Process> = (101..106).map(|p| process(p, 8 * S, &[100])).collect();
        star.push(process(100, 9 * S, &(101..106).collect::<Vec<_>>()));
        assert!(waiting(&star).is_empty());
        // four web workers and six application workers, each woken by the other tier's
        let web: Vec<u32> = (200..204).collect();
        let app: Vec<u32> = (300..306).collect();
        let mut tiers: Vec<Process> = web.iter().map(|p| process(*p, 7 * S, &app)).collect();
        tiers.extend(app.iter().map(|p| process(*p, 8 * S, &web)));
        assert!(waiting(&tiers).is_empty());
    }

    #[test]
    fn those_that_take_turns_are_found_beside_a_writer_and_their_client_is_named_with_them() {
        // four backends on one lock; a writer they wake with work; their client, which wakes
        // each of them with its requests and is woken by their answers
        let mut all: Vec<Process> = (101..105)
            .map(|p| {
                let mut b = process(p, 6 * S, &others(101..105, p));
                b.woken_by.insert(50, S);
                b
            })
            .collect();
        all.push(process(200, 9 * S, &[101, 102, 103, 104]));
        assert_eq!(waiting(&all), (101..105).collect());
        // measured with them, the client is one of them: it waits on them and they on it, and
        // its wakers take turns (the wakeups cannot tell its waits from theirs)
        all.push(process(50, 9 * S, &[101, 102, 103, 104]));
        assert_eq!(waiting(&all), [50, 101, 102, 103, 104].into());
    }
}
