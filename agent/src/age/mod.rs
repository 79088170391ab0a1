//! Age sources: the application's own Prometheus endpoint (`--age-url`), and
//! the `waitmeter_client` datagrams (`--age-socket`). Inputs to the model;
//! a source that fails warns once and is retried, never fatal after start.
pub use waitmeter_formats::exposition;
pub mod scrape;
pub mod socket;
pub mod sources;
