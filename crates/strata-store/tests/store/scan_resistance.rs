//! Scan resistance (`seg/ghost.rs`): keys that return after a one-time scan
//! longer than the cache end up resident, and later scans leave them be.
//!
//! Demand-filled rounds through a 4 MiB store: a scan of one-time keys 1.5
//! times what the cache holds, with every hot key read once (and set on a
//! miss) along the way. Each hot key is read once per round, so it is never read
//! while in its `Small` segment and S3-FIFO alone never promotes it: every
//! scan flushes it, and every round misses all of it. With the ghost, a hot
//! key that comes back after being evicted unread is promoted when its
//! `Small` segment is evicted, and from the third round on it hits.

use strata_store::{Engine, EngineConfig, GetAction, GetOptions, SegStore, StoreRequest};

const NOW: u32 = 100;
const HOT: usize = 1_000;

fn get_or_set(engine: &SegStore, key: &[u8], value: &[u8]) -> bool {
    if engine.get(key, GetOptions::default(), NOW, &mut |_, _| GetAction::default()) {
        return true;
    }
    let req = StoreRequest::set(key, value);
    engine.store(&req, NOW);
    false
}

#[test]
fn hot_keys_survive_scans_longer_than_the_cache() {
    let engine = SegStore::new(EngineConfig { memory_limit_bytes: 4 << 20, ..EngineConfig::default() });
    let value = vec![b'v'; 200];
    // What the cache holds: fill it with one-time keys until it evicts.
    let mut scanned = 0u64;
    while engine.stats().evictions == 0 {
        for _ in 0..1_000 {
            get_or_set(&engine, format!("scan:{scanned}").as_bytes(), &value);
            scanned += 1;
        }
    }
    let capacity = engine.stats().curr_items;
    let scan_len = capacity * 3 / 2;
    let mut hits_per_round = Vec::new();
    // Hot keys are read spread through each round's scan, as a real
    // stream interleaves them (read back to back, they would fill whole
    // segments, of which eviction keeps at most KEEP_PERCENT).
    let every = scan_len / HOT as u64;
    for _ in 0..5 {
        let mut hits = 0;
        for j in 0..scan_len {
            if j % every == 0 && j / every < HOT as u64 {
                hits += usize::from(get_or_set(&engine, format!("hot:{}", j / every).as_bytes(), &value));
            }
            get_or_set(&engine, format!("scan:{scanned}").as_bytes(), &value);
            scanned += 1;
        }
        hits_per_round.push(hits);
    }
    let stats = engine.stats();
    eprintln!("capacity {capacity} items, scans of {scan_len}; hot hits per round {hits_per_round:?}; ghost {} bytes, {} hits", stats.ghost_bytes, stats.ghost_hits);
    assert!(hits_per_round[..2].iter().all(|&h| h <= HOT / 100), "the first two rounds miss (first sight, then flushed by the scan): {hits_per_round:?}");
    for (round, &hits) in hits_per_round.iter().enumerate().skip(2) {
        assert!(hits >= HOT * 9 / 10, "round {round}: only {hits} of {HOT} hot keys survived the scan: {hits_per_round:?}");
    }
    assert!(stats.ghost_hits >= HOT as u64 * 9 / 10, "ghost_hits {}", stats.ghost_hits);
    // Bounded: a few bytes per item the cache holds.
    assert!(stats.ghost_bytes > 0 && stats.ghost_bytes <= capacity * 4, "ghost_bytes {} for {capacity} items", stats.ghost_bytes);
}
