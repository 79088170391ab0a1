//! Terminal rendering: the per-thread table (live and final) with a bar per thread.
use std::fmt::Write;

use super::verdict::{self, Verdict};
use super::{ProcessReport, ThreadRow};
use crate::model::age::AgeReport;
use crate::model::partition::secs;
use crate::model::state::State;

pub const BAR_WIDTH: usize = 30;

/// Column header, bar glyph (plain text) and ANSI colour of each state.
fn style(s: State) -> (&'static str, char, &'static str) {
    match s {
        State::Running => ("RUN", '#', "32"),
        State::Runqueue => ("RUNQ", 'q', "31"),
        State::Throttled => ("THROT", 't', "35"),
        State::GilWait => ("GIL", 'G', "33"),
        State::FutexWait => ("FUTEX", 'f', "34"),
        State::IoWait => ("IO", 'i', "36"),
        State::Sleep => ("SLEEP", '.', "90"),
        State::Other => ("OTHER", 'o', "37"),
        State::Yield => ("YIELD", 'y', "94"),
    }
}

/// A bar of `width` cells split in proportion to the states (largest remainder).
pub fn bar_cells(times: &crate::model::partition::Times, width: usize) -> Vec<State> {
    let total = times.total();
    if total == 0 {
        return vec![];
    }
    let exact: Vec<f64> = State::ALL.iter().map(|s| times.get(*s) as f64 * width as f64 / total as f64).collect();
    let mut cells: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut rest = width - cells.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..State::ALL.len()).collect();
    order.sort_by(|a, b| (exact[*b] - exact[*b].floor()).total_cmp(&(exact[*a] - exact[*a].floor())));
    for i in order {
        if rest == 0 {
            break;
        }
        if exact[i] > 0.0 {
            cells[i] += 1;
            rest -= 1;
        }
    }
    State::ALL.iter().zip(cells).flat_map(|(s, n)| std::iter::repeat_n(*s, n)).collect()
}

fn bar(times: &crate::model::partition::Times, color: bool, width: usize) -> String {
    let mut out = String::new();
    for s in bar_cells(times, width) {
        let (_, glyph, code) = style(s);
        if color {
            let _ = write!(out, "\x1b[{code}m█\x1b[0m");
        } else {
            out.push(glyph);
        }
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('~')).collect()
    }
}

/// The states the table shows: all but `yield`, and `yield` when a thread yielded.
pub fn shown_states(rows: &[ThreadRow]) -> Vec<State> {
    let yielded = rows.iter().any(|t| t.times.get(State::Yield) > 0);
    State::ALL.into_iter().filter(|s| *s != State::Yield || yielded).collect()
}

pub fn legend(color: bool, states: &[State]) -> String {
    states
        .iter()
        .map(|s| {
            let (_, glyph, code) = style(*s);
            if color {
                format!("\x1b[{code}m█\x1b[0m {}", s.name())
            } else {
                format!("{glyph} {}", s.name())
            }
        })
        .collect::<Vec<_>>()
        .join("  ")
}

/// What a thread waited for most, and behind whom: "GIL: processor",
/// "CPU: spin-b", "quota", "lock: holder"; empty when it mostly worked or idled.
pub fn culprit(t: &ThreadRow, rows: &[ThreadRow]) -> String {
    let total = t.times.total();
    if total == 0 {
        return String::new();
    }
    let candidates = [State::GilWait, State::Runqueue, State::Throttled, State::FutexWait];
    let Some(s) = candidates.into_iter().max_by_key(|s| t.times.get(*s)) else { return String::new() };
    if (t.times.get(s) as f64) < 0.2 * total as f64 {
        return String::new();
    }
    let (what, behind) = match s {
        State::GilWait => ("GIL", verdict::gil_holder(t, rows)),
        State::Runqueue => ("CPU", verdict::preemptor(t, rows)),
        State::Throttled => return "quota".into(),
        _ => ("lock", verdict::waker(t, rows)),
    };
    match behind {
        Some(b) => format!("{what}: {}", b.culprit.short()),
        None => what.into(),
    }
}

/// One plain line per interval when the output is not a terminal.
pub fn plain_line(r: &ProcessReport, at_s: f64, age: Option<&str>) -> String {
    let mut parts = vec![format!("waitmeter: t={at_s:.0}s")];
    if let Some(a) = age {
        parts.push(a.to_string());
    }
    let mut waits = vec![];
    for t in &r.threads {
        let c = culprit(t, &r.threads);
        if !c.is_empty() {
            let total = t.times.total().max(1) as f64;
            let waited = t.times.waiting() + t.times.get(State::FutexWait);
            waits.push(format!("{} {:.0}% ({c})", t.label(), 100.0 * waited as f64 / total));
        }
    }
    if waits.is_empty() {
        parts.push("threads working or idle".into());
    } else {
        parts.extend(waits);
    }
    parts.join(" | ")
}

/// A process' age as one tick shows it.
pub fn age_line(a: &AgeReport) -> String {
    format!(
        "age {:.2} s ({:+.2} s since attach, {} samples from the {})",
        a.summary.last_s, a.summary.growth_s, a.summary.samples, a.source
    )
}

/// A tick's plain line of one process' last interval; with several processes, it says whose.
pub fn tick_line(r: &ProcessReport, at_s: f64, age: Option<&AgeReport>, several: bool) -> String {
    let line = plain_line(r, at_s, age.map(age_line).as_deref());
    if several {
        line.replacen("waitmeter: ", &format!("waitmeter: PID {}: ", r.pid), 1)
    } else {
        line
    }
}

/// A tick's live view of one process' last interval: a title, the table in `width` columns,
/// the age.
pub fn tick_frame(
    r: &ProcessReport,
    at_s: f64,
    duration_s: f64,
    interval_s: f64,
    age: Option<&AgeReport>,
    color: bool,
    width: usize,
) -> String {
    let mut out = format!(
        "waitmeter: PID {} ({}), {at_s:.0}/{duration_s:.0} s, last {interval_s:.1} s (Ctrl-C ends early)\n{}",
        r.pid,
        r.comm,
        table_fit(r, color, width)
    );
    if let Some(a) = age {
        out.push_str(&format!("{}\n", age_line(a)));
    }
    out
}

/// The table's full width: every state column, the bar, the culprit.
pub const FULL_WIDTH: usize = 145;
/// Below `FULL_WIDTH` the bar goes; below this the state columns go and a shorter bar stays
/// (a `yield` column adds 6 to both).
pub const NARROW_WIDTH: usize = 100;

/// The rows most busy first (running and waiting), then by TID: the threads that matter lead.
/// Threads by their weight: running and waiting time, most first.
pub fn by_impact(rows: &[ThreadRow]) -> Vec<&ThreadRow> {
    let mut v: Vec<&ThreadRow> = rows.iter().collect();
    v.sort_by_key(|t| (std::cmp::Reverse(t.times.get(State::Running) + t.times.waiting()), t.tid, t.exited));
    v
}

/// The per-thread table in `width` columns, the busiest threads first: shares of each state in
/// percent, wait ratio, bar, top culprit; narrower, the bar goes, then the state columns (the
/// bar, shorter, shows them).
pub fn table_fit(r: &ProcessReport, color: bool, width: usize) -> String {
    let shown = shown_states(&r.threads);
    // each state column past the usual eight (yield) widens the table
    let extra = 6 * shown.len().saturating_sub(8);
    let (states, bar_width) = if width >= FULL_WIDTH + extra {
        (true, BAR_WIDTH)
    } else if width >= NARROW_WIDTH + extra {
        (true, 0)
    } else {
        (false, width.saturating_sub(39 + 4 + 12).clamp(8, BAR_WIDTH))
    };
    let fixed = 25 + if states { 6 * shown.len() } else { 0 } + 14 + if bar_width > 0 { 2 + bar_width } else { 0 };
    let culprit_width = width.saturating_sub(fixed + 2).clamp(6, 24);
    let mut out = String::new();
    let _ = write!(out, "{:>7}  {:<16}", "TID", "THREAD");
    if states {
        for &s in &shown {
            let _ = write!(out, " {:>5}", style(s).0);
        }
    }
    let _ = write!(out, "  {:>4}  {:>6}", "WAIT", "SECS");
    if bar_width > 0 {
        let _ = write!(out, "  {:<width$}", "STATES", width = bar_width);
    }
    let _ = writeln!(out, "  {}", truncate("TOP CULPRIT", culprit_width));
    for t in by_impact(&r.threads) {
        let total = t.times.total();
        let name = if t.exited { format!("{}†", truncate(&t.label(), 15)) } else { truncate(&t.label(), 16) };
        let _ = write!(out, "{:>7}  {:<16}", t.tid, name);
        if states {
            for &s in &shown {
                let pct = if total > 0 { 100.0 * t.times.get(s) as f64 / total as f64 } else { 0.0 };
                if pct == 0.0 {
                    let _ = write!(out, " {:>5}", "-");
                } else {
                    let _ = write!(out, " {:>5.1}", pct);
                }
            }
        }
        let ratio = t.times.wait_ratio_shown().map(|w| format!("{w:.2}")).unwrap_or_else(|| "-".into());
        let _ = write!(out, "  {:>4}  {:>6.2}", ratio, secs(total));
        if bar_width > 0 {
            let b = if total == 0 { " ".repeat(bar_width) } else { bar(&t.times, color, bar_width) };
            let _ = write!(out, "  {b}");
        }
        let _ = writeln!(out, "  {}", truncate(&culprit(t, &r.threads), culprit_width));
    }
    out
}

/// "CPUs 0-1 allowed; clocksource tsc (vDSO); no isolated CPUs"
pub fn environment_line(e: &super::environment::Environment) -> String {
    let mut parts = vec![];
    if let Some(c) = &e.cpus_allowed {
        parts.push(format!("CPUs {c} allowed"));
    }
    match (&e.clocksource, e.clock_vdso) {
        (Some(c), Some(true)) => parts.push(format!("clocksource {c} (vDSO)")),
        (Some(c), _) => parts.push(format!("clocksource {c} (clock reads are syscalls)")),
        _ => {}
    }
    match e.isolated_cpus.as_deref() {
        Some(i) if !i.is_empty() => parts.push(format!("isolated CPUs {i}")),
        _ => parts.push("no isolated CPUs".into()),
    }
    if let Some(n) = e.nohz_full.as_deref().filter(|n| !n.is_empty() && *n != "(null)") {
        parts.push(format!("nohz_full {n}"));
    }
    if let Some(go) = &e.go {
        let gomaxprocs = go.gomaxprocs_env.as_deref().map(|g| format!(", GOMAXPROCS={g}")).unwrap_or_default();
        parts.push(format!("{}{gomaxprocs}", go.version.as_deref().unwrap_or("Go before 1.18")));
    }
    format!("environment: {}", parts.join("; "))
}

/// The final report: header, table, legend, verdict (`v`: `verdict::analyse` of `r`); its table in
/// `width` columns (the verdict's lines wrap as the terminal wraps them).
pub fn report_fit(r: &ProcessReport, v: &Verdict, color: bool, width: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "waitmeter: PID {} ({}){}, {:.1} s, {} threads, % of time by state",
        r.pid,
        r.comm,
        r.container.as_ref().map(|c| format!(", {c}")).unwrap_or_default(),
        secs(r.duration_ns),
        r.threads.len()
    );
    if let Some(e) = &r.environment {
        let _ = writeln!(out, "{}", environment_line(e));
    }
    out.push_str(&table_fit(r, color, width));
    let shown = shown_states(&r.threads);
    let line = format!("  {}   († exited)", legend(false, &shown));
    if line.chars().count() <= width {
        let _ = writeln!(out, "  {}   († exited)", legend(color, &shown));
    } else {
        // two lines: the first four states, then the rest
        let _ = writeln!(out, "  {}", legend(color, &shown[..4]));
        let _ = writeln!(out, "  {}   († exited)", legend(color, &shown[4..]));
    }
    if let Some(e) = r.exited_after_ns {
        let _ = writeln!(out, "process {} exited {:.1} s into the window; the report covers the time it ran", r.pid, secs(e));
    }
    out.push_str("verdict:\n");
    for f in &v.shown {
        let _ = writeln!(out, "  - {f}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::blame::{FutexWait, Preemptor};
    use crate::model::partition::Times;
    use crate::report::fixtures::{full_report, row, S};
    use crate::report::verdict::analyse;
    use crate::report::ThreadRow;

    #[test]
    fn bar_is_proportional_and_full_width() {
        let mut t = Times::default();
        t.0[State::Running.index()] = 1;
        t.0[State::Runqueue.index()] = 1;
        let cells = bar_cells(&t, 30);
        assert_eq!(cells.len(), 30);
        assert_eq!(cells.iter().filter(|s| **s == State::Running).count(), 15);
        t.0[State::Sleep.index()] = 1;
        assert_eq!(bar_cells(&t, 30).len(), 30);
        assert!(bar_cells(&Times::default(), 30).is_empty());
    }

    #[test]
    fn table_shows_shares() {
        let mut t = Times::default();
        t.0[State::Running.index()] = 3_000_000_000;
        t.0[State::Runqueue.index()] = 1_000_000_000;
        let row =
            ThreadRow { tid: 42, name: "worker".into(), comm: "worker".into(), times: t, existed_ns: t.total(), ..Default::default() };
        let r = ProcessReport::new(42, "demo".into(), None, 4_000_000_000, None, vec![row]);
        let text = report_fit(&r, &analyse(&r), false, FULL_WIDTH);
        assert!(text.contains("PID 42 (demo), 4.0 s, 1 threads"), "{text}");
        let line = text.lines().find(|l| l.contains("worker")).unwrap();
        assert!(line.contains(" 75.0  25.0"), "{line}");
        assert!(line.contains("0.25"), "{line}");
        assert!(
            line.contains(&format!("{}{}", "#".repeat(22), "q".repeat(8)))
                || line.contains(&format!("{}{}", "#".repeat(23), "q".repeat(7))),
            "{line}"
        );
        assert!(line.ends_with("CPU"), "{line}"); // 25% in the run queue, preemptor unknown
        assert!(plain_line(&r, 3.0, Some("age 1.00 s")).starts_with("waitmeter: t=3s | age 1.00 s | worker 25% (CPU)"));
    }

    #[test]
    fn the_culprit_of_every_kind_is_pinned() {
        let gil = |holders: &[(u32, u64)]| {
            let mut r = row(1, "ingest", &[(State::GilWait, 5 * S), (State::Running, 5 * S)]);
            r.gil_by_holder.extend(holders.iter().copied());
            r
        };
        let rq = |by: &[(Preemptor, u64)]| {
            let mut r = row(1, "spin", &[(State::Runqueue, 5 * S), (State::Running, 5 * S)]);
            r.runqueue_by.extend(by.iter().cloned());
            r
        };
        let futex = |wakers: &[(u32, u64)]| {
            let mut r = row(1, "locker", &[(State::FutexWait, 5 * S), (State::Running, 5 * S)]);
            r.futex.extend(wakers.iter().map(|(w, ns)| FutexWait { addr: 0x10, waker: *w, ns: *ns }));
            r
        };
        let others = [row(2, "processor", &[(State::Running, 10 * S)])];
        let cases = [
            gil(&[(2, 4 * S), (0, S)]),
            gil(&[(7, 4 * S)]),
            gil(&[(0, 5 * S)]),
            gil(&[]),
            rq(&[(Preemptor::Thread(2), 3 * S), (Preemptor::Idle, 2 * S)]),
            rq(&[(Preemptor::Thread(7), 3 * S)]),
            rq(&[(Preemptor::Process { pid: 99, comm: "hog".into() }, 3 * S)]),
            rq(&[(Preemptor::Idle, 3 * S)]),
            rq(&[]),
            row(1, "w", &[(State::Throttled, 5 * S), (State::Running, 5 * S)]),
            futex(&[(2, 3 * S), (0, 2 * S)]),
            futex(&[(7, 3 * S)]),
            futex(&[(0, 3 * S)]),
            futex(&[]),
            row(1, "w", &[(State::GilWait, S), (State::Running, 9 * S)]),
            row(1, "w", &[(State::IoWait, 9 * S), (State::Running, S)]),
            row(1, "w", &[]),
        ];
        let pinned = [
            "GIL: processor",
            "GIL: 7",
            "GIL",
            "GIL",
            "CPU: processor",
            "CPU: 7",
            "CPU: pid 99 (hog)",
            "CPU: idle",
            "CPU",
            "quota",
            "lock: processor",
            "lock: 7",
            "lock: timeout",
            "lock",
            "",
            "",
            "",
        ];
        assert_eq!(cases.len(), pinned.len());
        for (c, want) in cases.iter().zip(pinned) {
            assert_eq!(culprit(c, &others), want, "{c:?}");
        }
    }

    #[test]
    fn the_table_fits_80_and_120_columns_busiest_first() {
        let r = full_report();
        for width in [80, 100, 120, FULL_WIDTH] {
            let text = report_fit(&r, &analyse(&r), false, width);
            let table: Vec<&str> = text.lines().take_while(|l| !l.starts_with("verdict:")).collect();
            for line in &table {
                assert!(line.chars().count() <= width, "{width}: {} chars: {line}", line.chars().count());
            }
            // every thread has its row; the busiest leads: ingest (running or waiting 100%),
            // processor (95%), then waiter (10%)
            let rows: Vec<&&str> = table.iter().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).collect();
            assert_eq!(rows.len(), 3, "{text}");
            assert!(rows[0].contains("ingest") && rows[1].contains("processor") && rows[2].contains("waiter"), "{width}: {text}");
        }
        // 80 columns: no state columns, a bar that still shows them
        let narrow = table_fit(&r, false, 80);
        assert!(!narrow.contains("FUTEX") && narrow.contains("STATES"), "{narrow}");
        // 120: the state columns, no bar
        let medium = table_fit(&r, false, 120);
        assert!(medium.contains("FUTEX") && !medium.contains("STATES"), "{medium}");
        assert!(!report_fit(&r, &analyse(&r), false, FULL_WIDTH).contains("YIELD"));
    }

    /// A tick's plain line says whose it is when there are several processes; its live frame
    /// has the title, the table and the age.
    #[test]
    fn a_tick_renders_each_process_line_or_frame() {
        let r = full_report();
        let summary = crate::model::age::AgeSummary { samples: 12, last_s: 3.5, growth_s: 1.25, ..Default::default() };
        let age = AgeReport { source: "endpoint", summary, p50_s: None, p99_s: None, skipped_lines: None, failed_polls: None };
        let line = tick_line(&r, 4.0, Some(&age), true);
        assert!(
            line.starts_with(&format!(
                "waitmeter: PID {}: t=4s | age 3.50 s (+1.25 s since attach, 12 samples from the endpoint) | ",
                r.pid
            )),
            "{line}"
        );
        assert!(tick_line(&r, 4.0, None, false).starts_with("waitmeter: t=4s | "));
        let frame = tick_frame(&r, 4.0, 10.0, 1.0, Some(&age), false, 120);
        let lines: Vec<&str> = frame.lines().collect();
        assert_eq!(lines[0], format!("waitmeter: PID {} ({}), 4/10 s, last 1.0 s (Ctrl-C ends early)", r.pid, r.comm));
        assert_eq!(lines[1..lines.len() - 1].join("\n"), table_fit(&r, false, 120).trim_end());
        assert_eq!(*lines.last().unwrap(), "age 3.50 s (+1.25 s since attach, 12 samples from the endpoint)");
    }

    #[test]
    fn a_yield_column_only_when_a_thread_yielded_and_it_still_fits() {
        let mut r = full_report();
        r.threads[0].times.0[State::Yield.index()] = 1_000_000_000;
        for width in [80, 100, 106, 120, FULL_WIDTH, FULL_WIDTH + 6] {
            let text = report_fit(&r, &analyse(&r), false, width);
            for line in text.lines().take_while(|l| !l.starts_with("verdict:")) {
                assert!(line.chars().count() <= width, "{width}: {} chars: {line}", line.chars().count());
            }
            assert!(text.contains("y yield"), "{text}");
        }
        assert!(table_fit(&r, false, FULL_WIDTH + 6).contains("YIELD  WAIT") && table_fit(&r, false, FULL_WIDTH + 6).contains("STATES"));
        assert!(table_fit(&r, false, 106).contains("YIELD") && !table_fit(&r, false, 105).contains("YIELD"));
    }

    #[test]
    fn the_text_report_is_pinned() {
        let r = full_report();
        let (plain, ansi) = (report_fit(&r, &analyse(&r), false, FULL_WIDTH), report_fit(&r, &analyse(&r), true, FULL_WIDTH));
        crate::report::fixtures::bless("full_report.txt", &plain);
        crate::report::fixtures::bless("full_report.ansi", &ansi);
        assert_eq!(plain, include_str!("testdata/full_report.txt"));
        assert_eq!(ansi, include_str!("testdata/full_report.ansi"));
    }
}
