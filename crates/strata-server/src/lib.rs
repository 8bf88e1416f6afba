//! strata-server: the event loops and connections, the protocol front ends
//! over one request service, and the features around them (operator
//! commands, the journal, TLS, the memory governor, handover, the flash
//! tier's server side).
//!
//! ```text
//!  server.rs ─► workers (worker.rs epoll | worker_uring.rs io_uring) ─► session/ (one lifecycle)
//!     └ runtime.rs: core.rs + each feature    conn.rs ─► front/ ─► service/ (hooks: the one door)
//! ```
//!
//! See `docs/ARCHITECTURE.md` for the thread model, the rooms and a
//! request's path; `scripts/dev/imports.py crates/strata-server` holds the
//! imports to one direction (no circles).

// Only the platform layer's named modules may use `unsafe` (`sys/mod.rs`
// allows it module by module: affinity, fdpass, malloc, mmsg, priority,
// read_ring, socket_writer, tsc, uring), each block with its `// SAFETY:`.
#![deny(unsafe_code)]

pub mod auth;
pub mod conn;
pub mod core;
pub mod ctx;
pub mod front;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod flash;
pub mod handover;
pub mod journal;
pub mod log;

pub mod memory;
pub mod new_conn;
pub mod output;
pub mod ops;
pub mod port_file;
pub mod protocol;
pub mod read_buf;
pub mod registry;
pub mod report;
pub mod runtime;
pub mod server;
pub mod service;
pub mod session;
pub mod settings;
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
