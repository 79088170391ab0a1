//! Loading, configuring and attaching the BPF probes, and reading their maps.
//! Each probe family has `bpf/<stem>.bpf.c`, `bpf/<stem>.h`, `<stem>.rs` here
//! and `docs/probes/<stem>.md`. `abi.rs` is the leaf they share: the sched object's generated
//! types (which the stack and sweep programs use too) and the conversions of map keys and values
//! to and from bytes, for the types marked `Plain` only. `Owned` holds a skeleton with the memory
//! its object lives in; `Mapped`, a map's values shared with the kernel by `mmap`.
mod abi;
pub mod batch;
pub mod cpu_clock;
pub mod gil;
pub mod kernel;
pub mod pypark;
pub mod sched;
pub mod stacks;
pub mod sweep;
pub mod syscalls;
pub mod thread_table;

use std::mem::{ManuallyDrop, MaybeUninit};
use std::path::Path;
use std::ptr::NonNull;

use libbpf_rs::OpenObject;

use anyhow::Result;

use crate::error::usage;
use crate::procfs::{self, CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN};

/// A BPF skeleton and the memory its object lives in, which it borrows,
/// owned together: probes are loaded and unloaded as targets come and go
/// (`run --all`), so no caller can lend them memory of a known life, and one
/// leaked allocation per load would add up. The skeleton is dropped before
/// the memory by `Drop`, whatever the order of fields around it; it is
/// reached through `&self`/`&mut self` only, so nothing borrowed from it (a
/// map, a program) outlives its owner: the `'static` of `S` stays in here.
pub(crate) struct Owned<S> {
    skel: ManuallyDrop<S>,
    /// a `Box`'s allocation, as a raw pointer: moving a `Box` asserts it is
    /// unaliased, and the skeleton holds a reference into it
    memory: NonNull<MaybeUninit<OpenObject>>,
}

impl<S> Owned<S> {
    /// Open (and load) a skeleton with `open`, handed fresh memory for its
    /// object. `open` must not keep the reference anywhere but in what it
    /// returns: on an error, what it made is dropped before it returns.
    pub(crate) fn open(open: impl FnOnce(&'static mut MaybeUninit<OpenObject>) -> Result<S>) -> Result<Owned<S>> {
        let memory = NonNull::from(Box::leak(Box::new(MaybeUninit::uninit())));
        // SAFETY: valid until freed below or in `drop`, after whatever borrowed it is gone.
        match open(unsafe { &mut *memory.as_ptr() }) {
            Ok(skel) => Ok(Owned { skel: ManuallyDrop::new(skel), memory }),
            Err(e) => {
                // SAFETY: allocated by `Box` above; `open` returned, dropping what borrowed it.
                drop(unsafe { Box::from_raw(memory.as_ptr()) });
                Err(e)
            }
        }
    }
}

impl<S> std::ops::Deref for Owned<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.skel
    }
}

impl<S> std::ops::DerefMut for Owned<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.skel
    }
}

impl<S> Drop for Owned<S> {
    fn drop(&mut self) {
        // SAFETY: the skeleton (which destroys the BPF object in the memory)
        // is dropped once, here, and then the memory `open` allocated by `Box`.
        unsafe {
            ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.memory.as_ptr()));
        }
    }
}

/// The value area of a `BPF_F_MMAPABLE` array map, mapped shared into the
/// agent (kernel and agent see the same bytes), unmapped when dropped. The
/// mapping holds the map: it stays valid after the map's fd is closed.
pub(crate) struct Mapped {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapped {
    /// Map `len` bytes of `map`'s values, readable and writable.
    pub(crate) fn new(map: &libbpf_rs::MapMut<'_>, len: usize, what: &str) -> Result<Mapped> {
        use std::os::fd::{AsFd, AsRawFd};
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a new shared mapping of the map's fd; nothing else is at the address the kernel picks.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, map.as_fd().as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(anyhow::Error::from(std::io::Error::last_os_error()).context(format!("failed to mmap {what}")));
        }
        Ok(Mapped { ptr: NonNull::new(ptr.cast()).ok_or_else(|| anyhow::anyhow!("mmap of {what} returned null"))?, len })
    }

    /// The start of the mapping (page-aligned), valid for `len` bytes while `self` lives.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
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

/// With `WAITMETER_VERIFIER_STATS=1` in the environment every program is loaded with the
/// verifier's statistics (`BPF_LOG_STATS`: the instructions it processed and each function's
/// stack depth), which libbpf logs at debug level (`-vv`). tests/kernels reads them to hold
/// each program's margins inside the verifier's limits on every kernel of the matrix.
pub(crate) fn ask_verifier_stats(open: &mut libbpf_rs::OpenObject) {
    if std::env::var_os("WAITMETER_VERIFIER_STATS").is_some_and(|v| v == "1") {
        for mut prog in open.progs_mut() {
            prog.set_log_level(4);
        }
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
