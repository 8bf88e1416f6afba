//! A merge's read of the old extent: its sets front to back, a chunk (at
//! most `buf_bytes` of one piece) at a time, read by a thread of the
//! merge's own one chunk ahead, so the device reads the next chunk while
//! the merge builds and writes from this one (read, then build and write,
//! in turn, left a merge waiting on the device half its time).
//!
//! ```text
//!  reader thread:  read chunk k+1 ─► channel (one waiting) ─┐
//!  merge:          sets of chunk k ─► builder ─► stream     │
//!                  chunk k done: its buffer back ◄──────────┘ (reused)
//! ```

use std::os::unix::fs::FileExt;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::Scope;

use super::block::{self, Kind, View};
use super::dir::Commit;
use super::geometry::LOG_BLOCK;
use crate::flash_read::FlashBuf;
use crate::seg::flash::record;
use crate::seg::flash::tier::{Tier, BLOCK};

/// Sets `first..first + count` of the extent, read (count 0 with one set
/// skipped: it could not be read).
struct Chunk {
    first: u32,
    count: u32,
    buf: FlashBuf,
    /// The page's seed and the first block of the chunk's first set.
    seed: u64,
    block: u32,
}

/// Reads an extent's sets in order (module docs).
pub struct ExtentReader {
    set_bytes: usize,
    units: u32,
    chunks: Receiver<Chunk>,
    spare: SyncSender<FlashBuf>,
    at: Option<Chunk>,
    next: u32,
}

impl ExtentReader {
    /// Start reading `commit`'s sets on a thread of `scope`; at most three
    /// buffers of `buf_bytes` at once (one read, one waiting, one used).
    pub fn start<'s>(scope: &'s Scope<'s, '_>, tier: &'s Tier, commit: &Commit, set_bytes: usize, buf_bytes: usize) -> ExtentReader {
        let (chunk_tx, chunks) = sync_channel::<Chunk>(1);
        let (spare, spare_rx) = sync_channel::<FlashBuf>(3);
        let commit = *commit;
        let units = (set_bytes / LOG_BLOCK) as u32;
        scope.spawn(move || {
            let mut t = 0;
            while t < commit.sets {
                let mut buf = spare_rx.try_recv().unwrap_or_else(|_| FlashBuf::unpooled(buf_bytes));
                let (count, seed, block) = read_chunk(tier, &commit, set_bytes, units, t, &mut buf).unwrap_or_default();
                let chunk = Chunk { first: t, count, buf, seed, block };
                t += count.max(1);
                // The merge stopped (its build failed): so does the reading.
                if chunk_tx.send(chunk).is_err() {
                    return;
                }
            }
        });
        ExtentReader { set_bytes, units, chunks, spare, at: None, next: 0 }
    }

    /// The next set, checked; None if it could not be read or fails its
    /// check.
    pub fn next_set(&mut self) -> Option<View<'_>> {
        let t = self.next;
        self.next += 1;
        if self.at.as_ref().is_none_or(|c| t >= c.first + c.count.max(1)) {
            if let Some(done) = self.at.take() {
                let _ = self.spare.try_send(done.buf);
            }
            self.at = self.chunks.recv().ok();
        }
        let c = self.at.as_ref()?;
        if t < c.first || t >= c.first + c.count {
            return None;
        }
        let i = (t - c.first) as usize;
        let bytes = &c.buf[i * self.set_bytes..(i + 1) * self.set_bytes];
        View::open(bytes, block::seed(c.seed, c.block + i as u32 * self.units), Kind::Set)
    }
}

/// Read from set `t` on, as many sets as lie contiguous in its piece and
/// fit `buf`: how many, the page's seed and the first block; None if set
/// `t` could not be read.
fn read_chunk(tier: &Tier, commit: &Commit, set_bytes: usize, units: u32, t: u32, buf: &mut FlashBuf) -> Option<(u32, u64, u32)> {
    let (page, block) = commit.unit_at(t * units)?;
    let piece = commit.pieces.iter().find(|p| p.page == page && p.units > 0 && (p.first_block..p.first_block + p.units).contains(&block))?;
    let left_in_piece = (piece.first_block + piece.units - block) / units;
    let n = left_in_piece.min((buf.len() / set_bytes) as u32).min(commit.sets - t);
    let spot = &tier.spots[page as usize];
    let len = n as usize * set_bytes;
    if tier.version(page) != piece.version || tier.files[spot.file].read_exact_at(&mut buf[..len], spot.base + u64::from(block) * BLOCK).is_err() {
        return None;
    }
    Some((n, record::seed(tier.secret, page, piece.version), block))
}
