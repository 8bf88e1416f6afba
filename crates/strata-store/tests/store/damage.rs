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

/// Each page of the flash file in turn made "not on the device" in the
/// page table (its entry zeroed): the small store's log blocks on it are
/// lost, and a key whose newest copy was in one of them must miss, not
/// come back with the older copy its set holds (its log entry became a
/// tombstone at recovery; before, it was dropped and the set answered).
#[test]
fn a_lost_log_block_never_brings_back_an_older_copy() {
    use strata_store::fuzzing::mutate::{At, Kind, Op};
    use strata_store::fuzzing::{run, Damage, FileKind};
    let pages = (strata_store::fuzzing::images::FLASH_BYTES / strata_store::fuzzing::images::FLASH_PAGE) as u32;
    let (mut stale, mut lost) = (0, 0);
    for page in 0..pages {
        let op = Op { file: 0, at: At::Grain(1, page, 0), kind: Kind::Zero(15) };
        let out = run(FileKind::PageTable, &Damage { crash: false, ops: vec![op] });
        assert!(out.wrong.is_empty(), "page {page}: {:?}", out.wrong);
        stale += out.stale;
        lost += out.live - out.kept;
    }
    assert!(lost > 0, "the damage lost nothing: it tests nothing");
    assert_eq!(stale, 0, "older copies served after their log blocks were lost ({lost} items lost)");
}

/// Image 25 of the benchmark's index row (seed 46): an index file's entry
/// damaged into one whose read (`blocks`) ends before its record's header
/// starts. Recovery kept it and the read's finish sliced past the bytes
/// read (a panic); now recovery drops it.
#[test]
fn an_index_entry_shorter_than_its_record_is_dropped() {
    use strata_store::fuzzing::mutate::{At, Kind, Op};
    use strata_store::fuzzing::{run, Damage, FileKind};
    let ops = vec![
        Op { file: 170, at: At::FromEnd(54367), kind: Kind::FlipBit(183) },
        Op { file: 11, at: At::FromEnd(46084), kind: Kind::Fill(47265, 168) },
        Op { file: 52, at: At::Raw(2191883887), kind: Kind::Truncate },
        Op { file: 68, at: At::FromEnd(27868), kind: Kind::Fill(18571, 117) },
    ];
    let out = run(FileKind::Index, &Damage { crash: false, ops });
    assert!(out.wrong.is_empty(), "{:?}", out.wrong);
}
