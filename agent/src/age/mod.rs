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
