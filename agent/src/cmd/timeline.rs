//! `run --timeline-minutes N`: the spans into the kept history (`model::history`) and the views
//! asked for at `/debug/timeline` taken from it (wiring: the run loop calls these). A view is
//! taken on the run loop (`prepare`: a copy of the kept spans and rows) and rendered off it
//! (`Prepared::render`, on `worker::Worker`: the verdict, the page or the trace, a few hundred ms of
//! a busy process), so that views never hold up the scrapes the loop answers (issue 54).
use std::collections::BTreeMap;

use super::python_info;
use crate::clock::monotonic_ns;
use crate::export::http::{Format, Look};
use crate::model::history::History;
use crate::model::loss::{Lost, Probe, Reason};
use crate::model::partition::Snapshot;
use crate::model::timeline::{Span, Timeline};
use crate::report::{html, rows_since, trace, verdict, ProcessReport, VerdictOptions};
use crate::session::{Session, Target};

/// The spans the ring lost so far.
pub(super) fn spans_lost(session: &Session) -> u64 {
    Lost::of(&session.lost(), Reason::SpanRingbufFull)
}

/// The live target with this PID (a PID of an exited one can be reused), else the exited one.
fn target_of(session: &Session, pid: u32) -> Option<&Target> {
    session.targets().find(|t| t.pid == pid && t.exited_ns.is_none()).or_else(|| session.target_by_pid(pid))
}

/// The spans the probe closed since the last call, into the history.
pub(super) fn drain_into(session: &mut Session, history: &mut History) {
    let spans = session.drain_spans();
    let lost = spans_lost(session);
    let by_target = spans.into_iter().filter_map(|(pid, spans)| Some((target_of(session, pid)?.id, spans)));
    history.add_spans(by_target, lost);
}

/// A view taken from the history, to be rendered off the run loop.
pub(super) struct Prepared {
    format: Format,
    /// each process' report and timeline
    each: Vec<(ProcessReport, Timeline)>,
}

impl Prepared {
    /// The page or the trace, with each process' verdict.
    pub(super) fn render(self) -> Result<Vec<u8>, String> {
        let mut each: Vec<_> = self.each.into_iter().map(|(r, t)| (verdict::analyse(&r), r, t)).collect();
        Ok(match self.format {
            Format::Html => {
                let (v, r, t) = each.pop().ok_or("no timeline kept yet")?;
                html::render(&r, &v, t).into_bytes()
            }
            Format::Trace => {
                let mut refs: Vec<_> = each.iter_mut().map(|(v, r, t)| (&*r, &*v, std::mem::take(t))).collect();
                trace::render(&mut refs).into_bytes()
            }
        })
    }
}

/// The view `look` asks for, taken from the history (or why not, for the client). `snap`: a
/// sample taken just now, after `open` (each thread's open interval, by PID) was read and before
/// the last spans were drained into `history`.
pub(super) fn prepare(
    look: &Look,
    session: &Session,
    history: &History,
    snap: &Snapshot,
    open: &BTreeMap<u32, Vec<(u32, Span)>>,
    online: f64,
    unix_now_ns: i64,
) -> Result<Prepared, String> {
    let now = monotonic_ns();
    let since = now.saturating_sub(look.seconds * 1_000_000_000);
    let kept: Vec<&Target> = match look.pid {
        Some(pid) => {
            let t = target_of(session, pid).ok_or(format!("process {pid} is not watched"))?;
            vec![t]
        }
        None => {
            let mut ts: Vec<&Target> = history.processes().filter_map(|id| session.targets().find(|t| t.id == id)).collect();
            ts.sort_by_key(|t| t.pid);
            ts
        }
    };
    if kept.is_empty() {
        return Err("no process has a timeline yet: none is watched".into());
    }
    if look.format == Format::Html && kept.len() > 1 {
        let some: Vec<String> = kept.iter().take(10).map(|t| format!("{} ({})", t.pid, t.comm)).collect();
        return Err(format!("the page is of one process: add &pid=P (watched: {}), or ask for &format=trace", some.join(", ")));
    }
    let lost_now = spans_lost(session);
    let mut each = vec![];
    for t in kept {
        let Some(view) = history.view(t.id, since, now, open.get(&t.pid).map(Vec::as_slice).unwrap_or(&[])) else {
            if look.pid.is_some() {
                return Err(format!("process {} has no timeline yet: it is kept from its first switch on", t.pid));
            }
            continue;
        };
        if view.exited_dropped > 0 {
            log::warn!(
                "the timeline of process {} left out {} exited threads' numbers (more than {} exited in 10 s): their rows are not in the report",
                t.pid,
                view.exited_dropped,
                crate::model::history::MAX_EXITED
            );
        }
        let live = snap.live.get(&t.id).map(Vec::as_slice).unwrap_or(&[]);
        let rows = rows_since(&view.base, live, &view.exited);
        let duration = now.saturating_sub(view.from);
        let exited_after = t.exited_ns.map(|e| e.saturating_sub(view.from));
        let lost = Lost::new(Probe::Sched, Reason::SpanRingbufFull, lost_now.saturating_sub(view.lost_before));
        let report = ProcessReport::new(t.pid, t.comm.clone(), python_info(session, t), duration, exited_after, rows)
            .with_online_cpus(online)
            .with_allowed_cpus(crate::procfs::allowed_cpus(t.pid))
            .with_start(unix_now_ns - duration as i64)
            .with_environment(super::environment(session, t.pid))
            .with_events_lost(vec![lost])
            .with_verdict(VerdictOptions::default())
            .with_short_lived_folded();
        each.push((report, view.timeline));
    }
    Ok(Prepared { format: look.format, each })
}
