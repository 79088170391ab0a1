//! Exporters: Prometheus text exposition over HTTP (`waitmeter run`), with
//! optional TLS and basic auth (`web`).
pub mod catalogue;
pub mod encode;
pub mod futex_words;
pub mod http;
pub mod profile;
pub mod prometheus;
pub mod web;
