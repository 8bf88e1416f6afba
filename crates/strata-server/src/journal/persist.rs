//! The journal's words, laid out, and kept in a file beside the memory
//! file (`<memory file>.journal`, a shared mapping: `strata_store::SharedWords`)
//! so the journal outlives the process, a `kill -9` included.
//!
//! ```text
//!  word  0 magic "STRJRNL1"        word  5 last flush_all (unix s, 0: none)
//!  word  1 format version          word  6 marks pushed in the file's life
//!  word  2 slots (2^k)             word  7 last tick (unix s): alive until
//!  word  3 born / made (unix s)    word  8 head: next position (own line)
//!  word  4 1: born with its memory file (nothing before word 3)
//!  words 16 .. 16 + 2×4096: marks, (unix s, head) at (count mod 4096)
//!  words 16 + 2×4096 ..: slots, !(position 32b | tag 32b), 0 unused
//!                        (complemented: zeroed pages are empty slots)
//! ```
//!
//! Opening trusts nothing it reads: a wrong magic, version or size makes a
//! new journal (not born: a previous process's changes are not in it);
//! the marks kept are the newest run that goes forward in time and
//! position and stays at or below the head; a position below the head
//! whose slot does not hold it was claimed by a writer killed before its
//! store, and every window reaching it is refused (`Refusal::Lost`).
//! The magic is written last when a file is made, so a kill in between
//! leaves a file that is made again.

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use strata_store::SharedWords;

use super::{Ring, MARKS_MAX, MAX_ENTRIES};

const MAGIC: u64 = u64::from_le_bytes(*b"STRJRNL1");
/// 2: slots complemented (1 held them as they are, `u64::MAX` unused).
const VERSION: u64 = 2;
const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_SLOTS: usize = 2;
const W_CREATED: usize = 3;
const W_BORN: usize = 4;
pub(super) const W_FLUSH: usize = 5;
pub(super) const W_MARKS_TOTAL: usize = 6;
pub(super) const W_ALIVE: usize = 7;
/// The head has a cache line of its own (words 8-15): writers bounce it,
/// and nothing else should share their line.
pub(super) const W_HEAD: usize = 8;
pub(super) const MARKS_AT: usize = 16;
pub(super) const SLOTS_AT: usize = MARKS_AT + 2 * MARKS_MAX;

/// Slots for `entries`: a power of two, at least 2.
fn slots_for(entries: usize) -> usize {
    entries.clamp(2, MAX_ENTRIES).next_power_of_two()
}

/// A journal of `entries` in anonymous memory, begun at `now_unix`.
pub(super) fn anonymous(entries: usize, now_unix: i64) -> Option<Ring> {
    let n = slots_for(entries);
    match SharedWords::anonymous(SLOTS_AT + n) {
        Ok(words) => Some(make(words, n, now_unix, false, true)),
        Err(e) => {
            crate::log_line!("strata: journal: cannot map {} bytes ({e}); journal off", (SLOTS_AT + n) * 8);
            None
        }
    }
}

/// A journal file opened.
pub(super) struct Opened {
    pub ring: Ring,
    /// It went on from a previous process's file.
    pub continued: bool,
    /// That process's last tick, and this start.
    pub down: Option<(i64, i64)>,
    /// What was found, for the log.
    pub line: String,
}

/// Open (or make) the journal file at `path`. `restored`: the memory file
/// beside it held a cache, so a new journal file is not a birth.
pub(super) fn open(entries: usize, path: &Path, restored: bool, now_unix: i64) -> io::Result<Opened> {
    let n = slots_for(entries);
    let existed = path.exists();
    let (words, kept) = SharedWords::open(path, SLOTS_AT + n)?;
    let why_new = if !existed {
        None
    } else if !kept {
        Some("another size (journal_size changed?) or damaged".to_string())
    } else {
        valid(&words, n).err()
    };
    if existed && why_new.is_none() {
        let (ring, down, lost) = resume(words, n, now_unix);
        let covers = ring.marks.lock().unwrap_or_else(|e| e.into_inner()).front().map_or(now_unix, |m| m.0);
        let head = ring.head().load(Ordering::Relaxed);
        let mut line = format!(
            "went on from the previous process: {head} changes recorded, covers from unix {covers}{}, down from unix {} ({} s)",
            if ring.born_unix.is_some() { " (its birth)" } else { "" },
            down.0,
            (down.1 - down.0).max(0)
        );
        if lost > 0 {
            line.push_str(&format!("; {lost} positions claimed but never written (killed writers): windows reaching them are refused"));
        }
        return Ok(Opened { ring, continued: true, down: Some(down), line });
    }
    let born = !existed && !restored;
    // A file made now, or remade at another size, is zeroed by its new length.
    let ring = make(words, n, now_unix, born, !existed || !kept);
    let line = match (why_new, born) {
        (Some(why), _) => format!("{why}; made anew, it covers from this start"),
        (None, true) => "made with its memory file: it covers the node's whole life".to_string(),
        (None, false) => "made beside a memory file that had a cache: it covers from this start".to_string(),
    };
    Ok(Opened { ring, continued: false, down: None, line })
}

/// Lay a new journal out in `words`: empty, begun (and born, if `born`)
/// at `now_unix`. `zeroed`: the words are known to be zero (a new
/// mapping or file), so the slots are empty without a write.
fn make(words: SharedWords, n: usize, now_unix: i64, born: bool, zeroed: bool) -> Ring {
    let w = words.words();
    w[W_MAGIC].store(0, Ordering::Relaxed);
    if !zeroed {
        for slot in &w[SLOTS_AT..SLOTS_AT + n] {
            slot.store(0, Ordering::Relaxed);
        }
    }
    w[W_VERSION].store(VERSION, Ordering::Relaxed);
    w[W_SLOTS].store(n as u64, Ordering::Relaxed);
    w[W_CREATED].store(now_unix as u64, Ordering::Relaxed);
    w[W_BORN].store(u64::from(born), Ordering::Relaxed);
    w[W_FLUSH].store(0, Ordering::Relaxed);
    w[W_MARKS_TOTAL].store(0, Ordering::Relaxed);
    w[W_ALIVE].store(now_unix as u64, Ordering::Relaxed);
    w[W_HEAD].store(0, Ordering::Relaxed);
    w[W_MAGIC].store(MAGIC, Ordering::Release);
    let ring = Ring {
        words,
        mask: n as u64 - 1,
        marks: Mutex::new(VecDeque::new()),
        lost_below: 0,
        born_unix: born.then_some(now_unix),
    };
    {
        let mut marks = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
        ring.push_mark(&mut marks, now_unix, 0);
    }
    ring
}

/// Whether the words hold a journal of `n` slots.
fn valid(words: &SharedWords, n: usize) -> Result<(), String> {
    let w = words.words();
    if w[W_MAGIC].load(Ordering::Acquire) != MAGIC {
        return Err("not a journal (bad magic, or a kill while it was made)".into());
    }
    let version = w[W_VERSION].load(Ordering::Relaxed);
    if version != VERSION {
        return Err(format!("format version {version}, this build reads {VERSION}"));
    }
    let slots = w[W_SLOTS].load(Ordering::Relaxed);
    if slots != n as u64 {
        return Err(format!("{slots} slots, journal_size asks for {n}"));
    }
    Ok(())
}

/// Go on from a valid file: its marks (the newest consistent run), the
/// positions a killed writer left empty, a start mark. Returns the ring,
/// (last alive, now) and the count of empty positions.
fn resume(words: SharedWords, n: usize, now_unix: i64) -> (Ring, (i64, i64), u64) {
    let w = words.words();
    let head = w[W_HEAD].load(Ordering::Acquire);
    let total = w[W_MARKS_TOTAL].load(Ordering::Acquire);
    let count = total.min(MARKS_MAX as u64);
    let mut marks: VecDeque<(i64, u64)> = VecDeque::new();
    for i in (total - count..total).rev() {
        let at = MARKS_AT + 2 * (i as usize % MARKS_MAX);
        let (t, h) = (w[at].load(Ordering::Relaxed) as i64, w[at + 1].load(Ordering::Relaxed));
        let fits = h <= head && marks.front().is_none_or(|&(nt, nh)| t < nt && h <= nh);
        if !fits {
            break;
        }
        marks.push_front((t, h));
    }
    let mask = n as u64 - 1;
    let mut lost_below = 0;
    let mut lost = 0;
    for pos in head.saturating_sub(n as u64)..head {
        let v = !w[SLOTS_AT + (pos & mask) as usize].load(Ordering::Relaxed);
        if v == u64::MAX || (v >> 32) as u32 != pos as u32 {
            lost_below = pos + 1;
            lost += 1;
        }
    }
    let created = w[W_CREATED].load(Ordering::Relaxed) as i64;
    let born = w[W_BORN].load(Ordering::Relaxed) == 1 && marks.front() == Some(&(created, 0));
    // Clamped: a damaged word must not make the downtime (now - alive)
    // overflow (a panic with debug assertions, garbage in `stats` without).
    let alive = (w[W_ALIVE].load(Ordering::Relaxed) as i64).clamp(0, now_unix.max(0));
    let ring = Ring { words, mask, marks: Mutex::new(VecDeque::new()), lost_below, born_unix: born.then_some(created) };
    {
        let mut ours = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
        ring.rewrite_marks(&marks);
        *ours = marks;
        // This start, unless the clock went back since the last mark.
        if ours.back().is_none_or(|&(t, _)| t < now_unix) {
            ring.push_mark(&mut ours, now_unix, head);
        }
    }
    ring.words.words()[W_ALIVE].store(now_unix as u64, Ordering::Relaxed);
    (ring, (alive, now_unix), lost)
}

#[cfg(test)]
mod tests {
    use super::super::{tag, Journal, Refusal};
    use std::sync::atomic::Ordering;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("strata-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::create_dir_all(&d);
        d
    }

    /// A last-alive word damaged to an extreme (`fuzz/` found i64::MIN):
    /// the downtime stays within 0..=now instead of overflowing.
    #[test]
    fn a_damaged_last_alive_time_gives_a_downtime_that_fits() {
        let d = dir("alive");
        let path = d.join("m.journal");
        for (alive, want) in [(i64::MIN as u64, 0), (u64::MAX, 0), (i64::MAX as u64, 1010), (5000, 1010)] {
            let _ = std::fs::remove_file(&path);
            let first = Journal::open(16, &path, false, 1000);
            first.record(b"a");
            drop(first);
            {
                use std::os::unix::fs::FileExt;
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.write_all_at(&alive.to_le_bytes(), (super::W_ALIVE * 8) as u64).unwrap();
            }
            let second = Journal::open(16, &path, true, 1010);
            assert_eq!(second.down, Some((want, 1010)), "alive {alive:#x}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_journal_goes_on_from_its_file_across_processes() {
        let d = dir("goes-on");
        let path = d.join("m.journal");
        let first = Journal::open(16, &path, false, 1000);
        assert_eq!(first.born_unix(), Some(1000));
        first.record(b"a");
        first.tick(1001);
        first.record(b"b");
        // No close: as after a kill -9.
        drop(first);
        let second = Journal::open(16, &path, true, 1010);
        assert!(second.continued());
        assert_eq!(second.down, Some((1001, 1010)));
        second.record(b"c");
        // A window in the downtime: b (after the last mark) and c.
        let got = second.changes_since(1005).unwrap_or_else(|e| panic!("not covered: {e:?}"));
        let mut want = vec![tag(b"b"), tag(b"c")];
        want.sort_unstable();
        assert_eq!(got.tags, want);
        // Born with its memory file: any window, from its birth.
        let all = second.changes_since(900).unwrap_or_else(|e| panic!("not covered: {e:?}"));
        assert_eq!((all.tags.len(), all.from_unix), (3, 1000));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_journal_made_beside_a_restored_cache_is_no_birth() {
        let d = dir("no-birth");
        let j = Journal::open(16, &d.join("m.journal"), true, 1000);
        assert!(!j.continued());
        assert_eq!(j.born_unix(), None);
        assert_eq!(j.changes_since(1000).err(), Some(Refusal::TooOld));
        // Another size: made anew, not born (it existed).
        drop(j);
        let j = Journal::open(64, &d.join("m.journal"), false, 1002);
        assert!(!j.continued());
        assert_eq!(j.born_unix(), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_position_a_killed_writer_claimed_refuses_the_windows_holding_it() {
        let d = dir("lost");
        let path = d.join("m.journal");
        let j = Journal::open(16, &path, false, 1000);
        j.record(b"a");
        j.tick(1001);
        j.record(b"b");
        // A writer claimed a position and died before its store.
        if let Some(ring) = &j.ring {
            ring.head().fetch_add(1, Ordering::AcqRel);
        }
        j.tick(1003);
        j.record(b"c");
        drop(j);
        let j = Journal::open(16, &path, true, 1005);
        assert_eq!(j.changes_since(1002).err(), Some(Refusal::Lost));
        assert_eq!(j.changes_since(1004).map(|c| c.tags).ok(), Some(vec![tag(b"c")]));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_clock_stepped_back_adds_no_mark_out_of_order() {
        let d = dir("clock");
        let path = d.join("m.journal");
        let j = Journal::open(16, &path, false, 2000);
        j.record(b"a");
        j.tick(2001);
        j.record(b"b");
        drop(j);
        // Restarted with the clock 500 s behind.
        let j = Journal::open(16, &path, true, 1500);
        j.record(b"c");
        j.tick(1501);
        // The marks before the step still bound the window: b and c.
        let got = j.changes_since(2002).unwrap_or_else(|e| panic!("not covered: {e:?}"));
        let mut want = vec![tag(b"b"), tag(b"c")];
        want.sort_unstable();
        assert_eq!(got.tags, want);
        let _ = std::fs::remove_dir_all(&d);
    }
}
