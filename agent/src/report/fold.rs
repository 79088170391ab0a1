//! Short-lived threads folded by role (issue 18, point 7): a thread-per-request server starts
//! and ends thousands of threads in a window, and a row each drowns the table, the JSON and the
//! verdict. Exited threads that lived less than `verdict::MIN_PRESENCE` of the window are
//! summed into one row per role (their name with the numbers that tell them apart replaced by
//! `*`: `Thread-12 (process_request_thread)` → `Thread-* (process_request_thread)`), with their
//! count; what other threads waited behind them is charged to that row. `attach --each-thread`
//! keeps a row per thread.
use std::collections::{BTreeMap, BTreeSet};

use super::ThreadRow;
use crate::model::blame::{FutexWait, Preemptor};

/// A role groups at least this many short-lived threads before it is folded.
pub const MIN_FOLDED: usize = 2;

/// `name` with each run of digits that follows a separator (`-`, `_`, ` `, `#`, `:`, `.`, `/`)
/// or starts it replaced by `*`: the numbers that tell a pool's threads apart.
pub fn role(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut prev: Option<char> = None;
    let mut in_number = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if in_number {
                continue;
            }
            if prev.is_none_or(|p| matches!(p, '-' | '_' | ' ' | '#' | ':' | '.' | '/')) {
                out.push('*');
                in_number = true;
                prev = Some(c);
                continue;
            }
        } else {
            in_number = false;
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

/// A folded row: `rows` (of one role) summed, under the lowest TID.
fn sum(role: String, rows: &[ThreadRow]) -> ThreadRow {
    let mut out = ThreadRow {
        tid: rows.iter().map(|r| r.tid).min().unwrap_or(0),
        name: role,
        comm: rows[0].comm.clone(),
        exited: true,
        folded: rows.len() as u32,
        ..Default::default()
    };
    let mut futex: BTreeMap<(u64, u32), u64> = BTreeMap::new();
    let mut syscalls: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for r in rows {
        out.times.add(&r.times);
        out.existed_ns += r.existed_ns;
        out.yields += r.yields;
        out.gil_waits += r.gil_waits;
        for (k, ns) in &r.gil_by_holder {
            *out.gil_by_holder.entry(*k).or_default() += ns;
        }
        for (k, ns) in &r.runqueue_by {
            *out.runqueue_by.entry(k.clone()).or_default() += ns;
        }
        for (k, ns) in &r.woken_by {
            *out.woken_by.entry(k.clone()).or_default() += ns;
        }
        for w in &r.futex {
            *futex.entry((w.addr, w.waker)).or_default() += w.ns;
        }
        for s in &r.syscalls {
            let e = syscalls.entry(s.nr).or_default();
            e.0 += s.calls;
            e.1 += s.ns;
        }
        if let Some(h) = &r.gil_hold {
            out.gil_hold.get_or_insert_with(Default::default).add(h);
        }
    }
    out.futex = futex.into_iter().map(|((addr, waker), ns)| FutexWait { addr, waker, ns }).collect();
    out.syscalls = syscalls.into_iter().map(|(nr, (calls, ns))| crate::model::syscalls::SyscallCount { nr, calls, ns }).collect();
    out.syscalls.sort_by_key(|s| (std::cmp::Reverse(s.calls), s.nr));
    out
}

/// The role of each short-lived thread. A thread whose own name was never read (an
/// interpreter's thread names are read about once a second, and a request thread lives for
/// milliseconds) goes by its OS name; it takes the role of the named threads of that OS name
/// when they all have one role (they are the same kind of thread, and were caught alive): a
/// thread-per-request server's threads are one row whichever of them a read caught.
fn roles_of(rows: &[ThreadRow]) -> Vec<String> {
    let unnamed = |r: &ThreadRow| r.name == r.comm;
    let mut named: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for r in rows.iter().filter(|r| !unnamed(r)) {
        named.entry(r.comm.as_str()).or_default().insert(role(&r.name));
    }
    rows.iter()
        .map(|r| match named.get(r.comm.as_str()) {
            Some(roles) if unnamed(r) && roles.len() == 1 => roles.first().cloned().unwrap_or_default(),
            _ => role(&r.name),
        })
        .collect()
}

/// `threads` with the exited ones that lived less than `short_ns` folded by role (roles of at
/// least `MIN_FOLDED` threads), and every wait charged to a folded thread charged to its row;
/// with the TID each folded thread now goes by (the wait stacks are remapped so).
pub fn fold(threads: Vec<ThreadRow>, short_ns: u64) -> (Vec<ThreadRow>, BTreeMap<u32, u32>) {
    let short = |r: &ThreadRow| r.exited && r.folded == 0 && r.existed_ns < short_ns;
    let (short_rows, mut kept): (Vec<ThreadRow>, Vec<ThreadRow>) = threads.into_iter().partition(short);
    let roles = roles_of(&short_rows);
    let mut by_role: BTreeMap<String, Vec<ThreadRow>> = BTreeMap::new();
    for (r, role) in short_rows.into_iter().zip(roles) {
        by_role.entry(role).or_default().push(r);
    }
    // the TID each folded thread is charged under
    let mut under: BTreeMap<u32, u32> = BTreeMap::new();
    for (role, rows) in by_role {
        if rows.len() < MIN_FOLDED {
            kept.extend(rows);
            continue;
        }
        let row = sum(role, &rows);
        for r in &rows {
            under.insert(r.tid, row.tid);
        }
        kept.push(row);
    }
    if under.is_empty() {
        return (kept, under);
    }
    let to = |tid: &u32| under.get(tid).copied().unwrap_or(*tid);
    for r in &mut kept {
        r.gil_by_holder = std::mem::take(&mut r.gil_by_holder).into_iter().fold(BTreeMap::new(), |mut m, (t, ns)| {
            *m.entry(to(&t)).or_default() += ns;
            m
        });
        r.runqueue_by = std::mem::take(&mut r.runqueue_by).into_iter().fold(BTreeMap::new(), |mut m, (p, ns)| {
            let p = match p {
                Preemptor::Thread(t) => Preemptor::Thread(to(&t)),
                other => other,
            };
            *m.entry(p).or_default() += ns;
            m
        });
        r.woken_by = std::mem::take(&mut r.woken_by).into_iter().fold(BTreeMap::new(), |mut m, ((s, w), ns)| {
            let w = match w {
                crate::model::blame::Waker::Thread(t) => crate::model::blame::Waker::Thread(to(&t)),
                other => other,
            };
            *m.entry((s, w)).or_default() += ns;
            m
        });
        for w in &mut r.futex {
            w.waker = to(&w.waker);
        }
    }
    kept.sort_by_key(|t| (t.tid, t.exited));
    (kept, under)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::State;
    use crate::report::fixtures::{row, S};

    #[test]
    fn roles_replace_the_numbers_that_tell_threads_apart() {
        assert_eq!(role("Thread-12 (process_request_thread)"), "Thread-* (process_request_thread)");
        assert_eq!(role("ThreadPoolExecutor-0_13"), "ThreadPoolExecutor-*_*");
        assert_eq!(role("pool-1-thread-7"), "pool-*-thread-*");
        assert_eq!(role("GC Thread#3"), "GC Thread#*");
        assert_eq!(role("42"), "*");
        // digits that are part of a word stay: python3.11 is one program
        assert_eq!(role("python3.11"), "python3.*");
        assert_eq!(role("worker"), "worker");
    }

    fn request(tid: u32, holder: u32) -> ThreadRow {
        let mut r =
            row(tid, &format!("Thread-{tid} (process_request_thread)"), &[(State::GilWait, 4_000_000), (State::Running, 1_000_000)]);
        r.gil_by_holder.insert(holder, 4_000_000);
        r.comm = "python3".into();
        r.exited = true;
        r
    }

    #[test]
    fn short_lived_threads_of_a_role_are_one_row_with_their_count_and_their_waits() {
        // 300 request threads of 5 ms each behind the main thread, which waited behind them too
        let mut main = row(1, "MainThread", &[(State::Running, 8 * S), (State::GilWait, 2 * S)]);
        for tid in 100..400 {
            main.gil_by_holder.insert(tid, 2 * S / 300);
        }
        main.runqueue_by.insert(Preemptor::Thread(150), 1000);
        let mut rows = vec![main];
        rows.extend((100..400).map(|tid| request(tid, 1)));
        // one short-lived thread of its own role, and a long-lived exited one: kept as they are
        let mut once = row(500, "flusher", &[(State::Running, 1_000_000)]);
        once.exited = true;
        let mut long = row(501, "Thread-501 (process_request_thread)", &[(State::Running, 5 * S)]);
        long.exited = true;
        rows.push(once);
        rows.push(long);
        let (folded, under) = fold(rows, S);
        assert_eq!((under.len(), under[&399]), (300, 100));
        let names: Vec<(&str, u32)> = folded.iter().map(|r| (r.name.as_str(), r.folded)).collect();
        assert_eq!(
            names,
            [("MainThread", 0), ("Thread-* (process_request_thread)", 300), ("flusher", 0), ("Thread-501 (process_request_thread)", 0)]
        );
        let f = &folded[1];
        assert_eq!((f.tid, f.exited), (100, true));
        assert_eq!(f.times.get(State::GilWait), 300 * 4_000_000);
        assert_eq!(f.existed_ns, 300 * 5_000_000);
        assert_eq!(f.gil_by_holder, [(1, 300 * 4_000_000)].into());
        // the main thread's waits behind any of them are behind the folded row
        let main = &folded[0];
        assert_eq!(main.gil_by_holder.len(), 1);
        assert_eq!(main.gil_by_holder[&100], 300 * (2 * S / 300));
        assert_eq!(main.runqueue_by[&Preemptor::Thread(100)], 1000);
        // a read of the names caught two of 300 request threads alive: the others (their OS
        // name only) are of their role, in one row; with two named roles of that OS name, an
        // unnamed thread keeps its own
        let mut rows: Vec<ThreadRow> = (100..400).map(|tid| request(tid, 1)).collect();
        for r in rows.iter_mut().skip(2) {
            r.name = r.comm.clone();
        }
        let (folded, _) = fold(rows.clone(), S);
        let names: Vec<(&str, u32)> = folded.iter().map(|r| (r.name.as_str(), r.folded)).collect();
        assert_eq!(names, [("Thread-* (process_request_thread)", 300)]);
        rows[1].name = "timer-1".into();
        let (folded, _) = fold(rows, S);
        let mut names: Vec<(String, u32)> = folded.iter().map(|r| (r.name.clone(), r.folded)).collect();
        names.sort();
        assert_eq!(names, [("Thread-100 (process_request_thread)".to_string(), 0), ("python3".into(), 298), ("timer-1".into(), 0)]);
        // nothing to fold: the rows as they were
        let plain = vec![row(1, "a", &[(State::Running, S)]), row(2, "b", &[(State::Running, S)])];
        assert_eq!(fold(plain, S).0.len(), 2);
    }
}
