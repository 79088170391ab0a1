//! Pyroscope's push request (`push.v1.PushRequest`), encoded by hand like
//! the profiles it carries ([`crate::pprof`]).
//!
//! # The call
//!
//! `POST {base}/push.v1.PusherService/Push` with `Content-Type:
//! application/proto` and the encoded request as the body: a Connect unary
//! call with the binary codec (connectrpc.com/docs/protocol), which works
//! over HTTP/1.1. The body may be gzipped with `Content-Encoding: gzip`
//! (connect-go's default compressors); `Connect-Protocol-Version: 1` should
//! be sent and is not required by Pyroscope. Success is `200` with an empty
//! `application/proto` body (`PushResponse` has no fields). An error is a
//! non-200 status with an `application/json` body `{"code": ..., "message":
//! ...}`: `400 invalid_argument` for invalid labels or profiles (do not
//! retry), `429 resource_exhausted` for rate limits, `5xx` otherwise
//! (connect-go maps errors it does not know, which includes a `raw_profile`
//! that does not parse, to `500 unknown`). A wrong `Content-Type` gets `415`
//! with no body; an unknown `Content-Encoding`, `501 unimplemented`. In
//! multi-tenant mode the tenant goes in `X-Scope-OrgID`
//! (docs/sources/reference-server-api/index.md).
//!
//! # Messages (api/push/v1/push.proto, api/types/v1/types.proto)
//!
//! ```text
//! PushRequest      { repeated RawProfileSeries series = 1; }
//! RawProfileSeries { repeated types.v1.LabelPair labels = 1; repeated RawSample samples = 2; }
//! LabelPair        { string name = 1; string value = 2; }
//! RawSample        { bytes raw_profile = 1; string ID = 2; }
//! ```
//!
//! A `raw_profile` is a pprof profile, gzipped or not (Pyroscope tries gzip
//! and falls back to raw: `pkg/pprof/pprof.go`, `RawFromBytesWithLimit`).
//!
//! # Names (grafana/pyroscope at 3fe6a457, August 2026)
//!
//! - `__name__` is the profile's name: the first part of each profile type
//!   id `<__name__>:<sample type>:<sample unit>:<period type>:<period unit>`
//!   that Pyroscope derives, one per sample type of the pprof profile
//!   (`pkg/phlaredb/labels/labels.go`, `CreateProfileLabels`; the type and
//!   unit also become the series labels `__type__`, `__unit__`,
//!   `__period_type__`, `__period_unit__`). So `__name__ = "waitmeter"` with
//!   sample type `wait`/`nanoseconds` and period type `wait`/`nanoseconds` is
//!   the profile type `waitmeter:wait:nanoseconds:wait:nanoseconds` in
//!   Grafana. `ValidateLabels` (`pkg/validation/validate.go`) requires a
//!   valid metric name (older releases: `[a-zA-Z_:][a-zA-Z0-9_:]*`; now any
//!   UTF-8), and a `:` would split the profile type id wrongly
//!   (`ParseProfileTypeSelector` splits on `:`). `memory` is special: its
//!   `alloc_*` types are turned into deltas (`pkg/phlaredb/delta.go`).
//! - `service_name` names the application; `ValidateLabels` rejects a series
//!   without it ("service name is not provided"; recent distributors first
//!   set `unknown_service` when it is missing).
//! - Sample type names must not contain `-` (`ValidateProfile`: "sample
//!   type contains -"), nor `:` (the type id).
//! - Label names: `[a-zA-Z_][a-zA-Z0-9_]*` (recent releases turn `.` into
//!   `_`), at most 30 per series, names ≤ 1024 bytes, values ≤ 2048, no name
//!   twice (defaults of `pkg/validation/limits.go`).
//! - The pprof samples' string labels become series labels
//!   (`pkg/model/pprofsplit`, `VisitSampleSeries`: the profile is split into
//!   one series per distinct sample label set, series labels winning over
//!   sample labels of the same name), so they obey the rules above and
//!   count towards the 30, and each distinct combination (say
//!   `thread`×`state`×`role`) is a series of its own: keep their values few.
//!   A profile is also cut to 16000 samples and 1000 frames per stack by
//!   default (`max-profile-stacktrace-samples`, `-depth`).
//!
//! [`check_labels`] and [`check_sample_type`] apply these rules, the
//! strictest of the releases named, so that a bad name is an error here,
//! not a `400` on every push.
use thiserror::Error;

use crate::pprof::put_bytes;

/// The path of the push call, after the server's base URL.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";
/// The request's `Content-Type` (Connect unary, binary protobuf).
pub const CONTENT_TYPE: &str = "application/proto";
/// Most label names per series (Pyroscope's default `validation.max-label-names-per-series`).
pub const MAX_LABEL_NAMES: usize = 30;
/// Longest label name and value (Pyroscope's defaults).
pub const MAX_LABEL_NAME_LEN: usize = 1024;
pub const MAX_LABEL_VALUE_LEN: usize = 2048;

/// One series: its labels and its profiles (pprof, gzipped or not).
#[derive(Clone, Copy, Debug)]
pub struct Series<'a> {
    pub labels: &'a [(&'a str, &'a str)],
    pub profiles: &'a [&'a [u8]],
}

/// The push request of these series, as protobuf.
pub fn push_request(series: &[Series]) -> Vec<u8> {
    let mut out = Vec::with_capacity(series.iter().flat_map(|s| s.profiles).map(|p| p.len() + 8).sum::<usize>() + 64);
    let (mut one, mut field) = (Vec::new(), Vec::new());
    for s in series {
        one.clear();
        for (name, value) in s.labels {
            field.clear();
            put_str(&mut field, 1, name.as_bytes());
            put_str(&mut field, 2, value.as_bytes());
            put_bytes(&mut one, 1, &field);
        }
        for p in s.profiles {
            field.clear();
            put_str(&mut field, 1, p);
            put_bytes(&mut one, 2, &field);
        }
        put_bytes(&mut out, 1, &one);
    }
    out
}

/// A string or bytes field; empty, the default, is left out as proto3 does.
fn put_str(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    if !b.is_empty() {
        put_bytes(out, field, b);
    }
}

/// Why Pyroscope would reject a series' labels or a sample type.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LabelError {
    #[error("no `{0}` label")]
    Missing(&'static str),
    #[error("invalid label name {0:?} (Pyroscope takes [a-zA-Z_][a-zA-Z0-9_]*)")]
    Name(String),
    #[error("invalid profile name (`__name__`) {0:?} (Pyroscope takes [a-zA-Z_][a-zA-Z0-9_]*)")]
    ProfileName(String),
    #[error("label {0:?} given twice")]
    Duplicate(String),
    #[error("more than {MAX_LABEL_NAMES} labels")]
    TooMany,
    #[error("label {0:?} is longer than Pyroscope takes")]
    TooLong(String),
    #[error("sample type or unit {0:?} is empty or has a `-` or `:`")]
    SampleType(String),
}

fn is_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Whether Pyroscope takes these as a series' labels: `__name__` and
/// `service_name` present and not empty, every name valid and given once,
/// sizes within its default limits (see the module doc). The labels the
/// profile's samples carry count towards [`MAX_LABEL_NAMES`] too: pass them
/// along to check the total.
pub fn check_labels(labels: &[(&str, &str)]) -> Result<(), LabelError> {
    if labels.len() > MAX_LABEL_NAMES {
        return Err(LabelError::TooMany);
    }
    for (i, (name, value)) in labels.iter().enumerate() {
        if name.len() > MAX_LABEL_NAME_LEN || value.len() > MAX_LABEL_VALUE_LEN {
            return Err(LabelError::TooLong(name.chars().take(64).collect()));
        }
        if *name == "__name__" {
            if !is_name(value) {
                return Err(LabelError::ProfileName(value.to_string()));
            }
        } else if !is_name(name) {
            return Err(LabelError::Name(name.to_string()));
        }
        if labels[..i].iter().any(|(n, _)| n == name) {
            return Err(LabelError::Duplicate(name.to_string()));
        }
    }
    for required in ["__name__", "service_name"] {
        if !labels.iter().any(|(n, v)| *n == required && !v.is_empty()) {
            return Err(LabelError::Missing(required));
        }
    }
    Ok(())
}

/// Whether Pyroscope takes this as a sample type, unit, period type or
/// period unit: not empty, no `-` (rejected) and no `:` (it would split the
/// profile type id).
pub fn check_sample_type(s: &str) -> Result<(), LabelError> {
    if s.is_empty() || s.contains(['-', ':']) {
        return Err(LabelError::SampleType(s.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pprof::tests::{bytes_of, fields, Value};

    #[test]
    fn push_request_fields() {
        let labels = [("__name__", "waitmeter"), ("service_name", "api"), ("empty", "")];
        let (p1, p2, p3) = (&[0x1f, 0x8b, 1, 2][..], &b"raw"[..], &b"third"[..]);
        let req =
            push_request(&[Series { labels: &labels, profiles: &[p1, p2] }, Series { labels: &[("service_name", "db")], profiles: &[p3] }]);
        let top = fields(&req);
        assert!(top.iter().all(|(n, _)| *n == 1), "PushRequest has series = 1 only");
        let series = bytes_of(&top, 1);
        assert_eq!(series.len(), 2);

        let s0 = fields(series[0]);
        let pairs: Vec<(String, String)> = bytes_of(&s0, 1)
            .into_iter()
            .map(|b| {
                let f = fields(b);
                let get = |n| bytes_of(&f, n).first().map_or(String::new(), |b| String::from_utf8(b.to_vec()).unwrap());
                (get(1), get(2))
            })
            .collect();
        assert_eq!(pairs, labels.map(|(n, v)| (n.to_string(), v.to_string())));
        // the empty value is left out, as proto3 encoders do
        assert_eq!(fields(bytes_of(&s0, 1)[2]), [(1, Value::Bytes(b"empty"))]);
        let samples: Vec<Vec<(u32, Value)>> = bytes_of(&s0, 2).into_iter().map(fields).collect();
        assert_eq!(samples, [vec![(1, Value::Bytes(p1))], vec![(1, Value::Bytes(p2))]]);

        let s1 = fields(series[1]);
        assert_eq!(bytes_of(&s1, 2).into_iter().map(fields).collect::<Vec<_>>(), [vec![(1, Value::Bytes(p3))]]);
        assert!(push_request(&[]).is_empty());
    }

    #[test]
    fn label_rules() {
        let ok = [("__name__", "waitmeter"), ("service_name", "api"), ("thread", "worker-1"), ("role", "victim")];
        assert_eq!(check_labels(&ok), Ok(()));
        assert_eq!(check_labels(&[("service_name", "api")]), Err(LabelError::Missing("__name__")));
        assert_eq!(check_labels(&[("__name__", "w"), ("service_name", "")]), Err(LabelError::Missing("service_name")));
        assert_eq!(check_labels(&[("__name__", "wait:x"), ("service_name", "a")]), Err(LabelError::ProfileName("wait:x".into())));
        assert_eq!(check_labels(&[("__name__", "w"), ("service_name", "a"), ("k8s.pod", "x")]), Err(LabelError::Name("k8s.pod".into())));
        assert_eq!(check_labels(&[("__name__", "w"), ("service_name", "a"), ("1x", "x")]), Err(LabelError::Name("1x".into())));
        assert_eq!(
            check_labels(&[("__name__", "w"), ("service_name", "a"), ("service_name", "b")]),
            Err(LabelError::Duplicate("service_name".into()))
        );
        let long = "v".repeat(MAX_LABEL_VALUE_LEN + 1);
        assert!(matches!(check_labels(&[("__name__", "w"), ("service_name", &long)]), Err(LabelError::TooLong(_))));
        let names: Vec<String> = (0..MAX_LABEL_NAMES).map(|i| format!("l{i}")).collect();
        let mut many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
        many[0] = ("__name__", "w");
        many[1] = ("service_name", "a");
        assert_eq!(check_labels(&many), Ok(()));
        many.push(("one_more", "v"));
        assert_eq!(check_labels(&many), Err(LabelError::TooMany));

        assert_eq!(check_sample_type("wait"), Ok(()));
        assert_eq!(check_sample_type("nanoseconds"), Ok(()));
        for bad in ["", "wait-time", "a:b"] {
            assert_eq!(check_sample_type(bad), Err(LabelError::SampleType(bad.into())));
        }
    }
}
