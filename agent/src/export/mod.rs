//! Exporters: Prometheus text exposition over HTTP (`waitmeter run`).
pub mod catalogue;
pub mod http;
pub mod prometheus;
