//! Readers for /proc: thin I/O wrappers around pure parsers (unit-tested on
//! recorded fixtures). PIDs here are the ones of the agent's PID namespace.
use std::fs;
use std::os::unix::fs::MetadataExt;

/// `PF_KTHREAD` in /proc/PID/stat `flags` (include/linux/sched.h)
const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of /proc/PID/task/TID/stat that waitmeter uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStat {
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub flags: u64,
    /// clock ticks after boot; identifies a process across PID reuse
    pub starttime: u64,
    /// CPU time in user and in kernel mode, in clock ticks (`clock_ticks_per_s`)
    pub utime: u64,
    pub stime: u64,
}

impl TaskStat {
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

/// Parse a stat line. The comm is in parentheses and may itself contain
/// spaces and parentheses, so split at the last `)`.
pub fn parse_stat(s: &str) -> Option<TaskStat> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = s.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field N is rest[N - 3]
    Some(TaskStat {
        comm,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        flags: rest.get(6)?.parse().ok()?,
        starttime: rest.get(19)?.parse().ok()?,
        utime: rest.get(11)?.parse().ok()?,
        stime: rest.get(12)?.parse().ok()?,
    })
}

/// A positive sysconf(3) value, else `default`.
pub fn sysconf_or(name: libc::c_int, default: u64) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(name) };
    if n > 0 {
        n as u64
    } else {
        default
    }
}

/// Clock ticks a second (USER_HZ) of /proc's CPU times.
pub fn clock_ticks_per_s() -> u64 {
    sysconf_or(libc::_SC_CLK_TCK, 100)
}

/// User and kernel CPU time of each thread of `pid` now, in ns (TID -> (user, system)).
pub fn thread_cpu_ns(pid: u32) -> std::collections::HashMap<u32, (u64, u64)> {
    let per_tick = 1_000_000_000 / clock_ticks_per_s();
    tasks(pid).into_iter().filter_map(|tid| task_stat(pid, tid).map(|s| (tid, (s.utime * per_tick, s.stime * per_tick)))).collect()
}

/// A syscall a task is blocked in: its number and first argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Syscall {
    pub nr: u32,
    pub arg0: u64,
}

/// Parse /proc/PID/task/TID/syscall; `None` when running, not in a syscall
/// (-1) or unreadable.
pub fn parse_syscall(s: &str) -> Option<Syscall> {
    let mut f = s.split_whitespace();
    let nr = f.next()?.parse::<i64>().ok().filter(|n| *n >= 0)? as u32;
    let arg0 = f.next().and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok()).unwrap_or(0);
    Some(Syscall { nr, arg0 })
}

/// The `NSpid:` line of /proc/PID/task/TID/status: the TID in the agent's
/// namespace first, in the task's own namespace last.
pub fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().map(|v| v.parse().ok()).collect()
}

/// CapEff from /proc/self/status.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

fn read(path: &str) -> Option<String> {
    fs::read_to_string(path).ok()
}

pub fn process_stat(pid: u32) -> Option<TaskStat> {
    read(&format!("/proc/{pid}/stat")).and_then(|s| parse_stat(&s))
}

/// The process of `roots` that `pid` descends from (through its parents), if any. A tree
/// deeper than 64 generations is not followed.
pub fn ancestor_in(pid: u32, roots: &[u32]) -> Option<u32> {
    let mut p = pid;
    for _ in 0..64 {
        p = process_stat(p)?.ppid;
        if roots.contains(&p) {
            return Some(p);
        }
        if p <= 1 {
            return None;
        }
    }
    None
}

pub fn task_stat(pid: u32, tid: u32) -> Option<TaskStat> {
    read(&format!("/proc/{pid}/task/{tid}/stat")).and_then(|s| parse_stat(&s))
}

pub fn task_nspid(pid: u32, tid: u32) -> Option<Vec<u32>> {
    read(&format!("/proc/{pid}/task/{tid}/status")).and_then(|s| parse_nspid(&s))
}

/// A process' own PID in its innermost PID namespace (the last of `NSpid:`).
pub fn own_pid(pid: u32) -> Option<u32> {
    task_nspid(pid, pid)?.last().copied()
}

/// A process' real user ID (the first of `Uid:`).
pub fn uid(pid: u32) -> Option<u32> {
    status_field(pid, "Uid")?.split_whitespace().next()?.parse().ok()
}

/// Open `path` (absolute, as process `pid` names it) for reading inside the process's root,
/// resolved as the process would resolve it: a symbolic link cannot lead out of its root
/// (`RESOLVE_IN_ROOT`; a plain open through /proc/PID/root would follow an absolute link into
/// the agent's own root), magic links are refused, the last component is not followed, and
/// opening never blocks (a FIFO planted there opens without waiting; the caller checks that it
/// is a regular file).
pub fn open_in_root(pid: u32, path: &str) -> std::io::Result<fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let root = fs::File::open(format!("/proc/{pid}/root"))?;
    let rel = std::ffi::CString::new(path.trim_start_matches('/')).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: open_how is plain data; zero is a valid value of every field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 with a valid directory fd, a NUL-terminated path and an open_how of the
    // size passed; it returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(libc::SYS_openat2, root.as_raw_fd(), rel.as_ptr(), &how as *const libc::open_how, size_of::<libc::open_how>())
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd of our own.
    Ok(unsafe { fs::File::from_raw_fd(fd as i32) })
}

/// The most of a process' environment read (`environ`): the kernel caps a process' arguments and
/// environment at a quarter of its stack limit; what is past this is not read.
const ENVIRON_MAX: u64 = 1 << 20;

/// A process' environment as it started (`/proc/PID/environ`: `NAME=value` entries, NUL-ended),
/// at most [`ENVIRON_MAX`] bytes. Another user's needs `CAP_SYS_PTRACE`.
pub fn environ(pid: u32) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    fs::File::open(format!("/proc/{pid}/environ")).ok()?.take(ENVIRON_MAX).read_to_end(&mut out).ok()?;
    Some(out)
}

/// The value of `name` in an environment as [`environ`] reads it (the first setting, as
/// `getenv` finds it); lossy UTF-8.
pub fn env_var(environ: &[u8], name: &str) -> Option<String> {
    environ
        .split(|b| *b == 0)
        .find_map(|e| e.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Inode of a process' PID namespace.
pub fn pidns_ino(pid: u32) -> Option<u64> {
    fs::metadata(format!("/proc/{pid}/ns/pid")).ok().map(|m| m.ino())
}

pub fn task_syscall(pid: u32, tid: u32) -> Option<Syscall> {
    read(&format!("/proc/{pid}/task/{tid}/syscall")).and_then(|s| parse_syscall(&s))
}

/// The kernel function a task sleeps in (/proc/PID/task/TID/wchan); None when running, or
/// hidden ("0": the kernel shows it only to those who may read kernel addresses).
pub fn task_wchan(pid: u32, tid: u32) -> Option<String> {
    read(&format!("/proc/{pid}/task/{tid}/wchan"))
        .map(|s| s.trim().chars().take(64).collect::<String>())
        .filter(|s| !s.is_empty() && s != "0")
}

pub fn task_comm(pid: u32, tid: u32) -> Option<String> {
    read(&format!("/proc/{pid}/task/{tid}/comm")).map(|s| s.trim_end_matches('\n').to_string())
}

fn numeric_entries(dir: &str) -> Vec<u32> {
    let mut v: Vec<u32> =
        fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()).unwrap_or_default();
    v.sort_unstable();
    v
}

/// TIDs of a process (empty when it is gone).
pub fn tasks(pid: u32) -> Vec<u32> {
    numeric_entries(&format!("/proc/{pid}/task"))
}

/// Every PID visible in the agent's PID namespace.
pub fn pids() -> Vec<u32> {
    numeric_entries("/proc")
}

/// Inode of the agent's PID namespace.
pub fn self_pidns_ino() -> std::io::Result<u64> {
    Ok(fs::metadata("/proc/self/ns/pid")?.ino())
}

/// The initial PID namespace's inode (PROC_PID_INIT_INO, include/linux/proc_ns.h).
pub const INIT_PIDNS_INO: u64 = 0xEFFF_FFFC;

/// Capability numbers (include/uapi/linux/capability.h).
/// Reading other users' processes (`/proc/PID/exe`, their memory).
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

pub fn self_cap_eff() -> Option<u64> {
    read("/proc/self/status").and_then(|s| parse_cap_eff(&s))
}

/// A sysfs or procfs line, trimmed and bounded (these files are one short line); None when absent.
fn first_line(path: &str) -> Option<String> {
    let text = read(path)?;
    Some(text.lines().next().unwrap_or("").trim().chars().take(256).collect())
}

/// The value of `key:` in /proc/PID/status, bounded.
fn status_field(pid: u32, key: &str) -> Option<String> {
    let text = read(&format!("/proc/{pid}/status"))?;
    text.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(':')).map(|v| v.trim().chars().take(256).collect()))
}

/// The machine's and a process's facts that decide its waits (`report::environment`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedFacts {
    /// the clock source clock_gettime reads
    pub clocksource: Option<String>,
    /// the process's main thread's Cpus_allowed_list
    pub cpus_allowed: Option<String>,
    /// isolcpus= and nohz_full= CPUs
    pub isolated_cpus: Option<String>,
    pub nohz_full: Option<String>,
}

/// `SchedFacts` of process `pid`, as far as they can be read.
pub fn sched_facts(pid: u32) -> SchedFacts {
    SchedFacts {
        clocksource: first_line("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        cpus_allowed: status_field(pid, "Cpus_allowed_list"),
        isolated_cpus: first_line("/sys/devices/system/cpu/isolated"),
        nohz_full: first_line("/sys/devices/system/cpu/nohz_full"),
    }
}

/// CPUs process `pid` may run on (its main thread's affinity, which its cpuset bounds).
pub fn allowed_cpus(pid: u32) -> Option<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(pid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(libc::CPU_COUNT(&set) as usize)
    }
}

/// CPUs of the machine.
pub fn online_cpus() -> f64 {
    sysconf_or(libc::_SC_NPROCESSORS_ONLN, 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    // recorded from a real system
    const STAT_PY: &str = "4242 (python3.11) S 4100 4242 4100 34816 4242 4194560 1503 0 0 0 12 3 0 0 20 0 3 0 987654 30000000 2500 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
    const STAT_WEIRD: &str = "77 (a) b (c)) R 1 77 77 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
    const STAT_KTHREAD: &str = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn a_variable_of_the_environment_is_its_first_setting() {
        let env = b"PATH=/bin\0GOMAXPROCS=1\0GOMAXPROCSX=9\0GOMAXPROCS=4\0EMPTY=\0";
        assert_eq!(env_var(env, "GOMAXPROCS").as_deref(), Some("1"));
        assert_eq!(env_var(env, "EMPTY").as_deref(), Some(""));
        assert_eq!(env_var(env, "GOMAXPROC"), None);
        // this process' own, as std reads it
        let mine = environ(std::process::id()).expect("own environment");
        assert_eq!(env_var(&mine, "PATH"), std::env::var("PATH").ok());
    }

    #[test]
    fn parses_stat() {
        let s = parse_stat(STAT_PY).unwrap();
        assert_eq!(s.comm, "python3.11");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 4100);
        assert_eq!(s.starttime, 987654);
        assert_eq!((s.utime, s.stime), (12, 3));
        assert!(!s.is_kernel_thread());
        let w = parse_stat(STAT_WEIRD).unwrap();
        assert_eq!(w.comm, "a) b (c)");
        assert_eq!(w.state, 'R');
        assert_eq!(w.starttime, 555);
        assert!(parse_stat(STAT_KTHREAD).unwrap().is_kernel_thread());
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn parses_syscall() {
        assert_eq!(parse_syscall("202 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f01\n"), Some(Syscall { nr: 202, arg0: 0x7f00 }));
        assert_eq!(parse_syscall("0 0x3 0x7ffd 0x1 0x0 0x0 0x0 0x7ffd 0x7f01\n"), Some(Syscall { nr: 0, arg0: 3 }));
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd 0x7f01\n"), None);
        assert_eq!(parse_syscall(""), None);
    }

    #[test]
    fn parses_nspid() {
        assert_eq!(parse_nspid("Name:\tx\nNSpid:\t4242\t7\nNSsid: 1\n"), Some(vec![4242, 7]));
        assert_eq!(parse_nspid("NSpid:\t12\n"), Some(vec![12]));
        assert_eq!(parse_nspid("Name: x\n"), None);
        // a thread two namespaces below the reader's (a container in a pod): the client's own TID is last
        let nested = "Name:\tingest\nTgid:\t4242\nNgid:\t0\nPid:\t4250\nPPid:\t4100\nNStgid:\t4242\t17\t1\nNSpid:\t4250\t23\t9\nNSpgid:\t4242\t17\t1\n";
        assert_eq!(parse_nspid(nested).as_deref().and_then(|v| v.last()), Some(&9));
        assert_eq!(parse_nspid("NSpid:\t12\tx\n"), None);
    }

    #[test]
    fn parses_cap_eff() {
        let status = "Name:\tbash\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ff_ffff_ffff));
        assert_eq!(parse_cap_eff("Name: x\n"), None);
    }
}
