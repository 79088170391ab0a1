//! A fast, unkeyed hasher for maps keyed by the kernel's integers (TIDs,
//! thread incarnations): under thread churn they are hashed several times
//! per exit, and SipHash (std's default, keyed against chosen-key attacks)
//! was a visible part of the agent's time. The keys here are assigned by the
//! kernel, not chosen by a watched process.
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The multiply-rotate mix of rustc's FxHasher.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(n as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A HashMap keyed by kernel-assigned integers.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn consecutive_ids_spread_over_the_top_bits() {
        // hashbrown picks a group by the low bits and tags by the top 7: consecutive
        // TIDs must not share either
        let b = BuildHasherDefault::<IdHasher>::default();
        let tops: std::collections::HashSet<u64> = (1000u32..1128).map(|t| b.hash_one((7u64, t)) >> 57).collect();
        assert!(tops.len() > 64, "{}", tops.len());
        let lows: std::collections::HashSet<u64> = (1000u32..1128).map(|t| b.hash_one((7u64, t)) & 127).collect();
        assert!(lows.len() > 64, "{}", lows.len());
        let m: IdMap<(u32, u32), u32> = (0..1000).map(|i| ((i, i * 7), i)).collect();
        assert!((0..1000).all(|i| m[&(i, i * 7)] == i));
    }
}
