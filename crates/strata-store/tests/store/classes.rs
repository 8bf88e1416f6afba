//! The segment store's per-class counters (`stats items`, `stats slabs`,
//! `stats sizes`) for known operations on items of known sizes, and `-M`'s
//! store-wide "memory full" state.

use strata_store::{
    memcached_item_size, ClassCounters, DeleteRequest, DeltaMode, DeltaRequest, Engine, EngineConfig, GetOptions,
    SegStore, SlabClasses, StoreMode, StoreRequest, StoreResult,
};

const NOW: u32 = 100;

fn set(store: &SegStore, key: &[u8], len: usize, mode: StoreMode, cas: u64) -> StoreResult {
    let value = vec![b'7'; len];
    let req = StoreRequest::new(mode, key, &value).with_cas(cas);
    store.store(&req, NOW)
}

fn get(store: &SegStore, key: &[u8], opts: GetOptions) -> bool {
    store.get(key, opts, NOW, &mut |_, _| Default::default())
}

fn class_of(key: &[u8], len: usize) -> usize {
    usize::from(SlabClasses::default().class_of(memcached_item_size(key.len(), 0, len, true)))
}

fn row(store: &SegStore, class: usize) -> ClassCounters {
    store.class_stats(NOW).classes[class]
}

#[test]
fn requests_count_in_the_class_of_the_item_they_hit() {
    let store = SegStore::new(EngineConfig::default());
    let (small, big) = (class_of(b"s", 3), class_of(b"b", 5000));
    assert_ne!(small, big);
    assert!(matches!(set(&store, b"s", 3, StoreMode::Set, 0), StoreResult::Stored { .. }));
    assert!(matches!(set(&store, b"b", 5000, StoreMode::Set, 0), StoreResult::Stored { .. }));
    assert!(get(&store, b"s", GetOptions::default()));
    assert!(get(&store, b"s", GetOptions { no_bump: true, ..GetOptions::default() }), "mg ... u still counts");
    assert!(get(&store, b"s", GetOptions { uncounted: true, ..GetOptions::default() }), "me does not");
    assert!(get(&store, b"b", GetOptions { touch: Some(0), ..GetOptions::default() }));
    assert!(store.touch(b"b", 0, NOW));
    let incr = DeltaRequest { key: b"s", mode: DeltaMode::Incr, delta: 1, cas: 0, vivify: None, initial: 0, touch: None, new_cas: None, in_place: true };
    store.delta(&incr, NOW);
    store.delta(&DeltaRequest { mode: DeltaMode::Decr, ..incr }, NOW);
    assert_eq!(set(&store, b"b", 5000, StoreMode::Cas, 12345), StoreResult::Exists);
    let s = row(&store, small);
    assert_eq!((s.get_hits, s.hits_to_hot, s.touch_hits, s.incr_hits, s.decr_hits), (2, 2, 0, 1, 1));
    assert_eq!((s.cmd_set, s.number(), s.number_hot), (1, 1, 1));
    assert_eq!(s.mem_requested, memcached_item_size(1, 0, 3, true) as u64);
    let b = row(&store, big);
    assert_eq!((b.get_hits, b.touch_hits, b.cmd_set, b.cas_badval, b.cas_hits), (0, 2, 2, 1, 0));
    let cas = {
        let mut cas = 0;
        store.get(b"b", GetOptions { uncounted: true, ..GetOptions::default() }, NOW, &mut |v, _| {
            cas = v.meta.cas;
            Default::default()
        });
        cas
    };
    assert!(matches!(set(&store, b"b", 5000, StoreMode::Cas, cas), StoreResult::Stored { .. }));
    store.delete(&DeleteRequest { key: b"b", ..DeleteRequest::default() }, NOW);
    let b = row(&store, big);
    assert_eq!((b.cas_hits, b.delete_hits, b.number(), b.mem_requested), (1, 1, 0, 0));
    store.reset_stats();
    let s = row(&store, small);
    assert_eq!((s.get_hits, s.cmd_set, s.number()), (0, 0, 1), "reset keeps the population");
}

#[test]
fn evictions_and_expiry_count_per_class() {
    let store = SegStore::new(EngineConfig { memory_limit_bytes: 2 << 20, ..EngineConfig::default() });
    for i in 0..2000u32 {
        let key = format!("key{i:05}");
        assert!(matches!(set(&store, key.as_bytes(), 3000, StoreMode::Set, 0), StoreResult::Stored { .. }));
    }
    let class = class_of(b"key00000", 3000);
    let stats = store.stats();
    let c = row(&store, class);
    assert!(stats.evictions > 0);
    assert_eq!(c.evicted, stats.evictions, "every eviction was of this class");
    assert_eq!(c.evicted_unfetched, stats.evicted_unfetched);
    assert_eq!(c.number(), stats.curr_items);
    assert_eq!(c.evicted_nonzero, 0, "no item had a TTL");
    let all: u64 = store.class_stats(NOW).classes.iter().map(|c| c.evicted).sum();
    assert_eq!(all, c.evicted);
}

#[test]
fn track_sizes_counts_live_items_per_32_byte_bucket() {
    let store = SegStore::new(EngineConfig { track_sizes: true, ..EngineConfig::default() });
    set(&store, b"a", 5, StoreMode::Set, 0);
    set(&store, b"b", 5, StoreMode::Set, 0);
    set(&store, b"c", 500, StoreMode::Set, 0);
    store.delete(&DeleteRequest { key: b"b", ..DeleteRequest::default() }, NOW);
    let sizes = store.class_stats(NOW).sizes.expect("tracking");
    let bucket = |len| memcached_item_size(1, 0, len, true).div_ceil(32);
    assert_eq!(sizes[bucket(5)], 1);
    assert_eq!(sizes[bucket(500)], 1);
    assert_eq!(sizes.iter().sum::<u64>(), 2);
    assert!(SegStore::new(EngineConfig::default()).class_stats(NOW).sizes.is_none());
}

/// t/dash-M.t: once a store is refused, the next one is too, whichever
/// shard its key falls in; removing an item ends the refusals.
#[test]
fn without_evictions_memory_full_is_store_wide() {
    let store = SegStore::new(EngineConfig { memory_limit_bytes: 2 << 20, evictions_disabled: true, ..EngineConfig::default() });
    let mut stored = 0;
    let refused = loop {
        let key = format!("dash{stored}");
        match set(&store, key.as_bytes(), 8192, StoreMode::Set, 0) {
            StoreResult::Stored { .. } => stored += 1,
            other => break other,
        }
    };
    assert_eq!(refused, StoreResult::OutOfMemory);
    for i in 1..20 {
        let key = format!("dash{}", stored + i);
        assert_eq!(set(&store, key.as_bytes(), 8192, StoreMode::Set, 0), StoreResult::OutOfMemory, "{key}");
    }
    let class = class_of(b"dash1", 8192);
    assert_eq!(row(&store, class).outofmemory, 20);
    assert_eq!(row(&store, class).number(), stored);
    store.delete(&DeleteRequest { key: b"dash0", ..DeleteRequest::default() }, NOW);
    // The freed room is in dash0's segment: compaction reclaims it for a
    // key of the same shard; some key of the 200 next ones is.
    let again = (0..200).any(|i| matches!(set(&store, format!("new{i}").as_bytes(), 8192, StoreMode::Set, 0), StoreResult::Stored { .. }));
    assert!(again, "a delete ends the refusals");
}
