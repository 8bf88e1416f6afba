//! Replays the damaged-file fuzz corpora (`fuzz/corpus/memory_file`,
//! `fuzz/corpus/flash_files`) through the fuzz targets' bodies on stable:
//! each input damages a pristine image, reopens it and checks every key
//! (never a panic, never a value nobody wrote).

use std::path::{Path, PathBuf};

fn corpus(name: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("corpus dir").map(|e| e.expect("entry").path()).collect();
    files.sort();
    assert!(!files.is_empty(), "{}: empty corpus", dir.display());
    files
}

#[test]
fn damaged_files_corpora_replay() {
    for file in corpus("memory_file") {
        strata_store::fuzzing::fuzz_memory_file(&std::fs::read(&file).expect("read input"));
    }
    for file in corpus("flash_files") {
        strata_store::fuzzing::fuzz_flash_files(&std::fs::read(&file).expect("read input"));
    }
    strata_store::fuzzing::images::remove_scratch();
}
