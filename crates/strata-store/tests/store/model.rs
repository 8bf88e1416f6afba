//! The segment store against a model under a simulated clock.
//!
//! The model is `MapStore` with memory to spare, the reference engine whose
//! semantics the differential test pins to memcached's. Random sequences of
//! every operation, with TTLs, flushes and clock steps, go to both. Before
//! each step, a key the segment store no longer has while the model does is
//! allowed only if the segment store has evicted something, or a flush that
//! took effect covers the model's item (the segment store drops flushed items
//! when it meets them; memcached and the model bring such an item back when a
//! later delayed `flush_all` moves the epoch forward), and the model then
//! forgets it too; after that, every reply (values, flags, CAS, TTL,
//! fetched/stale/token marks, last access) must be identical. The store's
//! integrity walk runs after every step. Explicit CAS numbers (meta `E`:
//! below, near and far above the counter) and `md x` (replace the item with
//! an empty one) are among the operations.
//!
//! With a flash tier (`matches_the_model_with_flash`), 1 MiB of RAM sends
//! most items to flash, and every operation first goes through the
//! server's flash protocol (`Driven`): an item found on flash is read back
//! and the operation then runs on it, so every reply must still match.

use proptest::prelude::*;
use strata_store::{
    memcached_item_size, DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, EmptyItem, Engine, EngineConfig,
    EngineStats, GetAction, GetOptions, ItemMeta, ItemView, MapStore, RelTime, SegStore, SlabClasses, StoreMode, StoreRequest,
    StoreResult, Visit, WalkCursor,
};

/// A segment store as the server drives it when it has a flash tier: before
/// a command on a key, the key's flash copy (if any) is read (blocking here)
/// and brought into RAM.
struct Driven<'a>(&'a SegStore);

impl Driven<'_> {
    fn fetch(&self, key: &[u8], now: RelTime) {
        // A record that moved while it was read is read again (the server's
        // `FlashFinish::Moved`).
        for _ in 0..4 {
            let Some(read) = self.0.flash_check(key, now) else { return };
            let data = read.read_blocking().ok();
            if self.0.finish_flash_read(&read, data.as_deref(), GetOptions::default(), true, now, &mut |_, _| GetAction::default())
                != strata_store::FlashFinish::Moved
            {
                return;
            }
        }
    }
}

impl Engine for Driven<'_> {
    fn get(&self, key: &[u8], opts: GetOptions, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, bool) -> GetAction) -> bool {
        self.fetch(key, now);
        self.0.get(key, opts, now, visit)
    }
    fn store(&self, req: &StoreRequest<'_>, now: RelTime) -> StoreResult {
        if req.mode != StoreMode::Set {
            self.fetch(req.key, now);
        }
        self.0.store(req, now)
    }
    fn delta(&self, req: &DeltaRequest<'_>, now: RelTime) -> DeltaResult {
        self.fetch(req.key, now);
        self.0.delta(req, now)
    }
    fn delete(&self, req: &DeleteRequest<'_>, now: RelTime) -> DeleteResult {
        self.fetch(req.key, now);
        self.0.delete(req, now)
    }
    fn touch(&self, key: &[u8], exptime: RelTime, now: RelTime) -> bool {
        self.fetch(key, now);
        self.0.touch(key, exptime, now)
    }
    fn flush_all(&self, at: RelTime, now: RelTime) {
        self.0.flush_all(at, now)
    }
    fn stats(&self) -> EngineStats {
        self.0.stats()
    }
    fn item_size_ok(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        self.0.item_size_ok(key_len, flags, value_len)
    }
    fn set_memory_limit(&self, bytes: u64) {
        self.0.set_memory_limit(bytes)
    }
    fn maintain(&self, now: RelTime, reclaim_expired: bool) {
        self.0.maintain(now, reclaim_expired)
    }
    fn walk(&self, cursor: &mut WalkCursor, budget: usize, now: RelTime, visit: &mut dyn FnMut(ItemView<'_>, Visit) -> bool) -> bool {
        self.0.walk(cursor, budget, now, visit)
    }
    fn reset_stats(&self) {
        self.0.reset_stats()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Get { key: u8, touch: Option<u8>, no_bump: bool, vivify: Option<u8>, token: bool, new_cas: Option<u8> },
    Store { key: u8, mode: u8, len: u16, flags: u32, ttl: u8, cas: u8, invalidate: bool, vivify: Option<u8>, new_cas: Option<u8> },
    Delta { key: u8, incr: bool, delta: u64, in_place: bool, touch: Option<u8>, vivify: Option<u8>, cas: u8, new_cas: Option<u8> },
    Delete { key: u8, cas: u8, invalidate: bool, touch: Option<u8>, empty: Option<(u32, u8)>, new_cas: Option<u8> },
    Touch { key: u8, ttl: u8 },
    Flush { delay: u8 },
    Tick { seconds: u8 },
}

fn op(keys: u8, heavy: bool) -> impl Strategy<Value = Op> {
    op_with(keys, heavy, 1)
}

/// `op`, with items given no TTL `forever` times as often as a short one.
fn op_with(keys: u8, heavy: bool, forever: u32) -> impl Strategy<Value = Op> {
    let (store_weight, flush_weight) = if heavy { (16, 0) } else { (6, 1) };
    let key = 0u8..keys;
    let ttl = prop_oneof![forever => Just(0u8), 1 => 1u8..20];
    prop_oneof![
        6 => (key.clone(), proptest::option::weighted(0.2, ttl.clone()), any::<bool>(), proptest::option::weighted(0.1, ttl.clone()), any::<bool>(), explicit())
            .prop_map(|(key, touch, no_bump, vivify, token, new_cas)| Op::Get { key, touch, no_bump, vivify, token, new_cas }),
        store_weight => (key.clone(), 0u8..6, prop_oneof![0u16..40, 0u16..3000, 10_000u16..20_000], prop_oneof![Just(0u32), any::<u32>()], ttl.clone(), 0u8..3, any::<bool>(), proptest::option::weighted(0.2, ttl.clone()), explicit())
            .prop_map(|(key, mode, len, flags, ttl, cas, invalidate, vivify, new_cas)| Op::Store { key, mode, len, flags, ttl, cas, invalidate, vivify, new_cas }),
        2 => (key.clone(), any::<bool>(), prop_oneof![0u64..1000, Just(u64::MAX)], any::<bool>(), proptest::option::weighted(0.2, ttl.clone()), proptest::option::weighted(0.2, ttl.clone()), 0u8..3, explicit())
            .prop_map(|(key, incr, delta, in_place, touch, vivify, cas, new_cas)| Op::Delta { key, incr, delta, in_place, touch, vivify, cas, new_cas }),
        2 => (key.clone(), 0u8..3, any::<bool>(), proptest::option::weighted(0.3, ttl.clone()), proptest::option::weighted(0.3, (prop_oneof![Just(0u32), any::<u32>()], ttl.clone())), explicit())
            .prop_map(|(key, cas, invalidate, touch, empty, new_cas)| Op::Delete { key, cas, invalidate, touch, empty, new_cas }),
        1 => (key, ttl).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        flush_weight => prop_oneof![Just(0u8), 1u8..5].prop_map(|delay| Op::Flush { delay }),
        2 => (0u8..4).prop_map(|seconds| Op::Tick { seconds }),
    ]
}

/// Meta `E`, now and then.
fn explicit() -> impl Strategy<Value = Option<u8>> {
    proptest::option::weighted(0.15, any::<u8>())
}

/// An explicit CAS: below the counter, near it, or far above it.
fn explicit_cas(e: u8) -> u64 {
    match e % 3 {
        0 => 1 + u64::from(e),
        1 => 300 + u64::from(e),
        _ => (1 << 40) + u64::from(e),
    }
}

fn key_of(k: u8) -> Vec<u8> {
    // A few long keys, so items straddle sizes.
    if k % 7 == 0 {
        format!("long-key-{k}-{}", "x".repeat(200)).into_bytes()
    } else {
        format!("key:{k}").into_bytes()
    }
}

fn value_of(key: u8, len: u16, step: usize) -> Vec<u8> {
    if len % 5 == 0 {
        // Numbers, so incr/decr find counters.
        return (u64::from(len) * 7 + step as u64).to_string().into_bytes();
    }
    (0..len as usize).map(|i| b'a' + ((i + step + usize::from(key)) % 26) as u8).collect()
}

/// What a read saw: value and every field of the metadata.
type Seen = Option<(Vec<u8>, ItemMeta, bool)>;

fn read(store: &dyn Engine, key: &[u8], opts: GetOptions, token: bool, now: RelTime) -> Seen {
    let mut seen = None;
    store.get(key, opts, now, &mut |view, created| {
        seen = Some((view.value.to_vec(), view.meta, created));
        GetAction { set_token_sent: token }
    });
    seen
}

fn peek(store: &dyn Engine, key: &[u8], now: RelTime) -> Seen {
    read(store, key, GetOptions { no_bump: true, uncounted: true, ..GetOptions::default() }, false, now)
}

/// The per-class population (`stats items` `number` and `mem_requested`)
/// must be exactly what the live items add up to, by memcached's size
/// arithmetic and class table, whatever moved, expired or was evicted.
fn check_classes(seg: &SegStore, keys: u8, cas_disabled: bool, now: RelTime) {
    let classes = SlabClasses::default();
    let mut expected = vec![(0u64, 0u64); classes.len() + 1];
    for key in 0..keys {
        let k = key_of(key);
        if let Some((value, meta, _)) = peek(seg, &k, now) {
            let size = memcached_item_size(k.len(), meta.flags, value.len(), !cas_disabled);
            let row = &mut expected[usize::from(classes.class_of(size))];
            row.0 += 1;
            row.1 += size as u64;
        }
    }
    let stats = seg.class_stats(now);
    for (id, &(number, bytes)) in expected.iter().enumerate() {
        let c = &stats.classes[id];
        assert_eq!((c.number_hot + c.number_warm, c.mem_requested), (number, bytes), "class {id}");
        // Items on flash are shown in the classes of the headers memcached
        // would keep for them, and only there.
        assert!(c.number_cold == 0 || c.flash_written > 0, "class {id}");
    }
    let on_flash = seg.ext_stats().map_or(0, |x| x.objects_used);
    assert_eq!(stats.classes.iter().map(|c| c.number_cold).sum::<u64>(), on_flash);
}

/// The CAS a client would send: the current one, a wrong one, or none.
fn cas_for(store: &dyn Engine, key: &[u8], choice: u8, now: RelTime) -> u64 {
    let current = peek(store, key, now).map(|(_, meta, _)| meta.cas).unwrap_or(0);
    match choice {
        0 => 0,
        1 => current,
        _ => current + 1,
    }
}

fn ttl_at(ttl: u8, now: RelTime) -> RelTime {
    if ttl == 0 {
        0
    } else {
        now + RelTime::from(ttl)
    }
}

fn apply(store: &dyn Engine, op: &Op, step: usize, now: RelTime) -> String {
    match *op {
        Op::Get { key, touch, no_bump, vivify, token, new_cas } => {
            let opts = GetOptions {
                touch: touch.map(|t| ttl_at(t, now)),
                no_bump,
                vivify: vivify.map(|t| ttl_at(t, now)),
                vivify_cas: new_cas.map(explicit_cas),
                // Every other step a plain get's promise (seg/read.rs marks
                // the fetch after an optimistic read): the same state after.
                fetched_unseen: step % 2 == 1,
                // Every third step the hash a multi-get computed for it.
                hash: (step % 3 == 0).then(|| strata_store::hash_key(&key_of(key))),
                ..GetOptions::default()
            };
            format!("{:?}", read(store, &key_of(key), opts, token, now))
        }
        Op::Store { key, mode, len, flags, ttl, cas, invalidate, vivify, new_cas } => {
            let k = key_of(key);
            let mode = [StoreMode::Set, StoreMode::Add, StoreMode::Replace, StoreMode::Append, StoreMode::Prepend, StoreMode::Cas][usize::from(mode)];
            let value = value_of(key, len, step);
            let req = StoreRequest {
                key: &k,
                value: &value,
                flags,
                exptime: ttl_at(ttl, now),
                mode,
                cas: cas_for(store, &k, cas, now),
                invalidate,
                vivify_ttl: vivify.map(|t| ttl_at(t, now)),
                key_binary: key % 3 == 0,
                new_cas: new_cas.map(explicit_cas),
            };
            format!("{:?}", store.store(&req, now))
        }
        Op::Delta { key, incr, delta, in_place, touch, vivify, cas, new_cas } => {
            let k = key_of(key);
            let req = DeltaRequest {
                key: &k,
                mode: if incr { DeltaMode::Incr } else { DeltaMode::Decr },
                delta,
                cas: cas_for(store, &k, cas, now),
                vivify: vivify.map(|t| ttl_at(t, now)),
                initial: u64::from(key) * 3,
                touch: touch.map(|t| ttl_at(t, now)),
                in_place,
                new_cas: new_cas.map(explicit_cas),
            };
            format!("{:?}", store.delta(&req, now))
        }
        Op::Delete { key, cas, invalidate, touch, empty, new_cas } => {
            let k = key_of(key);
            let cas = if cas == 0 { None } else { Some(cas_for(store, &k, cas, now)) };
            let req = DeleteRequest {
                key: &k,
                cas,
                invalidate,
                touch: touch.map(|t| ttl_at(t, now)),
                empty: empty.map(|(flags, ttl)| EmptyItem { flags, exptime: ttl_at(ttl, now) }),
                new_cas: new_cas.map(explicit_cas),
            };
            format!("{:?}", store.delete(&req, now))
        }
        Op::Touch { key, ttl } => format!("{}", store.touch(&key_of(key), ttl_at(ttl, now), now)),
        Op::Flush { delay } => {
            store.flush_all(if delay == 0 { 0 } else { now + RelTime::from(delay) }, now);
            String::new()
        }
        Op::Tick { .. } => {
            store.maintain(now, true);
            String::new()
        }
    }
}

/// A reply with its CAS numbers blanked.
fn mask_cas(reply: &str) -> String {
    let mut out = String::new();
    let mut rest = reply;
    while let Some(i) = rest.find("cas: ") {
        out.push_str(&rest[..i + 5]);
        rest = rest[i + 5..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('_');
    }
    out.push_str(rest);
    out
}

fn run(ops: &[Op], memory_bytes: u64, cas_disabled: bool) {
    run_with(ops, memory_bytes, cas_disabled, None);
}

/// Items that left the store: RAM evictions, and flash copies lost to page
/// reclaim, failed writes or checks.
fn losses(seg: &SegStore) -> u64 {
    let flash = seg
        .ext_stats()
        .map_or(0, |x| x.objects_evicted + x.write_fallbacks + x.badcrc_from_extstore + x.miss_from_extstore + x.small.dropped);
    seg.stats().evictions + flash
}

/// `run` with a flash tier of `flash_bytes` (64 KiB pages, 32 KiB write
/// buffer, every item size) in a temporary file.
fn run_flash(ops: &[Op], memory_bytes: u64, flash_bytes: u64) {
    use std::sync::Arc;
    use strata_store::{ExtConfig, ExtPath, ExtTunable, ExtTunables};
    let path = std::env::temp_dir().join(format!("strata-model-flash-{}-{:?}", std::process::id(), std::thread::current().id()));
    let tunables = Arc::new(ExtTunables::default());
    tunables.set(ExtTunable::ItemSize(0));
    let ext = ExtConfig {
        paths: vec![ExtPath { path: path.clone(), size_bytes: flash_bytes, bucket: Default::default() }],
        page_size_bytes: 64 << 10,
        wbuf_size_bytes: 32 << 10,
        tunables,
        ..ExtConfig::default()
    };
    let config = EngineConfig { memory_limit_bytes: memory_bytes, ..EngineConfig::default() };
    let mut seg = SegStore::new(config.clone());
    seg.attach_flash(ext).expect("flash tier");
    run_on(ops, &seg, &Driven(&seg), config);
    let st = seg.ext_stats().expect("flash stats");
    assert_eq!((st.badcrc_from_extstore, st.io_queue), (0, 0));
    if std::env::var_os("STRATA_FLASH_MODEL_VERBOSE").is_some() {
        eprintln!(
            "ops {} written {} read {} reclaimed pages {}; small: {:?}",
            ops.len(),
            st.objects_written,
            st.objects_read,
            st.page_evictions,
            st.small
        );
    }
    let _ = std::fs::remove_file(&path);
}

/// With `file`, the store lives in a memory file and is restarted from it
/// every 50 steps, alternately after a graceful stop and after a crash
/// (dropped without `close`, as `kill -9` leaves the file); the model goes on
/// as if nothing happened, so every item must come back exactly.
fn run_with(ops: &[Op], memory_bytes: u64, cas_disabled: bool, file: Option<&std::path::Path>) {
    let config = EngineConfig { memory_limit_bytes: memory_bytes, cas_disabled, ..EngineConfig::default() };
    let open = |config: &EngineConfig| match file {
        Some(path) => SegStore::open_file(config.clone(), path, false).expect("memory file").0,
        None => SegStore::new(config.clone()),
    };
    if let Some(path) = file {
        let _ = std::fs::remove_file(path);
    }
    if file.is_none() {
        let seg = open(&config);
        return run_on(ops, &seg, &seg, config);
    }
    let mut seg = open(&config);
    let mut evicted_before = 0;
    let model = MapStore::new(EngineConfig { memory_limit_bytes: 1 << 40, ..config.clone() });
    let mut now: RelTime = 100;
    let mut flushes: Vec<(RelTime, u64)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        if file.is_some() && step % 50 == 49 {
            if step % 100 == 99 {
                seg.close().expect("graceful stop");
            }
            evicted_before += seg.stats().evictions;
            drop(seg);
            seg = open(&config);
            seg.check_integrity();
        }
        if let Op::Tick { seconds } = op {
            now += RelTime::from(*seconds);
        }
        let op_key = match op {
            Op::Get { key, .. } | Op::Store { key, .. } | Op::Delta { key, .. } | Op::Delete { key, .. } | Op::Touch { key, .. } => Some(*key),
            Op::Flush { .. } | Op::Tick { .. } => None,
        };
        if let Some(key) = op_key {
            let k = key_of(key);
            let (mut s, mut m) = (peek(&seg, &k, now), peek(&model, &k, now));
            if file.is_some() {
                // CAS numbers jump after a crash (see CAS_GAP_AFTER_CRASH).
                for seen in [&mut s, &mut m].into_iter().flatten() {
                    seen.1.cas = 0;
                }
            }
            if s.is_none() && m.is_some() {
                let (meta, _) = model.probe(&k).expect("model has it");
                let flushed = flushes
                    .iter()
                    .any(|&(live, cas)| meta.last_access <= live || (cas != 0 && meta.cas < cas && meta.last_access <= live + 1));
                assert!(flushed || evicted_before + seg.stats().evictions > 0, "step {step}: {op:?}: key {key} lost without an eviction");
                model.delete(&DeleteRequest { key: &k, ..DeleteRequest::default() }, now);
            } else {
                assert_eq!(s, m, "step {step}: {op:?}: stores disagree before the op");
            }
        }
        let (mut a, mut b) = (apply(&seg, op, step, now), apply(&model, op, step, now));
        if file.is_some() {
            (a, b) = (mask_cas(&a), mask_cas(&b));
        }
        assert_eq!(a, b, "step {step}: {op:?}");
        seg.check_integrity();
        let epoch = model.flush_epoch();
        if epoch.0 != 0 && epoch.0 <= now && !flushes.contains(&epoch) {
            flushes.push(epoch);
        }
        let stats = seg.stats();
        assert_segments_within_limit(&stats, seg.allocated_bytes(), memory_bytes);
        assert!(stats.curr_items <= model.stats().curr_items);
        if step % 25 == 24 || step + 1 == ops.len() {
            check_classes(&seg, 250, cas_disabled, now);
        }
    }
}

/// Segment buffers never take more than -m. The index's growth and the
/// ghost count in -m too (`seg/shard/charge.rs`), charged when they grow:
/// a growth may take the total past -m until the next segment freed goes
/// back to the kernel instead of the pool (`index_charge.rs` checks that
/// it comes back within -m).
fn assert_segments_within_limit(stats: &strata_store::EngineStats, allocated: u64, memory_bytes: u64) {
    let segments = allocated - stats.charged_index_bytes;
    assert!(segments <= memory_bytes.max(1 << 20), "segments past -m: {segments} of {allocated} allocated");
}

/// The model run without restarts: `store` is how operations reach `seg`
/// (itself, or `Driven` with a flash tier).
fn run_on(ops: &[Op], seg: &SegStore, store: &dyn Engine, config: EngineConfig) {
    let memory_bytes = config.memory_limit_bytes;
    let cas_disabled = config.cas_disabled;
    let model = MapStore::new(EngineConfig { memory_limit_bytes: 1 << 40, ..config });
    let mut now: RelTime = 100;
    let mut flushes: Vec<(RelTime, u64)> = Vec::new();
    let mut rewrite = strata_store::FlashRewrite::default();
    let mut compact = strata_store::FlashCompact::default();
    for (step, op) in ops.iter().enumerate() {
        if let Op::Tick { seconds } = op {
            now += RelTime::from(*seconds);
        }
        let op_key = match op {
            Op::Get { key, .. } | Op::Store { key, .. } | Op::Delta { key, .. } | Op::Delete { key, .. } | Op::Touch { key, .. } => Some(*key),
            Op::Flush { .. } | Op::Tick { .. } => None,
        };
        if let Some(key) = op_key {
            let k = key_of(key);
            let (s, m) = (peek(store, &k, now), peek(&model, &k, now));
            if s.is_none() && m.is_some() {
                let (meta, _) = model.probe(&k).expect("model has it");
                let flushed = flushes
                    .iter()
                    .any(|&(live, cas)| meta.last_access <= live || (cas != 0 && meta.cas < cas && meta.last_access <= live + 1));
                assert!(flushed || losses(seg) > 0, "step {step}: {op:?}: key {key} lost without an eviction");
                model.delete(&DeleteRequest { key: &k, ..DeleteRequest::default() }, now);
            } else {
                assert_eq!(s, m, "step {step}: {op:?}: stores disagree before the op");
            }
        }
        let (a, b) = (apply(store, op, step, now), apply(&model, op, step, now));
        assert_eq!(a, b, "step {step}: {op:?}");
        if step % 11 == 10 {
            // The small store's partitions rewritten: items move from its
            // log into sets, tombstones and replaced copies go.
            seg.flash_merge_all(now, &mut rewrite);
        }
        if step % 7 == 6 {
            // The log's compaction: live records move off the pages it
            // empties, expired and flushed ones are dropped.
            let mut steps = 0;
            while seg.flash_compact(now, &mut compact) {
                steps += 1;
                assert!(steps < 10_000, "step {step}: the compactor never settles: {:?}", seg.ext_stats().map(|s| (s.compact_pages, s.compact_rescues, s.pages_free)));
            }
        }
        seg.check_integrity();
        let epoch = model.flush_epoch();
        if epoch.0 != 0 && epoch.0 <= now && !flushes.contains(&epoch) {
            flushes.push(epoch);
        }
        let stats = seg.stats();
        assert_segments_within_limit(&stats, seg.allocated_bytes(), memory_bytes);
        assert!(stats.curr_items <= model.stats().curr_items, "step {step}: {} items, the model {}", stats.curr_items, model.stats().curr_items);
        if step % 25 == 24 || step + 1 == ops.len() {
            check_classes(seg, 250, cas_disabled, now);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Memory to spare: no eviction, so every reply must match.
    #[test]
    fn matches_the_model(ops in proptest::collection::vec(op(40, false), 1..400)) {
        run(&ops, 64 << 20, false);
    }

    /// 1 MiB: 64 KiB segments, 20 KB values in segments of their own,
    /// constant eviction.
    #[test]
    fn matches_the_model_under_eviction(ops in proptest::collection::vec(op(250, true), 500..1500)) {
        run(&ops, 1 << 20, false);
    }

    #[test]
    fn matches_the_model_without_cas(ops in proptest::collection::vec(op(40, false), 1..200)) {
        run(&ops, 64 << 20, true);
    }

    /// A memory file, restarted every 50 steps (graceful and crash), under
    /// eviction, and with CAS disabled (items still ordered internally).
    #[test]
    fn matches_the_model_across_restarts(ops in proptest::collection::vec(op(250, true), 200..800), cas_disabled in any::<bool>()) {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let path = dir.join(format!("strata-model-{}.mem", std::process::id()));
        run_with(&ops, 1 << 20, cas_disabled, Some(&path));
        let _ = std::fs::remove_file(&path);
    }

    /// 1 MiB of RAM and 512 KiB of flash (8 pages of 64 KiB, so the FIFO
    /// wraps): many items go to flash and come back; every reply must match.
    #[test]
    fn matches_the_model_with_flash(ops in proptest::collection::vec(op_with(250, true, 8), 1000..3000)) {
        run_flash(&ops, 1 << 20, 512 << 10);
    }
}
