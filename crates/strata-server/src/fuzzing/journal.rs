//! The invalidation journal's file (`<memory file>.journal`) damaged and
//! opened as a start opens it, then asked for the changes since every
//! second of its life. The rule (journal/ docs): an answer is a superset of
//! the keys changed since the time asked, or a refusal (the asking node
//! then starts cold); a change left out of an answer is a lost
//! invalidation, a stale value served by a peer.
//!
//! The format has no check on its words: a slot whose tag bits change but
//! whose position bits stay, a mark whose time or head moves within the
//! order the reader checks, a head moved down, each reads as a valid
//! journal that says something else. Such losses are counted apart
//! (`unprotected`); a loss the reader could have seen (a slot zeroed or
//! moved, the file truncated, a header field at an extreme...) with the
//! header, marks and the change's own slot intact is `lost` and fails.
//!
//! ```text
//!  pristine: 4,096 slots; born at T0, 100 seconds of 60 changes each over
//!            1,000 keys (the ring wraps), a tick each second;
//!            clean: closed at the end; crash: copied before the close
//!  asked:    since = T0 - 1 ..= end + 1, every 4th second, and the edges
//! ```

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use arbitrary::{Arbitrary, Unstructured};
use strata_store::fuzzing::images::{copy_tree, remove_stale_scratch, scratch};
use strata_store::fuzzing::mutate::{self, Layout, Op};

use crate::journal::{tag, Journal, FILE_MARKS_AT, FILE_SLOTS_AT};

const ENTRIES: usize = 4096;
const T0: i64 = 1_000_000;
const SECONDS: i64 = 100;
const PER_SECOND: usize = 60;
const KEYS: usize = 1000;

/// A fuzzer's input: which image and the damage done to it.
#[derive(Arbitrary, Debug)]
pub struct Damage {
    pub crash: bool,
    pub ops: Vec<Op>,
}

/// What a damaged journal answered.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Windows asked, and answered (not refused).
    pub asked: usize,
    pub answered: usize,
    /// Changes left out of an answer although the reader could have seen
    /// the damage (should be none).
    pub lost: Vec<String>,
    /// Changes left out where the damage rewrote a word the format does not
    /// check (a slot's tag, a mark, the head) into another valid one.
    pub unprotected: usize,
    /// The file was made anew (not continued).
    pub remade: bool,
}

struct Image {
    root: PathBuf,
    /// (position, tick second before it, tag) of every change.
    changes: Vec<(u64, i64, u32)>,
    end: i64,
    bytes: [Vec<u8>; 2],
}

fn image() -> &'static (Image, Mutex<PathBuf>) {
    static IMAGE: OnceLock<(Image, Mutex<PathBuf>)> = OnceLock::new();
    IMAGE.get_or_init(|| {
        remove_stale_scratch();
        let root = scratch().join("journal");
        let work = root.join("work");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&work).expect("scratch directory");
        let path = work.join("memory.journal");
        let j = Journal::open(ENTRIES, &path, false, T0);
        let mut changes = Vec::new();
        let mut pos = 0u64;
        for s in 0..SECONDS {
            let t = T0 + s;
            for n in 0..PER_SECOND {
                let key = format!("key:{}", (s as usize * 7919 + n * 104_729) % KEYS);
                j.record(key.as_bytes());
                changes.push((pos, t, tag(key.as_bytes())));
                pos += 1;
            }
            j.tick(t + 1);
        }
        let end = T0 + SECONDS;
        copy_tree(&work, &root.join("crash")).expect("crash image");
        j.close(end);
        drop(j);
        copy_tree(&work, &root.join("clean")).expect("clean image");
        let read = |v: &str| std::fs::read(root.join(v).join("memory.journal")).expect("image");
        let bytes = [read("clean"), read("crash")];
        (Image { root, changes, end, bytes }, Mutex::new(work))
    })
}

fn layout() -> Layout {
    Layout::new(128, &[(FILE_MARKS_AT as u64, 16), (FILE_SLOTS_AT as u64, 8), (FILE_SLOTS_AT as u64, 4096)])
}

/// Damage the journal as `input` says, open it, ask for every window.
pub fn run(input: &Damage) -> Outcome {
    let (img, work) = image();
    let work = work.lock().unwrap_or_else(|e| e.into_inner());
    let variant = usize::from(input.crash);
    copy_tree(&img.root.join(["clean", "crash"][variant]), &work).expect("copy image");
    let path = work.join("memory.journal");
    for op in input.ops.iter().take(24) {
        mutate::apply(&path, &layout(), op).expect("damage the journal");
    }
    let damaged = std::fs::read(&path).unwrap_or_default();
    let pristine = &img.bytes[variant];
    let same_len = damaged.len() == pristine.len();
    let header_touched = same_len && damaged[..FILE_SLOTS_AT] != pristine[..FILE_SLOTS_AT];
    let word = |b: &[u8], pos: u64| {
        let at = FILE_SLOTS_AT + 8 * (pos as usize % ENTRIES);
        !u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
    };
    let now = img.end + 10;
    let j = Journal::open(ENTRIES, &path, true, now);
    let mut out = Outcome { remade: !j.continued(), ..Outcome::default() };
    let mut windows: Vec<i64> = (T0 - 1..=img.end + 1).step_by(4).collect();
    windows.extend([i64::MIN, 0, T0, T0 + 1, img.end - 1, img.end, now, i64::MAX]);
    for since in windows {
        out.asked += 1;
        let Ok(changes) = j.changes_since(since) else { continue };
        out.answered += 1;
        for &(pos, t, tag) in img.changes.iter().filter(|c| c.1 >= since) {
            if changes.tags.binary_search(&tag).is_ok() {
                continue;
            }
            let slot_rewritten = same_len && {
                let (was, is) = (word(pristine, pos), word(&damaged, pos));
                was != is && (is >> 32) as u32 == pos as u32
            };
            if header_touched || slot_rewritten {
                out.unprotected += 1;
            } else {
                out.lost.push(format!("since {since}: change at position {pos} (second {t}, tag {tag:#x}) not in {} tags from {}", changes.tags.len(), changes.from_unix));
            }
        }
    }
    out
}

/// Fuzz target 7: the journal file (`fuzz/fuzz_targets/journal.rs`).
pub fn fuzz_journal(data: &[u8]) {
    let Ok(input) = Damage::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let out = run(&input);
    assert!(out.lost.is_empty(), "{input:?}: lost invalidations: {:#?}", &out.lost[..out.lost.len().min(5)]);
}

#[cfg(test)]
mod tests {
    /// The fuzz corpus (`fuzz/corpus/journal`) replayed on stable.
    #[test]
    fn corpus_replays() {
        use crate::fuzzing::tests::{inputs, replay_whole, Kept};
        let seeds = inputs("journal", Kept::Seeds);
        assert!(!seeds.is_empty(), "empty corpus");
        replay_whole(&seeds, super::fuzz_journal);
        replay_whole(&inputs("journal", Kept::Grown), super::fuzz_journal);
        strata_store::fuzzing::images::remove_scratch();
    }
}
