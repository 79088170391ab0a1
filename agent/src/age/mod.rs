//! Age sources: the application's own Prometheus endpoint (`--age-url`), and
//! the `waitmeter_client` datagrams (`--age-socket`). Inputs to the model;
//! a source that fails warns once and is retried, never fatal after start.
use std::collections::BTreeMap;
use std::time::Duration;

pub use waitmeter_formats::exposition;
pub mod scrape;
pub mod senders;
pub mod socket;
pub mod sources;

/// The largest age taken as a fact: a week. An age source that says more (or
/// less than 0, or NaN, or an infinity) is broken or hostile; its value is
/// rejected and counted (`out_of_range`), never shown or reasoned about.
pub const MAX_AGE_S: f64 = 7.0 * 86_400.0;

/// An age as a fact, or None when it is outside [0, `MAX_AGE_S`] or not a number.
pub fn sane(age_s: f64) -> Option<f64> {
    (0.0..=MAX_AGE_S).contains(&age_s).then_some(age_s)
}

/// What the age sources are asked to do (`cli::AgeArgs` converts into it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgeConfig {
    /// `--age-url`: the application's own age metric
    pub endpoint: Option<EndpointConfig>,
    /// `--age-socket`: the waitmeter_client datagrams
    pub socket: Option<socket::SocketConfig>,
}

/// The application's Prometheus endpoint and the age metric in it.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointConfig {
    pub url: String,
    pub metric: String,
    /// only the series with these labels (empty: every series of the metric, summed)
    pub labels: BTreeMap<String, String>,
    /// a poll every `interval`
    pub interval: Duration,
    /// each poll's deadline, connect to last byte
    pub timeout: Duration,
}
