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
    fn explains_ns(&self) -> u64 {
        self.victim.ns
    }
    fn precedence(&self) -> u8 {
        6
    }
    fn explains_age(&self) -> bool {
        true
    }
    fn names(&self) -> Option<(u32, Option<State>)> {
        Some((self.victim.thread.tid, Some(self.victim.state)))
    }
    fn line_of(&self) -> Option<(u32, State)> {
        Some((self.victim.thread.tid, self.victim.state))
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
