//! Builds one BPF object and its Rust skeleton per `bpf/<probe>.bpf.c`.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// Probe families; each has `bpf/<stem>.bpf.c`, `bpf/<stem>.h` and `src/probes/<stem>.rs`.
const PROBES: &[&str] = &["sched", "gil", "pypark", "syscalls"];

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");
    let bpf = root.join("bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86",
        other => panic!("waitmeter has no pinned vmlinux.h for {other} yet"),
    };
    // clang-19 handles CO-RE bit-field reads that crash clang 14; WAITMETER_CLANG overrides.
    let clang = env::var("WAITMETER_CLANG").unwrap_or_else(|_| "clang-19".to_string());
    for stem in PROBES {
        let src = bpf.join(format!("{stem}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .clang(&clang)
            .clang_args([
                "-O2".into(),
                // v3: atomic OR for the watched bitmap (kernel 5.12+; we need 5.15)
                "-mcpu=v3".into(),
                "-g".into(),
                "-Wall".into(),
                "-Werror".into(),
                format!("-I{}", bpf.display()),
                format!("-I{}", bpf.join("vmlinux").join(arch).display()),
                "-idirafter".into(),
                "/usr/include/x86_64-linux-gnu".into(),
            ])
            .build_and_generate(out.join(format!("{stem}.skel.rs")))
            .unwrap_or_else(|e| panic!("failed to build bpf/{stem}.bpf.c: {e:#}"));
        println!("cargo:rerun-if-changed={}", src.display());
        println!("cargo:rerun-if-changed={}", bpf.join(format!("{stem}.h")).display());
        println!("cargo:rerun-if-changed={}", bpf.join("vmlinux").join(arch).join("vmlinux.h").display());
    }
    // every header the objects include, and the folder itself (a header added or removed)
    println!("cargo:rerun-if-changed={}", bpf.display());
    for entry in std::fs::read_dir(&bpf).expect("bpf/ is readable").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "h") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-env-changed=WAITMETER_CLANG");
}
