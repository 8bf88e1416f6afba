//! Walking every item in bounded steps, for key dumps (`lru_crawler
//! metadump|mgdump`, `stats cachedump`) and the crawler that reclaims
//! expired items (`lru_crawler crawl`).
//!
//! A walk is a [`WalkCursor`] the caller keeps between calls to
//! [`crate::Engine::walk`]; each call locks one shard, looks at up to a
//! budget of items, and returns, so no lock is held for longer than one
//! batch (about 50 µs for 256 items) and no list of keys is ever built:
//!
//! ```text
//!  SegStore:  cursor = (shard, segment id, segment generation, byte offset)
//!             shard 0: seg 0 [item item item ...] seg 1 [...] ...   then shard 1 ...
//!  MapStore:  cursor = (shard, position in that shard's key snapshot)
//! ```
//!
//! What a walk guarantees: an item that is live for the whole walk and
//! that nothing moves is visited exactly once. An item stored, deleted or
//! moved (SegStore: rewritten into another segment by eviction keeping it,
//! or by a CAS or TTL that outgrew its field) while the walk runs may be
//! visited once, twice or not at all; memcached's LRU crawl has the same
//! race with items that change LRU while it walks.

/// Where a walk stands. `Default` starts at the first item.
#[derive(Clone, Debug, Default)]
pub struct WalkCursor {
    pub(crate) shard: usize,
    /// SegStore: the segment being walked, its generation when the walk
    /// entered it, and the offset of the next item in it.
    pub(crate) segment: u32,
    pub(crate) gen: Option<u32>,
    pub(crate) offset: usize,
    /// MapStore: the keys of the current shard when the walk entered it.
    pub(crate) keys: Vec<Box<[u8]>>,
    /// SegStore: where the walk stands on flash, once past every shard
    /// (only a walk started [`WalkCursor::with_flash`]).
    pub(crate) flash: Option<Box<crate::seg::FlashScan>>,
    pub(crate) done: bool,
}

impl WalkCursor {
    /// A walk that also shows the items on flash, after RAM's (key dumps;
    /// its flash reads are blocking: a dump's own thread only).
    pub fn with_flash() -> WalkCursor {
        WalkCursor { flash: Some(Box::default()), ..WalkCursor::default() }
    }

    /// Every item has been visited.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// What the walk did with an item it shows the visitor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// A live item.
    Live,
    /// An expired or flushed item still linked: the visitor returns true
    /// to have the walk unlink it (the crawler), false to leave it.
    Expired,
}

/// Items looked at per call to [`crate::Engine::walk`] when the caller has
/// no better figure (dead and live alike).
pub const WALK_BATCH: usize = 256;
