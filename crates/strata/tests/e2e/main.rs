//! Every test that starts the `strata` binary, in one test binary: each
//! file is a module (one feature: `cli`, `flash_restart`, `vs_memcached`,
//! ...) and `common` starts servers and talks to them. One binary, not one
//! per file, because each test binary is linked (with LTO) on its own: 23 of
//! them were a third of `./scripts/test`'s build.
//!
//!     cargo test --release -p strata --test e2e                 all of them
//!     cargo test --release -p strata --test e2e flash_restart::  one file
//!
//! `STRATA_IO_ENGINE=uring` runs them on io_uring (scripts/test runs both).

mod common;
mod big_memory;
mod cli;
mod config_file;
mod connections;
mod debug_clock;
mod dumps;
mod flash;
mod flash_churn;
mod flash_limits;
mod flash_mc_suite;
mod flash_overwrite;
mod flash_restart;
mod flash_read_ahead;
mod flash_read_ahead_bound;
mod flash_shared_read;
mod flash_small;
mod handover;
mod memory;
mod memory_auto;
mod memory_breakdown;
mod metrics;
mod mrc;
mod restart;
mod restart_rules;
mod slab_memory;
mod steer;
mod tls;
mod verbose;
mod release_1_6_46;
mod vs_memcached;
mod warm_return;
mod watch_flash;
