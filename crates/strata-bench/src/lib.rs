//! strata-bench: a load generator for memcached-protocol servers that is
//! meant to be trusted as a measuring instrument. It composes every request
//! and parses every reply with `strata_proto::client`, checks each returned
//! value against what it wrote (`keyspace`), records latency in an HDR
//! histogram (`histogram`), measures open-loop latency from each request's
//! scheduled time (`driver`), and accounts for every request it sent
//! (`tally`).
//!
//! ```text
//!  main ─ cli ─┬─ run ──── driver (per thread, mio) ─┬─ tcp ─┐
//!              ├─ sweep ─ run, svg                   └─ udp ─┴─ exchange ─ strata_proto::client
//!              └─ compare ─ server, run, sys               mix, dist, keyspace
//! ```

#![deny(unsafe_code)]

pub mod cli;
pub mod compare;
pub mod dist;
pub mod driver;
pub mod exchange;
pub mod histogram;
pub mod keyspace;
pub mod mix;
pub mod preset;
pub mod report;
pub mod run;
pub mod server;
pub mod svg;
pub mod sweep;
pub mod tally;
pub mod tcp;
pub mod tls;
pub mod udp;
pub mod workload;
#[allow(unsafe_code)]
pub mod sys;
