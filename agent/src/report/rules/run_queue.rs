//! "run-queue saturation:": a thread waited for a CPU a large share of its time (its worst
//! involuntary wait).
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{waiting, Behind, ThreadTime};
use super::super::serial::ratio;
use super::super::ThreadRow;
use super::rows::{preemptor, time_in, worst_wait};
use super::{Claim, Context};
use crate::model::stacks::{Role, WaitStacks};
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunQueueSaturation {
    #[serde(flatten)]
    pub victim: ThreadTime,
    #[serde(serialize_with = "ratio")]
    pub wait_ratio: f64,
    pub preemptor: Option<Behind>,
}

/// The line of a thread whose worst involuntary wait (`WAITING_SHARE`) is for a CPU.
pub fn of(r: &ThreadRow, cx: &Context) -> Option<Box<dyn Claim>> {
    (worst_wait(r)? == State::Runqueue).then(|| -> Box<dyn Claim> {
        Box::new(RunQueueSaturation {
            victim: time_in(r, State::Runqueue),
            wait_ratio: r.times.wait_ratio().unwrap_or(0.0),
            preemptor: preemptor(r, cx.rows),
        })
    })
}

impl Claim for RunQueueSaturation {
    fn kind(&self) -> &'static str {
        "run_queue_saturation"
    }
    fn victim(&self) -> Option<&ThreadTime> {
        Some(&self.victim)
    }
    fn explains_age(&self) -> bool {
        true
    }
    fn code(&self, stacks: &WaitStacks, switch_ns: u64) -> Option<Code> {
        code::of_wait(&self.victim, self.preemptor.as_ref(), State::Runqueue, Role::Preemptor, stacks, switch_ns)
    }
}

impl fmt::Display for RunQueueSaturation {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let behind = self.preemptor.as_ref().map(|p| format!(", mostly behind {} ({:.0}%)", p.culprit.long(), 100.0 * p.share));
        waiting(f, "run-queue saturation", &self.victim, &behind.unwrap_or_default(), self.wait_ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    #[test]
    fn run_queue_saturation_behind_a_preemptor() {
        let mut a = row(21, "spin-a", &[(State::Running, 5 * S), (State::Runqueue, 5 * S)]);
        a.runqueue_by.insert(Preemptor::Process { pid: 99, comm: "hog".into() }, 4 * S);
        a.runqueue_by.insert(Preemptor::Idle, S);
        let mut c = row(23, "spin-c", &[(State::Running, 7 * S), (State::Runqueue, 3 * S)]);
        c.runqueue_by.insert(Preemptor::Idle, 3 * S);
        let f = findings_of(vec![a, c], 10 * S, 4.0, None);
        let hog = Some(Behind { culprit: Culprit::Process { pid: 99, comm: "hog".into() }, share: 0.8 });
        let a = RunQueueSaturation { victim: time(21, "spin-a", State::Runqueue, 5 * S, 10 * S), wait_ratio: 0.5, preemptor: hog };
        let idle = Some(Behind { culprit: Culprit::Idle, share: 1.0 });
        let c = RunQueueSaturation { victim: time(23, "spin-c", State::Runqueue, 3 * S, 10 * S), wait_ratio: 0.3, preemptor: idle };
        assert_eq!(
            f,
            [
                Finding { claim: Box::new(a), explains_ns: 5 * S, code: None, age: None, culprits_off_cpu: vec![] },
                Finding { claim: Box::new(c), explains_ns: 3 * S, code: None, age: None, culprits_off_cpu: vec![] }
            ]
        );
        assert!(f[0].to_string().contains("(50%), mostly behind pid 99 (hog) (80%), wait ratio 0.50"), "{}", f[0]);
        assert!(f[1].to_string().contains("mostly behind idle (100%)"), "{}", f[1]);
    }

    #[test]
    fn a_run_queue_finding_explains_rising_age() {
        let rows = vec![row(1, "spin", &[(State::Running, 2 * S), (State::Runqueue, 3 * S), (State::IoWait, 5 * S)])];
        let f = findings_of(rows, 10 * S, 4.0, Some((1.0, 9.0, true)));
        assert_eq!(kinds(&f), ["run_queue_saturation"]);
    }
}
