//! Exporters: Prometheus text exposition over HTTP (`waitmeter run`).
pub mod catalogue;
pub mod futex_words;
pub mod http;
pub mod prometheus;
