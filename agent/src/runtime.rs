//! Which runtime a process runs, where it is one whose own settings decide how many threads run
//! at once (and so how fast a CPU quota runs out): Go, by the build information the toolchain
//! puts in every Go executable (`.go.buildinfo`), and the `GOMAXPROCS` it was started with. What
//! a finding's remedy says to such a process (docs/verdicts.md). Python's facts are `python`'s.
use std::fs::File;

use serde::Serialize;
use waitmeter_formats::{elf::Elf, gobuild};

use crate::python::binary::FileSource;

/// A Go process: its toolchain's version and the `GOMAXPROCS` its environment set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Go {
    /// "go1.26.0"; null: before Go 1.18, which keeps it out of line
    pub version: Option<String>,
    /// `GOMAXPROCS` as its environment set it at start; null: not set (the runtime's default)
    pub gomaxprocs_env: Option<String>,
}

impl Go {
    /// Whether its runtime's default `GOMAXPROCS` follows the cgroup's CPU limit (Go 1.25+:
    /// the limit rounded up, at least 2); else the CPUs it may run on. None: version unknown.
    pub fn default_follows_quota(&self) -> Option<bool> {
        let (major, minor) = gobuild::release(self.version.as_deref()?)?;
        Some((major, minor) >= (1, 25))
    }
}

/// The Go facts of process `pid`, if it runs a Go executable (`/proc/PID/exe`); None when it
/// does not, or when its executable cannot be read.
pub fn go(pid: u32) -> Option<Go> {
    let file = File::open(format!("/proc/{pid}/exe")).ok()?;
    let size = file.metadata().ok()?.len();
    let src = FileSource::new(file, size);
    let elf = Elf::parse(&src).ok()?;
    let section = elf.section(".go.buildinfo")?;
    let data = elf.section_data(section, 4096).ok()?;
    let version = gobuild::version(&data)?;
    let gomaxprocs_env = crate::procfs::environ(pid).and_then(|e| crate::procfs::env_var(&e, "GOMAXPROCS"));
    Some(Go { version, gomaxprocs_env })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_follows_the_quota_from_go_1_25() {
        let go = |v: &str| Go { version: Some(v.into()), gomaxprocs_env: None };
        assert_eq!(go("go1.26.0").default_follows_quota(), Some(true));
        assert_eq!(go("go1.25.4").default_follows_quota(), Some(true));
        assert_eq!(go("go1.24.9").default_follows_quota(), Some(false));
        assert_eq!(Go { version: None, gomaxprocs_env: None }.default_follows_quota(), None);
        // this test's own process is no Go program
        assert_eq!(super::go(std::process::id()), None);
    }
}
