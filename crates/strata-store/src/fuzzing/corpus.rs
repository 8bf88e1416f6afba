//! The committed fuzz inputs, for the stable replays of every target:
//! `fuzz/corpus/TARGET` (the seeds and every input that found a bug, one
//! file each) and `fuzz/grown/TARGET.tar.gz` (what the runs found beyond
//! the seeds, kept by `scripts/fuzz TARGET merge`: thousands of inputs a
//! target, so one archive each keeps fuzz/ a tree tools can walk).
//!
//! An archive is read in memory (`tar` over `flate2`), never unpacked:
//! a replay writes no file, and writing thousands of small files cost
//! more than the replay itself (10 s of a 4,013-input archive's 10 s).

use std::io::Read;
use std::path::{Path, PathBuf};

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
        Kept::Seeds => read_dir(&kept_at),
        Kept::Grown if !kept_at.exists() => Vec::new(),
        Kept::Grown => read_archive(&kept_at),
    }
}

/// The files of `dir`, sorted by name.
fn read_dir(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut paths: Vec<PathBuf> = entries.map(|e| e.expect("a corpus entry").path()).collect();
    paths.sort();
    paths.into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))).collect()
}

/// The files of the tar.gz `archive`, sorted by name.
fn read_archive(archive: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let fail = |e: std::io::Error| -> ! { panic!("{}: {e}", archive.display()) };
    let file = std::fs::File::open(archive).unwrap_or_else(|e| fail(e));
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    let mut inputs = Vec::new();
    for entry in tar.entries().unwrap_or_else(|e| fail(e)) {
        let mut entry = entry.unwrap_or_else(|e| fail(e));
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = archive.join(entry.path().unwrap_or_else(|e| fail(e)));
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).unwrap_or_else(|e| fail(e));
        inputs.push((name, bytes));
    }
    inputs.sort_by(|a, b| a.0.cmp(&b.0));
    inputs
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

/// [`replay`] on `threads` threads, the inputs dealt round-robin, for a
/// body whose runs do not depend on each other (the damaged-files
/// targets: each damages its own copy of the images); every input runs,
/// and the replay fails naming each one that failed.
pub fn replay_on(threads: usize, inputs: &[(PathBuf, Vec<u8>)], body: impl Fn(&[u8]) + Sync) {
    let failed = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for first in 0..threads.max(1) {
            let (body, failed) = (&body, &failed);
            scope.spawn(move || {
                for (path, input) in inputs.iter().skip(first).step_by(threads.max(1)) {
                    // Unwind safety: nothing is used after a panic but to fail.
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(input))).is_err() {
                        failed.lock().unwrap_or_else(|e| e.into_inner()).push(path.display().to_string());
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(failed.is_empty(), "{} fail", failed.join(", "));
}
