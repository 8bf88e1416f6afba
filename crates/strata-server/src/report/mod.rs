//! The operator's views across the whole runtime: `stats` and its groups
//! (`stats.rs`), `stats memory` (`memory.rs`), the Prometheus `/metrics`
//! body (`metrics.rs`) and its listener (`metrics_http.rs`).
//!
//! They read every feature's figures, so they sit above the features with
//! the runtime (`runtime.rs`): a feature never imports them, and they
//! write nothing on the request path (a `stats` request, or a scrape on
//! its own thread, computes its figures when asked).

pub mod memory;
pub mod metrics;
pub mod metrics_http;
pub mod stats;
