//! "thread … blocked on …": most of a thread's time blocked on a futex or I/O, idle or
//! contended (blocked is not waiting: no thread is reported for it alone).
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{Behind, Culprit, ThreadTime};
use super::super::serial::hex_some;
use super::super::ThreadRow;
use super::rows::{share_of, thread_of, time_in, top_word, waker};
use super::{Claim, Context, BLOCKED_SHARE};
use crate::model::blame;
use crate::model::stacks::{Role, WaitStacks};
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Blocked {
    #[serde(flatten)]
    pub victim: ThreadTime,
    pub waker: Option<Behind>,
    /// the CPython lock (parking-lot address) most of a futex wait was on
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "hex_some")]
    pub lock: Option<u64>,
    /// nobody waited on the thread and it hardly ran: blocked for want of work
    /// (`idle_threads::idle`); summarised in one `idle_threads` line unless all findings are asked for
    pub idle: bool,
}

/// The line of a thread blocked `BLOCKED_SHARE` of its time on a futex, else on I/O.
pub fn of(r: &ThreadRow, cx: &Context) -> Option<Box<dyn Claim>> {
    let idle = cx.idle().contains(&r.tid);
    [State::FutexWait, State::IoWait].into_iter().find(|s| share_of(r, *s) >= BLOCKED_SHARE).map(|s| -> Box<dyn Claim> {
        Box::new(match s {
            State::FutexWait => Blocked { victim: time_in(r, s), waker: waker(r, cx.rows), lock: parked_lock(r), idle },
            _ => Blocked { victim: time_in(r, s), waker: None, lock: None, idle },
        })
    })
}

/// The CPython lock (parking-lot address) that has at least half of a
/// thread's futex wait, if one has.
fn parked_lock(r: &ThreadRow) -> Option<u64> {
    let (addr, ns, _) = top_word(r.futex.iter().filter(|w| blame::is_parked(w.addr)))?;
    (2 * ns >= r.times.get(State::FutexWait)).then_some(addr)
}

impl Claim for Blocked {
    fn kind(&self) -> &'static str {
        "blocked"
    }
    fn victim(&self) -> Option<&ThreadTime> {
        Some(&self.victim)
    }
    fn tier(&self) -> u8 {
        2
    }
    fn is_problem(&self) -> bool {
        !self.idle
    }
    fn quiet(&self) -> bool {
        true
    }
    /// The waker of a thread that is not idle.
    fn culprits(&self) -> Vec<u32> {
        if self.idle {
            return vec![];
        }
        thread_of(&self.waker).into_iter().collect()
    }
    fn idle(&self) -> bool {
        self.idle
    }
    fn code(&self, stacks: &WaitStacks, switch_ns: u64) -> Option<Code> {
        let v = &self.victim;
        match v.state {
            State::FutexWait => code::of_wait(v, self.waker.as_ref(), State::FutexWait, Role::Waker, stacks, switch_ns),
            _ => code::of_wait(v, None, v.state, Role::Victim, stacks, switch_ns),
        }
    }
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let Blocked { victim, waker, lock, idle } = self;
        let on = lock.map(|a| format!(", on CPython lock {:#x}", blame::address(a))).unwrap_or_default();
        let woken = match waker {
            Some(Behind { culprit: Culprit::Thread(t), share }) => {
                format!(", woken by {} {:.0}% of the time", t.or_thread_tid(), 100.0 * share)
            }
            Some(Behind { share, .. }) => format!(", {:.0}% of it ended by a timeout or signal, not a wake-up", 100.0 * share),
            None => String::new(),
        };
        let what = if *idle { "idle (it hardly ran, and no thread waited on it)" } else { "idle or contended" };
        write!(f, "thread {}{on}{woken}: {what}", victim.spent())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    #[test]
    fn blocked_on_a_futex_woken_by_a_thread_or_a_timeout_and_on_io() {
        let mut a = row(31, "waiter", &[(State::FutexWait, 9 * S), (State::Running, S)]);
        a.futex.push(FutexWait { addr: 0x10, waker: 33, ns: 8 * S });
        a.futex.push(FutexWait { addr: 0x10, waker: 0, ns: S });
        let mut b = row(32, "poller", &[(State::FutexWait, 6 * S), (State::Sleep, 4 * S)]);
        b.futex.push(FutexWait { addr: 0x20, waker: 0, ns: 6 * S });
        let c = row(36, "reader", &[(State::IoWait, 6 * S), (State::Sleep, 4 * S)]);
        let f = every_finding_of(vec![a, b, c, row(33, "holder", &[(State::Sleep, 10 * S)])], 10 * S);
        assert_eq!(kinds(&f), ["healthy", "blocked", "blocked", "blocked"]);
        let waiter = Blocked {
            victim: time(31, "waiter", State::FutexWait, 9 * S, 10 * S),
            waker: behind(33, "holder", 8.0 / 9.0),
            lock: None,
            idle: false,
        };
        let timeout = Some(Behind { culprit: Culprit::Timeout, share: 1.0 });
        let poller = Blocked { victim: time(32, "poller", State::FutexWait, 6 * S, 10 * S), waker: timeout, lock: None, idle: true };
        let reader = Blocked { victim: time(36, "reader", State::IoWait, 6 * S, 10 * S), waker: None, lock: None, idle: true };
        assert_eq!(f[1..], [Finding::from(waiter), Finding::from(poller), Finding::from(reader)]);
        assert_eq!(f[1].explains_ns, 9 * S);
        assert!(f[1].to_string().ends_with("(90%), woken by holder (33) 89% of the time: idle or contended"), "{}", f[1]);
        assert!(
            f[2].to_string().ends_with(
                "(60%), 100% of it ended by a timeout or signal, not a wake-up: idle (it hardly ran, and no thread waited on it)"
            ),
            "{}",
            f[2]
        );
        assert!(f[3].to_string().ends_with("blocked on I/O (60%): idle (it hardly ran, and no thread waited on it)"), "{}", f[3]);
    }
}
