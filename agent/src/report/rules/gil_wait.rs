//! "GIL wait:": a thread waited for the GIL a large share of its time (its worst involuntary wait).
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{unresolved_part, waiting, Behind, ThreadTime};
use super::super::serial::ratio;
use super::super::ThreadRow;
use super::rows::{gil_holder, gil_unresolved, thread_of, time_in, worst_wait};
use super::{Claim, Context};
use crate::model::stacks::{Role, WaitStacks};
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GilWait {
    #[serde(flatten)]
    pub victim: ThreadTime,
    #[serde(serialize_with = "ratio")]
    pub wait_ratio: f64,
    pub holder: Option<Behind>,
    /// the share of the GIL wait whose holder was not resolved (hand-offs too fast)
    #[serde(rename = "holder_unresolved_share", serialize_with = "ratio")]
    pub unresolved: f64,
}

/// The line of a thread whose worst involuntary wait (`WAITING_SHARE`) is for the GIL.
pub fn of(r: &ThreadRow, cx: &Context) -> Option<Box<dyn Claim>> {
    (worst_wait(r)? == State::GilWait).then(|| -> Box<dyn Claim> {
        Box::new(GilWait {
            victim: time_in(r, State::GilWait),
            wait_ratio: r.times.wait_ratio().unwrap_or(0.0),
            holder: gil_holder(r, cx.rows),
            unresolved: gil_unresolved(r),
        })
    })
}

impl Claim for GilWait {
    fn kind(&self) -> &'static str {
        "gil_wait"
    }
    fn victim(&self) -> Option<&ThreadTime> {
        Some(&self.victim)
    }
    fn gil_holder(&self) -> Option<u32> {
        thread_of(&self.holder)
    }
    fn culprits(&self) -> Vec<u32> {
        thread_of(&self.holder).into_iter().collect()
    }
    fn code(&self, stacks: &WaitStacks, switch_ns: u64) -> Option<Code> {
        code::of_wait(&self.victim, self.holder.as_ref(), State::GilWait, Role::Holder, stacks, switch_ns)
    }
}

impl fmt::Display for GilWait {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let behind = self.holder.as_ref().map(|h| format!(", {:.0}% of it behind {}", 100.0 * h.share, h.culprit.long()));
        waiting(f, "GIL wait", &self.victim, &(behind.unwrap_or_default() + &unresolved_part(self.unresolved)), self.wait_ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    #[test]
    fn gil_wait_behind_a_thread_outside_the_report() {
        let mut victim = row(11, "ingest", &[(State::GilWait, 3 * S), (State::Running, 7 * S)]);
        victim.gil_by_holder.insert(77, 3 * S);
        let f = findings_of(vec![victim], 10 * S, 4.0, None);
        let holder = Some(Behind { culprit: Culprit::Thread(ThreadRef { tid: 77, name: None, folded: 0 }), share: 1.0 });
        let kind = GilWait { victim: time(11, "ingest", State::GilWait, 3 * S, 10 * S), wait_ratio: 0.3, holder, unresolved: 0.0 };
        assert_eq!(f, [Finding { claim: Box::new(kind), explains_ns: 3 * S, code: None, age: None, culprits_off_cpu: vec![] }]);
        assert!(f[0].to_string().contains(", 100% of it behind a thread (77), wait ratio 0.30"), "{}", f[0]);
    }
}
