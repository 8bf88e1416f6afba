//! Fuzzing and damage harnesses over the server's own files: the body of
//! the libFuzzer target `fuzz/fuzz_targets/journal.rs`, replayed on stable
//! by `tests/server/journal_damage.rs`, and the journal's row of the
//! damaged-file benchmark (`examples/journal_damage.rs`). Not for servers.

pub mod journal;

pub use journal::fuzz_journal;
