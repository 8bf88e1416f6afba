//! Bodies of the libFuzzer targets that test this crate (`fuzz/`, one
//! line each), public so that a stable test replays each target's corpus
//! through the same code (`tests/server/fuzz_*.rs`). Not an API.
//!
//! - `conn` ([`conn::fuzz_conn`]): scripts of requests over a few
//!   connections through `Conn::process`, split anywhere, flash reads
//!   finished in any order; input format in [`script`].

pub mod conn;
mod flash_store;
pub mod script;
