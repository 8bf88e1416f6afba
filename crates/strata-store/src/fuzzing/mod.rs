//! Fuzzing and damage harnesses over the store's own files: the bodies of
//! the libFuzzer targets in `fuzz/fuzz_targets/` (`memory_file`,
//! `flash_files`), replayed on stable by `tests/store/damage.rs`, and the
//! damaged-file benchmark (`examples/lab/damage.rs`). Not for servers.
//!
//! - `corpus.rs`: the committed inputs of every target, for the replays.
//! - `mutate.rs`: damage described relative to a file's layout.
//! - `images.rs`: pristine images and what was written to them.
//! - `damage.rs`: damage an image, reopen it, check every key.

pub mod corpus;
pub mod damage;
pub mod images;
pub mod mutate;

pub use damage::{fuzz_flash_files, fuzz_memory_file, prepare, remove_images, run, Damage, FileKind, Outcome};
