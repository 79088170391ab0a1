//! GIL hold-time histograms: log2 buckets as the probe records them.

/// Bucket k holds durations in [2^(k-1), 2^k) ns (ABI: WM_GIL_HOLD_BUCKETS).
pub const BUCKETS: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldHist {
    pub count: u64,
    pub sum_ns: u64,
    pub buckets: [u64; BUCKETS],
}

impl Default for HoldHist {
    fn default() -> Self {
        HoldHist { count: 0, sum_ns: 0, buckets: [0; BUCKETS] }
    }
}

/// Upper bound, in ns, of bucket k.
pub fn upper_ns(k: usize) -> u64 {
    1u64 << k.min(63)
}

impl HoldHist {
    /// The upper bound (ns) of the bucket holding quantile `q` (0 < q <= 1).
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (k, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some(upper_ns(k));
            }
        }
        Some(upper_ns(BUCKETS - 1))
    }

    /// The holds since `earlier` (an earlier reading of the same histogram).
    pub fn since(&self, earlier: &HoldHist) -> HoldHist {
        let mut d = HoldHist {
            count: self.count.saturating_sub(earlier.count),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            ..Default::default()
        };
        for k in 0..BUCKETS {
            d.buckets[k] = self.buckets[k].saturating_sub(earlier.buckets[k]);
        }
        d
    }

    pub fn add(&mut self, o: &HoldHist) {
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        for k in 0..BUCKETS {
            self.buckets[k] += o.buckets[k];
        }
    }

    /// (upper bound in seconds, count in that bucket) for Prometheus, from
    /// about 1 µs to 17 s, then +Inf. Counts are per bucket, not cumulative.
    pub fn prometheus_buckets(&self) -> Vec<(f64, u64)> {
        let mut out = vec![(upper_ns(10) as f64 / 1e9, self.buckets[..=10].iter().sum())];
        for k in 11..35 {
            out.push((upper_ns(k) as f64 / 1e9, self.buckets[k]));
        }
        out.push((f64::INFINITY, self.buckets[35..].iter().sum()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_from_log2_buckets() {
        let mut h = HoldHist::default();
        assert_eq!(h.quantile_ns(0.5), None);
        // 90 holds of ~3 µs (bucket 12: [2048, 4096) ns), 10 of ~70 ms (bucket 27)
        h.count = 100;
        h.buckets[12] = 90;
        h.buckets[27] = 10;
        assert_eq!(h.quantile_ns(0.5), Some(4096));
        assert_eq!(h.quantile_ns(0.9), Some(4096));
        assert_eq!(h.quantile_ns(0.99), Some(1 << 27));
        let b = h.prometheus_buckets();
        assert_eq!(b.first().unwrap().0, 1024e-9);
        assert_eq!(b.iter().find(|(le, _)| *le == 4096e-9).unwrap().1, 90);
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 100);
        assert_eq!(b.last().unwrap().0, f64::INFINITY);
    }
}
