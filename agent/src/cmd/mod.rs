//! The commands: wiring of session, model, report and export.
pub mod attach;
pub mod run;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cli::ProbeArgs;
use crate::session::SessionOptions;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
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

pub fn session_options(p: &ProbeArgs, follow_forks: bool) -> SessionOptions {
    SessionOptions {
        btf: p.btf.clone(),
        max_threads: p.max_threads,
        max_procs: p.max_processes,
        follow_forks,
        gil_uprobes: p.gil_probe == crate::cli::GilProbe::Uprobe,
    }
}
