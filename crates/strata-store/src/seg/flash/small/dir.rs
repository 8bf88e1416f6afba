//! A shard's small-store directory: for each partition, where its extent of
//! sets is (two commit slots), its ring of log blocks, and its open log
//! block. One mapping per shard: a file (`<FILE>.flash/small.N`) with a
//! memory file (`-e`), so a restart, graceful or after `kill -9`, finds it
//! as memory held it; anonymous memory without.
//!
//! ```text
//!  header (4 KiB): magic │ secret u64 │ parts u32 │ set bytes u32 │ ring slots u32
//!  per partition (stride 21 KiB):
//!    commit slot A (320 B) │ commit slot B (320 B) │ live counts (64 B: shadowed
//!    u32) │ ring: RING_SLOTS x u64 │ open block (4 KiB)
//!  commit slot: seq u64 │ check u32 │ sets u32 │ bloom units u32 │ ring head u32 │
//!               bloom check u32 │ items u32 │ item bytes u64 │
//!               pieces 16 x (page u32 │ version u32 │ first block u32 │ units u32)
//!  ring slot:   0 empty │ OPEN (bit 63): the open block │ PLACED (bit 62) │
//!               page 0..19 │ 4 KiB block in the page 20..33 │ page version 34..49
//! ```
//!
//! - A rewrite commits by writing the slot not in use with the next
//!   sequence number (its check last): a `kill -9` in the middle leaves a
//!   slot whose check fails, and the other, older one stands (its extent
//!   is still on the device: pages are reclaimed only after a commit).
//! - The ring holds the partition's log blocks in log order, from the
//!   committed head to the first empty slot; a rewrite consumes the front
//!   and commits the new head, then clears the slots it consumed (a crash
//!   between leaves stale slots past the tail, which `open` clears).

use std::path::Path;

use memmap2::MmapMut;
use xxhash_rust::xxh3::xxh3_64;

use super::geometry::LOG_BLOCK;
use super::index::RING_SLOTS;
use crate::seg::flash::mapped;

const MAGIC: &[u8; 8] = b"STRSMDR1";
const HEAD: usize = 4096;
const SLOT: usize = 320;
/// Pieces an extent is written in at most (`geometry.rs` keeps an extent
/// within 4 pages: 6 pieces at most, with its filters).
pub const MAX_PIECES: usize = 16;

pub const RING_OPEN: u64 = 1 << 63;
const RING_PLACED: u64 = 1 << 62;

/// A log block's place on the device, as a ring slot names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAt {
    pub page: u32,
    /// 4 KiB block number within the page.
    pub block: u32,
    /// The page's version, low 16 bits.
    pub version16: u16,
}

impl BlockAt {
    pub fn pack(self) -> u64 {
        debug_assert!(self.page < 1 << 20 && self.block < 1 << 14);
        RING_PLACED | u64::from(self.page) | u64::from(self.block) << 20 | u64::from(self.version16) << 34
    }

    pub fn unpack(s: u64) -> Option<BlockAt> {
        (s & RING_PLACED != 0 && s & RING_OPEN == 0).then_some(BlockAt {
            page: (s & 0xf_ffff) as u32,
            block: ((s >> 20) & 0x3fff) as u32,
            version16: (s >> 34) as u16,
        })
    }
}

/// One piece of an extent: `units` 4 KiB blocks from `first_block` of `page`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    pub page: u32,
    pub version: u32,
    pub first_block: u32,
    pub units: u32,
}

/// A partition's committed state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Commit {
    /// 0: nothing ever committed.
    pub seq: u64,
    pub sets: u32,
    /// 4 KiB blocks of filters after the sets.
    pub bloom_units: u32,
    pub ring_head: u32,
    pub bloom_check: u32,
    pub items: u32,
    pub item_bytes: u64,
    pub pieces: [Piece; MAX_PIECES],
}

impl Commit {
    fn encode(&self, out: &mut [u8]) {
        out[..SLOT].fill(0);
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[12..16].copy_from_slice(&self.sets.to_le_bytes());
        out[16..20].copy_from_slice(&self.bloom_units.to_le_bytes());
        out[20..24].copy_from_slice(&self.ring_head.to_le_bytes());
        out[24..28].copy_from_slice(&self.bloom_check.to_le_bytes());
        out[28..32].copy_from_slice(&self.items.to_le_bytes());
        out[32..40].copy_from_slice(&self.item_bytes.to_le_bytes());
        for (i, p) in self.pieces.iter().enumerate() {
            let at = 40 + i * 16;
            for (j, v) in [p.page, p.version, p.first_block, p.units].into_iter().enumerate() {
                out[at + j * 4..at + j * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        let check = slot_check(out);
        out[8..12].copy_from_slice(&check.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Commit> {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(b[0..8].try_into().expect("8 bytes"));
        if seq == 0 || u32_at(8) != slot_check(b) {
            return None;
        }
        let mut pieces = [Piece::default(); MAX_PIECES];
        for (i, p) in pieces.iter_mut().enumerate() {
            let at = 40 + i * 16;
            *p = Piece { page: u32_at(at), version: u32_at(at + 4), first_block: u32_at(at + 8), units: u32_at(at + 12) };
        }
        Some(Commit {
            seq,
            sets: u32_at(12),
            bloom_units: u32_at(16),
            ring_head: u32_at(20),
            bloom_check: u32_at(24),
            items: u32_at(28),
            item_bytes: u64::from_le_bytes(b[32..40].try_into().expect("8 bytes")),
            pieces,
        })
    }

    /// 4 KiB blocks in the extent (sets, then filters).
    pub fn units(&self) -> u32 {
        self.pieces.iter().map(|p| p.units).sum()
    }

    /// Where extent unit `unit` (counted from the extent's first) is.
    pub fn unit_at(&self, unit: u32) -> Option<(u32, u32)> {
        let mut first = 0;
        for p in self.pieces.iter().filter(|p| p.units > 0) {
            if unit < first + p.units {
                return Some((p.page, p.first_block + unit - first));
            }
            first += p.units;
        }
        None
    }
}

/// The check of a commit slot: xxh3 of every byte but the check itself.
fn slot_check(b: &[u8]) -> u32 {
    let mut bytes = [0u8; SLOT];
    bytes.copy_from_slice(&b[..SLOT]);
    bytes[8..12].fill(0);
    xxh3_64(&bytes) as u32
}

/// The shard's directory mapping (module docs).
pub struct Dir {
    map: MmapMut,
    parts: usize,
}

/// Bytes of a partition's live counts (changed in place, not committed).
const LIVE: usize = 64;

/// Bytes a partition takes in the directory.
pub fn stride() -> usize {
    2 * SLOT + LIVE + RING_SLOTS * 8 + LOG_BLOCK
}

/// The mapping's length for `parts` partitions.
pub fn file_bytes(parts: usize) -> usize {
    HEAD + parts * stride()
}

impl Dir {
    /// A directory for `parts` partitions: the file at `path` (whose
    /// contents are kept if an earlier process left a directory of this
    /// shape and `recover`; else started afresh) or anonymous memory.
    /// Returns it and whether it was recovered.
    pub fn open(path: Option<&Path>, parts: usize, secret: u64, set_bytes: usize, recover: bool) -> std::io::Result<(Dir, bool)> {
        let len = file_bytes(parts);
        let mut map = match path {
            Some(path) => {
                let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
                if file.metadata()?.len() != len as u64 {
                    file.set_len(0)?;
                    file.set_len(len as u64)?;
                }
                mapped::map(&file, len)?
            }
            None => MmapMut::map_anon(len)?,
        };
        let fits = recover
            && &map[0..8] == MAGIC
            && map[8..16] == secret.to_le_bytes()
            && map[16..20] == (parts as u32).to_le_bytes()
            && map[20..24] == (set_bytes as u32).to_le_bytes()
            && map[24..28] == (RING_SLOTS as u32).to_le_bytes();
        if !fits {
            map.fill(0);
            map[8..16].copy_from_slice(&secret.to_le_bytes());
            map[16..20].copy_from_slice(&(parts as u32).to_le_bytes());
            map[20..24].copy_from_slice(&(set_bytes as u32).to_le_bytes());
            map[24..28].copy_from_slice(&(RING_SLOTS as u32).to_le_bytes());
            map[0..8].copy_from_slice(MAGIC);
        }
        Ok((Dir { map, parts }, fits))
    }

    fn base(&self, part: usize) -> usize {
        debug_assert!(part < self.parts);
        HEAD + part * stride()
    }

    /// The partition's committed state: the valid slot with the higher
    /// sequence (a fresh partition: the default, seq 0).
    pub fn commit(&self, part: usize) -> Commit {
        let b = self.base(part);
        let a = Commit::decode(&self.map[b..b + SLOT]);
        let c = Commit::decode(&self.map[b + SLOT..b + 2 * SLOT]);
        match (a, c) {
            (Some(a), Some(c)) => {
                if a.seq >= c.seq {
                    a
                } else {
                    c
                }
            }
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => Commit::default(),
        }
    }

    /// Commit `c` (its `seq` above the current one's) into the slot not
    /// holding the current state.
    pub fn write_commit(&mut self, part: usize, c: &Commit) {
        let b = self.base(part);
        let a = Commit::decode(&self.map[b..b + SLOT]).map_or(0, |s| s.seq);
        let other = Commit::decode(&self.map[b + SLOT..b + 2 * SLOT]).map_or(0, |s| s.seq);
        debug_assert!(c.seq > a.max(other));
        let at = if a <= other { b } else { b + SLOT };
        c.encode(&mut self.map[at..at + SLOT]);
    }

    /// The partition's `shadowed` count (`Part::shadowed`), as last kept.
    pub fn shadowed(&self, part: usize) -> u32 {
        let b = self.base(part) + 2 * SLOT;
        u32::from_le_bytes(self.map[b..b + 4].try_into().expect("4 bytes"))
    }

    pub fn set_shadowed(&mut self, part: usize, n: u32) {
        let b = self.base(part) + 2 * SLOT;
        self.map[b..b + 4].copy_from_slice(&n.to_le_bytes());
    }

    pub fn ring(&self, part: usize) -> &[u64] {
        let b = self.base(part) + 2 * SLOT + LIVE;
        bytemuck::cast_slice(&self.map[b..b + RING_SLOTS * 8])
    }

    pub fn ring_mut(&mut self, part: usize) -> &mut [u64] {
        let b = self.base(part) + 2 * SLOT + LIVE;
        bytemuck::cast_slice_mut(&mut self.map[b..b + RING_SLOTS * 8])
    }

    pub fn open_block(&self, part: usize) -> &[u8] {
        let b = self.base(part) + 2 * SLOT + LIVE + RING_SLOTS * 8;
        &self.map[b..b + LOG_BLOCK]
    }

    pub fn open_block_mut(&mut self, part: usize) -> &mut [u8] {
        let b = self.base(part) + 2 * SLOT + LIVE + RING_SLOTS * 8;
        &mut self.map[b..b + LOG_BLOCK]
    }

    /// Bytes of the mapping (counted in `-m`).
    pub fn bytes(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_alternate_and_a_torn_one_leaves_the_last() {
        let dir = std::env::temp_dir().join(format!("strata-smalldir-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let (mut d, recovered) = Dir::open(Some(&dir), 3, 9, 4096, true).expect("open");
        assert!(!recovered);
        assert_eq!(d.commit(1), Commit::default());
        let mut c = Commit { seq: 1, sets: 10, bloom_units: 1, ring_head: 5, bloom_check: 7, items: 300, item_bytes: 30_000, ..Commit::default() };
        c.pieces[0] = Piece { page: 3, version: 2, first_block: 100, units: 11 };
        d.write_commit(1, &c);
        assert_eq!(d.commit(1), c);
        let c2 = Commit { seq: 2, sets: 20, ..c };
        d.write_commit(1, &c2);
        assert_eq!(d.commit(1), c2);
        assert_eq!(d.commit(0), Commit::default());
        // A torn write of the next commit: the slot it went to fails its check.
        let c3 = Commit { seq: 3, sets: 30, ..c };
        d.write_commit(1, &c3);
        let b = d.base(1);
        let at = if Commit::decode(&d.map[b..b + SLOT]).is_some_and(|s| s.seq == 3) { b } else { b + SLOT };
        d.map[at + 12] ^= 1;
        assert_eq!(d.commit(1), c2);
        d.ring_mut(2)[7] = BlockAt { page: 5, block: 9, version16: 3 }.pack();
        d.open_block_mut(2)[0] = 42;
        drop(d);
        let (d, recovered) = Dir::open(Some(&dir), 3, 9, 4096, true).expect("reopen");
        assert!(recovered);
        assert_eq!((d.commit(1), BlockAt::unpack(d.ring(2)[7]), d.open_block(2)[0]), (c2, Some(BlockAt { page: 5, block: 9, version16: 3 }), 42));
        let (d, recovered) = Dir::open(Some(&dir), 4, 9, 4096, true).expect("another shape");
        assert!(!recovered && d.commit(1) == Commit::default());
        assert_eq!(c.unit_at(10), Some((3, 110)));
        assert_eq!(c.unit_at(11), None);
        let _ = std::fs::remove_file(&dir);
    }
}
