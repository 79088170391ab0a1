//! For tests that need what a machine may not have (root, BTF, an interpreter, Go): `skip`
//! says why on stderr and the test returns early. Where everything must run (`make unit`, and
//! so CI, sets `WAITMETER_NO_SKIP=1`) it fails instead: a run that must cover everything cannot
//! pass by skipping. Not for the product: tests only (hidden from the docs).

/// Skip this test (or this part of it) for `reason`, or fail under `WAITMETER_NO_SKIP=1`.
pub fn skip(reason: &str) {
    if std::env::var_os("WAITMETER_NO_SKIP").is_some_and(|v| v == "1") {
        panic!("WAITMETER_NO_SKIP=1 and this test would skip: {reason}");
    }
    eprintln!("skipped: {reason}");
}

/// The Go toolchain's `go` executable (`make setup` needs one, to build helm): on `PATH`, else
/// in /usr/local/go. A real Go executable for the tests of the readers of Go's tables.
pub fn go_toolchain() -> std::path::PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([std::path::PathBuf::from("/usr/local/go/bin")])
        .map(|d| d.join("go"))
        .find(|p| p.exists())
        .expect("a Go toolchain on PATH or in /usr/local/go (make setup)")
}
