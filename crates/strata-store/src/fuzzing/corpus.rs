//! The committed fuzz inputs, for the stable replays of every target:
//! `fuzz/corpus/TARGET` (the seeds and every input that found a bug, one
//! file each) and `fuzz/grown/TARGET.tar.gz` (what the runs found beyond
//! the seeds, kept by `scripts/fuzz TARGET merge`: thousands of inputs a
//! target, so one archive each keeps fuzz/ a tree tools can walk).
//!
//! An archive is unpacked with the system's `tar` (an essential package on
//! Debian) into a directory of its own under `target/fuzz-replay/`, read
//! and removed again: two test binaries replaying one target at once never
//! share a directory, and no unpacked copy goes stale when the archive
//! changes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which of a target's committed inputs.
#[derive(Clone, Copy, Debug)]
pub enum Kept {
    /// `fuzz/corpus/TARGET`, a directory: must exist.
    Seeds,
    /// `fuzz/grown/TARGET.tar.gz`: absent for a target no run has been
    /// merged for.
    Grown,
}

/// Where `target`'s inputs of that kind are kept: the seeds' directory,
/// or the archive of the grown inputs.
pub fn dir(target: &str, kept: Kept) -> PathBuf {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    match kept {
        Kept::Seeds => fuzz.join("corpus").join(target),
        Kept::Grown => fuzz.join("grown").join(format!("{target}.tar.gz")),
    }
}

/// Every input of `target` of that kind, with its path (for a grown
/// input, the archive's path joined with the input's name), in name order.
pub fn inputs(target: &str, kept: Kept) -> Vec<(PathBuf, Vec<u8>)> {
    let kept_at = dir(target, kept);
    match kept {
        Kept::Seeds => read_dir(&kept_at, &kept_at),
        Kept::Grown if !kept_at.exists() => Vec::new(),
        Kept::Grown => {
            let scratch = unpack(&kept_at, target);
            let inputs = read_dir(&scratch, &kept_at);
            std::fs::remove_dir_all(&scratch).unwrap_or_else(|e| panic!("{}: {e}", scratch.display()));
            inputs
        }
    }
}

/// The files of `dir`, sorted by name, each named as under `named`.
fn read_dir(dir: &Path, named: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut names: Vec<_> = entries.map(|e| e.expect("a corpus entry").file_name()).collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            (named.join(&name), std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        })
        .collect()
}

/// `archive` unpacked into a new directory of its own under
/// `target/fuzz-replay` (or `$CARGO_TARGET_DIR/fuzz-replay`).
fn unpack(archive: &Path, target: &str) -> PathBuf {
    static UNPACKED: AtomicU64 = AtomicU64::new(0);
    let targets = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let n = UNPACKED.fetch_add(1, Ordering::Relaxed);
    let scratch = targets.join("fuzz-replay").join(format!("{target}-{}-{n}", std::process::id()));
    // Left by a killed run of a process with the same id: start clean.
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap_or_else(|e| panic!("{}: {e}", scratch.display()));
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(archive)
        .arg("-C")
        .arg(&scratch)
        .status()
        .unwrap_or_else(|e| panic!("tar, to unpack {}: {e}", archive.display()));
    assert!(status.success(), "tar -xzf {}: {status}", archive.display());
    scratch
}

/// Each input through a target's `body`, whole, once; a panic fails the
/// replay with the input's file named.
pub fn replay(inputs: &[(PathBuf, Vec<u8>)], body: impl Fn(&[u8])) {
    for (path, input) in inputs {
        // Unwind safety: nothing is used after a panic but to fail.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(input)));
        assert!(outcome.is_ok(), "{} fails", path.display());
    }
}
