//! The probes' ABI with their BPF programs, in one leaf: the sched object's generated types (the
//! skeleton of `bpf/sched.bpf.c`, which the stack and sweep programs share), the marker of the
//! types that may be read from and written to a map as bytes, and the two conversions. Nothing
//! here names another probe module; they all name this.
use std::mem::size_of;

pub(super) mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
    include!(concat!(env!("OUT_DIR"), "/sched.skel.rs"));

    use std::sync::atomic::{AtomicBool, Ordering};

    /// The legacy object's bytes: the same source built for kernels without bpf_loop() (agent/build.rs,
    /// bpf/core_fixes.bpf.h), alike to the skeleton but for them.
    static LEGACY_DATA: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/legacy/sched.o"));

    /// Which object the next open of the skeleton reads: set under `OPENING` (sched.rs).
    pub(in crate::probes) static LEGACY: AtomicBool = AtomicBool::new(false);

    /// Serialises opens of the skeleton, each with its choice of object.
    pub(in crate::probes) static OPENING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The bytes the skeleton opens (build.rs points its `DATA` here).
    fn object_bytes(main: &'static [u8]) -> &'static [u8] {
        if LEGACY.load(Ordering::SeqCst) {
            LEGACY_DATA
        } else {
            main
        }
    }
}
use skel::types::{
    wm_blame_key, wm_exit, wm_futex_key, wm_gil, wm_gil_key, wm_native_stack, wm_preempt, wm_preempt_key, wm_py_stack, wm_py_walk, wm_span,
    wm_stretch, wm_stretch_key, wm_task_ids, wm_thread, wm_thread_data, wm_thread_rows, wm_throttle, wm_unwind_proc, wm_unwind_row,
    wm_wait_stack_key, wm_wait_stack_val,
};

/// A type whose bytes are its whole value, in both directions: `#[repr(C)]` plain data of
/// integers and arrays of them (the generated map types are), valid for any bit pattern, with no
/// pointer, reference or niche. A map's value and key are read as one (`from_bytes`) and written
/// as bytes (`as_bytes`); only a type marked here can be.
///
/// # Safety
/// The implementor is `Copy`, `#[repr(C)]` (or a primitive integer), and every bit pattern of
/// its size is a valid value.
pub unsafe trait Plain: Copy + 'static {}

macro_rules! plain {
    ($($t:ty),* $(,)?) => { $(
        // SAFETY: integers, or the generated #[repr(C)] structs of integers and integer arrays.
        unsafe impl Plain for $t {}
    )* };
}
plain!(u8, u16, u32, u64, i32, i64);
plain!(
    wm_blame_key,
    wm_exit,
    wm_futex_key,
    wm_gil,
    wm_gil_key,
    wm_native_stack,
    wm_preempt,
    wm_preempt_key,
    wm_py_stack,
    wm_py_walk,
    wm_span,
    wm_stretch,
    wm_stretch_key,
    wm_task_ids,
    wm_thread,
    wm_thread_data,
    wm_thread_rows,
    wm_throttle,
    wm_unwind_proc,
    wm_unwind_row,
    wm_wait_stack_key,
    wm_wait_stack_val,
);

/// The bytes of `v`, as the kernel reads a key or value.
pub fn as_bytes<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: T is Plain: its bytes are its whole value, and a shared borrow of it is one of
    // size_of::<T>() readable bytes.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// A `T` from the start of `b`, which may be longer: the kernel rounds a per-CPU value up to 8
/// bytes and a ring buffer record up to its own alignment. None when `b` is shorter than `T`.
pub fn from_bytes<T: Plain>(b: &[u8]) -> Option<T> {
    // SAFETY: the length is checked, and any bit pattern is a valid T (Plain).
    (b.len() >= size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_go_both_ways_and_short_input_is_none() {
        let v: u64 = 0x0102_0304_0506_0708;
        assert_eq!(from_bytes::<u64>(as_bytes(&v)), Some(v));
        // a longer buffer (a per-CPU value rounded up) reads its start
        let mut longer = as_bytes(&v).to_vec();
        longer.extend_from_slice(&[0xff; 8]);
        assert_eq!(from_bytes::<u64>(&longer), Some(v));
        assert_eq!(from_bytes::<u64>(&longer[..7]), None);
    }
}
