//! `attach --html FILE`: one self-contained page (no network, no external script, style or font;
//! it opens from disk in any current browser) with the verdict, every thread's state timeline
//! with who each wait was spent behind and the code both sides ran, the blame between threads
//! and the wait flame graph. The page is `html/page.html` with its script and style inlined and
//! the window's data as JSON in a `<script type="application/json">`: everything from the target
//! (thread names, frames) is data the script puts into the page as text, never as markup, and
//! the page's Content-Security-Policy lets it load nothing.
use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::finding::Finding;
use super::verdict::Verdict;
use super::ProcessReport;
use crate::model::blame::Preemptor;
use crate::model::loss::{Lost, Reason};
use crate::model::stacks::{site_of, Frame, Role};
use crate::model::state::State;
use crate::model::timeline::{Behind, Cell, Timeline};

const PAGE: &str = include_str!("html/page.html");
const SCRIPT: &str = include_str!("html/page.js");
const STYLE: &str = include_str!("html/page.css");

/// Cells a page draws at most (about 30 B each: 10 s of 64 threads switching 100k times a second,
/// 1.5 million intervals, make a page of about 4 MB); past it the timeline is folded coarser.
pub const MAX_CELLS: usize = 120_000;
/// Flame graph entries kept (the heaviest).
const MAX_STACKS: usize = 5_000;

/// The states' colours, in ABI order (the text report's letters are `text::style`).
pub const COLOURS: [&str; 9] = ["#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#8c564b", "#1f77b4", "#d9d9d9", "#a0a0a0", "#bcbd22"];

fn frame_name(f: &Frame) -> String {
    f.display_at()
}

/// A culprit as the page keys it: a TID, or a negative number for what is not a thread of the
/// process (-1: an idle CPU; -2 - pid: another process).
fn culprit_key(b: &Option<Behind>) -> i64 {
    match b {
        None => 0,
        Some(Behind::Thread(t)) => i64::from(*t),
        Some(Behind::Idle) => -1,
        Some(Behind::Process(p)) => -2 - i64::from(*p),
    }
}

/// The top code of each (victim, state, culprit) and role, from the wait stacks: "victim|state|culprit"
/// -> {"victim": [site, share], "culprit": [site, share]}.
fn code_of(r: &ProcessReport) -> serde_json::Map<String, Value> {
    let mut sites: HashMap<(u32, State, u32, bool), HashMap<String, u64>> = HashMap::new();
    if let Some(st) = &r.stacks {
        for (k, ns) in &st.ns {
            if k.role == Role::Busy {
                continue;
            }
            let own = k.role == Role::Victim;
            *sites.entry((k.victim, k.state, k.blamed, own)).or_default().entry(site_of(&k.stack)).or_default() += ns;
        }
    }
    let mut out = serde_json::Map::new();
    for ((victim, state, blamed, own), by_site) in sites {
        let total: u64 = by_site.values().sum();
        let Some((site, ns)) = by_site.into_iter().max_by_key(|(s, ns)| (*ns, std::cmp::Reverse(s.clone()))) else { continue };
        let key = format!("{victim}|{}|{blamed}", state.index());
        let e = out.entry(key).or_insert_with(|| json!({}));
        e[if own { "victim" } else { "culprit" }] = json!([site, ns as f64 / total.max(1) as f64]);
    }
    out
}

/// Edges of the blame graph: victim -> culprit, by kind of wait, in seconds.
fn blame_edges(r: &ProcessReport) -> Vec<Value> {
    let mut edges: BTreeMap<(u32, String, &'static str), u64> = BTreeMap::new();
    for t in &r.threads {
        for (holder, ns) in &t.gil_by_holder {
            if *holder != 0 {
                *edges.entry((t.tid, holder.to_string(), "gil_wait")).or_default() += ns;
            }
        }
        for w in &t.futex {
            if w.waker != 0 && w.waker != t.tid {
                *edges.entry((t.tid, w.waker.to_string(), "futex_wait")).or_default() += w.ns;
            }
        }
        for (p, ns) in &t.runqueue_by {
            let to = match p {
                Preemptor::Thread(tid) if *tid != t.tid => tid.to_string(),
                Preemptor::Process { pid, comm } => format!("{comm} ({pid})"),
                _ => continue,
            };
            *edges.entry((t.tid, to, "runqueue")).or_default() += ns;
        }
    }
    edges
        .into_iter()
        .filter(|(_, ns)| *ns >= 1_000_000)
        .map(|((victim, culprit, kind), ns)| json!({"victim": victim, "culprit": culprit, "kind": kind, "s": ns as f64 / 1e9}))
        .collect()
}

/// The wait flame graph's entries: whose stack (the thread's own, or its culprit's), the thread
/// that waited, state, role, frames root first, and seconds.
fn flame(r: &ProcessReport) -> Vec<Value> {
    let Some(st) = &r.stacks else { return vec![] };
    // waits only: a busy thread's own code on the CPU is not a wait (it is in the pprof profile, role busy)
    let mut entries: Vec<_> = st.ns.iter().filter(|(k, ns)| **ns > 0 && k.role != Role::Busy).collect();
    entries.sort_by(|a, b| b.1.cmp(a.1));
    entries
        .into_iter()
        .take(MAX_STACKS)
        .map(|(k, ns)| {
            let own = k.role == Role::Victim;
            json!({
                "whose": if own { k.victim } else { k.blamed }, "victim": k.victim, "state": k.state.index(), "role": k.role.label(),
                "frames": k.stack.iter().rev().map(frame_name).collect::<Vec<_>>(), "s": *ns as f64 / 1e9,
            })
        })
        .collect()
}

/// The window's data for the page: the JSON its script reads.
fn data(r: &ProcessReport, v: &Verdict, t: &Timeline) -> Value {
    let from = t.from;
    let us = |ns: u64| (ns.saturating_sub(from) as f64 / 1000.0).round() as u64;
    let mut rows = serde_json::Map::new();
    for (tid, row) in t.rows() {
        let cells: Vec<Value> = row
            .iter()
            .map(|c| match c {
                Cell::Span(s) => json!([us(s.start), us(s.end) - us(s.start), s.state.index(), culprit_key(&s.behind)]),
                // a fold: each state's percent of it, trailing zeros left out (the page's largest part)
                Cell::Fold { start, end, .. } => {
                    let mut pct = c.shares(100).unwrap_or_default().to_vec();
                    while pct.last() == Some(&0) {
                        pct.pop();
                    }
                    json!([us(*start), us(*end) - us(*start), c.state().index(), pct])
                }
            })
            .collect();
        rows.insert(tid.to_string(), Value::from(cells));
    }
    let order = super::text::by_impact(&r.threads);
    let threads: Vec<Value> = order
        .iter()
        .map(|th| {
            let total = th.times.total().max(1) as f64;
            json!({"tid": th.tid, "name": th.label(), "exited": th.exited,
                   "share": State::ALL.iter().map(|s| th.times.get(*s) as f64 / total).collect::<Vec<_>>(),
                   "seconds": th.times.total() as f64 / 1e9, "wait_ratio": th.times.wait_ratio_shown()})
        })
        .collect();
    let findings: Vec<Value> = v
        .shown
        .iter()
        .map(|f: &Finding| {
            let c = &f.claim;
            let mut tids: Vec<u32> =
                c.names().map(|(t, _)| t).into_iter().chain(c.culprits()).chain(c.together().iter().copied()).collect();
            tids.extend(c.gil_holder());
            tids.dedup();
            json!({"text": f.to_string(), "kind": c.kind(), "threads": tids, "state": c.names().and_then(|(_, s)| s).map(|s| s.index())})
        })
        .collect();
    let lost = Lost::of(&r.events_lost, Reason::SpanRingbufFull);
    json!({
        "producer": format!("waitmeter {}", env!("CARGO_PKG_VERSION")),
        "pid": r.pid, "comm": r.comm, "python": r.python.as_ref().map(|p| format!("Python {} (GIL {})", p.version, p.gil)),
        "container": r.container, "environment": r.environment.as_ref().map(super::text::environment_line),
        "window_us": us(t.to), "start_unix_s": r.started_unix_ns.map(|n| n as f64 / 1e9),
        "states": State::ALL.iter().map(|s| s.name()).collect::<Vec<_>>(), "colours": COLOURS,
        "threads": threads, "rows": rows, "verdict": findings, "blame": blame_edges(r), "flame": flame(r), "code": code_of(r),
        "folded_below_ms": t.fine_ns as f64 / 1e6, "spans": t.spans, "spans_folded": t.folded, "spans_lost": lost,
    })
}

/// JSON for a `<script type="application/json">`: nothing in it can end the element.
fn embeddable(v: &Value) -> String {
    v.to_string().replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026")
}

/// The page of one process' window (its timeline folded to fit `MAX_CELLS`).
pub fn render(r: &ProcessReport, v: &Verdict, mut t: Timeline) -> String {
    t.fit(MAX_CELLS);
    let title = format!("waitmeter: {} ({})", r.comm, r.pid).replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    PAGE.replace("{{TITLE}}", &title)
        .replace("/*{{STYLE}}*/", STYLE)
        .replace("{{DATA}}", &embeddable(&data(r, v, &t)))
        .replace("/*{{SCRIPT}}*/", SCRIPT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::timeline::{Span, FINE_NS, MAX_CELLS as RECORD_CELLS};
    use crate::report::fixtures;

    fn page_data(html: &str) -> Value {
        let tag = "<script id=\"data\" type=\"application/json\">";
        let start = html.find(tag).expect("data") + tag.len();
        let end = start + html[start..].find("</script>").expect("end of data");
        serde_json::from_str(&html[start..end]).expect("data is JSON")
    }

    #[test]
    fn the_page_carries_the_window_and_no_name_can_break_out_of_it() {
        let mut r = fixtures::full_report();
        r.threads[0].name = "</script><img src=x onerror=alert(1)>".into();
        let v = crate::report::verdict::analyse(&r);
        let (victim, holder) = (r.threads[0].tid, r.threads[1].tid);
        let mut t = Timeline::new(0, FINE_NS, RECORD_CELLS);
        t.add(victim, Span { start: 0, end: 72_000_000, state: State::GilWait, behind: Some(Behind::Thread(holder)) });
        t.add(holder, Span { start: 0, end: 72_000_000, state: State::Running, behind: None });
        let html = render(&r, &v, t);
        // one </script> for the data, one for the script: the name did not add one
        assert_eq!(html.matches("</script>").count(), 2, "{html}");
        assert!(!html.contains("<img"), "the name's markup reached the page");
        // nothing loads from outside: no URL but the SVG namespace's name, no import
        let urls = html.matches("http://").count() + html.matches("https://").count();
        assert_eq!(urls, html.matches("http://www.w3.org/2000/svg").count(), "a URL in the page");
        assert!(!html.contains("@import") && !html.contains("url(http") && !html.contains("src=\"http"));
        assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
        let d = page_data(&html);
        assert_eq!(d["rows"][victim.to_string()][0], json!([0, 72_000, State::GilWait.index(), holder]));
        assert_eq!(d["threads"].as_array().unwrap().len(), r.threads.len());
        assert!(d["threads"].as_array().unwrap().iter().any(|t| t["name"] == "</script><img src=x onerror=alert(1)>"));
        assert!(d["blame"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["victim"] == victim && e["culprit"].as_str() == Some(&*holder.to_string())));
        assert!(!d["verdict"].as_array().unwrap().is_empty());
    }
}
