//! The application's end-to-end age (now - send time of what it handles)
//! over a window: is it rising, by how much. Pure.

/// One age observation: when, and the age in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgeSample {
    pub at_ns: u64,
    pub age_s: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgeSummary {
    pub samples: usize,
    pub first_s: f64,
    pub last_s: f64,
    pub max_s: f64,
    pub mean_s: f64,
    /// the middle sample (the upper one of an even count)
    pub median_s: f64,
    /// last - first
    pub growth_s: f64,
    /// least-squares slope, seconds of age per second
    pub slope: f64,
    pub rising: bool,
}

/// The application's age over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct AgeReport {
    /// "endpoint" (its Prometheus metric) or "client" (waitmeter_client samples)
    pub source: &'static str,
    pub summary: AgeSummary,
    /// from a histogram's bucket deltas over the window
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    /// endpoint: malformed lines skipped, and failed polls, since the start
    pub skipped_lines: Option<u64>,
    pub failed_polls: Option<u64>,
}

/// Age is "rising" when it grew by at least this much over the window...
pub const RISING_MIN_GROWTH_S: f64 = 0.5;
/// ... at a least-squares rate of at least this many seconds per second.
pub const RISING_MIN_SLOPE: f64 = 0.1;

pub fn summarize(samples: &[AgeSample]) -> Option<AgeSummary> {
    let good: Vec<&AgeSample> = samples.iter().filter(|s| s.age_s.is_finite()).collect();
    let (first, last) = (good.first()?, good.last()?);
    let n = good.len() as f64;
    let mean_s = good.iter().map(|s| s.age_s).sum::<f64>() / n;
    let t0 = first.at_ns;
    let xs: Vec<f64> = good.iter().map(|s| (s.at_ns - t0) as f64 / 1e9).collect();
    let mx = xs.iter().sum::<f64>() / n;
    let var: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let slope = if var > 0.0 { xs.iter().zip(&good).map(|(x, s)| (x - mx) * (s.age_s - mean_s)).sum::<f64>() / var } else { 0.0 };
    let growth_s = last.age_s - first.age_s;
    let mut sorted: Vec<f64> = good.iter().map(|s| s.age_s).collect();
    sorted.sort_by(f64::total_cmp);
    Some(AgeSummary {
        median_s: sorted[sorted.len() / 2],
        samples: good.len(),
        first_s: first.age_s,
        last_s: last.age_s,
        max_s: good.iter().map(|s| s.age_s).fold(f64::MIN, f64::max),
        mean_s,
        growth_s,
        slope,
        rising: growth_s >= RISING_MIN_GROWTH_S && slope >= RISING_MIN_SLOPE,
    })
}

/// The errors of the age sources, for the self-metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgeErrors {
    /// failed polls of the endpoint
    pub endpoint: u64,
    /// malformed datagrams on the client socket
    pub client: u64,
    /// the endpoint's failed polls and skipped lines by reason, every reason
    /// (empty without --age-url)
    pub scrape: Vec<(&'static str, u64)>,
    /// the client records not taken, by reason, every reason (empty without --age-socket)
    pub rejected: Vec<(&'static str, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(f: impl Fn(f64) -> f64) -> Vec<AgeSample> {
        (0..10).map(|i| AgeSample { at_ns: i * 1_000_000_000, age_s: f(i as f64) }).collect()
    }

    #[test]
    fn rising_flat_and_noisy() {
        let up = summarize(&series(|t| 0.1 + 0.9 * t)).unwrap();
        assert!(up.rising && (up.slope - 0.9).abs() < 1e-9 && (up.growth_s - 8.1).abs() < 1e-9, "{up:?}");
        let flat = summarize(&series(|t| 0.05 + 0.001 * (t % 2.0))).unwrap();
        assert!(!flat.rising, "{flat:?}");
        // one late spike is not a trend
        let spike = summarize(&series(|t| if t == 5.0 { 3.0 } else { 0.02 })).unwrap();
        assert!(!spike.rising, "{spike:?}");
        assert_eq!(spike.median_s, 0.02);
        assert_eq!(summarize(&[]), None);
        let nan = summarize(&[AgeSample { at_ns: 0, age_s: f64::NAN }]);
        assert_eq!(nan, None);
    }
}
