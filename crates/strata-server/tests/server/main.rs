//! The server's own tests, in one test binary: servers started in this
//! process (`Server::start` on an ephemeral loopback port), one module per
//! feature, and `common` to start them and read replies. One binary because
//! each test binary is linked (with LTO) on its own.
//!
//!     cargo test --release -p strata-server --test server          all of them
//!     cargo test --release -p strata-server --test server parity::  one file

mod common;
mod dumps;
mod fuzz_conn;
mod hotkeys;
mod index_stats;
mod latency;
mod meta_145;
mod parity;
mod scan_resistance;
mod slab_view;
mod udp;
mod watch;
mod wire;
