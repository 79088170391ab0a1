//! Reading one metric out of a Prometheus text or OpenMetrics exposition:
//! a gauge (or counter) value, a histogram's sum/count/buckets, or a
//! summary's sum/count/quantiles. Pure; malformed input is an error, never a panic.
use std::collections::BTreeMap;

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ExpositionError {
    #[error("metric {0} not found in the exposition")]
    Missing(String),
    #[error("malformed exposition line {line}: {text}")]
    Malformed { line: usize, text: String },
}

/// The metric's current state.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// a gauge (or untyped/counter) value
    Value(f64),
    /// cumulative histogram: sum, count, (upper bound, cumulative count)
    Histogram { sum: f64, count: f64, buckets: Vec<(f64, f64)> },
    /// summary: sum, count, (quantile, value)
    Summary { sum: f64, count: f64, quantiles: Vec<(f64, f64)> },
}

/// One sample line: name, labels, value.
fn parse_sample(line: &str) -> Option<(String, BTreeMap<String, String>, f64)> {
    let (name_labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line[open..].rfind('}')? + open;
            (&line[..close + 1], line[close + 1..].trim())
        }
        None => {
            let sp = line.find(char::is_whitespace)?;
            (&line[..sp], line[sp..].trim())
        }
    };
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    let (name, labels) = match name_labels.find('{') {
        None => (name_labels.to_string(), BTreeMap::new()),
        Some(open) => (name_labels[..open].to_string(), parse_labels(&name_labels[open + 1..name_labels.len() - 1])?),
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return None;
    }
    Some((name, labels, value))
}

fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=')).collect();
        chars.next()?; // '='
        if chars.next()? != '"' {
            return None;
        }
        let mut val = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => val.push('\n'),
                    c => val.push(c),
                },
                '"' => break,
                c => val.push(c),
            }
        }
        out.insert(key.trim().to_string(), val);
    }
}

/// Read metric `name` (series matching every label in `want`) from `text`.
pub fn read(text: &str, name: &str, want: &BTreeMap<String, String>) -> Result<Reading, ExpositionError> {
    let mut kind = "untyped".to_string();
    let (mut value, mut sum, mut count) = (None, None, None);
    let mut buckets = vec![];
    let mut quantiles = vec![];
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut f = rest.split_whitespace();
            if f.next() == Some(name) {
                kind = f.next().unwrap_or("untyped").to_string();
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (n, labels, v) = parse_sample(line).ok_or_else(|| ExpositionError::Malformed { line: i + 1, text: raw.chars().take(120).collect() })?;
        if !n.starts_with(name) || !want.iter().all(|(k, val)| labels.get(k) == Some(val)) {
            continue;
        }
        match &n[name.len()..] {
            "" | "_total" if labels.contains_key("quantile") => {
                if let Some(q) = labels.get("quantile").and_then(|q| q.parse().ok()) {
                    quantiles.push((q, v));
                }
            }
            "" | "_total" => value = Some(value.unwrap_or(0.0) + v),
            "_sum" => sum = Some(sum.unwrap_or(0.0) + v),
            "_count" => count = Some(count.unwrap_or(0.0) + v),
            "_bucket" => {
                let le = labels.get("le").and_then(|l| if l == "+Inf" { Some(f64::INFINITY) } else { l.parse().ok() });
                if let Some(le) = le {
                    match buckets.iter_mut().find(|(b, _): &&mut (f64, f64)| *b == le) {
                        Some(b) => b.1 += v,
                        None => buckets.push((le, v)),
                    }
                }
            }
            _ => {}
        }
    }
    let missing = || ExpositionError::Missing(name.to_string());
    match kind.as_str() {
        "histogram" | "gaugehistogram" => {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            Ok(Reading::Histogram { sum: sum.ok_or_else(missing)?, count: count.ok_or_else(missing)?, buckets })
        }
        "summary" => Ok(Reading::Summary { sum: sum.ok_or_else(missing)?, count: count.ok_or_else(missing)?, quantiles }),
        _ => value.map(Reading::Value).ok_or_else(missing),
    }
}

/// `k=v,k2=v2` from --age-labels.
pub fn parse_label_filter(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').ok_or_else(|| format!("`{p}` is not key=value"))?;
            Ok((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    const PROM: &str = "# HELP fix_lag_seconds Lag.\n# TYPE fix_lag_seconds gauge\nfix_lag_seconds{session=\"a\"} 1.5\nfix_lag_seconds{session=\"b\"} 7\n\
        # TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"0.1\"} 3\nlat_seconds_bucket{le=\"1\"} 7\nlat_seconds_bucket{le=\"+Inf\"} 8\nlat_seconds_sum 4.5\nlat_seconds_count 8\n\
        # TYPE rpc summary\nrpc{quantile=\"0.5\"} 0.2\nrpc{quantile=\"0.99\"} 1.1\nrpc_sum 30\nrpc_count 100\n";

    #[test]
    fn gauges_with_and_without_label_filters() {
        let mut want = BTreeMap::new();
        want.insert("session".to_string(), "b".to_string());
        assert_eq!(read(PROM, "fix_lag_seconds", &want), Ok(Reading::Value(7.0)));
        // without a filter, matching series are summed: ambiguous, so give --age-labels
        assert_eq!(read(PROM, "fix_lag_seconds", &none()), Ok(Reading::Value(8.5)));
    }

    #[test]
    fn histograms_and_summaries() {
        assert_eq!(
            read(PROM, "lat_seconds", &none()),
            Ok(Reading::Histogram { sum: 4.5, count: 8.0, buckets: vec![(0.1, 3.0), (1.0, 7.0), (f64::INFINITY, 8.0)] })
        );
        assert_eq!(read(PROM, "rpc", &none()), Ok(Reading::Summary { sum: 30.0, count: 100.0, quantiles: vec![(0.5, 0.2), (0.99, 1.1)] }));
    }

    #[test]
    fn openmetrics_and_escapes() {
        let om = "# TYPE lag gauge\n# UNIT lag seconds\nlag{path=\"a\\\"b\",x=\"1\"} 2.5 1700000000.1\n# EOF\n";
        let mut want = BTreeMap::new();
        want.insert("path".to_string(), "a\"b".to_string());
        assert_eq!(read(om, "lag", &want), Ok(Reading::Value(2.5)));
    }

    #[test]
    fn malformed_and_missing_inputs_are_errors() {
        assert_eq!(read(PROM, "nope", &none()), Err(ExpositionError::Missing("nope".into())));
        assert!(matches!(read("fix_lag_seconds{a=\"1\" 3\n", "fix_lag_seconds", &none()), Err(ExpositionError::Malformed { line: 1, .. })));
        assert!(matches!(read("fix_lag_seconds abc\n", "fix_lag_seconds", &none()), Err(ExpositionError::Malformed { .. })));
        assert!(matches!(read("<html>oops</html>\n", "x", &none()), Err(ExpositionError::Malformed { .. })));
        assert_eq!(read("", "x", &none()), Err(ExpositionError::Missing("x".into())));
        // a histogram without _count is missing parts
        assert!(read("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n", "h", &none()).is_err());
    }

    #[test]
    fn label_filters() {
        assert_eq!(parse_label_filter("a=1, b=\"x\"").unwrap().len(), 2);
        assert!(parse_label_filter("a").is_err());
        assert!(parse_label_filter("").unwrap().is_empty());
    }
}
