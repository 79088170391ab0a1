//! `attach --trace FILE`: every thread's state timeline in the Chrome trace-event format
//! (the JSON Object Format: `traceEvents`, complete events `"ph": "X"` with `ts` and `dur` in
//! µs), which Perfetto, the Firefox Profiler and chrome://tracing open. A process is a trace
//! process, a thread a trace thread named as the report names it; each span is an event named
//! by its state, with who it was spent behind in its `args`; a fold of intervals too short to
//! draw is one event named by the state that had most of it, `"folded": true`, with each
//! state's share. The verdict opens the process as an instant event and in `otherData`.
use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::finding::Finding;
use super::verdict::Verdict;
use super::ProcessReport;
use crate::model::loss::{Lost, Reason};
use crate::model::state::State;
use crate::model::timeline::{Behind, Cell, Timeline};

/// Events a file holds at most: past it the timeline is folded coarser (about 130 B each).
pub const MAX_EVENTS: usize = 200_000;

/// µs since the window opened, to the ns, on a grid of 1/1024 µs: a sum of two such values is
/// exact in an f64 (below 2^43 µs), so an event's `ts + dur` is the next one's `ts` to the bit.
/// On a grid of decimal ns it could be one ulp past it, and a consumer that nests events (the
/// trace viewers turn each complete event into a begin and an end) finds the next one begun
/// before this one ended.
fn us(ns: u64, from: u64) -> f64 {
    let ns = u128::from(ns.saturating_sub(from));
    ((ns * 1024 + 500) / 1000) as f64 / 1024.0
}

/// Who a wait was spent behind, in words: "processor (13921)", "process 812", "idle CPU".
pub fn behind(b: &Behind, names: &BTreeMap<u32, String>) -> String {
    match b {
        Behind::Thread(t) => match names.get(t) {
            Some(n) => format!("{n} ({t})"),
            None => format!("thread {t}"),
        },
        Behind::Process(p) => format!("process {p}"),
        Behind::Idle => "nothing (an idle CPU)".to_string(),
    }
}

/// The trace events of one process.
fn process_events(r: &ProcessReport, v: &Verdict, t: &Timeline, out: &mut Vec<Value>) {
    let pid = r.pid;
    let names: BTreeMap<u32, String> = r.threads.iter().map(|t| (t.tid, t.label())).collect();
    out.push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": format!("{} ({pid})", r.comm)}}));
    for (i, (tid, _)) in t.rows().enumerate() {
        let name = names.get(&tid).cloned().unwrap_or_else(|| format!("thread {tid}"));
        out.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
        out.push(json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": i}}));
    }
    if let Some(first) = v.shown.first() {
        out.push(json!({"name": first.to_string(), "cat": "verdict", "ph": "i", "s": "p", "ts": 0.0, "pid": pid, "tid": pid,
            "args": {"verdict": v.shown.iter().map(Finding::to_string).collect::<Vec<_>>()}}));
    }
    for (tid, row) in t.rows() {
        for c in row {
            let ts = us(c.start(), t.from);
            let dur = us(c.end(), t.from) - ts;
            let e = match c {
                Cell::Span(s) => {
                    let mut args = serde_json::Map::new();
                    if let Some(b) = &s.behind {
                        args.insert("behind".into(), Value::from(behind(b, &names)));
                    }
                    json!({"name": s.state.name(), "cat": "state", "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args})
                }
                Cell::Fold { us: parts, .. } => {
                    let total: u64 = parts.iter().map(|u| u64::from(*u)).sum::<u64>().max(1);
                    let shares: serde_json::Map<String, Value> = State::ALL
                        .iter()
                        .filter(|s| parts[s.index()] > 0)
                        .map(|s| (s.name().to_string(), Value::from((1000 * u64::from(parts[s.index()]) / total) as f64 / 10.0)))
                        .collect();
                    json!({"name": c.state().name(), "cat": "state", "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid,
                        "args": {"folded": true, "percent": shares}})
                }
            };
            out.push(e);
        }
    }
}

/// The trace of these processes' window, each with its verdict and timeline (folded to fit
/// `MAX_EVENTS` events among them).
pub fn render(processes: &mut [(&ProcessReport, &Verdict, Timeline)]) -> String {
    let total: usize = processes.iter().map(|(_, _, t)| t.cells()).sum();
    if total > MAX_EVENTS {
        for (_, _, t) in processes.iter_mut() {
            let share = MAX_EVENTS * t.cells() / total;
            t.fit(share);
        }
    }
    let mut events = vec![];
    let mut about = vec![];
    for (r, v, t) in processes.iter() {
        process_events(r, v, t, &mut events);
        let lost = Lost::of(&r.events_lost, Reason::SpanRingbufFull);
        about.push(json!({
            "pid": r.pid, "comm": r.comm, "duration_s": (t.to.saturating_sub(t.from)) as f64 / 1e9,
            // ts 0: when the window opened, on the Unix clock (an application's own prints line up)
            "window_start_unix_s": r.started_unix_ns.map(|n| n as f64 / 1e9),
            "verdict": v.shown.iter().map(Finding::to_string).collect::<Vec<_>>(),
            "folded_below_ms": t.fine_ns as f64 / 1e6, "spans": t.spans, "spans_folded": t.folded, "spans_lost": lost,
        }));
    }
    let doc = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": format!("waitmeter {}", env!("CARGO_PKG_VERSION")),
            "about": "every thread's state over the window; intervals shorter than folded_below_ms are folded into events of at least that long, named by the state that had most of them, with each state's percent",
            "processes": about,
        },
    });
    doc.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::timeline::{Span, FINE_NS, MAX_CELLS};
    use crate::report::fixtures;

    #[test]
    fn a_trace_names_threads_and_says_who_each_wait_was_behind() {
        let r = fixtures::full_report();
        let v = crate::report::verdict::analyse(&r);
        let (victim, holder) = (r.threads[0].tid, r.threads[1].tid);
        let mut t = Timeline::new(1_000_000_000, FINE_NS, MAX_CELLS);
        t.add(victim, Span { start: 1_000_000_000, end: 1_072_000_000, state: State::GilWait, behind: Some(Behind::Thread(holder)) });
        t.add(holder, Span { start: 1_000_000_000, end: 1_072_000_000, state: State::Running, behind: None });
        for i in 0..100 {
            let at = 1_072_000_000 + i * 20_000;
            t.add(victim, Span { start: at, end: at + 10_000, state: State::Running, behind: None });
            t.add(victim, Span { start: at + 10_000, end: at + 20_000, state: State::Runqueue, behind: Some(Behind::Idle) });
        }
        let doc: Value = serde_json::from_str(&render(&mut [(&r, &v, t)])).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let named: Vec<&Value> = events.iter().filter(|e| e["name"] == "thread_name").collect();
        assert_eq!(named.len(), 2);
        let wait = events.iter().find(|e| e["ph"] == "X" && e["name"] == "gil_wait").unwrap();
        assert_eq!((wait["ts"].as_f64(), wait["dur"].as_f64(), wait["tid"].as_u64()), (Some(0.0), Some(72_000.0), Some(victim as u64)));
        assert_eq!(wait["args"]["behind"], format!("{} ({holder})", r.threads[1].label()));
        // 2 ms of 10 µs switches: folded, half running and half queued
        let folds: Vec<&Value> = events.iter().filter(|e| e["args"]["folded"] == true).collect();
        assert!(!folds.is_empty() && folds.len() <= 20, "{}", folds.len());
        assert_eq!(folds[0]["args"]["percent"]["running"], 50.0);
        assert!(events.iter().any(|e| e["cat"] == "verdict"));
        assert_eq!(doc["otherData"]["processes"][0]["spans"], 202);
    }

    #[test]
    fn each_event_ends_where_the_next_begins_to_the_bit() {
        // a thread's stretches as a real trace had them (ns since the window opened): on a grid
        // of decimal ns, 162022.842 + 6862.102 is 168884.94400000002, past the next event's ts
        let r = fixtures::full_report();
        let v = crate::report::verdict::analyse(&r);
        let tid = r.threads[0].tid;
        let from = 5_000_000_000;
        let edges = [162_022_842, 168_884_944, 169_011_722, 179_688_830, 179_836_407, 184_998_561, 326_334_427, 326_422_963_000];
        let mut t = Timeline::new(from, FINE_NS, MAX_CELLS);
        for (i, w) in edges.windows(2).enumerate() {
            let state = if i % 2 == 0 { State::Running } else { State::FutexWait };
            t.add(tid, Span { start: from + w[0], end: from + w[1], state, behind: None });
        }
        let doc: Value = serde_json::from_str(&render(&mut [(&r, &v, t)])).unwrap();
        let xs: Vec<(f64, f64)> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        assert_eq!(xs.len(), edges.len() - 1);
        for (a, b) in xs.iter().zip(&xs[1..]) {
            assert_eq!(a.0 + a.1, b.0, "{a:?} then {b:?}");
        }
        // and each is its ns to within half a ns
        for ((ts, _), ns) in xs.iter().zip(edges) {
            assert!((ts - ns as f64 / 1000.0).abs() <= 0.0005, "{ts} for {ns}");
        }
    }
}
