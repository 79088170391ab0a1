//! The code on both sides of a finding's wait, from the wait stacks: where the
//! thread that waited was stopped, and what the thread it waited behind ran
//! meanwhile (docs/probes/stacks.md, docs/verdicts.md).
use std::fmt;

use serde::Serialize;

use super::evidence::{Behind, Culprit, ThreadRef, ThreadTime};
use crate::model::stacks::{HoldSite, Role, Site, WaitStacks};
use crate::model::state::State;

/// One side: the site with the most of the wait, and its share of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Side {
    /// the thread whose code this is
    pub thread: ThreadRef,
    /// `json.dumps ← processor (service.py:52)`
    pub site: String,
    #[serde(serialize_with = "super::serial::ratio")]
    pub share: f64,
    /// the C function with the most of that site's time (a GIL holder's,
    /// sampled while it ran; a native frame of a C extension)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_c: Option<InC>,
}

/// A C function inside a site, and its share of the site's time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InC {
    pub function: String,
    #[serde(serialize_with = "super::serial::ratio")]
    pub share: f64,
}

/// A C function is named in the sentence from this share of its site's time.
const IN_C_SHARE: f64 = 0.2;

/// How long the holds of a GIL holder's code that the thread sat behind
/// were (from its first wait behind one to the release that woke it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Holds {
    pub holds: u64,
    #[serde(serialize_with = "super::serial::seconds")]
    pub p50_s: u64,
    #[serde(serialize_with = "super::serial::seconds")]
    pub p99_s: u64,
    /// the waits were mostly (p50) two switch intervals or longer: the holder
    /// did not give the GIL up when asked (a C call that does not release it)
    pub without_switch: bool,
}

impl Holds {
    fn of(h: &HoldSite, switch_ns: u64) -> Option<Holds> {
        let p50 = h.lengths.quantile(0.5)?;
        let p99 = h.lengths.quantile(0.99)?;
        Some(Holds { holds: h.lengths.waits, p50_s: p50 as u64, p99_s: p99 as u64, without_switch: p50 >= 2.0 * switch_ns as f64 })
    }
}

fn role_label<S: serde::Serializer>(role: &Role, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(role.label())
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Code {
    /// the role of `culprit`: holder, waker, preemptor, busy
    #[serde(serialize_with = "role_label")]
    pub role: Role,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Side>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub victim: Option<Side>,
    /// a GIL holder's code: the lengths of the waits behind it there
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holds: Option<Holds>,
}

/// The code of the two sides of `victim`'s wait in `state` behind `holder` (the culprit in
/// `role`: holder, preemptor, waker; `Role::Victim`: the victim's side only); None when no
/// stack of it was taken. `switch_ns`: the target's GIL switch interval. A finding's code
/// (`rules::Claim::code`).
pub fn of_wait(
    victim: &ThreadTime,
    holder: Option<&Behind>,
    state: State,
    role: Role,
    stacks: &WaitStacks,
    switch_ns: u64,
) -> Option<Code> {
    let culprit = holder.and_then(|b| match &b.culprit {
        Culprit::Thread(t) => Some(t.clone()),
        _ => None,
    });
    let culprit_side = culprit.as_ref().filter(|_| role != Role::Victim).and_then(|t| {
        let s = stacks.top_site(victim.thread.tid, state, role, Some(t.tid))?;
        Some(side(t.clone(), s))
    });
    let victim_side = stacks.top_site(victim.thread.tid, state, Role::Victim, None).map(|s| side(victim.thread.clone(), s));
    let holds = culprit_side.as_ref().filter(|_| role == Role::Holder).and_then(|c| {
        let h = stacks.holds_by_site(Some(victim.thread.tid)).into_iter().find(|h| h.holder == c.thread.tid && h.site == c.site)?;
        Holds::of(&h, switch_ns)
    });
    (culprit_side.is_some() || victim_side.is_some()).then_some(Code { role, culprit: culprit_side, victim: victim_side, holds })
}

/// Where `thread` itself waited in `state` for at most `within_ns` of it (a wait no other thread
/// ended: I/O, a sleep), as a finding's code: a stall's stretches away from an event loop's poll,
/// spent in a synchronous call (`fetch_daily_report (app.py:21)`), not the poll's own site.
pub fn own_wait(thread: &ThreadRef, state: State, within_ns: u64, stacks: &WaitStacks) -> Option<Code> {
    let s = stacks.top_site_within(thread.tid, state, within_ns)?;
    Some(Code { role: Role::Victim, culprit: None, victim: Some(side(thread.clone(), s)), holds: None })
}

/// What a busy thread ran (its CPU clock samples while it had not blocked for a while: role
/// busy), as the culprit side of a finding about it (a stall, a saturated thread).
pub fn busy(thread: &ThreadRef, stacks: &WaitStacks) -> Option<Code> {
    let s = stacks.top_site(thread.tid, State::Running, Role::Busy, None)?;
    Some(Code { role: Role::Busy, culprit: Some(side(thread.clone(), s)), victim: None, holds: None })
}

/// A convoy: the code that released the lock (the wakers' top site as they woke the waiters) and
/// where the waiters waited for it, over the waits one of the lock's `wakers` ended: the hand-offs
/// of the lock, not the waiters' other waits (a pool's worker waiting for its next task, woken by
/// the dispatcher, is not waiting for the lock).
pub fn convoy(waiters: &[u32], wakers: &[u32], stacks: &WaitStacks) -> Option<Code> {
    let culprit =
        stacks.top_site_behind(waiters, State::FutexWait, Role::Waker, |b| wakers.contains(&b)).map(|s| side(anyone("the releasers"), s));
    let victim =
        stacks.top_site_behind(waiters, State::FutexWait, Role::Victim, |b| wakers.contains(&b)).map(|s| side(anyone("the waiters"), s));
    (culprit.is_some() || victim.is_some()).then_some(Code { role: Role::Waker, culprit, victim, holds: None })
}

/// GIL contention over a pool: what `holder` ran while any of the waiters waited behind it, and
/// where they waited, over all of them (the holder is often one of the waiters: a pool's workers
/// take turns, and a thread never waits behind itself).
pub fn contention(waiters: &[u32], holder: &ThreadRef, stacks: &WaitStacks, switch_ns: u64) -> Option<Code> {
    let culprit = stacks.top_site_of(waiters, State::GilWait, Role::Holder, Some(holder.tid)).map(|s| side(holder.clone(), s));
    let victim = stacks.top_site_of(waiters, State::GilWait, Role::Victim, None).map(|s| side(anyone("the waiters"), s));
    // the holds' lengths as one waiter saw them (summed over waiters, a hold two of them waited
    // behind would count twice): the one that waited longest behind it
    let most =
        waiters.iter().max_by_key(|v| stacks.select(**v, State::GilWait, Role::Holder, Some(holder.tid)).map(|(_, ns)| ns).sum::<u64>());
    let holds = culprit.as_ref().zip(most).and_then(|(c, v)| {
        let h = stacks.holds_by_site(Some(*v)).into_iter().find(|h| h.holder == holder.tid && h.site == c.site)?;
        Holds::of(&h, switch_ns)
    });
    (culprit.is_some() || victim.is_some()).then_some(Code { role: Role::Holder, culprit, victim, holds })
}

/// One side of a wait: a thread and the top site of its stacks there.
fn side(thread: ThreadRef, s: Site) -> Side {
    Side { thread, site: s.text, share: s.share, in_c: s.in_c.map(|(function, share)| InC { function, share }) }
}

/// A side that is several threads, said as one (`the waiters`).
fn anyone(who: &str) -> ThreadRef {
    ThreadRef { tid: 0, name: Some(who.into()), folded: 0 }
}

impl fmt::Display for Code {
    /// The sentence appended to the finding's line.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let name = |t: &ThreadRef| match (&t.name, t.tid) {
            (Some(n), 0) => n.clone(),
            (Some(n), tid) => format!("{n} ({tid})"),
            (None, tid) => format!("thread {tid}"),
        };
        if let Some(c) = &self.culprit {
            let verb = match self.role {
                Role::Holder => "held the GIL in",
                Role::Waker if c.thread.tid == 0 => "released it in",
                Role::Waker => "woke it from",
                Role::Preemptor => "had the CPU in",
                Role::Busy => "ran",
                Role::Victim => "was in",
            };
            write!(f, "Code: {} {verb} `{}` {:.0}% of that time", name(&c.thread), c.site, 100.0 * c.share)?;
            if let Some(in_c) = c.in_c.as_ref().filter(|i| i.share >= IN_C_SHARE) {
                write!(f, " (in C `{}` {:.0}% of it)", in_c.function, 100.0 * in_c.share)?;
            }
            if let Some(h) = self.holds.as_ref().filter(|h| h.without_switch) {
                let ms = |ns: u64| ns as f64 / 1e6;
                write!(
                    f,
                    ", without a switch for {:.0}–{:.0} ms at a time (p50–p99 of {} holds): a call that does not release the GIL",
                    ms(h.p50_s),
                    ms(h.p99_s),
                    h.holds
                )?;
            }
        }
        if let Some(v) = &self.victim {
            let lead = if self.culprit.is_some() { ";" } else { "Code:" };
            write!(f, "{lead} {} waited in `{}` ({:.0}%", name(&v.thread), v.site, 100.0 * v.share)?;
            if let Some(in_c) = v.in_c.as_ref().filter(|i| i.share >= IN_C_SHARE) {
                write!(f, "; in C `{}` {:.0}% of it", in_c.function, 100.0 * in_c.share)?;
            }
            write!(f, ")")?;
        }
        write!(f, ".")
    }
}

#[cfg(test)]
mod tests {
    use super::super::evidence::CpuUse;
    use super::super::rules::gil_starvation::GilStarvation;
    use super::super::rules::Claim;
    use super::*;
    use crate::model::stacks::{Frame, Key, Stack};

    #[test]
    fn a_gil_finding_names_the_holders_code_and_the_victims() {
        let mut w = WaitStacks::default();
        let py = |f: &str, file: &str, l| Frame::python(f.into(), file.into(), l);
        let dumps: Stack = vec![py("dumps", "/usr/lib/python3.12/json/__init__.py", 231), py("processor", "/srv/service.py", 52)].into();
        // the same site, sampled inside the C encoder
        let mut in_c = vec![Frame::native("encoder_listencode_obj".into(), "/usr/lib/python3.12/lib-dynload/_json.so".into())];
        in_c.extend(dumps.iter().cloned());
        let in_c: Stack = in_c.into();
        let spin: Stack = vec![py("spin", "/srv/service.py", 40)].into();
        let recv: Stack = vec![py("recv_exact", "/srv/service.py", 70)].into();
        let key = |role, stack: &Stack| Key { victim: 11, blamed: 12, state: State::GilWait, role, stack: stack.clone() };
        let mut long = crate::model::stacks::Lengths { waits: 12, max_ns: 75_000_000, ..Default::default() };
        long.buckets[7] = 12;
        w.add_waits(key(Role::Holder, &dumps), 400, &long);
        w.add(key(Role::Holder, &in_c), 500);
        w.add(key(Role::Holder, &spin), 100);
        w.add(key(Role::Victim, &recv), 1000);
        let kind = GilStarvation {
            victim: ThreadTime {
                thread: ThreadRef { tid: 11, name: Some("ingest".into()), folded: 0 },
                state: State::GilWait,
                ns: 1000,
                total_ns: 1100,
            },
            holder: Some(Behind { culprit: Culprit::Thread(ThreadRef { tid: 12, name: Some("processor".into()), folded: 0 }), share: 1.0 }),
            unresolved: 0.0,
            age: None,
            cpu: CpuUse { used_cores: 1.0, limit_cores: 2.0 },
            lock_holder: None,
            age_confirmed: true,
            kept_from_home: None,
        };
        let code = kind.code(&w, 5_000_000).expect("code");
        assert_eq!(
            code.to_string(),
            "Code: processor (12) held the GIL in `json.dumps ← processor (service.py:52)` 90% of that time (in C `encoder_listencode_obj` 56% of it), without a switch for 70–75 ms at a time (p50–p99 of 12 holds): a call that does not release the GIL; ingest (11) waited in `recv_exact (service.py:70)` (100%)."
        );
        // with a switch interval of 100 ms those waits are not long
        assert!(!kind.code(&w, 100_000_000).unwrap().to_string().contains("without a switch"));
        assert_eq!(
            serde_json::to_value(&code).unwrap()["culprit"],
            serde_json::json!({"thread": {"tid": 12, "name": "processor"}, "site": "json.dumps ← processor (service.py:52)", "share": 0.9,
                               "in_c": {"function": "encoder_listencode_obj", "share": 0.5556}})
        );
        assert!(kind.code(&WaitStacks::default(), 5_000_000).is_none());
    }

    /// A pool's workers take turns holding the GIL: the holder named is also the longest waiter,
    /// and its code is what it ran while the others waited (a thread never waits behind itself).
    #[test]
    fn gil_contention_over_a_pool_names_what_the_holder_ran_while_the_others_waited() {
        let mut w = WaitStacks::default();
        let py = |f: &str, l| Frame::python(f.into(), "/srv/app.py".into(), l);
        let dumps: Stack =
            vec![Frame::python("dumps".into(), "/usr/lib/python3.12/json/__init__.py".into(), 231), py("render_report", 12)].into();
        let take: Stack =
            vec![Frame::python("wait".into(), "/usr/lib/python3.12/threading.py".into(), 327), py("handler_thread", 40)].into();
        let key = |victim, blamed, role, stack: &Stack| Key { victim, blamed, state: State::GilWait, role, stack: stack.clone() };
        let mut held = crate::model::stacks::Lengths { waits: 4, max_ns: 200_000_000, ..Default::default() };
        held.buckets[8] = 4;
        // workers 1 and 3 waited behind 2, worker 2 behind 1 (and a sliver behind 3)
        for victim in [1, 3] {
            w.add_waits(key(victim, 2, Role::Holder, &dumps), 600, &held);
            w.add(key(victim, 2, Role::Victim, &take), 600);
        }
        w.add_waits(key(2, 1, Role::Holder, &dumps), 900, &held);
        w.add(key(2, 1, Role::Victim, &take), 900);
        w.add(key(2, 3, Role::Holder, &take), 50);
        let worker = |tid| ThreadRef { tid, name: Some(format!("worker-{tid}")), folded: 0 };
        let code = contention(&[2, 1, 3], &worker(2), &w, 5_000_000).expect("code");
        let text = code.to_string();
        assert_eq!(
            text,
            "Code: worker-2 (2) held the GIL in `json.dumps ← render_report (app.py:12)` 100% of that time, without a switch for 164–199 ms at a time (p50–p99 of 4 holds): a call that does not release the GIL; the waiters waited in `threading.wait ← handler_thread (app.py:40)` (100%)."
        );
        // what worker 2 waited in is not what it ran
        assert_eq!(code.culprit.as_ref().unwrap().thread.tid, 2);
        assert!(contention(&[1, 3], &worker(2), &WaitStacks::default(), 5_000_000).is_none());
    }
}
