//! Command-line interface. Only parsing lives here; `cmd/` does the work.
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::age::socket::{SocketConfig, DEFAULT_MODE};
use crate::age::sources::DEFAULT_MAX_CLIENT_THREADS;
use crate::age::{AgeConfig, EndpointConfig};
use crate::export::http::DEFAULT_LISTEN;
use crate::probes::sched::{DEFAULT_MAX_PROCS, DEFAULT_MAX_THREADS};

const EXAMPLES: &str = "\
Examples:
  sudo waitmeter attach -p 1234                         # 10 s, live table, then the report
  sudo waitmeter attach --pid 1234 --duration 30 --output json > waits.json
  sudo waitmeter run --pid 1234 --listen 127.0.0.1:9747 # Prometheus endpoint for one process
  sudo waitmeter run --all                              # every process in this PID namespace (pod sidecar)

Every option can also be set in the environment: --max-threads N as WAITMETER_MAX_THREADS=N
(the command line wins). Completions: `waitmeter completions bash|zsh|fish`; man pages: `waitmeter man`.
Exit codes: 0 ok, 1 runtime failure, 2 bad usage or bad target.
Needs CAP_BPF and CAP_PERFMON (or root) and a kernel with BTF (5.8 or later; tested: 5.10, 6.1, 6.12, 6.18).";

/// Measures waiting: where each thread's wall time goes (running, run queue,
/// CPU throttling, GIL, locks, I/O, sleep) and who made it wait.
#[derive(Parser, Debug)]
#[command(name = "waitmeter", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
    /// More log output on stderr (-v: info, -vv: debug, including libbpf's log); with attach,
    /// the verdict lists every finding, idle threads one by one
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Measure one process for a while: a live per-thread table, then a report
    #[command(after_help = "\
Examples:
  sudo waitmeter attach --pid 1234
  sudo waitmeter attach --pid 1234 --duration 30
  sudo waitmeter attach --pid 1234 --duration 5 --output json | jq '.threads[] | {name, wait_ratio}'
  sudo waitmeter attach --pid 1234 --age-url http://127.0.0.1:8000/metrics --age-metric fix_lag_seconds
  sudo waitmeter attach -- python3 script.py arg   # from its first instruction to its exit

Ctrl-C ends the window early and still prints the report. If the process exits
during the window, the report covers the time it ran and the exit code is 2.
A COMMAND is measured until it exits; its output comes first, then the report,
and waitmeter exits with the command's exit code.")]
    Attach(Box<AttachArgs>),
    /// Serve Prometheus metrics for one or more processes, or all of them
    #[command(after_help = "\
Examples:
  sudo waitmeter run --pid 1234
  sudo waitmeter run --pid 1234 --pid 5678 --listen 0.0.0.0:9747
  sudo waitmeter run --all          # a pod sidecar with shareProcessNamespace: true
  sudo waitmeter run --all --age-socket /run/waitmeter/age.sock   # per-thread age from waitmeter_client
  sudo waitmeter run --all --age-socket /run/waitmeter/age.sock --age-socket-group app   # group app may send too
  sudo waitmeter run --all --listen 0.0.0.0:9747 --web.config.file /etc/waitmeter/web.yml   # TLS, basic auth

Metrics: docs/metrics.md. Scrape http(s)://ADDR:PORT/metrics; GET /healthz answers 200 while the
agent's main loop runs (for liveness probes; not behind basic auth).")]
    Run(Box<RunArgs>),
    /// What every thread of a process waits on now: its state, whom it waits behind, and the code
    /// on both sides (from a short window: --window)
    #[command(after_help = "\
Examples:
  sudo waitmeter dump -p 1234
  sudo waitmeter dump -p 1234 --window 3 --output json | jq '.threads[] | {name, state, behind}'

Each thread: its state for most of the window and its share, whom it waited behind (the GIL
holder, the thread whose wake ended its futex waits, what had its CPU), the threads it kept
waiting, its state now (/proc: the kernel's letter, the syscall, the futex word, the kernel
function), where it waited (innermost frame first) and what its culprit ran meanwhile.")]
    Dump(Box<DumpArgs>),
    /// Print a shell's completion script (generated from this command line)
    #[command(after_help = "\
Examples:
  waitmeter completions bash | sudo tee /etc/bash_completion.d/waitmeter
  waitmeter completions zsh > \"${fpath[1]}/_waitmeter\"
  waitmeter completions fish > ~/.config/fish/completions/waitmeter.fish")]
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the man page (generated from this command line), or write every page to a directory
    #[command(after_help = "\
Examples:
  waitmeter man | man -l -
  sudo waitmeter man --dir /usr/local/share/man/man1")]
    Man {
        /// Write waitmeter.1, waitmeter-attach.1, ... into this directory instead
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print docs/metrics.md, generated from the metric catalogue
    #[command(hide = true)]
    MetricsDoc,
}

/// Shells with completions (`waitmeter completions SHELL`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The command line, with an environment variable for every option:
/// `--max-threads` is also `WAITMETER_MAX_THREADS` (a container's env, a
/// systemd unit's `Environment=`); the command line wins. --help, the
/// completions and the man pages show them.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommands(|c| if matches!(c.get_name(), "attach" | "run" | "dump") { with_env(c) } else { c })
}

/// The environment variable of an option: WAITMETER_ and its long name in
/// capitals, `-` and `.` as `_`.
pub fn env_name(long: &str) -> String {
    format!("WAITMETER_{}", long.to_ascii_uppercase().replace(['-', '.'], "_"))
}

fn with_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let takes = matches!(a.get_action(), ArgAction::Set | ArgAction::Append | ArgAction::SetTrue);
        match a.get_long() {
            Some(long) if takes && long != "help" && long != "version" => {
                let name = env_name(long);
                match a.get_action() {
                    // a switch from the environment: 1/0, yes/no, on/off, true/false
                    ArgAction::SetTrue => a.env(name).value_parser(clap::builder::BoolishValueParser::new()),
                    _ => a.env(name),
                }
            }
            _ => a,
        }
    })
}

/// Parse this process' command line and environment; bad usage exits with
/// clap's message and code 2, naming the environment variable when the bad
/// value came from one.
pub fn parse() -> Cli {
    let matches = command().try_get_matches().unwrap_or_else(|e| {
        if let Some(var) = from_env(&e, &command(), std::env::args_os()) {
            crate::error::say!("waitmeter: the value below comes from the environment variable {var}: fix or unset it");
        }
        e.exit()
    });
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The environment variable a rejected value came from: the error names an
/// option the command line does not give, whose variable is set.
fn from_env(e: &clap::Error, cmd: &clap::Command, args: impl Iterator<Item = std::ffi::OsString>) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else { return None };
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let short = cmd
        .get_subcommands()
        .flat_map(|c| c.get_arguments())
        .chain(cmd.get_arguments())
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_short());
    let given = |a: &str| {
        a == format!("--{long}") || a.starts_with(&format!("--{long}=")) || short.is_some_and(|c| a.starts_with(&format!("-{c}")))
    };
    let on_line = args.skip(1).any(|a| a.to_str().is_some_and(given));
    let var = env_name(long);
    (!on_line && std::env::var_os(&var).is_some()).then_some(var)
}

/// How GIL waits and holds are measured.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum GilProbe {
    /// GIL waits from futex words at context switches: no uprobe, works on stripped builds
    Futex,
    /// also uprobes on take_gil/drop_gil (needs .symtab): hold-time histograms, ~2 µs per GIL hand-off
    Uprobe,
}

/// How lock waits of CPython 3.13+ are attributed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LockProbe {
    /// uprobes on _PySemaphore_Wait: a wait in the parking lot is charged to the lock parked on (~2 µs per sleep)
    Uprobe,
    /// no uprobe: such waits are charged to the sleeping thread's own semaphore
    None,
}

/// Which stacks a wait is charged to (docs/probes/stacks.md).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Stacks {
    /// native stacks (frame pointers, and .eh_frame where there are none) and Python frames
    All,
    /// Python frames only
    Python,
    /// native stacks only
    Native,
    /// no stacks: the cheapest
    None,
}

/// Whether each thread's syscalls are counted (docs/probes/syscalls.md).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Syscalls {
    /// count calls and time per thread and syscall (a probe on every syscall of the machine)
    On,
    Off,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Probe settings shared by the commands.
#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// BTF file for a kernel without /sys/kernel/btf/vmlinux (e.g. from BTFHub)
    #[arg(long, value_name = "FILE")]
    pub btf: Option<PathBuf>,
    /// Most threads measured at once (the kernel's thread table, rounded up to a power of 2 groups of 16 slots); a thread with no free slot among the 64 it may take is counted as lost
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_THREADS, value_parser = clap::value_parser!(u32).range(16..=4_194_304))]
    pub max_threads: u32,
    /// Most processes watched at once
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_PROCS, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub max_processes: u32,
    /// Size of the ring buffer of exited threads' final records, in KiB (a power of 2, 4 to
    /// 1048576): 4096 holds 14,000 records, 0.5 s of 25k thread exits/s; lost records are counted
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_EXIT_BUFFER_KIB, value_parser = exit_buffer_kib)]
    pub exit_buffer_kib: u32,
    /// GIL measurement for Python targets: futex (default, cheapest) or uprobe (adds hold times)
    #[arg(long, value_enum, default_value_t = GilProbe::Futex)]
    pub gil_probe: GilProbe,
    /// Lock waits of Python 3.13+ (PyMutex, threading.Lock): uprobe (default) charges them to the lock, none to futex words
    #[arg(long, value_enum, default_value_t = LockProbe::Uprobe)]
    pub lock_probe: LockProbe,
    /// Stacks of both sides of each wait, for the verdict and the wait profiles: all, python, native or none
    #[arg(long, value_enum, default_value_t = Stacks::All)]
    pub stacks: Stacks,
    /// A thread takes its own stack at most once per this many milliseconds (reused meanwhile)
    #[arg(long, value_name = "MS", default_value_t = 2.0, value_parser = stack_interval)]
    pub stack_interval: f64,
    /// Per CPU, samples a second that take a GIL holder's native stack (its C function) while others wait behind it; 0: off
    #[arg(long, value_name = "HZ", default_value_t = 499, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub holder_sample_hz: u32,
    /// Count each thread's syscalls, calls and time (the clock-syscall check). Off by default:
    /// the probe runs on every syscall of the machine (about 0.3 µs each for unwatched processes)
    #[arg(long, value_enum)]
    pub syscalls: Option<Syscalls>,
}

/// The exit ring buffer's default size: 4 MiB.
pub const DEFAULT_EXIT_BUFFER_KIB: u32 = 4096;
/// The timeline's ring buffer's default size: 16 MiB (bpf/timeline.h, WM_DEFAULT_SPANS_BYTES).
pub const DEFAULT_TIMELINE_BUFFER_KIB: u32 = 16384;

/// A ring buffer's size in KiB: a power of 2 pages (4 KiB) to 1 GiB, as the kernel requires.
fn exit_buffer_kib(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| format!("{s:?} is not a whole number of KiB"))?;
    if (4..=1_048_576).contains(&v) && v.is_power_of_two() {
        Ok(v)
    } else {
        Err(format!(
            "must be a power of 2 from 4 to 1048576 KiB (e.g. {}), the kernel's rule for ring buffers",
            v.max(4).next_power_of_two().min(1_048_576)
        ))
    }
}

fn stack_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    if (0.0..=10_000.0).contains(&v) {
        Ok(v)
    } else {
        Err("must be 0 to 10000 ms".into())
    }
}

/// Where the application's end-to-end age comes from (docs/age.md).
#[derive(Args, Debug)]
pub struct AgeArgs {
    /// The application's Prometheus endpoint holding its age/lag metric (http://HOST:PORT/PATH)
    #[arg(long, value_name = "URL", requires = "age_metric")]
    pub age_url: Option<String>,
    /// The age metric at --age-url (gauge, histogram or summary, in seconds)
    #[arg(long, value_name = "NAME", requires = "age_url")]
    pub age_metric: Option<String>,
    /// Only the series with these labels (k=v,k2=v2)
    #[arg(long, value_name = "LABELS", requires = "age_url", value_parser = parse_labels)]
    pub age_labels: Option<std::collections::BTreeMap<String, String>>,
    /// Poll --age-url every SECS (asking for the metric's samples only: ?name[]=NAME...)
    #[arg(long, value_name = "SECS", default_value = "1", requires = "age_url", value_parser = age_interval)]
    pub age_interval: f64,
    /// Give up a poll of --age-url not answered in full within SECS (connect, request, whole response; at most 60)
    #[arg(long, value_name = "SECS", default_value = "10", requires = "age_url", value_parser = age_timeout)]
    pub age_timeout: f64,
    /// Receive waitmeter_client samples on this Unix socket (per-thread age); a sample is taken
    /// only from the process it speaks of (the kernel tells the sender's PID)
    #[arg(long, value_name = "PATH")]
    pub age_socket: Option<PathBuf>,
    /// Permissions of the --age-socket file in octal: who may send (default 0660: the agent's
    /// user and the socket's group; 0666: every local user)
    #[arg(long, value_name = "OCTAL", requires = "age_socket")]
    pub age_socket_mode: Option<String>,
    /// Group of the --age-socket file (a name from /etc/group or a gid), e.g. the group of an
    /// application that runs as another user
    #[arg(long, value_name = "GROUP", requires = "age_socket")]
    pub age_socket_group: Option<String>,
    /// Most threads whose --age-socket samples are kept at once; records of more are counted as
    /// dropped (waitmeter_age_client_rejected_total{reason="state_full"})
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CLIENT_THREADS as u32, requires = "age_socket",
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub age_max_threads: u32,
}

impl AgeArgs {
    /// The age sources' settings. A bad mode or group is the user's to fix:
    /// one line and exit code 2.
    pub fn config(&self) -> anyhow::Result<AgeConfig> {
        let endpoint = match (&self.age_url, &self.age_metric) {
            (Some(url), Some(metric)) => Some(EndpointConfig {
                url: url.clone(),
                metric: metric.clone(),
                labels: self.age_labels.clone().unwrap_or_default(),
                interval: Duration::from_secs_f64(self.age_interval),
                timeout: Duration::from_secs_f64(self.age_timeout),
            }),
            _ => None,
        };
        let socket = match &self.age_socket {
            Some(path) => {
                let mode = match &self.age_socket_mode {
                    Some(m) => parse_mode(m).map_err(|e| {
                        crate::error::usage!("bad --age-socket-mode {m}: {e}, e.g. 0660 (the agent's user and the socket's group may send) or 0666 (every local user)")
                    })?,
                    None => DEFAULT_MODE,
                };
                let group = match &self.age_socket_group {
                    Some(g) => {
                        let etc_group = std::fs::read_to_string("/etc/group").unwrap_or_default();
                        Some(parse_group(g, &etc_group).map_err(|e| crate::error::usage!("bad --age-socket-group {g}: {e}"))?)
                    }
                    None => None,
                };
                Some(SocketConfig { path: path.clone(), mode, group, max_threads: self.age_max_threads as usize })
            }
            None => None,
        };
        Ok(AgeConfig { endpoint, socket })
    }
}

/// A socket file's permission bits in octal: 3 or 4 digits (`660`, `0660`,
/// `0o660`); no setuid, setgid or sticky bit, which mean nothing on a socket.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if !(3..=4).contains(&digits.len()) || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err("not an octal mode: give 3 or 4 octal digits".to_string());
    }
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err("setuid, setgid and sticky bits mean nothing on a socket: give the permission bits only".to_string()),
    }
}

/// A group given by gid, or by name as `/etc/group` (its text, `etc_group`) has it.
pub fn parse_group(s: &str, etc_group: &str) -> Result<u32, String> {
    if let Ok(gid) = s.parse::<u32>() {
        // (gid_t)-1 means "leave the group" to chown
        return if gid == u32::MAX { Err("not a gid".to_string()) } else { Ok(gid) };
    }
    etc_group
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == s).then(|| f.nth(1)?.parse().ok())?
        })
        .ok_or_else(|| "no such group in /etc/group: give its numeric gid".to_string())
}

/// At least 0.1 s: every poll makes the application render its metrics.
fn age_interval(s: &str) -> Result<f64, String> {
    match seconds(s, 0.0, 3600.0)? {
        v if v < 0.1 => Err(format!("`{s}`: poll at most every 0.1 s (each poll makes the application render its metrics)")),
        v => Ok(v),
    }
}

/// At most 60 s: a poll that takes longer cannot be joined with a window.
fn age_timeout(s: &str) -> Result<f64, String> {
    seconds(s, 0.001, 60.0)
}

fn parse_labels(s: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    crate::age::exposition::parse_label_filter(s)
}

/// A number of seconds within [min, max], or a line that says the bound it broke.
fn seconds(s: &str, min: f64, max: f64) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    let said = |x: f64| match x {
        x if x >= 86_400.0 => format!("{x} seconds ({} days)", x / 86_400.0),
        x => format!("{x} seconds"),
    };
    if v.is_nan() || v < min {
        Err(format!("`{s}`: give at least {}", said(min)))
    } else if v > max {
        Err(format!("`{s}`: give at most {}", said(max)))
    } else {
        Ok(v)
    }
}

/// Thread labels per process: bounded, as every series' cardinality is (names come from the target).
fn thread_labels(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        _ => Err(format!("`{s}`: give a whole number from 1 to 1000")),
    }
}

/// A measurement window: a millisecond to a year.
fn window_seconds(s: &str) -> Result<f64, String> {
    seconds(s, 0.001, 365.0 * 86_400.0)
}

/// A refresh interval: 50 ms (a redraw costs a sample of every thread) to an hour.
fn refresh_seconds(s: &str) -> Result<f64, String> {
    seconds(s, 0.05, 3600.0)
}

/// An age objective: within the ages taken as facts.
fn slo_seconds(s: &str) -> Result<f64, String> {
    seconds(s, 0.001, crate::age::MAX_AGE_S)
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "command"])))]
pub struct AttachArgs {
    /// Process to measure (a PID of this PID namespace); repeat for several, or separate them
    /// with commas: a report each (with --output json, one object per line)
    #[arg(short, long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Length of the measurement window in seconds (with a COMMAND: until it exits)
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = window_seconds, conflicts_with = "command")]
    pub duration: f64,
    /// Report format: a table for people, or one JSON object for scripts
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Refresh interval of the live table in seconds
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = refresh_seconds)]
    pub interval: f64,
    /// Also write the wait profile of the window here (gzipped pprof: `go tool pprof FILE`); of every
    /// process measured (--children, several --pid), each sample labelled with its pid and comm
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Also write every thread's state timeline of the window here, with who each wait was spent
    /// behind, in the Chrome trace-event format (open it in Perfetto or the Firefox Profiler)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Also write the window as one self-contained web page here: the verdict, every thread's
    /// timeline with who each wait was spent behind, the blame graph and the wait flame graph
    /// (no network: it opens from disk in any current browser)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Size of the timeline's ring buffer in KiB, with --trace or --html (a power of 2, 4 to
    /// 1048576): 16384 holds 350,000 spans, over a second of 100k switches/s (it is read every
    /// 250 ms); spans lost are counted and the file says so
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_TIMELINE_BUFFER_KIB, value_parser = exit_buffer_kib)]
    pub timeline_buffer_kib: u32,
    /// The level the application's age should stay under, in seconds; without it the verdict
    /// takes twice the window's median age plus 0.1 s (docs/verdicts.md)
    #[arg(long, value_name = "SECS", value_parser = slo_seconds)]
    pub age_slo: Option<f64>,
    /// A row for every thread: by default the exited threads that lived less than a tenth of
    /// the window are summed into one row per role (their name without its numbers), with their count
    #[arg(long)]
    pub each_thread: bool,
    /// Also measure the processes it starts: its descendants now and those started in the
    /// window (a report each); the first report then weighs their CPU demand against the CPUs
    /// they may use ("4 processes on 2 CPUs want 4.0 CPUs: oversubscribed")
    #[arg(long)]
    pub children: bool,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[command(flatten)]
    pub age: AgeArgs,
    #[command(flatten)]
    pub pods: PodsArgs,
    /// Run this command and measure it from its first instruction until it exits; waitmeter
    /// exits with its exit code
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Process to look at (a PID of this PID namespace)
    #[arg(short, long, value_name = "PID")]
    pub pid: u32,
    /// How long to watch for whom each thread waits behind, in seconds
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = refresh_seconds)]
    pub window: f64,
    /// Format: text for people, or one JSON object for scripts
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Also write the window as one self-contained web page here (as `attach --html`)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[command(flatten)]
    pub pods: PodsArgs,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("targets").required(true).multiple(true).args(["pid", "all", "comm", "cgroup"])))]
pub struct RunArgs {
    /// Process to measure; repeat for several, or separate them with commas
    #[arg(short, long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Every process of this PID namespace, following new processes and exits
    #[arg(long, conflicts_with_all = ["pid", "comm", "cgroup"])]
    pub all: bool,
    /// Also every process the --pid processes start (their descendants, now and later), each
    /// with its own series
    #[arg(long, requires = "pid")]
    pub children: bool,
    /// Every process with this name (its comm, as `pgrep -x`: the first 15 characters), now and
    /// later (looked for every second); repeat or separate with commas for several
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub comm: Vec<String>,
    /// Every process in this cgroup (v2 path, e.g. /system.slice/app.service) or below it, now
    /// and later; with --comm, those of them with that name
    #[arg(long, value_name = "PATH", value_delimiter = ',')]
    pub cgroup: Vec<String>,
    /// Address to serve /metrics on
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// TLS, client certificates and basic auth for the endpoint: a file in the
    /// Prometheus exporter toolkit's web-config format (docs/deployment.md)
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Thread labels per process, given to the busiest names (running and waiting, with
    /// hysteresis); the rest are "other" (1 to 1000: each name is a series per state)
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = thread_labels)]
    pub max_thread_labels: usize,
    /// Add a `tid` label (one series per thread; for debugging)
    #[arg(long)]
    pub tid_labels: bool,
    /// Keep the last N minutes of every watched thread's state timeline (1 to 60; at most
    /// 400,000 cells, about 22 MiB, folded coarser past that) and serve them at
    /// /debug/timeline?seconds=S (the page, or &format=trace); each watched context switch costs
    /// about 100 ns more
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=60))]
    pub timeline_minutes: Option<u64>,
    /// Size of the timeline's ring buffer in KiB, with --timeline-minutes (a power of 2, 4 to
    /// 1048576; read every 100 ms): spans lost are counted
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_TIMELINE_BUFFER_KIB, value_parser = exit_buffer_kib, requires = "timeline_minutes")]
    pub timeline_buffer_kib: u32,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[command(flatten)]
    pub age: AgeArgs,
    #[command(flatten)]
    pub push: PushArgs,
    #[command(flatten)]
    pub pods: PodsArgs,
}

/// Kubernetes names of the processes' containers (docs/deployment.md, "Which pod is that?").
#[derive(Args, Debug, Clone)]
pub struct PodsArgs {
    /// Where the names of the node's pods come from: api (the API server, from inside the
    /// cluster: the pods of --node-name), a URL that answers a PodList (e.g. the kubelet's
    /// https://NODE:10250/pods), off, or auto: api when in a pod with --node-name set, else off
    #[arg(long, value_name = "SOURCE", default_value = "auto")]
    pub pods: String,
    /// The node whose pods `--pods api` lists (the chart sets NODE_NAME from spec.nodeName)
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// File holding a bearer token for a --pods URL, read again for every fetch (https only;
    /// api uses the service account's)
    #[arg(long, value_name = "FILE")]
    pub pods_token_file: Option<PathBuf>,
    /// CA certificates (PEM) to check a --pods https:// server with (default: the system's)
    #[arg(long, value_name = "FILE")]
    pub pods_ca_file: Option<PathBuf>,
    /// Seconds between fetches of the pod list (a container the last list did not name asks for
    /// one sooner, at most every 5 s)
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub pods_refresh: u64,
}

/// Pushing wait profiles to Pyroscope (docs/profiles.md).
#[derive(Args, Debug, Clone)]
pub struct PushArgs {
    /// Push wait profiles to this Pyroscope server (or Grafana Alloy's pyroscope.receive_http), e.g. http://pyroscope:4040
    #[arg(long, value_name = "URL")]
    pub pyroscope_url: Option<String>,
    /// Seconds of waiting in each pushed profile
    #[arg(long, value_name = "SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=300), requires = "pyroscope_url")]
    pub pyroscope_interval: u64,
    /// The `service_name` label of the pushed profiles (default: each process' command name)
    #[arg(long, value_name = "NAME", requires = "pyroscope_url")]
    pub pyroscope_service: Option<String>,
    /// An extra label of every pushed profile (repeat for several), e.g. namespace=shop
    #[arg(long = "pyroscope-label", value_name = "NAME=VALUE", requires = "pyroscope_url")]
    pub pyroscope_labels: Vec<String>,
    /// Tenant of a multi-tenant Pyroscope (sent as X-Scope-OrgID)
    #[arg(long, value_name = "ID", requires = "pyroscope_url")]
    pub pyroscope_tenant: Option<String>,
    /// User for basic auth (Grafana Cloud: the instance ID)
    #[arg(long, value_name = "USER", requires = "pyroscope_password_file")]
    pub pyroscope_user: Option<String>,
    /// File holding the basic-auth password or token
    #[arg(long, value_name = "FILE", requires = "pyroscope_user")]
    pub pyroscope_password_file: Option<PathBuf>,
    /// CA certificates (PEM) to check an https:// server with (default: the system's)
    #[arg(long, value_name = "FILE", requires = "pyroscope_url")]
    pub pyroscope_ca_file: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_needs_a_target() {
        assert!(Cli::try_parse_from(["waitmeter", "run"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "run", "--all", "--pid", "1"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "run", "--pid", "1", "--pid", "2"]).is_ok());
        let Cmd::Run(r) = Cli::try_parse_from(["waitmeter", "run", "-p", "1,2", "-p", "3"]).unwrap().cmd else { panic!() };
        assert_eq!(r.pid, [1, 2, 3]);
        assert!(Cli::try_parse_from(["waitmeter", "run", "-p", "1,x"]).is_err());
        let Cmd::Attach(a) = Cli::try_parse_from(["waitmeter", "attach", "-p", "7"]).unwrap().cmd else { panic!() };
        assert_eq!(a.pid, [7]);
        let Cmd::Attach(a) = Cli::try_parse_from(["waitmeter", "attach", "--", "python3", "-c", "pass"]).unwrap().cmd else { panic!() };
        assert_eq!((a.pid.len(), a.command.len()), (0, 3));
        let Cmd::Attach(a) = Cli::try_parse_from(["waitmeter", "attach", "-p", "7,8", "-p", "9"]).unwrap().cmd else { panic!() };
        assert_eq!(a.pid, [7, 8, 9]);
        assert!(Cli::try_parse_from(["waitmeter", "run", "--comm", "python3", "--cgroup", "/a"]).is_ok());
        assert!(Cli::try_parse_from(["waitmeter", "run", "--comm", "python3", "--all"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "attach"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "attach", "-p", "7", "--", "true"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--duration", "3", "--", "true"]).is_err());
        assert_eq!(env_name("web.config.file"), "WAITMETER_WEB_CONFIG_FILE");
        assert_eq!(env_name("max-threads"), "WAITMETER_MAX_THREADS");
        let Cmd::Run(r) = Cli::try_parse_from(["waitmeter", "run", "--all", "--web.config.file", "/w.yml"]).unwrap().cmd else { panic!() };
        assert_eq!(r.web_config_file.as_deref(), Some(std::path::Path::new("/w.yml")));
    }

    #[test]
    fn age_url_and_metric_go_together() {
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--pid", "1", "--age-url", "http://x/metrics"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--pid", "1", "--age-metric", "lag"]).is_err());
        let with_labels = |labels: &str| {
            Cli::try_parse_from([
                "waitmeter",
                "attach",
                "--pid",
                "1",
                "--age-url",
                "http://x/m",
                "--age-metric",
                "lag",
                "--age-labels",
                labels,
            ])
        };
        assert!(with_labels("a=b").is_ok());
        assert!(with_labels("oops").is_err());
    }

    #[test]
    fn age_poll_interval_and_deadline() {
        let age = |extra: &[&str]| {
            let mut a = vec!["waitmeter", "attach", "--pid", "1", "--age-url", "http://x/m", "--age-metric", "lag"];
            a.extend_from_slice(extra);
            Cli::try_parse_from(a).map(|c| match c.cmd {
                Cmd::Attach(a) => (a.age.age_interval, a.age.age_timeout),
                _ => unreachable!(),
            })
        };
        assert_eq!(age(&[]).unwrap(), (1.0, 10.0));
        assert_eq!(age(&["--age-interval", "0.5", "--age-timeout", "2.5"]).unwrap(), (0.5, 2.5));
        assert_eq!(age(&["--age-timeout", "60"]).unwrap(), (1.0, 60.0));
        for bad in [
            ["--age-interval", "0"],
            ["--age-interval", "0.01"],
            ["--age-interval", "x"],
            ["--age-timeout", "0"],
            ["--age-timeout", "61"],
            ["--age-timeout", "-1"],
        ] {
            assert!(age(&bad).is_err(), "{bad:?}");
        }
        // without --age-url they mean nothing
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--pid", "1", "--age-interval", "2"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "run", "--pid", "1", "--age-timeout", "2"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "run", "--pid", "1"]).is_ok());
    }

    #[test]
    fn age_socket_mode_and_group() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("660"), Ok(0o660));
        assert_eq!(parse_mode("0o666"), Ok(0o666));
        assert_eq!(parse_mode("0600"), Ok(0o600));
        for bad in ["", "66", "0x660", "999", "0860", "06600", "-660", " 0660", "rw-rw----"] {
            assert!(parse_mode(bad).unwrap_err().contains("octal"), "{bad}");
        }
        assert!(parse_mode("4660").unwrap_err().contains("setuid"));
        let etc_group = "root:x:0:\nwheel:x:10:alice,bob\n# comment\nbroken\napp:x:10001:\nnogid:x::\n";
        assert_eq!(parse_group("app", etc_group), Ok(10001));
        assert_eq!(parse_group("wheel", etc_group), Ok(10));
        assert_eq!(parse_group("10001", etc_group), Ok(10001));
        assert_eq!(parse_group("4242", ""), Ok(4242));
        assert!(parse_group("nosuch", etc_group).unwrap_err().contains("numeric gid"));
        assert!(parse_group("nogid", etc_group).is_err());
        assert!(parse_group("4294967295", etc_group).is_err());
        // the CLI: defaults, and only with --age-socket
        let age = |extra: &[&str]| {
            let mut a = vec!["waitmeter", "run", "--pid", "1"];
            a.extend_from_slice(extra);
            Cli::try_parse_from(a).map(|c| match c.cmd {
                Cmd::Run(r) => r.age.config(),
                _ => unreachable!(),
            })
        };
        let socket = |extra: &[&str]| age(extra).unwrap().unwrap().socket.unwrap();
        assert_eq!(socket(&["--age-socket", "/s"]), SocketConfig { path: "/s".into(), mode: 0o660, group: None, max_threads: 4096 });
        assert_eq!(socket(&["--age-socket", "/s", "--age-max-threads", "64"]).max_threads, 64);
        assert!(age(&["--age-socket", "/s", "--age-max-threads", "0"]).is_err());
        assert!(age(&["--age-max-threads", "64"]).is_err());
        assert_eq!(socket(&["--age-socket", "/s", "--age-socket-mode", "0666", "--age-socket-group", "0"]).group, Some(0));
        assert_eq!(socket(&["--age-socket", "/s", "--age-socket-mode", "0666"]).mode, 0o666);
        assert!(age(&["--age-socket-mode", "0666"]).is_err());
        assert!(age(&["--age-socket-group", "0"]).is_err());
        let e = age(&["--age-socket", "/s", "--age-socket-mode", "777x"]).unwrap().unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().starts_with("bad --age-socket-mode 777x: not an octal mode"), "{e}");
        assert_eq!(age(&[]).unwrap().unwrap(), AgeConfig::default());
    }

    #[test]
    fn durations_must_be_positive() {
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--pid", "1", "--duration", "0"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--pid", "1", "--duration", "x"]).is_err());
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--pid", "1", "--duration", "0.5"]).is_ok());
        // the bound broken is the one said
        let err = |args: &[&str]| Cli::try_parse_from(args).err().map(|e| e.to_string()).unwrap_or_default();
        let e = err(&["waitmeter", "attach", "--pid", "1", "--duration", "100000000"]);
        assert!(e.contains("give at most 31536000 seconds (365 days)"), "{e}");
        assert!(err(&["waitmeter", "attach", "--pid", "1", "--duration", "0"]).contains("give at least 0.001 seconds"));
        assert!(err(&["waitmeter", "attach", "--pid", "1", "--duration", "NaN"]).contains("give at least"));
        assert!(err(&["waitmeter", "attach", "--pid", "1", "--duration", "inf"]).contains("give at most"));
        assert!(err(&["waitmeter", "attach", "--pid", "1", "--interval", "1e-9"]).contains("give at least 0.05 seconds"));
        assert!(err(&["waitmeter", "attach", "--pid", "1", "--age-slo", "1e308"]).contains("give at most 604800 seconds (7 days)"));
        assert!(err(&["waitmeter", "dump", "--pid", "1", "--window", "1e9"]).contains("give at most 3600 seconds"));
        assert!(Cli::try_parse_from(["waitmeter", "attach", "--pid", "-3"]).is_err());
    }
}
