//! A verdict finding: what a rule found (`rules::Claim`: the kind with the evidence it quotes,
//! in a file of its own), the wall time it explains, and what the verdict adds beside it (the
//! code of both sides, the age, the culprits kept off the CPU). The findings are decided once
//! per report (`verdict::analyse`); they are put in words only at the edge (`Display`: the text
//! report's verdict and the JSON `verdict` strings), and serialised as they are for the JSON
//! `findings` (docs/architecture.md).
use std::fmt;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::code::Code;
use super::evidence::{growth, AgeFacts, ThreadRef};
use super::rules::Claim;
use super::serial::{ratio, seconds};
use crate::model::partition::secs;

/// One finding: what it found, and how much of the window's wall time that accounts for.
/// Serialised as `kind`, the claim's evidence, then `explains_s` and what is beside it.
#[derive(Clone, Debug)]
pub struct Finding {
    pub claim: Box<dyn Claim>,
    /// the wall time the finding accounts for (`Claim::explains_ns`)
    pub explains_ns: u64,
    /// the code on both sides of the wait, when stacks were taken
    pub code: Option<Code>,
    /// the application's age beside a finding whose kind does not quote it itself
    /// (`Claim::quotes_age`), when an age source is joined
    pub age: Option<AgeFacts>,
    /// the threads others waited behind (a GIL holder, a lock's releasers, a waker) that were
    /// themselves throttled or queued for a CPU a large share of their time (linked findings)
    pub culprits_off_cpu: Vec<OffCpu>,
}

/// A culprit thread kept off the CPU: throttled by the cgroup's quota or queued for a CPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OffCpu {
    pub thread: ThreadRef,
    #[serde(rename = "throttled_s", serialize_with = "seconds")]
    pub throttled_ns: u64,
    #[serde(rename = "runqueue_s", serialize_with = "seconds")]
    pub runqueue_ns: u64,
    /// (throttled + runqueue) / the time it existed in the window
    #[serde(serialize_with = "ratio")]
    pub share: f64,
}

impl fmt::Display for OffCpu {
    /// "worker0 (12) 31% of its time (throttled 0.61 s, queued for a CPU 0.02 s)"
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut parts = vec![];
        // what rounds to 0.00 s is left out
        if self.throttled_ns >= 5_000_000 {
            parts.push(format!("throttled {:.2} s", secs(self.throttled_ns)));
        }
        if self.runqueue_ns >= 5_000_000 {
            parts.push(format!("queued for a CPU {:.2} s", secs(self.runqueue_ns)));
        }
        write!(f, "{} {:.0}% of its time ({})", self.thread.or_thread_tid(), 100.0 * self.share, parts.join(", "))
    }
}

impl Finding {
    /// The finding of `claim`, with nothing beside it.
    pub fn new(claim: Box<dyn Claim>) -> Self {
        Finding { explains_ns: claim.explains_ns(), claim, code: None, age: None, culprits_off_cpu: vec![] }
    }
}

impl PartialEq for Finding {
    fn eq(&self, other: &Finding) -> bool {
        *self.claim == *other.claim
            && self.explains_ns == other.explains_ns
            && self.code == other.code
            && self.age == other.age
            && self.culprits_off_cpu == other.culprits_off_cpu
    }
}

impl<C: Claim> From<C> for Finding {
    fn from(claim: C) -> Self {
        Finding::new(Box::new(claim))
    }
}

impl Serialize for Finding {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Seconds(u64);
        impl Serialize for Seconds {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                seconds(&self.0, s)
            }
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("kind", self.claim.kind())?;
        for (key, value) in self.claim.fields().entries() {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("explains_s", &Seconds(self.explains_ns))?;
        if let Some(code) = &self.code {
            map.serialize_entry("code", code)?;
        }
        if let Some(age) = &self.age {
            map.serialize_entry("age", age)?;
        }
        if !self.culprits_off_cpu.is_empty() {
            map.serialize_entry("culprits_off_cpu", &self.culprits_off_cpu)?;
        }
        map.end()
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut line = self.claim.to_string();
        if !self.culprits_off_cpu.is_empty() {
            let who: Vec<String> = self.culprits_off_cpu.iter().map(ToString::to_string).collect();
            line = format!(
                "{}. Kept off the CPU {}: {}: a holder that cannot run keeps every thread behind it waiting",
                line.trim_end_matches('.'),
                if who.len() == 1 { "itself" } else { "themselves" },
                who.join(", ")
            );
        }
        let line = format!("{line}{}", growth(&self.age));
        match &self.code {
            Some(c) => write!(f, "{}. {c}", line.trim_end_matches('.')),
            None => f.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::evidence::{Behind, Culprit, ThreadTime};
    use super::super::rules::blocked::Blocked;
    use super::*;
    use crate::model::state::State;
    use crate::report::fixtures::thread;
    use serde_json::json;

    #[test]
    fn a_finding_serialises_as_its_kind_its_evidence_and_the_time_it_explains() {
        let victim =
            ThreadTime { thread: thread(31, Some("waiter")), state: State::FutexWait, ns: 9_000_000_000, total_ns: 10_000_000_000 };
        let f =
            Finding::from(Blocked { victim, waker: Some(Behind { culprit: Culprit::Timeout, share: 2.0 / 3.0 }), lock: None, idle: false });
        assert_eq!(
            serde_json::to_value(&f).unwrap(),
            json!({"kind": "blocked", "thread": {"tid": 31, "name": "waiter"}, "state": "futex_wait", "wait_s": 9.0, "total_s": 10.0,
                   "waker": {"type": "timeout", "share": 0.6667}, "idle": false, "explains_s": 9.0})
        );
        assert_eq!(f.to_string(), "thread waiter (31) spent 9.0 s of 10.0 s blocked on a lock or condition (futex) (90%), 67% of it ended by a timeout or signal, not a wake-up: idle or contended");
        // the keys in the order the evidence has them, `kind` first and `explains_s` after
        let text = serde_json::to_string(&f).unwrap();
        assert!(text.starts_with(r#"{"kind":"blocked","thread":{"tid":31,"name":"waiter"},"state":"futex_wait","#), "{text}");
        assert!(text.ends_with(r#""idle":false,"explains_s":9.0}"#), "{text}");
    }
}
