//! strata-server: event loops, connections, the protocol front ends over one
//! request service, and stats.
//! See `docs/ARCHITECTURE.md` for the thread model and a request's path.

// Only `sys::uring`, `sys::mmsg` and `sys::affinity` may use `unsafe` (they say so with an `allow`).
#![deny(unsafe_code)]

pub mod auth;
pub mod conn;
pub mod ctx;
pub mod front;
#[doc(hidden)]
pub mod fuzzing;
pub mod flash;
pub mod handover;
pub mod journal;
pub mod lifecycle;
pub mod log;

pub mod memory;
pub mod new_conn;
pub mod ops;
pub mod port_file;
pub mod report;
pub mod read_buf;
pub mod server;
pub mod service;
pub mod settings;
pub mod shared;
pub mod slabs;
pub mod stats;
pub mod steer;
pub mod sys;
pub mod tls;
pub mod tunables;
pub mod turn_prefetch;
pub mod udp;
pub mod worker;
pub mod worker_uring;

pub use server::Server;
pub use settings::Settings;
