//! Reading a target's memory, behind a trait: the readers of CPython objects
//! (thread names, `gil_addresses`) run on a live process (`Process`:
//! process_vm_readv, needs ptrace access) and, in unit tests, on a recorded
//! image (`Recorded`: hand-built, or recorded from a real interpreter).
//!
//! Everything read there is hostile: an address taken from the target is
//! offset only with `at`/`before` (checked: an error, never a wrap), a length
//! read from it only through `read_bytes` with a cap, and a walk over its
//! structures is bounded by a `Budget` of reads and bytes, so a cyclic list or
//! a dict of a million entries costs a bounded amount of work.
use std::cell::Cell;

use anyhow::{bail, Context, Result};

pub trait Memory {
    /// Fill `buf` from `addr`: all of it, or an error (unmapped, like EFAULT).
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()>;

    fn read_u8(&self, addr: u64) -> Result<u8> {
        array(self, addr).map(u8::from_le_bytes)
    }

    fn read_u32(&self, addr: u64) -> Result<u32> {
        array(self, addr).map(u32::from_le_bytes)
    }

    fn read_u64(&self, addr: u64) -> Result<u64> {
        array(self, addr).map(u64::from_le_bytes)
    }

    /// A pointer (x86-64: 8 bytes, little-endian).
    fn read_ptr(&self, addr: u64) -> Result<u64> {
        self.read_u64(addr)
    }

    /// `len` bytes at `addr`, where `len` came from the target: refused above
    /// `max` before anything is allocated.
    fn read_bytes(&self, addr: u64, len: u64, max: u64) -> Result<Vec<u8>> {
        if len > max {
            bail!("{len} bytes at {addr:#x}: more than the {max} read at most");
        }
        let mut buf = vec![0u8; usize::try_from(len)?];
        self.read(addr, &mut buf)?;
        Ok(buf)
    }
}

fn array<const N: usize>(m: &(impl Memory + ?Sized), addr: u64) -> Result<[u8; N]> {
    let mut b = [0u8; N];
    m.read(addr, &mut b)?;
    Ok(b)
}

/// `base + off` for an address read from the target: an error on overflow.
pub fn at(base: u64, off: u64) -> Result<u64> {
    base.checked_add(off).with_context(|| format!("address {base:#x} + {off:#x} overflows"))
}

/// `base - off` (fields before an object's header): an error on underflow.
pub fn before(base: u64, off: u64) -> Result<u64> {
    base.checked_sub(off).with_context(|| format!("address {base:#x} - {off:#x} underflows"))
}

/// The memory of a live process.
pub struct Process {
    pid: u32,
}

impl Process {
    pub fn new(pid: u32) -> Process {
        Process { pid }
    }
}

impl Memory for Process {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let pid = self.pid;
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: one local iovec over `buf`, one remote; the kernel checks the remote range.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            bail!("cannot read memory of process {pid} at {addr:#x}: {}", std::io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            bail!("short read of process {pid} at {addr:#x}");
        }
        Ok(())
    }
}

/// At most `reads` reads and `bytes` bytes through `inner`, then every read
/// fails: what bounds a walk over structures the target controls.
pub struct Budget<'a> {
    inner: &'a dyn Memory,
    reads: Cell<u64>,
    bytes: Cell<u64>,
}

impl<'a> Budget<'a> {
    pub fn new(inner: &'a dyn Memory, reads: u64, bytes: u64) -> Budget<'a> {
        Budget { inner, reads: Cell::new(reads), bytes: Cell::new(bytes) }
    }

    pub fn exhausted(&self) -> bool {
        self.reads.get() == 0 || self.bytes.get() == 0
    }
}

impl Memory for Budget<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let (reads, bytes) = (self.reads.get(), self.bytes.get());
        if reads == 0 || (buf.len() as u64) > bytes {
            self.reads.set(0);
            bail!("read budget exhausted (at {addr:#x})");
        }
        self.reads.set(reads - 1);
        self.bytes.set(bytes - buf.len() as u64);
        self.inner.read(addr, buf)
    }
}

/// A recorded memory image: regions of (address, bytes); a read outside them
/// fails as EFAULT would. A read may span adjacent regions.
#[cfg(test)]
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    /// disjoint: overlapping insertions are merged
    regions: std::collections::BTreeMap<u64, Vec<u8>>,
}

#[cfg(test)]
impl Recorded {
    /// Record `bytes` at `addr`; they replace what they overlap.
    pub fn insert(&mut self, addr: u64, bytes: &[u8]) {
        use std::ops::Bound::Excluded;
        let end = addr.checked_add(bytes.len() as u64).expect("a region that wraps");
        let mut overlapped: Vec<u64> =
            self.regions.range(..=addr).next_back().filter(|(s, b)| **s + b.len() as u64 > addr).map(|(s, _)| *s).into_iter().collect();
        overlapped.extend(self.regions.range((Excluded(addr), Excluded(end))).map(|(s, _)| *s));
        let old: Vec<(u64, Vec<u8>)> = overlapped.into_iter().map(|s| (s, self.regions.remove(&s).expect("listed"))).collect();
        let start = old.iter().map(|(s, _)| *s).chain([addr]).min().expect("not empty");
        let stop = old.iter().map(|(s, b)| s + b.len() as u64).chain([end]).max().expect("not empty");
        let mut buf = vec![0u8; (stop - start) as usize];
        for (s, b) in &old {
            buf[(s - start) as usize..][..b.len()].copy_from_slice(b);
        }
        buf[(addr - start) as usize..][..bytes.len()].copy_from_slice(bytes);
        self.regions.insert(start, buf);
    }

    pub fn regions(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.regions.iter().map(|(a, b)| (*a, b.as_slice()))
    }
}

#[cfg(test)]
impl Memory for Recorded {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len();
        let fault = || anyhow::anyhow!("no recorded memory at {addr:#x} ({len} bytes)");
        addr.checked_add(buf.len() as u64).ok_or_else(fault)?;
        let mut done = 0;
        while done < buf.len() {
            let pos = addr + done as u64;
            let (start, bytes) = self.regions.range(..=pos).next_back().ok_or_else(fault)?;
            let off = (pos - start) as usize;
            if off >= bytes.len() {
                return Err(fault());
            }
            let n = (bytes.len() - off).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&bytes[off..off + n]);
            done += n;
        }
        Ok(())
    }
}

/// Records every successful read through `inner` (a live process) into an image.
#[cfg(test)]
pub struct Recorder<'a> {
    pub inner: &'a dyn Memory,
    pub image: std::cell::RefCell<Recorded>,
}

#[cfg(test)]
impl Memory for Recorder<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(addr, buf)?;
        self.image.borrow_mut().insert(addr, buf);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory() {
        let x: u64 = 0x1122_3344_5566_7788;
        let me = Process::new(std::process::id());
        assert_eq!(me.read_u64(&x as *const u64 as u64).unwrap(), x);
        assert!(me.read_u64(8).is_err());
        assert!(me.read_u64(u64::MAX - 3).is_err());
    }

    #[test]
    fn recorded_regions_merge_and_fault_outside() {
        let mut m = Recorded::default();
        m.insert(0x1000, &[1, 2, 3, 4]);
        m.insert(0x1008, &[9, 9]);
        assert!(m.read_u32(0x1000).is_ok());
        assert!(m.read_u64(0x1000).is_err(), "a hole at 0x1004");
        m.insert(0x1004, &[5, 6, 7, 8]); // fills the hole: reads span the three
        assert_eq!(m.regions().count(), 3);
        assert_eq!(m.read_bytes(0x1000, 10, 16).unwrap(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 9]);
        m.insert(0x0ffe, &[0xaa, 0xbb, 0xcc]); // overlaps the start: merged, new bytes win
        assert_eq!(m.regions().count(), 3);
        assert_eq!(m.read_bytes(0x0ffe, 4, 16).unwrap(), [0xaa, 0xbb, 0xcc, 2]);
        m.insert(0x0ff8, &[7; 0x10]); // covers two regions, touches the third
        assert_eq!(m.regions().count(), 2);
        assert_eq!(m.read_bytes(0x1006, 4, 16).unwrap(), [7, 7, 9, 9]);
        assert!(m.read_u8(0x0ff7).is_err());
        assert!(m.read_u8(0x100a).is_err());
        assert!(m.read_u64(u64::MAX - 3).is_err());
        assert!(m.read_bytes(0x1000, u64::MAX, 1 << 20).is_err());
    }

    #[test]
    fn a_budget_ends_reads() {
        let mut m = Recorded::default();
        m.insert(0, &[0; 64]);
        let b = Budget::new(&m, 3, 20);
        assert!(b.read_u64(0).is_ok());
        assert!(b.read_u64(8).is_ok());
        assert!(b.read_u64(16).is_err(), "20 bytes");
        assert!(b.exhausted());
        assert!(b.read_u8(0).is_err());
    }

    #[test]
    fn checked_offsets() {
        assert_eq!(at(0x1000, 8).unwrap(), 0x1008);
        assert!(at(u64::MAX - 7, 8).is_err());
        assert_eq!(before(0x1000, 24).unwrap(), 0x1000 - 24);
        assert!(before(16, 24).is_err());
    }
}
