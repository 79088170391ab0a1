//! "GIL starvation:": the age rising (or above its objective) while a thread lost most of its
//! time to the GIL, itself or through a lock whose holder waited for the GIL (a causal chain).
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{growth, unresolved_part, AgeFacts, Behind, CpuUse, Culprit, ThreadRef, ThreadTime};
use super::super::serial::{hex, ratio, seconds};
use super::super::ThreadRow;
use super::gil_ping_pong::pollers;
use super::rows::{gil_holder, gil_unresolved, present, row_of, share_of, thread_of, time_in, top_word};
use super::{Claim, Context, Repeat, WAITING_SHARE};
use crate::model::blame;
use crate::model::partition::secs;
use crate::model::stacks::{Role, WaitStacks};
use crate::model::state::State;

/// GIL starvation needs the victim's GIL wait to be at least this share of its time.
pub const GIL_STARVATION_SHARE: f64 = 0.5;
/// A lock wait is a link of a causal chain when one thread's wake-ups ended this share of it.
pub const CHAIN_SHARE: f64 = 0.5;
/// A lock wait shorter than `WAITING_SHARE` of its waiter's time is still a link from this share
/// when the waiter lost most of its time to the GIL, directly and through the lock together: a
/// waiter that gets the lock and then waits for the GIL again splits one loss in two.
pub const CHAIN_LINK_MIN_SHARE: f64 = 0.10;
const _: () = assert!(CHAIN_LINK_MIN_SHARE <= WAITING_SHARE);
/// A chain's waiting end is said to wait for the GIL itself too from this share of its time.
pub const OWN_GIL_SHARE: f64 = 0.05;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GilStarvation {
    #[serde(flatten)]
    pub victim: ThreadTime,
    pub holder: Option<Behind>,
    /// the share of the GIL wait whose holder was not resolved (hand-offs too fast)
    #[serde(rename = "holder_unresolved_share", serialize_with = "ratio")]
    pub unresolved: f64,
    pub age: Option<AgeFacts>,
    pub cpu: CpuUse,
    /// the causal chain's middle link: the victim (`state` futex_wait) waited on a lock
    /// whose holder was itself waiting for the GIL (`holder` and `holder_unresolved_share`
    /// are of that thread's GIL wait); null: the victim waited for the GIL itself
    pub lock_holder: Option<LockHolder>,
    /// the age says the work falls behind (rising or above its objective); false: no age
    /// source is joined, and the share of time lost to the GIL alone says so
    pub age_confirmed: bool,
    /// the victim's stalls away from its home wait, when it has some (the stall this finding
    /// says too: one finding per cause)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_from_home: Option<KeptFromHome>,
}

/// A thread's stalls away from its home wait, as another finding quotes them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeptFromHome {
    pub home: String,
    pub stalls: u64,
    #[serde(rename = "p50_s", serialize_with = "seconds")]
    pub p50_ns: u64,
    #[serde(rename = "max_s", serialize_with = "seconds")]
    pub max_ns: u64,
}

impl KeptFromHome {
    /// Of a thread with stalls at its home.
    pub fn of(r: &ThreadRow) -> Option<KeptFromHome> {
        let st = r.stretches.as_ref()?;
        let (home, h) = st.at_home()?;
        (h.long_count > 0).then(|| KeptFromHome {
            home: home.name(),
            stalls: h.long_count,
            p50_ns: h.quantile_ns(0.5, st.objective_ns).unwrap_or(h.max_ns),
            max_ns: h.max_ns,
        })
    }
}

impl fmt::Display for KeptFromHome {
    /// "kept from its read (recvfrom) for 304–570 ms at a time (p50–max of 3 stalls)"
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let lengths = super::stall::lengths(self.p50_ns, self.max_ns);
        write!(
            f,
            "kept from {} ({}) for {lengths} at a time (p50–max of {} stalls)",
            super::stall::from_what(&self.home),
            self.home,
            self.stalls
        )
    }
}

/// The thread whose release ended most of a victim's lock wait, while itself waiting for the
/// GIL: the middle of "ingest waits on a lock held by worker, which waits for the GIL behind processor".
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockHolder {
    /// the lock holder's GIL wait (its `thread`, `wait_s` and `total_s`)
    pub gil_wait: ThreadTime,
    /// the futex word (or CPython lock) most of the victim's wait behind it was on
    #[serde(serialize_with = "hex")]
    pub lock: u64,
    /// the share of the victim's futex wait that this thread's wake-ups ended
    #[serde(serialize_with = "ratio")]
    pub share: f64,
    /// the victim's own GIL wait besides (its time waiting for the GIL directly), and what held
    /// the GIL then
    #[serde(rename = "waiter_gil_wait_s", serialize_with = "seconds")]
    pub waiter_gil_ns: u64,
    pub waiter_gil_holder: Option<Behind>,
}

/// The thread that ended most of `u`'s futex wait (`CHAIN_SHARE`), when that thread waited for
/// the GIL `WAITING_SHARE` of its time or more behind a thread other than `u`; with its wait-ups'
/// part of `u`'s wait and the futex word most of that was on.
fn lock_link<'a>(u: &ThreadRow, rows: &'a [ThreadRow]) -> Option<(&'a ThreadRow, u64, u64)> {
    let (w, share) = u.top_waker()?;
    if w == 0 || w == u.tid || share < CHAIN_SHARE {
        return None;
    }
    let holder = row_of(w, rows)?;
    if share_of(holder, State::GilWait) < WAITING_SHARE || holder.top_gil_holder().is_some_and(|(h, _)| h == u.tid) {
        return None;
    }
    let (lock, _, ns) = top_word(u.futex.iter().filter(|x| x.waker == w))?;
    // its home wait is where it waits for work (a pool's worker on its queue): no lock
    if super::idle_threads::home_word(u, lock) {
        return None;
    }
    Some((holder, ns, lock))
}

/// GIL starvation: the thread whose work falls behind lost most of its time to the GIL, itself
/// (`GIL_STARVATION_SHARE`) or through a lock whose holder waited for the GIL (a causal chain:
/// the lock wait `CHAIN_LINK_MIN_SHARE` of its time or more and the two together most of it, or
/// the lock wait `WAITING_SHARE` or more and the holder starving itself). Said when the age rises or breaks its objective; with no age source
/// at all, said as likely when the GIL's holder is a named thread. A thread with its own rising
/// age (waitmeter_client) is the victim before any other; else a chain's waiting end before the
/// thread that lost the most to the GIL directly. Neither end is idle or busy-polling the GIL.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    starvation(cx).map(|s| -> Box<dyn Claim> { Box::new(s) }).into_iter().collect()
}

fn starvation(cx: &Context) -> Option<GilStarvation> {
    let (report, rows) = (cx.report, cx.rows);
    let confirmed = cx.bad_age;
    let no_age = report.age.is_none() && rows.iter().all(|t| t.age.is_none());
    if !confirmed && !no_age {
        return None;
    }
    let idle = cx.idle();
    let own_age_rising = |r: &ThreadRow| r.age.as_ref().is_some_and(|a| a.rising);
    let gil = |r: &ThreadRow| r.times.get(State::GilWait);
    // a busy-polling thread's GIL wait is its polling's price, not starvation
    let pollers: Vec<u32> = pollers(rows, cx.window_ns).iter().map(|r| r.tid).collect();
    let direct = rows
        .iter()
        .filter(|r| !pollers.contains(&r.tid))
        .filter(|r| present(r, cx.window_ns) && share_of(r, State::GilWait) >= GIL_STARVATION_SHARE)
        .max_by_key(|r| (own_age_rising(r), gil(r)));
    let chain = rows
        .iter()
        .filter(|u| present(u, cx.window_ns) && !idle.contains(&u.tid) && !pollers.contains(&u.tid))
        .filter_map(|u| lock_link(u, rows).map(|(w, ns, lock)| (u, w, ns, lock)))
        .filter(|(_, w, _, _)| !pollers.contains(&w.tid))
        .filter(|(u, w, ns, _)| {
            let (total, ns) = (u.times.total() as f64, *ns as f64);
            let most_lost = ns + gil(u) as f64 >= GIL_STARVATION_SHARE * total;
            (ns >= CHAIN_LINK_MIN_SHARE * total && most_lost)
                || (ns >= WAITING_SHARE * total && share_of(w, State::GilWait) >= GIL_STARVATION_SHARE)
        })
        .max_by_key(|(u, _, ns, _)| (own_age_rising(u), *ns))
        // a direct victim whose own age rises wins over a chain it is not part of
        .filter(|(u, w, _, _)| direct.is_none_or(|d| !own_age_rising(d) || own_age_rising(u) || d.tid == w.tid));
    let (victim, gil_waiter, lock_holder) = match (chain, direct) {
        (Some((u, w, ns, lock)), _) => {
            let share = ns as f64 / u.times.get(State::FutexWait).max(1) as f64;
            let victim = ThreadTime { ns, ..time_in(u, State::FutexWait) };
            let lock_holder = LockHolder {
                gil_wait: time_in(w, State::GilWait),
                lock,
                share: share.min(1.0),
                waiter_gil_ns: gil(u),
                waiter_gil_holder: gil_holder(u, rows),
            };
            (victim, w, Some(lock_holder))
        }
        (None, Some(d)) => (time_in(d, State::GilWait), d, None),
        (None, None) => return None,
    };
    let holder = gil_holder(gil_waiter, rows);
    let named =
        matches!(&holder, Some(Behind { culprit: Culprit::Thread(ThreadRef { name: Some(_), tid, .. }), .. }) if *tid != blame::GONE);
    if !confirmed && !named {
        return None;
    }
    let kept_from_home = row_of(victim.thread.tid, rows).and_then(KeptFromHome::of);
    Some(GilStarvation {
        victim,
        unresolved: gil_unresolved(gil_waiter),
        holder,
        age: cx.age.clone(),
        cpu: cx.cpu,
        kept_from_home,
        lock_holder,
        age_confirmed: confirmed,
    })
}

impl Claim for GilStarvation {
    fn kind(&self) -> &'static str {
        "gil_starvation"
    }
    fn victim(&self) -> Option<&ThreadTime> {
        Some(&self.victim)
    }
    /// The victim's wait; a chain's, the longer of its two waits.
    fn explains_ns(&self) -> u64 {
        let v = &self.victim;
        self.lock_holder.as_ref().map_or(v.ns, |l| (v.ns + l.waiter_gil_ns).max(l.gil_wait.ns))
    }
    fn precedence(&self) -> u8 {
        2
    }
    /// A headline, not the victim's own line.
    fn line_of(&self) -> Option<(u32, State)> {
        None
    }
    fn quotes_age(&self) -> bool {
        true
    }
    fn explains_age(&self) -> bool {
        true
    }
    /// The starving thread's and a chain's lock holder's GIL-wait lines.
    fn repeats(&self) -> Vec<Repeat> {
        let starving = std::iter::once(self.victim.thread.tid).chain(self.lock_holder.as_ref().map(|l| l.gil_wait.thread.tid));
        starving.map(|tid| Repeat { tid: Some(tid), states: &[State::GilWait] }).collect()
    }
    fn gil_holder(&self) -> Option<u32> {
        thread_of(&self.holder)
    }
    fn culprits(&self) -> Vec<u32> {
        thread_of(&self.holder).into_iter().collect()
    }
    /// A causal chain's code is of its GIL wait: the lock holder's, behind the GIL holder.
    fn code(&self, stacks: &WaitStacks, switch_ns: u64) -> Option<Code> {
        let victim = self.lock_holder.as_ref().map_or(&self.victim, |l| &l.gil_wait);
        code::of_wait(victim, self.holder.as_ref(), State::GilWait, Role::Holder, stacks, switch_ns)
    }
}

/// " held by processor (12)" when `b` is a named thread of the report.
fn held_by(b: &Option<Behind>) -> String {
    match b {
        Some(Behind { culprit: Culprit::Thread(ThreadRef { tid, name: Some(name), folded: 0 }), .. }) if *tid != blame::GONE => {
            format!(" held by {name} ({tid})")
        }
        _ => String::new(),
    }
}

impl fmt::Display for GilStarvation {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let GilStarvation { victim, holder, unresolved, age, cpu, lock_holder, age_confirmed, kept_from_home } = self;
        let holder = holder.as_ref().and_then(|h| match &h.culprit {
            Culprit::Thread(ThreadRef { tid, name: Some(name), folded: 0 }) => Some((name, tid)),
            _ => None,
        });
        let behind = holder.map(|(name, tid)| format!(" held by {name} ({tid})")).unwrap_or_default() + &unresolved_part(*unresolved);
        let fix = holder
            .map_or_else(|| " Move the GIL-heavy work to its own process".into(), |(name, _)| format!(" Move {name} to its own process"));
        let (head, confirm) = if *age_confirmed {
            ("GIL starvation", "")
        } else {
            (
                "GIL starvation (likely: no age source)",
                "; join the work's age (--age-url, waitmeter_client: docs/age.md) to see whether it falls behind",
            )
        };
        let lost = match lock_holder {
            None => format!("lost {:.1} s of {:.1} s waiting for the GIL{behind}", secs(victim.ns), secs(victim.total_ns)),
            Some(l) => format!(
                "lost {:.1} s of {:.1} s {}blocked on {} released by {} ({:.0}% of that wait), which itself lost {:.1} s of {:.1} s waiting for the GIL{behind}",
                secs(victim.ns + l.waiter_gil_ns),
                secs(victim.total_ns),
                if l.waiter_gil_ns as f64 >= OWN_GIL_SHARE * victim.total_ns as f64 {
                    format!("to the GIL: {:.1} s waiting for it{}, {:.1} s ", secs(l.waiter_gil_ns), held_by(&l.waiter_gil_holder), secs(victim.ns))
                } else {
                    String::new()
                },
                if blame::is_parked(l.lock) {
                    format!("CPython lock {:#x}", blame::address(l.lock))
                } else {
                    format!("futex {:#x} (a lock or condition)", blame::address(l.lock))
                },
                l.gil_wait.thread.or_a_thread(),
                100.0 * l.share,
                secs(l.gil_wait.ns),
                secs(l.gil_wait.total_ns),
            ),
        };
        let kept = kept_from_home.as_ref().map(|k| format!("; {k}")).unwrap_or_default();
        write!(
            f,
            "{head}: thread {} {lost}{kept}{}; {cpu}: this is waiting, not working.{fix}{confirm}",
            victim.thread.or_a_thread(),
            growth(age),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;
    use crate::report::rules::gil_wait::GilWait;

    #[test]
    fn the_starvation_line_names_no_holder_outside_the_report() {
        let victim = ThreadTime { thread: thread(11, Some("ingest")), state: State::GilWait, ns: 9_000_000_000, total_ns: 10_000_000_000 };
        let holder = Some(Behind { culprit: Culprit::Thread(thread(77, None)), share: 1.0 });
        let kind = GilStarvation {
            victim,
            holder,
            unresolved: 0.0,
            age: None,
            cpu: CpuUse { used_cores: 0.1, limit_cores: 2.0 },
            lock_holder: None,
            age_confirmed: true,
            kept_from_home: None,
        };
        assert_eq!(kind.explains_ns(), 9_000_000_000);
        assert_eq!(
            kind.to_string(),
            "GIL starvation: thread ingest (11) lost 9.0 s of 10.0 s waiting for the GIL; CPU 0.1 of 2 cores: this is waiting, not working. Move the GIL-heavy work to its own process"
        );
    }

    #[test]
    fn gil_starvation_behind_a_holder() {
        let f = findings_of(starving(), 10 * S, 4.0, Some((1.0, 3.0, true)));
        let victim = time(11, "ingest", State::GilWait, 9_400_000_000, 10 * S);
        let starvation = GilStarvation {
            victim: victim.clone(),
            holder: behind(12, "processor", 9.3 / 9.4),
            unresolved: 0.1 / 9.4,
            age: Some(facts(1.0, 3.0, true)),
            cpu: CpuUse { used_cores: 10.5 / 10.0, limit_cores: 4.0 },
            lock_holder: None,
            age_confirmed: true,
            kept_from_home: None,
        };
        check(&f[0], starvation, 9_400_000_000, "GIL starvation: thread ingest (11) lost 9.4 s of 10.0 s waiting for the GIL held by processor (12), 1% behind a holder not resolved (hand-offs too fast to follow); message age grew 2.0 s (to 3.0 s; mean 2.00 s, max 3.00 s); CPU 1.1 of 4 cores: this is waiting, not working. Move processor to its own process");
        // the victim's own line follows, with the same holder
        // as shown, the victim's own line would repeat it; among all findings it follows, with the age
        assert_eq!(f.len(), 1);
        let mut r = ProcessReport::new(1, "svc".into(), None, 10 * S, None, starving()).with_age(Some(age(1.0, 3.0, true)));
        r.cpu_limit_cores = 4.0;
        let all = all_findings(&r);
        let gil_wait = GilWait { victim, wait_ratio: 0.94, holder: behind(12, "processor", 9.3 / 9.4), unresolved: 0.1 / 9.4 };
        assert_eq!(
            all[1],
            Finding {
                claim: Box::new(gil_wait),
                explains_ns: 9_400_000_000,
                code: None,
                age: Some(facts(1.0, 3.0, true)),
                culprits_off_cpu: vec![]
            }
        );
        assert_eq!(all.len(), 2);
    }

    /// The GIL starvation of `rows` under a rising age (or none), if the verdict finds one.
    fn starvation_of(rows: Vec<ThreadRow>, ages: Option<(f64, f64, bool)>) -> Option<Finding> {
        findings_of(rows, 10 * S, 4.0, ages).into_iter().find(|f| matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { .. })))
    }

    #[test]
    fn a_lock_wait_behind_a_thread_waiting_for_the_gil_is_one_chain_with_the_lock_waiter_first() {
        let f = starvation_of(chain(), Some((1.0, 6.0, true))).expect("a starvation finding");
        let lock_holder = LockHolder {
            gil_wait: time(12, "worker", State::GilWait, 6 * S, 10 * S),
            lock: 0x7f10,
            share: 4.2 / 4.5,
            waiter_gil_ns: S,
            waiter_gil_holder: behind(13, "processor", 1.0),
        };
        let kind = GilStarvation {
            victim: time(11, "ingest", State::FutexWait, 4_200_000_000, 10 * S),
            holder: behind(13, "processor", 5.5 / 6.0),
            unresolved: 0.5 / 6.0,
            age: Some(facts(1.0, 6.0, true)),
            cpu: CpuUse { used_cores: 1.4, limit_cores: 4.0 },
            lock_holder: Some(lock_holder),
            age_confirmed: true,
            kept_from_home: None,
        };
        // the chain explains the longer of its two waits
        assert_eq!(f.claim.get::<GilStarvation>(), Some(&kind));
        assert_eq!(f.explains_ns, 6 * S);
        assert!(f.to_string().starts_with("GIL starvation: thread ingest (11) lost 5.2 s of 10.0 s to the GIL: 1.0 s waiting for it held by processor (13), 4.2 s blocked on futex 0x7f10 (a lock or condition) released by worker (12) (93% of that wait), which itself lost 6.0 s of 10.0 s waiting for the GIL held by processor (13)"), "{f}");
        // the waiting end's own GIL wait below 5% of its time is not said
        let mut rows = chain();
        rows[0].times.0[State::GilWait.index()] = 400_000_000;
        rows[0].times.0[State::IoWait.index()] = 3_600_000_000;
        rows[0].gil_by_holder.insert(13, 400_000_000);
        let f = starvation_of(rows, Some((1.0, 6.0, true))).expect("a starvation finding");
        assert!(f.to_string().starts_with("GIL starvation: thread ingest (11) lost 4.6 s of 10.0 s blocked on futex 0x7f10"), "{f}");
        // the lock holder's own GIL-wait line would repeat the chain: not shown
        let shown = findings_of(chain(), 10 * S, 4.0, Some((1.0, 6.0, true)));
        assert!(
            !shown.iter().any(|f| matches!(f.claim.get::<GilWait>(), Some(GilWait { victim, .. }) if victim.thread.tid == 12)),
            "{:?}",
            kinds(&shown)
        );
        // the chain holds with no age source too, said as likely
        let unconfirmed = starvation_of(chain(), None).expect("a likely starvation");
        assert!(
            matches!(unconfirmed.claim.get::<GilStarvation>(), Some(GilStarvation { victim, age_confirmed: false, lock_holder: Some(_), .. }) if victim.thread.tid == 11)
        );
    }

    #[test]
    fn a_thread_waiting_for_work_from_a_starving_producer_is_not_the_victim() {
        // control: a consumer that hardly runs, woken by the starving worker, waits for work
        // (idle), not on a lock: the worker is the victim
        let mut rows = chain();
        rows[0] = row(11, "consumer", &[(State::FutexWait, 9_500_000_000), (State::Running, 500_000_000)]);
        rows[0].futex.push(FutexWait { addr: 0x7f10, waker: 12, ns: 9_500_000_000 });
        let f = starvation_of(rows, Some((1.0, 6.0, true))).expect("a starvation finding");
        assert!(
            matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { victim, lock_holder: None, .. }) if victim.thread.tid == 12),
            "{f}"
        );
        // a lock wait too small to matter is no chain either
        let mut rows = chain();
        rows[0].futex = vec![FutexWait { addr: 0x7f10, waker: 12, ns: S }, FutexWait { addr: 0x7f10, waker: 0, ns: 3_500_000_000 }];
        let f = starvation_of(rows, Some((1.0, 6.0, true))).expect("a starvation finding");
        assert!(
            matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { victim, lock_holder: None, .. }) if victim.thread.tid == 12),
            "{f}"
        );
    }

    #[test]
    fn a_short_lock_wait_is_a_link_when_the_waiter_lost_most_of_its_time_to_the_gil() {
        // ingest waits 1.2 s on the lock worker releases and 4.0 s for the GIL directly: it
        // lost most of its time to the GIL, a part through the lock; the chain, not worker
        let mut rows = chain();
        rows[0] = row(11, "ingest", &[(State::FutexWait, 1_200_000_000), (State::GilWait, 4 * S), (State::Running, 4_800_000_000)]);
        rows[0].futex.push(FutexWait { addr: 0x7f10, waker: 12, ns: 1_200_000_000 });
        rows[0].gil_by_holder.insert(13, 4 * S);
        let f = starvation_of(rows.clone(), None).expect("a likely starvation");
        assert!(
            matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { victim, lock_holder: Some(_), .. }) if victim.thread.tid == 11),
            "{f}"
        );
        // the same lock wait, but the waiter mostly works: not a victim, worker is
        rows[0] = row(11, "ingest", &[(State::FutexWait, 1_200_000_000), (State::GilWait, 2_500_000_000), (State::Running, 6_300_000_000)]);
        rows[0].futex.push(FutexWait { addr: 0x7f10, waker: 12, ns: 1_200_000_000 });
        rows[0].gil_by_holder.insert(13, 2_500_000_000);
        let f = starvation_of(rows.clone(), None).expect("a likely starvation");
        assert!(
            matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { victim, lock_holder: None, .. }) if victim.thread.tid == 12),
            "{f}"
        );
        // nor a lock wait below the floor, however much it lost besides
        rows[0] = row(11, "ingest", &[(State::FutexWait, 800_000_000), (State::GilWait, 4_500_000_000), (State::Running, 4_700_000_000)]);
        rows[0].futex.push(FutexWait { addr: 0x7f10, waker: 12, ns: 800_000_000 });
        rows[0].gil_by_holder.insert(13, 4_500_000_000);
        let f = starvation_of(rows, None).expect("a likely starvation");
        assert!(matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { lock_holder: None, .. })), "{f}");
    }

    #[test]
    fn a_thread_whose_own_age_rises_is_the_victim_before_a_longer_gil_wait() {
        let mut rows = starving();
        let mut reader = row(14, "reader", &[(State::GilWait, 6 * S), (State::Running, 4 * S)]);
        reader.gil_by_holder.insert(12, 6 * S);
        reader.age = Some(crate::model::age::AgeSummary {
            samples: 5,
            first_s: 0.1,
            last_s: 3.1,
            max_s: 3.1,
            mean_s: 1.6,
            median_s: 1.6,
            growth_s: 3.0,
            slope: 0.3,
            rising: true,
        });
        rows.push(reader);
        let f = starvation_of(rows, None).expect("a starvation finding");
        assert!(
            matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { victim, age_confirmed: true, .. }) if victim.thread.tid == 14),
            "{f}"
        );
    }

    #[test]
    fn without_an_age_source_starvation_is_likely_only_behind_a_named_holder() {
        let f = starvation_of(starving(), None).expect("a likely starvation");
        assert!(matches!(f.claim.get::<GilStarvation>(), Some(GilStarvation { age_confirmed: false, age: None, .. })));
        // the holder unknown or outside the report: the thread's GIL-wait line only
        let mut unknown = starving();
        unknown[0].gil_by_holder = [(0, 9_400_000_000)].into();
        assert_eq!(starvation_of(unknown, None), None);
        let mut outside = starving();
        outside[0].gil_by_holder = [(77, 9_400_000_000)].into();
        assert_eq!(starvation_of(outside, None), None);
        // an age source that says the work keeps up: no starvation
        assert_eq!(starvation_of(starving(), Some((1.0, 1.0, false))), None);
    }
}
