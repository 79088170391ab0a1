//! `waitmeter attach -- COMMAND ARGS...`: start a command stopped at its exec,
//! before its first instruction, so that it is watched from its start; let it
//! go once the probes watch it; pass its exit code through.
//!
//! The child asks to be traced (`PTRACE_TRACEME`) before `execve`: the kernel
//! stops it with SIGTRAP once the new program is loaded and before it runs
//! (the dynamic loader included). The agent attaches its probes to that PID
//! (the process keeps its PID across the exec), then detaches: from then on
//! the command runs untraced, like any other target.
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};

use anyhow::Result;

use crate::error::usage;

/// A command started and stopped at its exec.
pub struct Launched {
    child: Child,
    released: bool,
}

impl Launched {
    /// Start `argv` (the command and its arguments), stopped before its first instruction.
    pub fn start(argv: &[OsString]) -> Result<Launched> {
        let (program, args) = argv.split_first().ok_or_else(|| usage!("no command after --: give the command to run"))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        // SAFETY: between fork and exec only async-signal-safe calls: ptrace(2).
        unsafe {
            cmd.pre_exec(|| {
                if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            usage!("cannot run {}: {e}: check the command (a program on PATH, or a path to one)", program.to_string_lossy())
        })?;
        let launched = Launched { child, released: false };
        // the stop at the exec (spawn returned: the exec succeeded)
        let pid = launched.pid() as libc::pid_t;
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r != pid || !libc::WIFSTOPPED(status) {
            // dropped: killed if it still stands, and reaped
            anyhow::bail!(
                "{} did not stop at its start (wait status {status:#x}): cannot measure it from its start",
                program.to_string_lossy()
            );
        }
        Ok(launched)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Let it run (it is watched now).
    pub fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        // SAFETY: detaching our own stopped tracee, with no signal.
        if unsafe { libc::ptrace(libc::PTRACE_DETACH, self.pid() as libc::pid_t, 0, 0) } == -1 {
            anyhow::bail!("cannot let the command go (PTRACE_DETACH): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait for it to exit: the exit code to pass through (128 + the signal
    /// that killed it, as shells say).
    pub fn wait(mut self) -> Result<i32> {
        self.release()?;
        let status = self.child.wait()?;
        Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    }
}

impl Drop for Launched {
    /// An agent that fails before releasing it must not leave it stopped:
    /// end it (it never ran an instruction of its own).
    fn drop(&mut self) {
        if !self.released {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
