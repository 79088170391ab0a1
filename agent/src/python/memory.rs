//! Reading the target's memory (process_vm_readv; needs ptrace access).
use anyhow::{bail, Result};

pub fn read(pid: u32, addr: u64, buf: &mut [u8]) -> Result<()> {
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

pub fn read_u64(pid: u32, addr: u64) -> Result<u64> {
    let mut b = [0u8; 8];
    read(pid, addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

pub fn read_i32(pid: u32, addr: u64) -> Result<i32> {
    let mut b = [0u8; 4];
    read(pid, addr, &mut b)?;
    Ok(i32::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory() {
        let x: u64 = 0x1122_3344_5566_7788;
        assert_eq!(read_u64(std::process::id(), &x as *const u64 as u64).unwrap(), x);
        assert!(read_u64(std::process::id(), 8).is_err());
    }
}
