//! GIL hold-time histograms: log2 buckets as the probe records them.

/// Bucket k holds durations in [2^(k-1), 2^k) ns (ABI: WM_GIL_HOLD_BUCKETS).
pub const BUCKETS: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldHist {
    pub count: u64,
    pub sum_ns: u64,
    /// the longest hold so far (over a window: the longest up to its end, an upper bound)
    pub max_ns: u64,
    pub buckets: [u64; BUCKETS],
}

impl Default for HoldHist {
    fn default() -> Self {
        HoldHist { count: 0, sum_ns: 0, max_ns: 0, buckets: [0; BUCKETS] }
    }
}

/// Lower bound, in ns, of bucket k.
fn lower_ns(k: usize) -> u64 {
    if k == 0 {
        0
    } else {
        upper_ns(k - 1)
    }
}

/// Upper bound, in ns, of bucket k.
pub fn upper_ns(k: usize) -> u64 {
    1u64 << k.min(63)
}

impl HoldHist {
    /// Quantile `q` (0 < q <= 1) of the holds, ns. Within its log2 bucket it is placed by what
    /// else is known: never above the longest hold, and spread around the bucket's own mean
    /// (the sum less the other buckets' holds) when that mean is known well enough; else
    /// linearly across the bucket. Holds that are all 50 ms come out as 50 ms, not as the
    /// bucket's 67 ms bound.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut seen = 0.0;
        for (k, n) in self.buckets.iter().enumerate() {
            let n = *n as f64;
            if n == 0.0 || seen + n < rank {
                seen += n;
                continue;
            }
            let f = ((rank - seen) / n).clamp(0.0, 1.0);
            let lo = lower_ns(k) as f64;
            let mut hi = upper_ns(k) as f64;
            if self.max_ns > 0 && (self.max_ns as f64) >= lo {
                hi = hi.min(self.max_ns as f64);
            }
            let lo_at = match self.bucket_mean(k) {
                // uniform on [a, hi] with the bucket's mean: a = 2 mean - hi
                Some(mean) => (2.0 * mean.clamp(lo, hi) - hi).clamp(lo, hi),
                None => lo,
            };
            return Some((lo_at + f * (hi - lo_at)).round() as u64);
        }
        Some(self.max_ns.max(upper_ns(BUCKETS - 1)))
    }

    /// The mean of bucket k's holds, from the sum less the other buckets' (at their middles),
    /// when their uncertainty is under a tenth of what bucket k's holds add up to.
    fn bucket_mean(&self, k: usize) -> Option<f64> {
        let n = self.buckets[k] as f64;
        let (mut others, mut doubt) = (0.0, 0.0);
        for (j, m) in self.buckets.iter().enumerate().filter(|(j, m)| *j != k && **m > 0) {
            let (lo, hi) = (lower_ns(j) as f64, upper_ns(j) as f64);
            others += *m as f64 * (lo + hi) / 2.0;
            doubt += *m as f64 * (hi - lo) / 2.0;
        }
        let mean = (self.sum_ns as f64 - others) / n;
        (n > 0.0 && doubt <= 0.1 * n * lower_ns(k).max(1) as f64).then_some(mean)
    }

    /// The holds since `earlier` (an earlier reading of the same histogram).
    pub fn since(&self, earlier: &HoldHist) -> HoldHist {
        let mut d = HoldHist {
            count: self.count.saturating_sub(earlier.count),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            // the window's longest hold is at most the longest so far
            max_ns: self.max_ns,
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
        self.max_ns = self.max_ns.max(o.max_ns);
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

    /// Known holds: `holds` of each length (ns), as the probe records them.
    fn hist(holds: &[(u64, u64)]) -> HoldHist {
        let mut h = HoldHist::default();
        for &(ns, n) in holds {
            let k = (64 - ns.leading_zeros()) as usize;
            h.count += n;
            h.sum_ns += ns * n;
            h.max_ns = h.max_ns.max(ns);
            h.buckets[k] += n;
        }
        h
    }

    #[test]
    fn quantiles_of_known_holds_are_near_them_not_at_the_bucket_bound() {
        let within = |got: Option<u64>, want: f64, tol: f64| {
            let g = got.unwrap() as f64;
            assert!((g - want).abs() <= tol * want, "{g} against {want}");
        };
        // 20 holds of 50 ms, in [33.6, 67.1) ms: the bound said 67 ms
        let h = hist(&[(50_000_000, 20)]);
        within(h.quantile_ns(0.5), 50e6, 0.01);
        within(h.quantile_ns(0.99), 50e6, 0.01);
        // 64 ms holds (the case: 134 ms for the p99 of holds in [67.1, 134.2) ms was
        // holds of 70 ms), and a thousand 3 µs holds beside them
        let h = hist(&[(3_000, 1000), (70_000_000, 20)]);
        within(h.quantile_ns(0.5), 3_000.0, 0.1);
        within(h.quantile_ns(0.999), 70e6, 0.02);
        // spread holds: 40, 45, ..., 65 ms; the p99 is at most the longest, p50 near the middle
        let h = hist(&(0..6).map(|i| (40_000_000 + i * 5_000_000, 10)).collect::<Vec<_>>());
        within(h.quantile_ns(0.99), 65e6, 0.03);
        within(h.quantile_ns(0.5), 52.5e6, 0.1);
        // a window's max is an upper bound: never above it
        assert!(h.quantile_ns(1.0).unwrap() <= 65_000_000);
    }

    #[test]
    fn quantiles_from_log2_buckets() {
        let mut h = HoldHist::default();
        assert_eq!(h.quantile_ns(0.5), None);
        // 90 holds of ~3 µs (bucket 12: [2048, 4096) ns), 10 of ~70 ms (bucket 27)
        h.count = 100;
        h.buckets[12] = 90;
        h.buckets[27] = 10;
        // no sum, no max: linear within the bucket
        assert_eq!(h.quantile_ns(0.9), Some(4096));
        assert!(h.quantile_ns(0.5).unwrap() > 2048 && h.quantile_ns(0.5).unwrap() < 4096);
        assert!(h.quantile_ns(0.99).unwrap() > 1 << 26 && h.quantile_ns(0.99).unwrap() <= 1 << 27);
        let b = h.prometheus_buckets();
        assert_eq!(b.first().unwrap().0, 1024e-9);
        assert_eq!(b.iter().find(|(le, _)| *le == 4096e-9).unwrap().1, 90);
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 100);
        assert_eq!(b.last().unwrap().0, f64::INFINITY);
    }
}
