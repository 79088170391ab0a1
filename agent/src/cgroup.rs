//! CPU cgroups of targets: which cgroup, its CFS quota, its throttling
//! counters. cgroup v1 (`cpu` controller) and v2; pure parsers, unit-tested on
//! recorded files (this machine has only the v1 cpu controller).
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A target's CPU cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    /// the path as /proc/PID/cgroup names it ("/kubepods/pod1/abc")
    pub path: String,
    pub version: Version,
    /// the directory holding cpu.stat
    pub dir: PathBuf,
}

/// Cumulative throttling counters of a cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_ns: u64,
}

impl CpuStat {
    pub fn since(&self, earlier: &CpuStat) -> CpuStat {
        CpuStat {
            nr_periods: self.nr_periods.saturating_sub(earlier.nr_periods),
            nr_throttled: self.nr_throttled.saturating_sub(earlier.nr_throttled),
            throttled_ns: self.throttled_ns.saturating_sub(earlier.throttled_ns),
        }
    }
}

/// CFS bandwidth: `quota_us` per `period_us`; `None` quota = unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub quota_us: Option<u64>,
    pub period_us: u64,
}

impl Quota {
    pub fn cores(&self) -> Option<f64> {
        self.quota_us.map(|q| q as f64 / self.period_us as f64)
    }
}

/// /proc/PID/cgroup: (v1 path of the `cpu` controller, v2 path).
pub fn parse_proc_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let (mut v1, mut v2) = (None, None);
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        if id == "0" && ctrls.is_empty() {
            v2 = Some(path.to_string());
        } else if ctrls.split(',').any(|c| c == "cpu") {
            v1 = Some(path.to_string());
        }
    }
    (v1, v2)
}

/// cpu.stat of v1 (`throttled_time` in ns) or v2 (`throttled_usec`).
pub fn parse_cpu_stat(text: &str) -> CpuStat {
    let mut s = CpuStat::default();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) else { continue };
        match k {
            "nr_periods" => s.nr_periods = v,
            "nr_throttled" => s.nr_throttled = v,
            "throttled_time" => s.throttled_ns = v,
            "throttled_usec" => s.throttled_ns = v * 1000,
            _ => {}
        }
    }
    s
}

/// v2 cpu.max: "max 100000" or "20000 100000".
pub fn parse_cpu_max(text: &str) -> Option<Quota> {
    let mut f = text.split_whitespace();
    let quota = f.next()?;
    let period_us = f.next().map_or(Some(100_000), |p| p.parse().ok())?;
    let quota_us = if quota == "max" { None } else { Some(quota.parse().ok()?) };
    Some(Quota { quota_us, period_us })
}

/// v1 cpu.cfs_quota_us (-1 = unlimited) and cpu.cfs_period_us.
pub fn parse_v1_quota(quota: &str, period: &str) -> Option<Quota> {
    let q: i64 = quota.trim().parse().ok()?;
    let p: u64 = period.trim().parse().ok()?;
    Some(Quota { quota_us: (q > 0).then_some(q as u64), period_us: p })
}

/// Mount points of cgroup hierarchies from /proc/self/mountinfo:
/// (v1 mount of the `cpu` controller, v2 mount).
pub fn parse_mountinfo(text: &str) -> (Option<String>, Option<String>) {
    let (mut v1, mut v2) = (None, None);
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let mount = pre.split_whitespace().nth(4);
        let mut post = post.split_whitespace();
        let (fstype, _src, opts) = (post.next(), post.next(), post.next().unwrap_or(""));
        match (fstype, mount) {
            (Some("cgroup"), Some(m)) if opts.split(',').any(|o| o == "cpu") => v1 = Some(m.to_string()),
            (Some("cgroup2"), Some(m)) if v2.is_none() => v2 = Some(m.to_string()),
            _ => {}
        }
    }
    (v1, v2)
}

/// The CPU cgroup of process `pid`: the v1 `cpu` controller's if mounted,
/// else the v2 one if it has the cpu controller.
pub fn of_process(pid: u32) -> Option<Cgroup> {
    let (v1_path, v2_path) = parse_proc_cgroup(&fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?);
    let (v1_mount, v2_mount) = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").ok()?);
    let join = |m: &str, p: &str| Path::new(m).join(p.trim_start_matches('/'));
    if let (Some(p), Some(m)) = (&v1_path, &v1_mount) {
        let dir = join(m, p);
        if dir.join("cpu.stat").exists() {
            return Some(Cgroup { path: p.clone(), version: Version::V1, dir });
        }
    }
    if let (Some(p), Some(m)) = (&v2_path, &v2_mount) {
        let dir = join(m, p);
        if dir.join("cpu.max").exists() || dir.join("cpu.stat").exists() {
            return Some(Cgroup { path: p.clone(), version: Version::V2, dir });
        }
    }
    None
}

impl Cgroup {
    pub fn stat(&self) -> Option<CpuStat> {
        fs::read_to_string(self.dir.join("cpu.stat")).ok().map(|t| parse_cpu_stat(&t))
    }

    pub fn quota(&self) -> Option<Quota> {
        let read = |f: &str| fs::read_to_string(self.dir.join(f)).ok();
        match self.version {
            Version::V1 => parse_v1_quota(&read("cpu.cfs_quota_us")?, &read("cpu.cfs_period_us")?),
            Version::V2 => parse_cpu_max(&read("cpu.max")?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // recorded: a cgroup v2 pod (systemd + kubelet) and this machine's v1 layout
    const V2_CPU_STAT: &str = "usage_usec 8335566\nuser_usec 6001000\nsystem_usec 2334566\nnr_periods 4200\nnr_throttled 1523\nthrottled_usec 98765432\nnr_bursts 0\nburst_usec 0\n";
    const V1_CPU_STAT: &str = "nr_periods 31\nnr_throttled 30\nthrottled_time 2423311911\n";
    const PROC_CGROUP_V1: &str = "12:pids:/user.slice\n5:cpu,cpuacct:/waitmeter-test\n0::/user.slice/session-1.scope\n";
    const PROC_CGROUP_V2: &str = "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope\n";
    const MOUNTINFO: &str = "25 30 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755\n\
        28 25 0:25 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n\
        33 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n\
        34 25 0:31 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n";

    #[test]
    fn cpu_stat_v1_and_v2() {
        assert_eq!(parse_cpu_stat(V2_CPU_STAT), CpuStat { nr_periods: 4200, nr_throttled: 1523, throttled_ns: 98_765_432_000 });
        assert_eq!(parse_cpu_stat(V1_CPU_STAT), CpuStat { nr_periods: 31, nr_throttled: 30, throttled_ns: 2_423_311_911 });
        let a = parse_cpu_stat(V1_CPU_STAT);
        assert_eq!(a.since(&CpuStat { nr_periods: 1, nr_throttled: 0, throttled_ns: 23_311_911 }).throttled_ns, 2_400_000_000);
    }

    #[test]
    fn quotas() {
        assert_eq!(parse_cpu_max("max 100000\n"), Some(Quota { quota_us: None, period_us: 100_000 }));
        let q = parse_cpu_max("250000 100000\n").unwrap();
        assert_eq!(q.cores(), Some(2.5));
        assert_eq!(parse_cpu_max("20000 100000").unwrap().cores(), Some(0.2));
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_v1_quota("-1\n", "100000\n"), Some(Quota { quota_us: None, period_us: 100_000 }));
        assert_eq!(parse_v1_quota("20000\n", "100000\n").unwrap().cores(), Some(0.2));
        assert_eq!(parse_v1_quota("x", "100000"), None);
    }

    #[test]
    fn which_cgroup() {
        assert_eq!(parse_proc_cgroup(PROC_CGROUP_V1), (Some("/waitmeter-test".into()), Some("/user.slice/session-1.scope".into())));
        assert_eq!(
            parse_proc_cgroup(PROC_CGROUP_V2).1.as_deref(),
            Some("/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope")
        );
        assert_eq!(parse_proc_cgroup(PROC_CGROUP_V2).0, None);
        assert_eq!(parse_mountinfo(MOUNTINFO), (Some("/sys/fs/cgroup/cpu,cpuacct".into()), Some("/sys/fs/cgroup/unified".into())));
    }
}
