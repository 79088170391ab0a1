//! waitmeter: measures waiting. See docs/architecture.md.
mod age;
mod cgroup;
mod cli;
mod clock;
mod cmd;
mod error;
mod http_client;

mod export;
mod identity;
mod idhash;
mod model;
mod outfile;
mod probes;
mod procfs;
mod python;
mod report;
mod runtime;
mod session;
mod shrink;
mod stacks;
mod tls;
mod worker;

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
            crate::error::say!("waitmeter: {level}{}", r.args());
        }
    }
    fn flush(&self) {}
}

fn main() {
    // Fixed allocator thresholds (glibc adjusts them on its own otherwise, and
    // a burst of threads then leaves the heap fragmented: RSS stays up).
    // Buffers up to 4 MiB (whole-map reads and the samples of a drain of
    // exits, under thread churn) come from the heap and are reused from drain
    // to drain: from mmap, each would be mapped, faulted in page by page and
    // unmapped again ten times a second. The heap's free top is kept up to
    // 8 MiB between drains and given back every few seconds (malloc_trim).
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
    }
    let cli = cli::parse();
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
        cli::Cmd::Dump(d) => cmd::dump::dump(d),
        cli::Cmd::Completions { shell } => {
            cmd::emit_bytes(&cmd::generate::completions(*shell));
            Ok(())
        }
        cli::Cmd::Man { dir: Some(dir) } => cmd::generate::write_man_pages(dir),
        cli::Cmd::Man { dir: None } => cmd::generate::man_pages().map(|p| cmd::emit_bytes(&p[0].1)),
        cli::Cmd::MetricsDoc => {
            cmd::emit(&export::catalogue::markdown());
            Ok(())
        }
    };
    if let Err(e) = result {
        crate::error::say!("waitmeter: {e:#}");
        std::process::exit(error::exit_code(&e));
    }
}

/// The crate's directory, for the tests' recorded data and the repository's files: as `cargo
/// test` says at run time (a test binary built in another checkout that shares the target
/// directory is not rebuilt for this one), else as it was when built.
#[cfg(test)]
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string())
}
