//! Whole-map reads and deletes in a few system calls (`BPF_MAP_LOOKUP_BATCH`,
//! `BPF_MAP_DELETE_BATCH`, Linux 5.6) instead of two per entry
//! (`get_next_key` and `lookup`): under thread churn the blame maps hold
//! thousands of entries and are read several times a second, and per-entry
//! calls made the agent the busiest process of the machine (docs/probes/sched.md).
//!
//! The entries are decoded straight into the ABI types from two buffers
//! reused batch after batch: one allocation per call, not two per entry (the
//! agent's RSS stays flat under churn). libbpf-rs' batch iterator is not used:
//! it drops the entries of a short last batch.
use std::mem::size_of;
use std::os::fd::AsRawFd;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags};

use super::abi::{as_bytes, from_bytes, Plain};

/// Entries asked for per call; a hash bucket with more than this (ENOSPC)
/// doubles it, up to `MAX_BATCH`.
const BATCH: usize = 512;
const MAX_BATCH: usize = 1 << 16;

fn opts(elem_flags: MapFlags) -> libbpf_sys::bpf_map_batch_opts {
    libbpf_sys::bpf_map_batch_opts { sz: size_of::<libbpf_sys::bpf_map_batch_opts>() as _, elem_flags: elem_flags.bits(), flags: 0 }
}

/// Every (key, value) of a hash map of ABI structs, read with `elem_flags`
/// (`MapFlags::LOCK`: each value copied under its spin lock). A map whose
/// kernel does not batch (before 5.6) is read entry by entry.
pub fn dump<K: Plain, V: Plain>(map: &impl MapCore, elem_flags: MapFlags) -> Vec<(K, V)> {
    batched(map, elem_flags, false)
}

/// Every (key, value) of a hash map, each looked up and deleted in one step
/// (`BPF_MAP_LOOKUP_AND_DELETE_BATCH`): what the BPF side adds meanwhile is
/// in the value taken or in a new entry. Entry by entry before Linux 5.6.
pub fn drain<K: Plain, V: Plain>(map: &impl MapCore) -> Vec<(K, V)> {
    batched(map, MapFlags::ANY, true)
}

thread_local! {
    /// The key and value buffers of `batched`, reused call after call: a
    /// whole-map read several times a second must not allocate (and fault in)
    /// fresh pages each time.
    static BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

fn batched<K: Plain, V: Plain>(map: &impl MapCore, elem_flags: MapFlags, delete: bool) -> Vec<(K, V)> {
    let (ks, vs) = (size_of::<K>(), size_of::<V>());
    // always checked: a type that is not the map's would read garbage, or past the buffers
    assert_eq!(
        (map.key_size() as usize, map.value_size() as usize),
        (ks, vs),
        "{}: not its key and value types",
        map.name().to_string_lossy()
    );
    let fd = map.as_fd().as_raw_fd();
    let mut out = Vec::new();
    let mut cap = BATCH;
    BUFFERS.with_borrow_mut(|(keys, values)| {
        keys.resize(cap * ks, 0);
        values.resize(cap * vs, 0);
        // the position between calls, opaque (a bucket index for hash maps)
        let (mut token_in, mut token_out) = ([0u8; 8], [0u8; 8]);
        let mut first = true;
        loop {
            let mut count = cap as u32;
            let o = opts(elem_flags);
            let in_batch = if first { std::ptr::null_mut() } else { token_in.as_mut_ptr().cast() };
            let call = if delete { libbpf_sys::bpf_map_lookup_and_delete_batch } else { libbpf_sys::bpf_map_lookup_batch };
            // SAFETY: the buffers hold `count` keys and values of the map's sizes
            // (checked above); the tokens are at least the 4 bytes a hash map uses.
            let rc = unsafe {
                call(fd, in_batch, token_out.as_mut_ptr().cast(), keys.as_mut_ptr().cast(), values.as_mut_ptr().cast(), &mut count, &o)
            };
            let got = (count as usize).min(cap);
            out.extend((0..got).filter_map(|i| Some((from_bytes::<K>(&keys[i * ks..])?, from_bytes::<V>(&values[i * vs..])?))));
            match -rc {
                0 => {}
                libc::ENOENT => break,
                libc::ENOSPC if got == 0 && cap < MAX_BATCH => {
                    cap *= 2;
                    keys.resize(cap * ks, 0);
                    values.resize(cap * vs, 0);
                    continue;
                }
                libc::EINVAL | libc::ENOTSUP | libc::EOPNOTSUPP if first => {
                    out = by_key(map, elem_flags, delete);
                    break;
                }
                e => {
                    log::debug!("batch read of {} failed: {}", map.name().to_string_lossy(), std::io::Error::from_raw_os_error(e));
                    break;
                }
            }
            token_in = token_out;
            first = false;
        }
        // a bucket that needed a bigger batch does not keep its memory
        if keys.capacity() + values.capacity() > 1 << 20 {
            *keys = Vec::new();
            *values = Vec::new();
        }
    });
    out
}

/// The fallback of `batched`: two system calls per entry.
fn by_key<K: Plain, V: Plain>(map: &impl MapCore, elem_flags: MapFlags, delete: bool) -> Vec<(K, V)> {
    let keys: Vec<Vec<u8>> = map.keys().collect();
    keys.into_iter()
        .filter_map(|k| {
            let v = if delete { map.lookup_and_delete(&k).ok()?? } else { map.lookup(&k, elem_flags).ok()?? };
            Some((from_bytes::<K>(&k)?, from_bytes::<V>(&v)?))
        })
        .collect()
}

/// Entries in a hash map now.
pub fn count<K: Plain, V: Plain>(map: &impl MapCore) -> usize {
    dump::<K, V>(map, MapFlags::ANY).len()
}

/// Delete these keys (ABI structs) from a hash map; returns how many were
/// there. A key already gone is skipped, not an error.
pub fn delete<K: Plain>(map: &impl MapCore, keys: &[K]) -> usize {
    let ks = size_of::<K>();
    assert_eq!(map.key_size() as usize, ks, "{}: not its key type", map.name().to_string_lossy());
    let fd = map.as_fd().as_raw_fd();
    let mut deleted = 0;
    let mut at = 0;
    while at < keys.len() {
        let rest = &keys[at..];
        let mut count = rest.len() as u32;
        let o = opts(MapFlags::ANY);
        // SAFETY: `rest` is `count` contiguous keys of the map's key size.
        let rc = unsafe { libbpf_sys::bpf_map_delete_batch(fd, rest.as_ptr().cast(), &mut count, &o) };
        let done = (count as usize).min(rest.len());
        deleted += done;
        match -rc {
            0 => return deleted,
            // the key after the deleted ones is not there (any more): skip it
            libc::ENOENT => at += done + 1,
            libc::EINVAL | libc::ENOTSUP | libc::EOPNOTSUPP if at == 0 && done == 0 => {
                return keys.iter().filter(|k| map.delete(as_bytes(*k)).is_ok()).count();
            }
            e => {
                log::debug!("batch delete in {} failed: {}", map.name().to_string_lossy(), std::io::Error::from_raw_os_error(e));
                return deleted;
            }
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;
    use libbpf_rs::{MapHandle, MapType};

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Key {
        a: u32,
        b: u32,
    }
    // SAFETY: #[repr(C)] two u32s: any bit pattern is a Key.
    unsafe impl Plain for Key {}

    /// A real hash map with more entries than a batch and than a bucket
    /// holds: every entry comes back once, deletes count what was there.
    #[test]
    fn dump_and_delete_see_every_entry_once() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            waitmeter_formats::testing::skip("creating a BPF map needs root");
            return;
        }
        let opts = libbpf_sys::bpf_map_create_opts { sz: size_of::<libbpf_sys::bpf_map_create_opts>() as _, ..Default::default() };
        let map = MapHandle::create(MapType::Hash, Some("wm_batch_test"), 8, 8, 4096, &opts).expect("create a hash map");
        let n = 3 * BATCH as u32 + 7;
        for i in 0..n {
            let k = Key { a: i, b: !i };
            map.update(as_bytes(&k), &(u64::from(i) * 3).to_ne_bytes(), MapFlags::ANY).expect("update");
        }
        let mut got = dump::<Key, u64>(&map, MapFlags::ANY);
        got.sort_by_key(|(k, _)| k.a);
        assert_eq!(got.len(), n as usize);
        assert!(got.iter().enumerate().all(|(i, (k, v))| k.a == i as u32 && k.b == !k.a && *v == u64::from(k.a) * 3));
        assert_eq!(count::<Key, u64>(&map), n as usize);
        // every other key, plus keys that were never there
        let mut doomed: Vec<Key> = (0..n).step_by(2).map(|i| Key { a: i, b: !i }).collect();
        doomed.insert(5, Key { a: n + 1, b: 0 });
        doomed.push(Key { a: n + 2, b: 0 });
        assert_eq!(delete(&map, &doomed), n.div_ceil(2) as usize);
        let left = dump::<Key, u64>(&map, MapFlags::ANY);
        assert_eq!(left.len(), (n / 2) as usize);
        assert!(left.iter().all(|(k, _)| k.a % 2 == 1));
        assert_eq!(delete::<Key>(&map, &[]), 0);
        // a drain takes what is left, once
        let mut drained = drain::<Key, u64>(&map);
        drained.sort_by_key(|(k, _)| k.a);
        let mut left = left;
        left.sort_by_key(|(k, _)| k.a);
        assert_eq!(drained, left);
        assert_eq!(count::<Key, u64>(&map), 0);
    }
}
