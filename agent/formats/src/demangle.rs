//! Symbol names as a reader knows them: C++ (the Itanium ABI's `_Z…`) and Rust
//! (legacy `_ZN…17h…E` and v0 `_R…`) names demangled as perf and py-spy print
//! them in a stack, without parameter lists, return types or Rust's hashes
//! (`node::TaskQueue<v8::Task>::Push`, `ObjectMonitor::EnterI`,
//! `std::rt::lang_start`); anything else is left as it is.
//!
//! The names come from the symbol tables of a target's files, so hostile
//! input: a name longer than [`MAX_INPUT`] is not demangled, the parser's and
//! printer's recursion is bounded (the agent's threads have small stacks), and
//! the output stops at [`MAX_OUTPUT`] bytes (a few bytes of substitutions can
//! expand to megabytes): past it the mangled name is kept.
use std::fmt;

/// The longest name demangled (bytes).
pub const MAX_INPUT: usize = 4096;
/// The longest demangled name (bytes).
pub const MAX_OUTPUT: usize = 1024;
/// Recursion bound of the C++ parser and printer (cpp_demangle's default is 96, for a main
/// thread's stack).
const RECURSION: u32 = 64;

/// `name` demangled, or `None` when it is not a C++ or Rust mangled name (or is past the bounds).
pub fn demangle(name: &str) -> Option<String> {
    if name.len() > MAX_INPUT || !(name.starts_with("_Z") || name.starts_with("_R")) {
        return None;
    }
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        let mut out = Bounded(String::new());
        return fmt::write(&mut out, format_args!("{d:#}")).ok().map(|_| out.0);
    }
    let parse = cpp_demangle::ParseOptions::default().recursion_limit(RECURSION);
    let symbol = cpp_demangle::Symbol::new_with_options(name.as_bytes(), &parse).ok()?;
    let print = cpp_demangle::DemangleOptions::new().no_params().no_return_type().recursion_limit(RECURSION);
    let mut out = Bounded(String::new());
    symbol.structured_demangle(&mut out, &print).ok()?;
    (!out.0.is_empty()).then_some(out.0)
}

/// A string that refuses to grow past `MAX_OUTPUT`.
struct Bounded(String);

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.0.len() + s.len() > MAX_OUTPUT {
            return Err(fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn cpp_names_read_as_perf_prints_them_without_parameters() {
        let d = |s: &str| demangle(s).unwrap();
        assert_eq!(d("_ZN4node9TaskQueueIN2v84TaskEE4PushESt10unique_ptrIS2_St14default_deleteIS2_EE"), "node::TaskQueue<v8::Task>::Push");
        assert_eq!(d("_ZN13ObjectMonitor6EnterIEP10JavaThread"), "ObjectMonitor::EnterI");
        assert_eq!(d("_ZN5space3fooEv"), "space::foo");
    }

    #[test]
    fn rust_names_lose_their_hash() {
        assert_eq!(demangle("_ZN3std2rt10lang_start17h0123456789abcdefE").unwrap(), "std::rt::lang_start");
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo").unwrap(), "mycrate::foo");
    }

    #[test]
    fn c_names_and_garbage_stay_as_they_are() {
        for s in ["main", "pthread_mutex_lock", "_Z", "_ZZZZ", "_R", "", "_Znotmangled"] {
            assert_eq!(demangle(s), None, "{s}");
        }
    }

    #[test]
    fn hostile_names_are_bounded() {
        // past the input bound: not parsed at all
        let long = format!("_ZN{}E", "3foo".repeat(super::MAX_INPUT));
        assert_eq!(demangle(&long), None);
        // deep nesting: the recursion bound ends it, no stack overflow (run on a small stack)
        let deep = format!("_Z1fI{}E", "PA1_".repeat(1000) + "i");
        let h = std::thread::Builder::new().stack_size(256 << 10).spawn(move || demangle(&deep)).unwrap();
        assert_eq!(h.join().unwrap(), None);
        // a name whose demangled form is past the output bound: the mangled name is kept
        let wide = format!("_ZN1100{}3fooEv", "a".repeat(1100));
        assert!(wide.len() < super::MAX_INPUT);
        assert_eq!(demangle(&wide), None);
        let fits = format!("_ZN900{}3fooEv", "a".repeat(900));
        assert_eq!(demangle(&fits).unwrap().len(), 905);
    }
}
