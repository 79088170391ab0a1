//! Loading, configuring and attaching the BPF probes, and reading their maps.
//! Each probe family has `bpf/<stem>.bpf.c`, `bpf/<stem>.h`, `<stem>.rs` here
//! and `docs/probes/<stem>.md`. `abi.rs` is the leaf they share: the sched object's generated
//! types (which the stack and sweep programs use too) and the conversions of map keys and values
//! to and from bytes, for the types marked `Plain` only.
mod abi;
pub mod batch;
pub mod cpu_clock;
pub mod gil;
pub mod pypark;
pub mod sched;
pub mod stacks;
pub mod sweep;
pub mod syscalls;

use std::mem::MaybeUninit;
use std::path::Path;
use std::ptr::NonNull;

use libbpf_rs::OpenObject;

use anyhow::Result;

use crate::error::usage;
use crate::procfs::{self, CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN};

/// The memory the skeleton keeps its BPF object in, owned by one probe:
/// allocated at attach, freed after the skeleton that borrows it (targets come
/// and go under `run --all`; one leaked allocation per attach would add up).
/// A raw pointer, not a `Box`: moving a `Box` asserts it is unaliased, and
/// the skeleton holds a reference into it.
pub(crate) struct Storage(NonNull<MaybeUninit<OpenObject>>);

// SAFETY: an owned heap allocation holding an `OpenObject`/`Object`, which
// libbpf-rs declares `Send` and `Sync`; it is only reached through the
// skeleton, whose own `Send`/`Sync` the generated code declares.
unsafe impl Send for Storage {}
unsafe impl Sync for Storage {}

impl Storage {
    pub(crate) fn new() -> Storage {
        Storage(NonNull::from(Box::leak(Box::new(MaybeUninit::uninit()))))
    }

    /// The storage, for the skeleton to borrow.
    ///
    /// # Safety
    /// Whatever holds the returned reference must be dropped before `self`.
    pub(crate) unsafe fn lend(&mut self) -> &'static mut MaybeUninit<OpenObject> {
        // SAFETY: valid from `new` until `drop`; the caller lends it once and
        // drops the borrower first.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // SAFETY: allocated by `Box` in `new`, freed once here; the skeleton
        // that borrowed it (and dropped the object in it) is gone: `attach`
        // drops its open skeleton before the storage on every error path
        // (declared later, dropped earlier), and the probes declare `_storage` last.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// The sum over CPUs of the u64 at `key` of a per-CPU array (0 if unreadable).
pub(crate) fn percpu_sum(map: &impl libbpf_rs::MapCore, key: u32) -> u64 {
    map.lookup_percpu(&key.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .ok()
        .flatten()
        .map(|v| v.iter().filter_map(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?))).sum())
        .unwrap_or(0)
}

/// Where the kernel publishes its own BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Which of the capabilities the probes need are missing from `cap_eff`.
/// The kernel accepts CAP_SYS_ADMIN in place of either (bpf_capable(),
/// perfmon_capable()), which is also all that kernels before 5.8 know.
pub fn missing_caps(cap_eff: u64) -> Vec<&'static str> {
    let has = |c: u32| cap_eff & (1u64 << c) != 0;
    let mut missing = vec![];
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// Checks that make a failure to load say why, in one line, before libbpf tries.
pub fn preflight(btf: Option<&Path>) -> Result<()> {
    let cap_eff = procfs::self_cap_eff().unwrap_or(0);
    let missing = missing_caps(cap_eff);
    if !missing.is_empty() {
        let who = if unsafe { libc::geteuid() } == 0 { "root without them" } else { "not root" };
        return Err(usage!(
            "missing {} ({who}): run as root (sudo waitmeter ...) or grant them: sudo setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep $(command -v waitmeter)",
            missing.join(" and ")
        ));
    }
    match btf {
        Some(p) if !p.is_file() => Err(usage!(
            "no BTF file at {}: pass --btf a BTF file for this kernel (e.g. from BTFHub), or leave it out to use {KERNEL_BTF}",
            p.display()
        )),
        None if !Path::new(KERNEL_BTF).exists() => Err(usage!(
            "kernel without BTF ({KERNEL_BTF} is missing): waitmeter needs CONFIG_DEBUG_INFO_BTF=y, or pass --btf FILE with BTF for this kernel (BTFHub)"
        )),
        _ => Ok(()),
    }
}

/// Route libbpf's own messages into our log at debug level (never muted).
pub fn route_libbpf_log() {
    fn print(level: libbpf_rs::PrintLevel, msg: String) {
        let msg = msg.trim_end();
        match level {
            libbpf_rs::PrintLevel::Warn => log::debug!(target: "libbpf", "warning: {msg}"),
            _ => log::debug!(target: "libbpf", "{msg}"),
        }
    }
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, print)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_check_names_what_is_missing() {
        let bpf = 1u64 << CAP_BPF;
        let perfmon = 1u64 << CAP_PERFMON;
        assert!(missing_caps(bpf | perfmon).is_empty());
        assert_eq!(missing_caps(perfmon), ["CAP_BPF"]);
        assert_eq!(missing_caps(bpf), ["CAP_PERFMON"]);
        assert_eq!(missing_caps(0), ["CAP_BPF", "CAP_PERFMON"]);
        // root on a modern kernel: everything
        assert!(missing_caps(0x1ff_ffff_ffff).is_empty());
        // CAP_SYS_ADMIN stands in for both
        assert!(missing_caps(1u64 << CAP_SYS_ADMIN).is_empty());
        assert_eq!(missing_caps(0x1ff_ffff_ffff & !(bpf | (1u64 << CAP_SYS_ADMIN))), ["CAP_BPF"]);
    }
}
