//! Maps keyed by threads give their memory back when the threads have gone.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Shrink `m` when it holds less than a quarter of the entries it has room
/// for (a burst of threads has come and gone): a map keeps its peak capacity
/// otherwise, and the agent its peak memory.
pub fn shrink<K: Eq + Hash, V, S: BuildHasher>(m: &mut HashMap<K, V, S>) {
    if m.capacity() > 4 * m.len() + 64 {
        m.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_map_emptied_after_a_burst_gives_its_room_back() {
        let mut m: std::collections::HashMap<u32, u64> = (0..10_000).map(|i| (i, 0)).collect();
        m.retain(|k, _| *k < 10);
        super::shrink(&mut m);
        assert!(m.capacity() < 100, "{}", m.capacity());
        let mut small: std::collections::HashMap<u32, u64> = (0..50).map(|i| (i, 0)).collect();
        small.retain(|k, _| *k < 40);
        let before = small.capacity();
        super::shrink(&mut small);
        assert_eq!(small.capacity(), before); // no reallocation for small changes
    }
}
