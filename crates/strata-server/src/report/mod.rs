//! What the server reports about itself, reading every part of it:
//! `stats` and its groups (`stats.rs`), `stats memory` (`memory.rs`), and
//! the Prometheus exposition with its HTTP listener (`metrics.rs`,
//! `metrics_http.rs`).

pub mod memory;
pub mod metrics;
pub mod metrics_http;
pub mod stats;
