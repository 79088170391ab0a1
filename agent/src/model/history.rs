//! `run --timeline-minutes N`: the last minutes of each watched process' state timeline, kept in
//! bounded memory for `/debug/timeline?seconds=N`, with what a report of them needs beside the
//! spans: each thread's numbers when every segment began, and the final numbers of the threads
//! that exited in it.
//!
//! A segment begins at each of the agent's window boundaries (every 10 s). The oldest goes once
//! the next one is old enough to cover what is kept. Past `max_cells` cells in all, the segment
//! with the most is folded again at twice its grain; a view is at the coarsest grain of the
//! segments it takes, and says so. Exited threads past `MAX_EXITED` a segment are counted, not
//! kept. Pure: the run loop hands samples and spans in and asks for views.
use std::collections::{BTreeMap, VecDeque};

use super::partition::ThreadSample;
use super::timeline::{Span, Timeline, FINE_NS};

/// Cells kept over every process and segment (about 56 B each: 22 MiB).
pub const MAX_KEPT_CELLS: usize = 400_000;
/// Exited threads kept a segment and process (their final samples, for the report's rows).
pub const MAX_EXITED: usize = 2_048;

#[derive(Debug)]
struct Segment {
    timeline: Timeline,
    /// the process' live threads as it began (empty: the process was found after it began)
    base: Vec<ThreadSample>,
    /// threads that exited in it, as they ended
    exited: Vec<ThreadSample>,
    exited_dropped: u64,
    /// spans the ring had lost (of every process) as it began
    lost_before: u64,
}

impl Segment {
    fn new(from: u64, base: Vec<ThreadSample>, max_cells: usize, lost_before: u64) -> Segment {
        Segment { timeline: Timeline::new(from, FINE_NS, max_cells), base, exited: vec![], exited_dropped: 0, lost_before }
    }

    fn from(&self) -> u64 {
        self.timeline.from
    }
}

/// The last seconds of one process, as a view takes them.
#[derive(Debug)]
pub struct View {
    /// when it begins: the start of the segment that holds the first second asked for
    pub from: u64,
    pub timeline: Timeline,
    /// its threads' numbers at `from`
    pub base: Vec<ThreadSample>,
    /// threads that exited since, as they ended
    pub exited: Vec<ThreadSample>,
    /// exited threads not kept (past `MAX_EXITED` a segment)
    pub exited_dropped: u64,
    /// spans the ring had lost as it began (of every process: the ring is one)
    pub lost_before: u64,
}

#[derive(Debug)]
pub struct History {
    keep_ns: u64,
    max_cells: usize,
    /// target id -> its segments, oldest first
    procs: BTreeMap<u64, VecDeque<Segment>>,
}

impl History {
    pub fn new(keep_ns: u64, max_cells: usize) -> History {
        History { keep_ns, max_cells: max_cells.max(1), procs: BTreeMap::new() }
    }

    /// A window boundary at `now`: each live process begins a segment with its threads' numbers;
    /// segments no longer needed go, and so do processes no longer watched.
    /// `lost`: the spans the ring has lost so far.
    pub fn boundary(&mut self, now: u64, live: &BTreeMap<u64, Vec<ThreadSample>>, lost: u64) {
        self.procs.retain(|id, _| live.contains_key(id));
        for (id, threads) in live {
            let segs = self.procs.entry(*id).or_default();
            if segs.back().is_some_and(|s| s.from() >= now) {
                continue;
            }
            segs.push_back(Segment::new(now, threads.clone(), self.max_cells, lost));
            let oldest = now.saturating_sub(self.keep_ns);
            while segs.len() >= 2 && segs[1].from() <= oldest {
                segs.pop_front();
            }
        }
    }

    /// Spans by process (each thread's in time order): a span that began before the segment it
    /// ended in is split at the segment's start. `lost`: the spans the ring has lost so far.
    pub fn add_spans(&mut self, by_process: impl IntoIterator<Item = (u64, Vec<(u32, Span)>)>, lost: u64) {
        for (id, spans) in by_process {
            let Some((_, first)) = spans.first() else { continue };
            let segs = self.procs.entry(id).or_default();
            if segs.is_empty() {
                // found between boundaries: its segment begins with what it has
                segs.push_back(Segment::new(first.start, vec![], self.max_cells, lost));
            }
            for (tid, mut s) in spans {
                for seg in segs.iter_mut().rev() {
                    let from = seg.from();
                    if s.end > from {
                        seg.timeline.add(tid, Span { start: s.start.max(from), ..s });
                    }
                    if s.start >= from {
                        break;
                    }
                    s.end = s.end.min(from);
                }
            }
        }
        self.bound();
    }

    /// Threads that exited, by process: into each one's newest segment.
    pub fn note_exits(&mut self, exits: &BTreeMap<u64, Vec<ThreadSample>>) {
        for (id, threads) in exits {
            let Some(seg) = self.procs.get_mut(id).and_then(|s| s.back_mut()) else { continue };
            for t in threads {
                if seg.exited.len() < MAX_EXITED {
                    seg.exited.push(t.clone());
                } else {
                    seg.exited_dropped += 1;
                }
            }
        }
    }

    /// Cells kept in all.
    pub fn cells(&self) -> usize {
        self.procs.values().flatten().map(|s| s.timeline.cells()).sum()
    }

    /// Fold the largest segment coarser until every cell kept fits.
    fn bound(&mut self) {
        let mut total = self.cells();
        while total > self.max_cells {
            let Some(seg) = self.procs.values_mut().flatten().max_by_key(|s| s.timeline.cells()) else { return };
            let before = seg.timeline.cells();
            let fine = seg.timeline.fine_ns * 2;
            seg.timeline.refold(fine);
            total = total - before + seg.timeline.cells();
        }
    }

    /// The processes kept.
    pub fn processes(&self) -> impl Iterator<Item = u64> + '_ {
        self.procs.keys().copied()
    }

    /// Process `id` from the segment that holds `since` (or its oldest) to now, with `open`,
    /// each thread's open interval, added, closed at `now`.
    pub fn view(&self, id: u64, since: u64, now: u64, open: &[(u32, Span)]) -> Option<View> {
        let segs = self.procs.get(&id)?;
        let first = segs.iter().rposition(|s| s.from() <= since).unwrap_or(0);
        let taken: Vec<&Segment> = segs.iter().skip(first).collect();
        let head = taken.first()?;
        let mut timeline = Timeline::new(head.from(), FINE_NS, usize::MAX);
        let mut exited = vec![];
        let mut exited_dropped = 0;
        for seg in &taken {
            timeline.append(&seg.timeline);
            exited.extend(seg.exited.iter().cloned());
            exited_dropped += seg.exited_dropped;
        }
        for (tid, s) in open {
            timeline.add_open(*tid, *s);
        }
        timeline.close(now);
        Some(View { from: head.from(), timeline, base: head.base.clone(), exited, exited_dropped, lost_before: head.lost_before })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::State;
    use crate::model::timeline::Cell;

    const S: u64 = 1_000_000_000;

    fn thread(tid: u32) -> ThreadSample {
        crate::model::partition::test_sample(tid, Default::default(), 0)
    }

    fn span(start: u64, end: u64, state: State) -> Span {
        Span { start, end, state, behind: None }
    }

    fn live(at: &[u32]) -> BTreeMap<u64, Vec<ThreadSample>> {
        BTreeMap::from([(7, at.iter().map(|t| thread(*t)).collect())])
    }

    #[test]
    fn a_view_takes_the_segments_since_it_began_and_a_span_across_a_boundary_is_split() {
        let mut h = History::new(60 * S, MAX_KEPT_CELLS);
        h.boundary(10 * S, &live(&[1]), 0);
        h.add_spans([(7, vec![(1, span(10 * S, 15 * S, State::Running))])], 0);
        h.boundary(20 * S, &live(&[1, 2]), 0);
        // asleep from 15 s to 25 s: half in each segment
        h.add_spans([(7, vec![(1, span(15 * S, 25 * S, State::Sleep)), (2, span(20 * S, 29 * S, State::FutexWait))])], 0);
        let v = h.view(7, 12 * S, 30 * S, &[(1, span(25 * S, 30 * S, State::Running))]).unwrap();
        assert_eq!((v.from, v.base.len()), (10 * S, 1));
        let rows: BTreeMap<u32, Vec<Cell>> = v.timeline.rows().map(|(t, r)| (t, r.to_vec())).collect();
        let ends: Vec<(u64, u64, State)> = rows[&1].iter().map(|c| (c.start() / S, c.end() / S, c.state())).collect();
        assert_eq!(ends, [(10, 15, State::Running), (15, 20, State::Sleep), (20, 25, State::Sleep), (25, 30, State::Running)]);
        assert_eq!(rows[&2].len(), 1);
        // from 22 s: the second segment only, its base the two threads
        let v = h.view(7, 22 * S, 30 * S, &[]).unwrap();
        assert_eq!((v.from, v.base.len()), (20 * S, 2));
    }

    #[test]
    fn old_segments_go_gone_processes_go_and_the_cells_stay_bounded() {
        let mut h = History::new(30 * S, 2_000);
        for b in 0..10u64 {
            h.boundary(b * 10 * S, &live(&[1]), 0);
            // 10 s of 1 ms switches: 10,000 spans a segment
            let spans = (0..10_000u64).map(|i| {
                let at = b * 10 * S + i * 1_000_000;
                (1, span(at, at + 1_000_000, if i % 2 == 0 { State::Running } else { State::Runqueue }))
            });
            h.add_spans([(7, spans.collect())], 0);
            assert!(h.cells() <= 2_000, "{}", h.cells());
        }
        // 30 s kept: the segment holding 60 s ago on, at most 4 of them
        let segs = &h.procs[&7];
        assert!(
            segs.len() <= 4 && segs[0].from() <= 60 * S && segs[1].from() > 60 * S,
            "{:?}",
            segs.iter().map(Segment::from).collect::<Vec<_>>()
        );
        let v = h.view(7, 61 * S, 100 * S, &[]).unwrap();
        let totals = v.timeline.rows().next().unwrap().1.iter().map(|c| c.end() - c.start()).sum::<u64>();
        assert_eq!(totals, 100 * S - v.from);
        assert!(v.timeline.fine_ns > FINE_NS);
        // exits kept a segment at most MAX_EXITED, the rest counted
        let mut gone = thread(9);
        gone.exited = true;
        h.note_exits(&BTreeMap::from([(7, vec![gone; MAX_EXITED + 3])]));
        let v = h.view(7, 95 * S, 100 * S, &[]).unwrap();
        assert_eq!((v.exited.len(), v.exited_dropped), (MAX_EXITED, 3));
        h.boundary(100 * S, &BTreeMap::new(), 0);
        assert_eq!(h.processes().count(), 0);
    }
}
