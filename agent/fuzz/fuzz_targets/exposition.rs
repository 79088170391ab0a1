//! The Prometheus text and OpenMetrics parser on the expositions of
//! applications (their /metrics is reachable by anyone on the pod network).
#![no_main]
use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use waitmeter_formats::exposition;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // the metric name and label filter come from the first line, the exposition is the rest
    let (first, body) = text.split_once('\n').unwrap_or(("", text));
    let (name, label) = first.split_once(' ').unwrap_or((first, ""));
    let mut want = BTreeMap::new();
    if let Some((k, v)) = label.split_once('=') {
        want.insert(k.to_string(), v.to_string());
    }
    for name in [name, "fix_lag_seconds", "lat_seconds"] {
        let _ = exposition::read(body, name, &want);
    }
});
