//! CFS bandwidth throttling: the signature of a thread whose waits cluster on
//! the CFS period (the quota refills at each period boundary, so every
//! throttled stretch ends on the same phase of the period timer).

/// A throttled stretch of one thread: CLOCK_MONOTONIC ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stretch {
    pub start: u64,
    pub end: u64,
}

/// At least this many stretches before the signature is claimed.
pub const MIN_STRETCHES: usize = 5;
/// Concentration (mean resultant length, 0..1) of the end phases needed.
pub const MIN_CONCENTRATION: f64 = 0.8;

/// How tightly the ends of the stretches line up on one phase of `period_ns`:
/// the mean resultant length of the phases as angles (1 = all on the same phase).
pub fn phase_concentration(stretches: &[Stretch], period_ns: u64) -> Option<f64> {
    if stretches.is_empty() || period_ns == 0 {
        return None;
    }
    let (mut c, mut s) = (0.0f64, 0.0f64);
    for st in stretches {
        let phase = (st.end % period_ns) as f64 / period_ns as f64 * std::f64::consts::TAU;
        c += phase.cos();
        s += phase.sin();
    }
    let n = stretches.len() as f64;
    Some((c * c + s * s).sqrt() / n)
}

/// The throttling signature: enough stretches, ending on the period's beat.
pub fn signature(stretches: &[Stretch], period_ns: u64) -> bool {
    stretches.len() >= MIN_STRETCHES && phase_concentration(stretches, period_ns).is_some_and(|r| r >= MIN_CONCENTRATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 100_000_000;

    #[test]
    fn stretches_ending_on_the_period_boundary_are_the_signature() {
        // quota of 20 ms per 100 ms: 80 ms throttled, unthrottled at each boundary (+ jitter)
        let s: Vec<Stretch> = (1..=10).map(|k| Stretch { start: k * P - 80_000_000, end: k * P + 37_000 + (k % 3) * 200_000 }).collect();
        assert!(phase_concentration(&s, P).unwrap() > 0.99);
        assert!(signature(&s, P));
    }

    #[test]
    fn random_ends_are_not() {
        let s: Vec<Stretch> = (0..20u64).map(|k| Stretch { start: 0, end: k * 37_000_000 + (k * k * 7_919_000) % P }).collect();
        assert!(phase_concentration(&s, P).unwrap() < 0.5, "{:?}", phase_concentration(&s, P));
        assert!(!signature(&s, P));
        assert!(!signature(&s[..3], P)); // too few
        assert_eq!(phase_concentration(&[], P), None);
    }
}
