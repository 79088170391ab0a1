//! Wait profiles: the wait stacks of a process as a pprof profile
//! (docs/profiles.md). Sample value: nanoseconds of waiting (sample type
//! `wait`/`nanoseconds`, never `cpu`, so no consumer files it with CPU
//! profiles). Labels: `thread` (whose stack: the thread that waited for role
//! `victim`, the holder, waker or preemptor otherwise), `state` (the time
//! model's), `role`, and `victim` (the thread that waited) on the culprits'
//! samples. Threads are labelled by name, as the metrics label them; the
//! same-named threads' samples merge.
use std::collections::HashMap;

use waitmeter_formats::pprof::{Builder, Frame as PFrame};

use crate::model::stacks::{Kind, Role, WaitStacks};
use crate::report::ProcessReport;

/// A thread's label: its name when known, else its TID.
fn label(names: &HashMap<u32, String>, tid: u32) -> String {
    match (tid, names.get(&tid)) {
        (0, _) => "unknown".into(),
        (_, Some(n)) => n.clone(),
        (t, None) => format!("tid {t}"),
    }
}

/// The wait stacks of one process, its threads' labels (TID -> label) and
/// labels of its own that every one of its samples carries (`pid`, `comm`
/// when a profile covers several processes).
pub struct Part<'a> {
    pub stacks: &'a WaitStacks,
    pub names: &'a HashMap<u32, String>,
    pub labels: Vec<(&'static str, String)>,
}

/// The profile of the processes `attach` measured together (several `-p`, `--children`): one
/// process' as `pprof` makes it, several each sample labelled with its process (`pid`, `comm`),
/// as `run` labels the processes it watches. Processes without stacks add nothing.
pub fn of_reports(reports: &[ProcessReport], start_unix_ns: i64, duration_ns: i64) -> Builder {
    let names: Vec<HashMap<u32, String>> = reports.iter().map(|r| r.threads.iter().map(|t| (t.tid, t.name.clone())).collect()).collect();
    let several = reports.iter().filter(|r| r.stacks.is_some()).count() > 1;
    let parts: Vec<Part> = reports
        .iter()
        .zip(&names)
        .filter_map(|(r, names)| {
            let labels = if several { vec![("pid", r.pid.to_string()), ("comm", r.comm.clone())] } else { vec![] };
            r.stacks.as_ref().map(|stacks| Part { stacks, names, labels })
        })
        .collect();
    pprof_of(&parts, start_unix_ns, duration_ns)
}

/// The pprof profile of the wait stacks of several processes, which cover `duration_ns` from
/// `start_unix_ns` (what did not fit: `Builder::dropped`).
pub fn pprof_of(parts: &[Part], start_unix_ns: i64, duration_ns: i64) -> Builder {
    let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
    b.set_time(start_unix_ns, duration_ns);
    b.add_comment("waitmeter wait profile: value = nanoseconds a thread waited; role victim = its own stack, holder/waker/preemptor = the stack of who it waited behind; role busy = a thread's own code on the CPU while it had not blocked for long (not a wait)");
    // the heaviest first, so that what a full profile leaves out is the least
    let mut entries: Vec<_> = parts.iter().flat_map(|p| p.stacks.ns.iter().map(move |(k, ns)| (p, k, ns))).collect();
    entries.sort_by(|a, b| b.2.cmp(a.2).then_with(|| (a.1.victim, a.1.role, a.1.state).cmp(&(b.1.victim, b.1.role, b.1.state))));
    for (part, k, ns) in entries {
        let names = part.names;
        let locs: Vec<u64> = k
            .stack
            .iter()
            .map(|f| {
                let name = match f.kind {
                    Kind::Python => f.display_name(),
                    _ => f.function.clone(),
                };
                b.location(&PFrame {
                    function: &name,
                    system_name: &f.function,
                    filename: &f.file,
                    line: i64::from(f.line),
                    start_line: 0,
                    address: 0,
                })
            })
            .collect();
        // the thread's own stack (where it waited, or what it ran while busy) or its culprit's
        let own = matches!(k.role, Role::Victim | Role::Busy);
        let whose = if own { k.victim } else { k.blamed };
        let thread = label(names, whose);
        let victim = label(names, k.victim);
        let mut labels: Vec<(&str, &str)> = part.labels.iter().map(|(n, v)| (*n, v.as_str())).collect();
        labels.extend([("thread", thread.as_str()), ("state", k.state.name()), ("role", k.role.label())]);
        if !own {
            labels.push(("victim", victim.as_str()));
        }
        b.add_sample(&locs, &[i64::try_from(*ns).unwrap_or(i64::MAX)], &labels);
    }
    b
}
