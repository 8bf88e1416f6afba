//! The server's side of the flash tier (`ext_path`), in one place: the
//! read threads and rings (`io.rs`), the keys a parked request reads
//! ahead (`peek.rs`), the bound on bytes read ahead (`budget.rs`), and
//! the background threads that age and merge flash segments (`age.rs`,
//! `merge.rs`). The store's tier itself is `strata-store/src/seg/flash`.

pub mod age;
pub mod budget;
pub mod io;
pub mod merge;
pub(crate) mod peek;
