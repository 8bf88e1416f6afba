//! The index and the ghost counted in `-m` (`seg/shard/charge.rs`): a store
//! of small items, whose index is a large share of its memory, keeps its
//! segments, index and ghost together within `-m`, and its accounting
//! (`check_integrity`) holds through growth of the index and of the ghost.

use strata_store::{Engine, EngineConfig, GetAction, GetOptions, SegStore, StoreRequest};

const NOW: u32 = 100;
const LIMIT: u64 = 4 << 20;

#[test]
fn segments_index_and_ghost_fit_in_the_limit() {
    let engine = SegStore::new(EngineConfig { memory_limit_bytes: LIMIT, ..EngineConfig::default() });
    // 26-byte items (8-byte header, 10-byte key, 8-byte value): an index
    // slot (8 bytes at 68-85% full) is a third of what an item costs.
    let value = [b'v'; 8];
    let mut checked_at_growth = 0;
    let mut last_index = 0;
    for i in 0..400_000u32 {
        let key = format!("k{i:09}");
        // Demand-filled: every third key is read again soon, so the ghost
        // and the Main queue both see use.
        if !engine.get(key.as_bytes(), GetOptions::default(), NOW, &mut |_, _| GetAction::default()) {
            engine.store(&StoreRequest::set(key.as_bytes(), &value), NOW);
        }
        if i % 3 == 0 && i >= 30 {
            let back = format!("k{:09}", i - 30);
            engine.get(back.as_bytes(), GetOptions::default(), NOW, &mut |_, _| GetAction::default());
        }
        let index = engine.stats().index_bytes;
        if index != last_index {
            // Every growth of the index is charged at once.
            engine.check_integrity();
            last_index = index;
            checked_at_growth += 1;
        }
    }
    engine.check_integrity();
    let s = engine.stats();
    assert!(s.evictions > 0 && s.ghost_bytes > 0, "the store evicted and the ghost holds keys: {s:?}");
    assert!(checked_at_growth > 5, "the index grew {checked_at_growth} times");
    let uncharged = 512 * engine.shard_count() as u64;
    assert_eq!(s.charged_index_bytes + uncharged, s.index_bytes + s.ghost_bytes, "all but each shard's first 64 slots charged");
    assert!(s.malloced_bytes <= LIMIT, "allocated {} past -m {LIMIT}", s.malloced_bytes);
    let segments = s.malloced_bytes - s.charged_index_bytes;
    assert!(
        segments + s.index_bytes + s.ghost_bytes <= LIMIT + uncharged,
        "segments {segments} + index {} + ghost {} past -m {LIMIT}",
        s.index_bytes,
        s.ghost_bytes
    );
    // The index took a real share of the memory from the segments.
    assert!(s.index_bytes * 10 > LIMIT, "index {} bytes", s.index_bytes);
}
