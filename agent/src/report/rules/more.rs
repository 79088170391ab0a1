//! "…": the findings the verdict's line cap left out (`-v` lists them).
use std::fmt;

use serde::Serialize;

use super::Claim;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct More {
    pub findings: usize,
}

impl Claim for More {
    fn kind(&self) -> &'static str {
        "more"
    }
    fn tier(&self) -> u8 {
        3
    }
    fn precedence(&self) -> u8 {
        8
    }
    fn is_problem(&self) -> bool {
        false
    }
}

impl fmt::Display for More {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "… and {} more finding{}; -v lists them", self.findings, if self.findings == 1 { "" } else { "s" })
    }
}
