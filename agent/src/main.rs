//! waitmeter: measures waiting. See docs/architecture.md.
mod age;
mod cgroup;
mod cli;
mod clock;
mod cmd;
mod error;
mod export;
mod model;
mod probes;
mod procfs;
mod python;
mod report;
mod session;
mod shrink;
mod stacks;

use clap::Parser;

/// Log lines on stderr, prefixed so they stand apart from a report.
struct StderrLog(log::LevelFilter);

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= self.0
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            let level = match r.level() {
                log::Level::Error => "error: ",
                log::Level::Warn => "warning: ",
                _ => "",
            };
            crate::say!("waitmeter: {level}{}", r.args());
        }
    }
    fn flush(&self) {}
}

fn main() {
    // Buffers of 128 KiB and more (whole-map reads under thread churn) come
    // from mmap and go back to the system when freed. glibc would otherwise
    // raise this threshold after the first such free and carve them from the
    // heap, which a burst of threads then leaves fragmented (RSS stays up).
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
    let cli = cli::Cli::parse();
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        _ => log::LevelFilter::Debug,
    };
    let _ = log::set_boxed_logger(Box::new(StderrLog(level)));
    log::set_max_level(level);
    probes::route_libbpf_log();

    let result = match &cli.cmd {
        cli::Cmd::Attach(a) => cmd::attach::attach(a, cli.verbose > 0),
        cli::Cmd::Run(r) => cmd::run::run(r),
        cli::Cmd::MetricsDoc => {
            cmd::emit(&export::catalogue::markdown());
            Ok(())
        }
    };
    if let Err(e) = result {
        crate::say!("waitmeter: {e:#}");
        std::process::exit(error::exit_code(&e));
    }
}
