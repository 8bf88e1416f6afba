//! Carrying the journal across a socket handover (`handover/`): the old
//! process writes out what its ring still holds, the new one replays it
//! before it serves, so the node's journal stays continuous. Without it a
//! node that just took over could not answer a peer's window reaching
//! before its own start (`too_old`: that peer would start cold), and a
//! rolling restart would have to wait between nodes for journals to grow.
//!
//! ```text
//!  bytes: flush_unix i64 | marks u32 | tags u32 | marks × (unix i64, position u64) | tags × u32
//! ```
//! Positions are relative to the first tag carried; all little-endian.
//! Only the part of the ring that is still readable goes (a slot being
//! written, or a lap overwritten, ends the export at the oldest good mark).

use std::sync::atomic::Ordering;

use super::{read_slot, Journal};

impl Journal {
    /// What the ring holds, for [`Journal::import`] in the next process;
    /// None with the journal off. Call with writers stopped.
    pub fn export(&self) -> Option<Vec<u8>> {
        let ring = self.ring.as_ref()?;
        let head = ring.head().load(Ordering::Acquire);
        let size = ring.mask + 1;
        let marks: Vec<(i64, u64)> = ring.marks.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().filter(|&(_, h)| head - h <= size).collect();
        let base = marks.first().map_or(head, |&(_, h)| h);
        let mut tags = Vec::with_capacity((head - base) as usize);
        for pos in base..head {
            tags.push(read_slot(ring, pos).ok()?);
        }
        let mut out = Vec::with_capacity(16 + marks.len() * 16 + tags.len() * 4);
        out.extend_from_slice(&ring.flush_unix().to_le_bytes());
        out.extend_from_slice(&(marks.len() as u32).to_le_bytes());
        out.extend_from_slice(&(tags.len() as u32).to_le_bytes());
        for (t, h) in &marks {
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&(h - base).to_le_bytes());
        }
        for tag in tags {
            out.extend_from_slice(&tag.to_le_bytes());
        }
        Some(out)
    }

    /// Replay an [`Journal::export`] into this fresh journal (before any
    /// request): its marks come first, then this process's start mark.
    /// False (and nothing changed) if the bytes do not parse.
    ///
    /// A journal that went on from its file already holds all of it: the
    /// old process wrote the same file (nothing is replayed twice).
    pub fn import(&self, bytes: &[u8]) -> bool {
        let Some(ring) = &self.ring else { return true };
        if self.continued {
            return true;
        }
        let Some((flush, marks, tags)) = parse(bytes) else { return false };
        let size = ring.mask + 1;
        // A smaller ring keeps the newest tags; marks before them go.
        let skip = (tags.len() as u64).saturating_sub(size);
        for &tag in &tags[skip as usize..] {
            let pos = ring.head().fetch_add(1, Ordering::AcqRel);
            ring.put(pos, tag);
        }
        let mut ours = ring.marks.lock().unwrap_or_else(|e| e.into_inner());
        let start = ours.pop_front();
        ours.clear();
        ours.extend(marks.into_iter().filter(|&(_, p)| p >= skip).map(|(t, p)| (t, p - skip)));
        let head = ring.head().load(Ordering::Acquire);
        if let Some((t, _)) = start {
            if ours.back().is_none_or(|&(last, _)| last < t) {
                ours.push_back((t, head));
            }
        }
        while ours.len() > super::MARKS_MAX {
            ours.pop_front();
        }
        ring.rewrite_marks(&ours);
        if flush != 0 {
            ring.words.words()[super::persist::W_FLUSH].fetch_max(flush as u64, Ordering::Relaxed);
        }
        true
    }
}

type Parsed = (i64, Vec<(i64, u64)>, Vec<u32>);

fn parse(bytes: &[u8]) -> Option<Parsed> {
    let i64_at = |at: usize| Some(i64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let flush = i64_at(0)?;
    let (n_marks, n_tags) = (u32_at(8)? as usize, u32_at(12)? as usize);
    if bytes.len() != 16 + n_marks * 16 + n_tags * 4 {
        return None;
    }
    let mut marks = Vec::with_capacity(n_marks);
    for i in 0..n_marks {
        let at = 16 + i * 16;
        let (t, p) = (i64_at(at)?, i64_at(at + 8)? as u64);
        if p > n_tags as u64 || marks.last().is_some_and(|&(lt, lp)| lt >= t || lp > p) {
            return None;
        }
        marks.push((t, p));
    }
    let tags_at = 16 + n_marks * 16;
    let tags = (0..n_tags).map(|i| u32_at(tags_at + i * 4)).collect::<Option<Vec<u32>>>()?;
    Some((flush, marks, tags))
}

#[cfg(test)]
mod tests {
    use super::super::{tag, Journal, Refusal};

    #[test]
    fn a_carried_journal_answers_for_the_old_process_window() {
        let old = Journal::new(16, 1000);
        old.record(b"before");
        old.tick(1001);
        old.record(b"a");
        old.tick(1002);
        old.record(b"b");
        let bytes = old.export().unwrap_or_default();
        let new = Journal::new(16, 1003);
        assert_eq!(new.changes_since(1002).err(), Some(Refusal::TooOld));
        assert!(new.import(&bytes));
        new.record(b"c");
        let got = new.changes_since(1002).unwrap_or_else(|e| panic!("not covered: {e:?}"));
        let mut want = vec![tag(b"a"), tag(b"b"), tag(b"c")];
        want.sort_unstable();
        assert_eq!(got.tags, want);
        assert_eq!(new.changes_since(1001).map(|c| c.tags.len()).ok(), Some(4));
    }

    #[test]
    fn a_smaller_ring_keeps_the_newest_and_garbage_is_refused() {
        let old = Journal::new(16, 1000);
        for i in 0..10u32 {
            old.record(&i.to_le_bytes());
        }
        old.tick(1001);
        old.record(b"late");
        let new = Journal::new(4, 1002);
        assert!(new.import(&old.export().unwrap_or_default()));
        // The start mark (1000, 0) fell out with the oldest tags.
        assert_eq!(new.changes_since(1001).err(), Some(Refusal::TooOld));
        assert_eq!(new.changes_since(1002).map(|c| c.tags).ok(), Some(vec![tag(b"late")]));
        assert!(!Journal::new(4, 1).import(b"garbage"));
    }
}
