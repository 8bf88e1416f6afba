//! The committed fuzz inputs, for the stable replays of every target:
//! `fuzz/corpus/TARGET` (the seeds and every input that found a bug) and
//! `fuzz/grown/TARGET` (what the runs found beyond the seeds, kept by
//! `scripts/fuzz TARGET merge`).

use std::path::{Path, PathBuf};

/// Which of a target's committed directories.
#[derive(Clone, Copy, Debug)]
pub enum Kept {
    /// `fuzz/corpus/TARGET`: must exist.
    Seeds,
    /// `fuzz/grown/TARGET`: absent for a target no run has been merged for.
    Grown,
}

/// The directory of `target`'s inputs of that kind.
pub fn dir(target: &str, kept: Kept) -> PathBuf {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    match kept {
        Kept::Seeds => fuzz.join("corpus").join(target),
        Kept::Grown => fuzz.join("grown").join(target),
    }
}

/// Every input of `target` of that kind, with its path, in name order.
pub fn inputs(target: &str, kept: Kept) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = dir(target, kept);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && matches!(kept, Kept::Grown) => return Vec::new(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.expect("a corpus entry").path()).collect();
    paths.sort();
    paths.into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))).collect()
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
