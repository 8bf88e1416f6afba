//! Replays the damaged-file fuzz corpora (`fuzz/corpus/memory_file`,
//! `fuzz/corpus/flash_files`) through the fuzz targets' bodies on stable:
//! each input damages a pristine image, reopens it and checks every key
//! (never a panic, never a value nobody wrote). The seeds and bug inputs
//! (`fuzz/corpus`) and the runs' finds (`fuzz/grown`) both.

use strata_store::fuzzing::corpus::{inputs, replay_on, Kept};
use strata_store::fuzzing::{fuzz_flash_files, fuzz_memory_file, remove_images};

/// A fuzz target's body.
type Body = fn(&[u8]);

const TARGETS: [(&str, Body); 2] = [("memory_file", fuzz_memory_file), ("flash_files", fuzz_flash_files)];

/// Inputs replayed at once: each damages its own copy of the images.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4)
}

#[test]
fn damaged_files_corpora_replay() {
    for (target, body) in TARGETS {
        let seeds = inputs(target, Kept::Seeds);
        assert!(!seeds.is_empty(), "fuzz/corpus/{target}: empty");
        replay_on(threads(), &seeds, body);
    }
    remove_images();
}

/// What the fuzz runs found beyond the seeds, each input once.
#[test]
fn damaged_files_grown_replay() {
    for (target, body) in TARGETS {
        replay_on(threads(), &inputs(target, Kept::Grown), body);
    }
    remove_images();
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

/// A page's FIFO sequence in the page table set to its largest value
/// (found by the flash_files target): recovery took the newest sequence
/// plus one as the next, an overflow (a panic with overflow checks; in
/// release the counter wrapped to 0, the "free" mark). Now a sequence no
/// run reaches is damage: the page is lost, never a wrong value.
#[test]
fn a_page_sequence_no_run_reaches_loses_the_page() {
    use strata_store::fuzzing::mutate::{At, Extreme, Kind, Op};
    use strata_store::fuzzing::{run, Damage, FileKind};
    let pages = (strata_store::fuzzing::images::FLASH_BYTES / strata_store::fuzzing::images::FLASH_PAGE) as u32;
    let mut lost = 0;
    for page in 0..pages {
        for value in [Extreme::Max, Extreme::SignedMax] {
            let op = Op { file: 0, at: At::Grain(1, page, 8), kind: Kind::Set(3, value) };
            let out = run(FileKind::PageTable, &Damage { crash: false, ops: vec![op] });
            assert!(out.wrong.is_empty(), "page {page}, {value:?}: {:?}", out.wrong);
            assert_eq!(out.stale, 0, "page {page}, {value:?}");
            lost += out.live - out.kept;
        }
    }
    assert!(lost > 0, "pages with a sequence no run reaches were kept");
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
