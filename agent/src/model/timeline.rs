//! The state timeline (`attach --trace`): when each watched thread was in which state, and who
//! each wait was spent behind, as the sched probe closed its intervals (bpf/timeline.h). The
//! partition says how long; the timeline says when, next to what the other threads did.
//!
//! What is too fine to draw is folded: an interval shorter than the timeline's `fine_ns` goes
//! into a *fold*, a cell at least that long that keeps each state's time in it (and so its
//! share), not the order within it. Memory is bounded: past `max_cells` cells the whole timeline
//! is folded again at twice the grain, as often as needed, and the grain is said with it. Pure:
//! the session resolves who a span was behind and hands spans in; the outputs read cells out.
use std::collections::BTreeMap;

use super::state::{State, NR_STATES};

/// A span as the kernel sent it: host IDs, the culprit as the probe names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSpan {
    pub host_tid: u32,
    pub host_tgid: u32,
    pub state: State,
    /// CLOCK_MONOTONIC ns
    pub start: u64,
    pub end: u64,
    /// gil_wait: the holder as the probe names it; futex_wait: the waker's host TID (0: none);
    /// runqueue: what had the CPU (a host TID of the same process, else a host TGID)
    pub culprit: u64,
    /// runqueue: the host TGID of what had the CPU
    pub by_tgid: u32,
}

/// Who a wait was spent behind, in the agent's PID namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Behind {
    /// a thread of the same process (the GIL holder, the waker, the preemptor)
    Thread(u32),
    /// another process had the CPU
    Process(u32),
    /// the CPU was idle (a run-queue wait behind nothing: the time to be switched in)
    Idle,
}

/// One interval of one thread in one state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// CLOCK_MONOTONIC ns
    pub start: u64,
    pub end: u64,
    pub state: State,
    pub behind: Option<Behind>,
}

/// A cell of a thread's row: a span as it was, or a fold of short ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    Span(Span),
    /// intervals each shorter than the grain, from `start` to `end`: each state's time in it
    /// (µs; less than the cell's length where spans were lost)
    Fold {
        start: u64,
        end: u64,
        us: [u32; NR_STATES],
    },
}

impl Cell {
    pub fn start(&self) -> u64 {
        match self {
            Cell::Span(s) => s.start,
            Cell::Fold { start, .. } => *start,
        }
    }

    pub fn end(&self) -> u64 {
        match self {
            Cell::Span(s) => s.end,
            Cell::Fold { end, .. } => *end,
        }
    }

    /// A fold's share of each state, in `parts` parts, rounded (None: a span). A fold whose
    /// spans were all lost has no time: every share 0.
    pub fn shares(&self, parts: u64) -> Option<[u64; NR_STATES]> {
        let Cell::Fold { us, .. } = self else { return None };
        let total = us.iter().map(|u| u64::from(*u)).sum::<u64>().max(1);
        Some(us.map(|u| (parts * u64::from(u) + total / 2) / total))
    }

    /// The state that had most of it.
    pub fn state(&self) -> State {
        match self {
            Cell::Span(s) => s.state,
            Cell::Fold { us, .. } => {
                let i = (0..NR_STATES).max_by_key(|i| (us[*i], std::cmp::Reverse(*i))).unwrap_or(0);
                State::from_index(i).unwrap_or(State::Running)
            }
        }
    }
}

/// Cells kept while recording before the timeline is folded coarser (about 40 B each).
pub const MAX_CELLS: usize = 500_000;
/// The grain a timeline is recorded at: intervals shorter than this are folded.
pub const FINE_NS: u64 = 100_000;

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// the window: spans are clipped to it
    pub from: u64,
    pub to: u64,
    /// intervals shorter than this are folded
    pub fine_ns: u64,
    max_cells: usize,
    cells: usize,
    /// thread (TID in the agent's namespace) -> its cells, in time order
    threads: BTreeMap<u32, Vec<Cell>>,
    /// spans taken, and of them folded
    pub spans: u64,
    pub folded: u64,
}

/// Add a cell's time to a fold's per-state µs.
fn fold_into(us: &mut [u32; NR_STATES], c: &Cell) {
    match c {
        Cell::Span(s) => {
            let i = s.state.index();
            us[i] = us[i].saturating_add(((s.end - s.start) / 1000) as u32);
        }
        Cell::Fold { us: other, .. } => {
            for (a, b) in us.iter_mut().zip(other) {
                *a = a.saturating_add(*b);
            }
        }
    }
}

/// Put `c` at the end of `row` at grain `fine`: a span as long as the grain stays whole; a
/// shorter one, or a fold, goes into the open fold at the row's end while that fold is shorter
/// than the grain. Returns how many cells the row gained (0 or 1).
fn push(row: &mut Vec<Cell>, c: Cell, fine: u64) -> usize {
    let whole = matches!(c, Cell::Span(s) if s.end - s.start >= fine);
    if !whole {
        if let Some(Cell::Fold { start, end, us }) = row.last_mut() {
            if *end - *start < fine {
                *end = (*end).max(c.end());
                fold_into(us, &c);
                return 0;
            }
        }
        if let Cell::Span(_) = c {
            let mut us = [0u32; NR_STATES];
            fold_into(&mut us, &c);
            row.push(Cell::Fold { start: c.start(), end: c.end(), us });
            return 1;
        }
    }
    row.push(c);
    1
}

impl Timeline {
    pub fn new(from: u64, fine_ns: u64, max_cells: usize) -> Timeline {
        Timeline { from, to: from, fine_ns: fine_ns.max(1), max_cells: max_cells.max(1), ..Default::default() }
    }

    /// A timeline of a window opened at `from`, at the recording grain and bound (FINE_NS, MAX_CELLS).
    pub fn recording(from: u64) -> Timeline {
        Timeline::new(from, FINE_NS, MAX_CELLS)
    }

    /// One span of thread `tid`, clipped to the window's start (spans come in the order their
    /// intervals closed: per thread, in time order).
    pub fn add(&mut self, tid: u32, mut s: Span) {
        s.start = s.start.max(self.from);
        if s.end <= s.start {
            return;
        }
        self.to = self.to.max(s.end);
        self.spans += 1;
        if s.end - s.start < self.fine_ns {
            self.folded += 1;
        }
        let row = self.threads.entry(tid).or_default();
        self.cells += push(row, Cell::Span(s), self.fine_ns);
        if self.cells > self.max_cells {
            let fine = self.fine_ns * 2;
            self.refold(fine);
        }
    }

    /// A thread's open interval (its state since its last transition, to now): from where its
    /// row ends, if that is later (its closed spans came first).
    pub fn add_open(&mut self, tid: u32, mut s: Span) {
        if let Some(last) = self.threads.get(&tid).and_then(|r| r.last()) {
            s.start = s.start.max(last.end());
        }
        self.add(tid, s);
    }

    /// Close the window at `to`: later spans are cut there.
    pub fn close(&mut self, to: u64) {
        self.to = to;
        for row in self.threads.values_mut() {
            row.retain(|c| c.start() < to);
            if let Some(Cell::Span(s)) = row.last_mut() {
                s.end = s.end.min(to);
            }
            if let Some(Cell::Fold { end, .. }) = row.last_mut() {
                *end = (*end).min(to);
            }
        }
        self.cells = self.threads.values().map(Vec::len).sum();
    }

    /// Fold every row again at grain `fine_ns` (coarser than now).
    pub fn refold(&mut self, fine_ns: u64) {
        self.fine_ns = fine_ns.max(self.fine_ns);
        let mut cells = 0;
        for row in self.threads.values_mut() {
            let mut out = Vec::with_capacity(row.len() / 2);
            for c in row.drain(..) {
                cells += push(&mut out, c, self.fine_ns);
            }
            *row = out;
        }
        self.cells = cells;
    }

    /// Add a later timeline's cells after this one's (`later` begins where this one ends), at
    /// the coarser of the two grains.
    pub fn append(&mut self, later: &Timeline) {
        if later.fine_ns > self.fine_ns {
            self.refold(later.fine_ns);
        }
        for (tid, cells) in &later.threads {
            let row = self.threads.entry(*tid).or_default();
            for c in cells {
                self.cells += push(row, *c, self.fine_ns);
            }
        }
        self.to = self.to.max(later.to);
        self.spans += later.spans;
        self.folded += later.folded;
    }

    /// Fold at twice the grain until the timeline has at most `max_cells` cells (an output's
    /// budget).
    pub fn fit(&mut self, max_cells: usize) {
        while self.cells > max_cells.max(1) {
            let fine = self.fine_ns * 2;
            self.refold(fine);
        }
    }

    pub fn cells(&self) -> usize {
        self.cells
    }

    /// Each thread's row, by TID.
    pub fn rows(&self) -> impl Iterator<Item = (u32, &[Cell])> {
        self.threads.iter().map(|(t, r)| (*t, r.as_slice()))
    }

    /// A thread's time in each state over the timeline's cells (ns; folds to the µs).
    #[cfg(test)]
    pub fn totals(&self, tid: u32) -> [u64; NR_STATES] {
        let mut out = [0u64; NR_STATES];
        for c in self.threads.get(&tid).into_iter().flatten() {
            match c {
                Cell::Span(s) => out[s.state.index()] += s.end - s.start,
                Cell::Fold { us, .. } => {
                    for (o, u) in out.iter_mut().zip(us) {
                        *o += u64::from(*u) * 1000;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start_us: u64, end_us: u64, state: State) -> Span {
        Span { start: start_us * 1000, end: end_us * 1000, state, behind: None }
    }

    /// A thread that alternates `n` times between running `run_us` and waiting `wait_us` for the GIL.
    fn ping_pong(t: &mut Timeline, tid: u32, from_us: u64, n: u64, run_us: u64, wait_us: u64) -> u64 {
        let mut at = from_us;
        for _ in 0..n {
            t.add(tid, span(at, at + run_us, State::Running));
            at += run_us;
            t.add(tid, span(at, at + wait_us, State::GilWait));
            at += wait_us;
        }
        at
    }

    #[test]
    fn long_spans_stay_whole_and_short_ones_fold_with_their_shares() {
        let mut t = Timeline::new(0, 100_000, MAX_CELLS);
        // a 72 ms hold, then 1000 switches of 10 µs running and 30 µs waiting
        t.add(1, Span { behind: Some(Behind::Thread(2)), ..span(0, 72_000, State::GilWait) });
        let end = ping_pong(&mut t, 1, 72_000, 1000, 10, 30);
        let row: Vec<Cell> = t.rows().next().unwrap().1.to_vec();
        assert_eq!(row[0], Cell::Span(Span { behind: Some(Behind::Thread(2)), ..span(0, 72_000, State::GilWait) }));
        // the 40 ms of switches in folds of at least 100 µs (the last may be shorter)
        assert!(row[1..].iter().all(|c| matches!(c, Cell::Fold { .. })));
        assert!(row[1..row.len() - 1].iter().all(|c| c.end() - c.start() >= 100_000), "{row:?}");
        assert!(row.len() - 1 <= 40_000 / 100, "{}", row.len());
        assert_eq!(row.last().unwrap().end(), end * 1000);
        // the shares are kept: a quarter running, three quarters waiting, in every fold
        let totals = t.totals(1);
        assert_eq!(totals[State::Running.index()], 10_000 * 1000);
        assert_eq!(totals[State::GilWait.index()], 72_000_000 + 30_000 * 1000);
        assert!(row[1..].iter().all(|c| c.state() == State::GilWait));
        let mut quarter = [0u64; NR_STATES];
        (quarter[State::Running.index()], quarter[State::GilWait.index()]) = (25, 75);
        assert!(row[1..row.len() - 1].iter().all(|c| c.shares(100) == Some(quarter)), "{:?}", row[1].shares(100));
        assert_eq!(row[0].shares(100), None);
        assert_eq!((t.spans, t.folded), (2001, 2000));
    }

    #[test]
    fn past_its_cells_the_timeline_folds_coarser_and_keeps_every_states_time() {
        let mut t = Timeline::new(0, 100_000, 1000);
        let end = ping_pong(&mut t, 7, 0, 100_000, 50, 50);
        assert!(t.cells() <= 1000, "{}", t.cells());
        // 10 s in at most 1000 cells: a grain of 10 ms or about
        assert!(t.fine_ns >= 5_000_000, "{}", t.fine_ns);
        let totals = t.totals(7);
        assert_eq!(totals[State::Running.index()], 5_000_000_000);
        assert_eq!(totals[State::GilWait.index()], 5_000_000_000);
        assert_eq!(t.rows().next().unwrap().1.last().unwrap().end(), end * 1000);
        // and an output's budget folds it further
        t.fit(100);
        assert!(t.cells() <= 100);
        assert_eq!(t.totals(7)[State::Running.index()], 5_000_000_000);
    }

    #[test]
    fn spans_are_clipped_to_the_window() {
        let mut t = Timeline::new(1_000_000, 100_000, MAX_CELLS);
        t.add(1, span(0, 500, State::Sleep)); // before the window: nothing
        t.add(1, span(500, 3_000, State::Sleep)); // from the window's start
        t.add(1, span(3_000, 9_000, State::Running));
        t.close(5_000_000);
        let row: Vec<Cell> = t.rows().next().unwrap().1.to_vec();
        assert_eq!(row, vec![Cell::Span(span(1_000, 3_000, State::Sleep)), Cell::Span(span(3_000, 5_000, State::Running))]);
        assert_eq!(t.to, 5_000_000);
    }

    #[test]
    fn an_open_interval_fills_a_row_from_its_last_span_to_the_end() {
        let mut t = Timeline::new(1_000_000, 100_000, MAX_CELLS);
        t.add(1, span(1_000, 2_000, State::Running));
        // thread 1 asleep since before its last span was drained; thread 2 blocked all window
        t.add_open(1, span(1_500, 9_000, State::Sleep));
        t.add_open(2, span(0, 9_000, State::FutexWait));
        t.close(5_000_000);
        let rows: Vec<(u32, Vec<Cell>)> = t.rows().map(|(tid, r)| (tid, r.to_vec())).collect();
        assert_eq!(rows[0], (1, vec![Cell::Span(span(1_000, 2_000, State::Running)), Cell::Span(span(2_000, 5_000, State::Sleep))]));
        assert_eq!(rows[1], (2, vec![Cell::Span(span(1_000, 5_000, State::FutexWait))]));
    }
}
