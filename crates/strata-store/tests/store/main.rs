//! The store's tests, in one test binary: the model tests against
//! `MapStore`, concurrent readers against every writer, flash, restart and
//! stress, one module per file. One binary because each test binary is
//! linked (with LTO) on its own. (`loom_read.rs` stays apart: it needs the
//! `loom` feature.)
//!
//!     cargo test --release -p strata-store --test store          all of them
//!     cargo test --release -p strata-store --test store model::  one file

mod classes;
mod damage;
mod flash;
mod flash_age;
mod flash_compact;
mod flash_budget;
mod flash_large;
mod flash_small;
mod index_charge;
mod model;
mod read_concurrent;
mod restart;
mod scan_resistance;
mod stress;
