//! "healthy:": no thread waited `WAITING_SHARE` of its time or was busy all of it, and the
//! age (if any) is fine.
use std::fmt;

use serde::Serialize;

use super::super::evidence::AgeFacts;
use super::super::serial::seconds;
use super::{Claim, Context, WAITING_SHARE};
use crate::model::partition::secs;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Healthy {
    pub age: Option<AgeFacts>,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    /// the waiting share below which a thread is not reported (`WAITING_SHARE`)
    pub waiting_share: f64,
}

/// When every finding before is quiet (blocked threads may be idle or contended; yielding
/// ones idle by choice), the age is not bad, and there are threads.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let quiet = cx.found.iter().all(|c| c.quiet());
    if quiet && !cx.bad_age && !cx.rows.is_empty() {
        return vec![Box::new(Healthy { age: cx.age.clone(), window_ns: cx.window_ns, waiting_share: WAITING_SHARE })];
    }
    vec![]
}

impl Claim for Healthy {
    fn kind(&self) -> &'static str {
        "healthy"
    }
    fn tier(&self) -> u8 {
        0
    }
    fn precedence(&self) -> u8 {
        0
    }
    fn quotes_age(&self) -> bool {
        true
    }
    fn is_problem(&self) -> bool {
        false
    }
}

impl fmt::Display for Healthy {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let age = match &self.age {
            Some(a) => {
                format!("age flat at {:.2} s (mean {:.2} s, max {:.2} s, objective {:.2} s)", a.last_s, a.mean_s, a.max_s, a.objective_s)
            }
            None => "no age source".to_string(),
        };
        write!(
            f,
            "healthy: {age}; no thread waited for a CPU, quota or the GIL for {:.0}% or more of its time, and none was busy all of the {:.1} s",
            100.0 * self.waiting_share,
            secs(self.window_ns)
        )
    }
}
