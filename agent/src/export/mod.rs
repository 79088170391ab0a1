//! Exporters: Prometheus text exposition over HTTP (`waitmeter run`), with
//! optional TLS and basic auth (`web`); wait profiles (`profile`), recorded
//! for pulls and pushes (`recorder`) and pushed to Pyroscope (`push`).
pub mod catalogue;
pub mod encode;
pub mod futex_words;
pub mod http;
pub mod profile;
pub mod prometheus;
pub mod push;
pub mod recorder;
pub mod web;
