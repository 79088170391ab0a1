//! The commands: wiring of session, model, report and export.
pub mod attach;
pub mod dump;
pub mod generate;
pub mod launch;
pub mod run;
mod timeline;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cli::ProbeArgs;
use crate::report::PythonInfo;
use crate::session::{Session, SessionOptions, Target};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The facts of process `pid`'s machine that decide waits, with the running kernel's as the
/// session's probes were loaded for it: a report's environment.
pub fn environment(session: &Session, pid: u32) -> crate::report::environment::Environment {
    let k = session.kernel();
    crate::report::environment::Environment::of(crate::procfs::sched_facts(pid))
        .with_kernel(crate::report::environment::KernelFacts {
            release: k.release.clone(),
            features: k.features.iter().map(|f| f.name().to_string()).collect(),
            degraded: k.degraded(),
        })
        .with_go(crate::runtime::go(pid))
}

/// Each feature above the kernel floor and whether the running kernel has it
/// (`waitmeter_kernel_feature`).
pub fn kernel_features(k: &crate::probes::kernel::Kernel) -> Vec<(&'static str, bool)> {
    crate::probes::kernel::Feature::ALL.iter().map(|f| (f.name(), k.has(*f))).collect()
}

/// SIGINT/SIGTERM end the measurement cleanly (reports still print, links detach).
pub fn install_stop_handler() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// `keep_stacks`: whether the session keeps the stacks it drains from the
/// start (`run` keeps them only while a profile is being recorded).
pub fn session_options(p: &ProbeArgs, follow_forks: bool, keep_stacks: bool) -> SessionOptions {
    let stacks = p.stacks;
    SessionOptions {
        btf: p.btf.clone(),
        max_threads: p.max_threads,
        max_procs: p.max_processes,
        exit_buffer_bytes: p.exit_buffer_kib * 1024,
        follow_forks,
        gil_uprobes: p.gil_probe == crate::cli::GilProbe::Uprobe,
        lock_uprobes: p.lock_probe == crate::cli::LockProbe::Uprobe,
        stacks: crate::stacks::Options {
            native: matches!(stacks, crate::cli::Stacks::All | crate::cli::Stacks::Native),
            python: matches!(stacks, crate::cli::Stacks::All | crate::cli::Stacks::Python),
            interval_ns: (p.stack_interval * 1e6) as u64,
            holder_hz: p.holder_sample_hz,
            keep: keep_stacks,
        },
        stall_ns: crate::model::stretches::STALL_OBJECTIVE_NS,
        timeline_bytes: 0,
    }
}

/// Write to standard output. A reader that went away (`| head -c 100`) ends
/// the program quietly with exit code 0, as other Unix tools do (the kernel
/// detaches the probes when the process exits); any other output error is one
/// line and exit code 1. Never a panic.
pub fn emit(text: &str) {
    emit_bytes(text.as_bytes())
}

/// [`emit`] for bytes (a generated completion script or man page).
pub fn emit_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        crate::error::say!("waitmeter: failed to write to standard output: {e}: check where it is redirected (disk full?)");
        std::process::exit(1);
    }
}

/// Check --pods and start fetching the node's pod list (None: no source).
pub fn pod_names(args: &crate::cli::PodsArgs) -> anyhow::Result<Option<std::sync::Arc<crate::identity::source::Directory>>> {
    use crate::identity::source::{Directory, Source};
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let source = Source::choose(&args.pods, args.node_name.as_deref(), args.pods_token_file.as_deref(), args.pods_ca_file.as_deref(), &env)
        .map_err(|e| crate::error::usage!("{e:#}"))?;
    let Some(source) = source else { return Ok(None) };
    log::info!("naming containers from the pod list at {}", source.url);
    Ok(Some(Directory::start(source, std::time::Duration::from_secs(args.pods_refresh))?))
}

/// The JSON `python` block of a target, as of now.
pub(super) fn python_info(session: &Session, target: &Target) -> Option<PythonInfo> {
    target.python.as_ref().map(|p| PythonInfo {
        version: p.version.clone(),
        gil: p.gil_state(),
        gil_probe: session.gil_probe_name(target),
        lock_probe: if session.parks_attached(target) { "uprobe" } else { "none" },
        free_threaded: p.free_threaded,
        binary: p.binary.display().to_string(),
        symbols: p.symtab,
        switch_interval_us: p
            .gils
            .first()
            .and_then(|g| crate::python::switch_interval_us(&crate::python::memory::Process::new(target.pid), *g)),
        unmeasured_gil: p.unmeasured_gil.clone(),
    })
}
