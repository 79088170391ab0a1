//! Failures that are the user's to fix (exit code 2): bad usage or a bad
//! target. Anything else is a runtime failure (exit code 1).
use std::fmt;

/// One line naming the cause and the fix.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `return Err(usage!("..."))` in functions returning `anyhow::Result`.
macro_rules! usage {
    ($($arg:tt)*) => { anyhow::Error::new($crate::error::UsageError(format!($($arg)*))) };
}

/// `eprintln!` that never panics: a closed or full stderr (`2>&1 | head`)
/// loses the line, not the program.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
// named by path, `crate::error::say!`, like any item of this module
pub(crate) use say;
pub(crate) use usage;

/// The exit code for an error: 2 for a `UsageError` anywhere in its chain, else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|e| e.is::<UsageError>()) {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn usage_errors_exit_2_even_with_context() {
        let e: anyhow::Result<()> = Err(usage!("no process with PID {}", 7));
        let e = e.context("failed to attach").unwrap_err();
        assert_eq!(exit_code(&e), 2);
        assert_eq!(exit_code(&anyhow::anyhow!("boom")), 1);
    }
}
