//! Gets without the lock (seg/read.rs) against every writer at once.
//!
//! Two reader threads get random keys while two writer threads set and
//! delete them (each writer owns half the keys, so a key's versions only
//! grow), a third thread moves the clock, reclaims expired segments and
//! now and then flushes everything, under each of: eviction (a small -m),
//! compaction (-M, deletes leave holes a store compacts), and flash
//! demotion (-o ext_path: evicted items go to a file).
//!
//! Every value is `key id, version, length, filler`, the filler a function
//! of all three, with lengths from 1 byte to past a segment's quarter (its
//! own buffer), so a reader checks each value it is handed is whole and
//! the key's: never torn, never another key's. Before each get a reader
//! notes the version of the key's last completed set or delete; the value
//! returned must be that version or newer (never a value deleted or
//! overwritten before the read began), and not expired at the read's time.
//! A miss is always allowed (eviction, expiry, flush, flash).
//! Bounded: fixed operation counts, no sleeps; a few seconds in release.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use strata_store::{
    DeleteRequest, Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable, ExtTunables, GetAction, GetOptions, SegStore,
    StoreRequest,
};

const KEYS: u64 = 4000;
const WRITER_OPS: u64 = 60_000;
const START: u32 = 1000;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// Value lengths: mostly small, some past the first 64-byte copy, a few
/// large enough for a buffer of their own (over a quarter of 64 KiB).
fn value_len(k: u64, version: u64) -> usize {
    match (k * 31 + version) % 64 {
        0 => 20_000,
        1..=8 => 300 + (version % 700) as usize,
        _ => 1 + ((k + version) % 60) as usize,
    }
}

fn filler(k: u64, version: u64, i: usize) -> u8 {
    b'a' + ((k.wrapping_mul(7) ^ version.wrapping_mul(13) ^ i as u64 * 3) % 26) as u8
}

/// `k:version:` then filler up to the length (at least the header).
fn value(k: u64, version: u64) -> Vec<u8> {
    let mut v = format!("{k}:{version}:").into_bytes();
    let len = value_len(k, version).max(v.len());
    while v.len() < len {
        let i = v.len();
        v.push(filler(k, version, i));
    }
    v
}

/// The version a value read for key `k` encodes, if it is whole and the key's.
fn check(k: u64, v: &[u8]) -> Result<u64, String> {
    let text = String::from_utf8_lossy(v);
    let mut parts = text.splitn(3, ':');
    let (Some(ks), Some(vs)) = (parts.next(), parts.next()) else { return Err(format!("no header in {text:?}")) };
    let (Ok(got_k), Ok(version)) = (ks.parse::<u64>(), vs.parse::<u64>()) else { return Err(format!("bad header {text:.40?}")) };
    if got_k != k {
        return Err(format!("key {k} read a value of key {got_k}"));
    }
    if v != value(k, version).as_slice() {
        return Err(format!("key {k} version {version}: torn value (length {})", v.len()));
    }
    Ok(version)
}

struct Shared {
    store: SegStore,
    now: AtomicU32,
    /// Per key: the version of its last completed set or delete.
    done: Vec<AtomicU64>,
    stop: AtomicBool,
    hits: AtomicU64,
}

fn writer(s: &Shared, id: u64) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (id + 1));
    let mut versions = vec![0u64; KEYS as usize];
    for _ in 0..WRITER_OPS {
        // This writer owns the keys k with k % 2 == id.
        let k = rng.below(KEYS / 2) * 2 + id;
        let version = versions[k as usize] + 1;
        versions[k as usize] = version;
        let now = s.now.load(Ordering::Relaxed);
        let kb = key(k);
        if rng.below(10) == 0 {
            s.store.delete(&DeleteRequest { key: &kb, ..DeleteRequest::default() }, now);
        } else {
            let v = value(k, version);
            // A third of the keys live two seconds: expiry runs too.
            let exptime = if k % 3 == 0 { now + 2 } else { 0 };
            let req = StoreRequest::set(&kb, &v).with_flags(k as u32).with_exptime(exptime);
            s.store.store(&req, now);
        }
        s.done[k as usize].store(version, Ordering::Release);
    }
}

fn reader(s: &Shared, id: u64) -> Result<(), String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id + 7));
    // Reader 1 reads as a multi-get does: 16 keys at a time, prefetched,
    // under one epoch pin (`Engine::read_batch`).
    let batched = id == 1;
    let mut batch = None;
    let mut window = Vec::new();
    // Bounded even if the writers were to stall.
    for i in 0..4 * WRITER_OPS {
        if s.stop.load(Ordering::Relaxed) {
            break;
        }
        if batched && i % 16 == 0 {
            window = (0..16).map(|_| rng.below(KEYS)).collect();
            // The previous batch is dropped after this one is made.
            batch = Some(s.store.read_batch());
            s.store.prefetch(&window.iter().map(|&k| strata_store::hash_key(&key(k))).collect::<Vec<_>>());
        }
        let k = if batched { window[(i % 16) as usize] } else { rng.below(KEYS) };
        let floor = s.done[k as usize].load(Ordering::Acquire);
        let now = s.now.load(Ordering::Relaxed);
        let mut seen = None;
        // The visitor never wins a recache token: items with a TTL are read
        // without the lock too.
        // A batched read passes the hash its window's prefetch computed.
        let hash = batched.then(|| strata_store::hash_key(&key(k)));
        let opts = GetOptions { no_token: true, hash, ..GetOptions::default() };
        s.store.get(&key(k), opts, now, &mut |item, _| {
            seen = Some((check(k, item.value), item.meta.flags, item.meta.exptime));
            GetAction::default()
        });
        let Some((version, flags, exptime)) = seen else { continue };
        let version = version?;
        if version < floor {
            return Err(format!("key {k}: read version {version} after version {floor} completed"));
        }
        if flags != k as u32 {
            return Err(format!("key {k}: flags {flags}"));
        }
        if exptime != 0 && exptime <= now {
            return Err(format!("key {k}: expired at {exptime}, read at {now}"));
        }
        s.hits.fetch_add(1, Ordering::Relaxed);
    }
    drop(batch);
    Ok(())
}

/// Moves the clock one second every few hundred steps, reclaims expired
/// segments, flushes everything now and then.
fn housekeeper(s: &Shared) {
    let mut step = 0u64;
    while !s.stop.load(Ordering::Relaxed) && step < 1_000_000 {
        step += 1;
        if step % 500 == 0 {
            let now = s.now.fetch_add(1, Ordering::Relaxed) + 1;
            s.store.maintain(now, true);
            if step % 20_000 == 0 {
                s.store.flush_all(0, now);
            }
        }
        std::thread::yield_now();
    }
}

fn run(store: SegStore) {
    let s = Arc::new(Shared {
        store,
        now: AtomicU32::new(START),
        done: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
        hits: AtomicU64::new(0),
    });
    let result: Result<(), String> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..2).map(|id| scope.spawn({ let s = &s; move || reader(s, id) })).collect();
        let keeper = scope.spawn(|| housekeeper(&s));
        let writers: Vec<_> = (0..2).map(|id| scope.spawn({ let s = &s; move || writer(s, id) })).collect();
        for w in writers {
            w.join().expect("writer");
        }
        s.stop.store(true, Ordering::Relaxed);
        keeper.join().expect("housekeeper");
        readers.into_iter().map(|r| r.join().expect("reader")).collect()
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    s.store.check_integrity();
    assert!(s.hits.load(Ordering::Relaxed) > 0, "the readers hit nothing: the test checked nothing");
}

#[test]
fn reads_under_eviction() {
    run(SegStore::new(EngineConfig { memory_limit_bytes: 2 << 20, ..EngineConfig::default() }));
}

#[test]
fn reads_under_compaction() {
    run(SegStore::new(EngineConfig { memory_limit_bytes: 8 << 20, evictions_disabled: true, ..EngineConfig::default() }));
}

#[test]
fn reads_under_flash_demotion() {
    let dir = std::env::temp_dir().join(format!("strata-read-concurrent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tunables = Arc::new(ExtTunables::default());
    tunables.set(ExtTunable::ItemSize(0));
    let ext = ExtConfig {
        paths: vec![ExtPath { path: dir.join("flash"), size_bytes: 16 << 20, bucket: Default::default() }],
        page_size_bytes: 64 << 10,
        wbuf_size_bytes: 32 << 10,
        tunables,
        ..ExtConfig::default()
    };
    let mut store = SegStore::new(EngineConfig { memory_limit_bytes: 2 << 20, ..EngineConfig::default() });
    store.attach_flash(ext).expect("flash tier");
    run(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Meta `W`: of two readers racing on a stale item, exactly one wins its
/// recache token (reading and marking it stay one step, under the lock).
#[test]
fn one_reader_wins_a_stale_items_token() {
    const ROUNDS: usize = 20_000;
    let store = SegStore::new(EngineConfig { memory_limit_bytes: 8 << 20, ..EngineConfig::default() });
    let barrier = std::sync::Barrier::new(2);
    let wins = AtomicU64::new(0);
    let read = |store: &SegStore| {
        // no_bump: the read could skip the lock but for the token.
        let opts = GetOptions { no_bump: true, ..GetOptions::default() };
        store.get(b"stale", opts, START, &mut |item, _| {
            let won = item.meta.stale && !item.meta.token_sent;
            if won {
                wins.fetch_add(1, Ordering::Relaxed);
            }
            GetAction { set_token_sent: won }
        });
    };
    // Rounds whose winners were not exactly one (asserted after both
    // threads are done, so a failure cannot leave one waiting).
    let mut bad = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..ROUNDS {
                barrier.wait();
                read(&store);
                barrier.wait();
            }
        });
        for round in 0..ROUNDS {
            let req = StoreRequest::set(b"stale", b"v");
            store.store(&req, START);
            store.delete(&DeleteRequest { key: b"stale", invalidate: true, ..DeleteRequest::default() }, START);
            barrier.wait();
            read(&store);
            barrier.wait();
            let winners = wins.swap(0, Ordering::Relaxed);
            if winners != 1 {
                bad.push((round, winners));
            }
        }
    });
    assert!(bad.is_empty(), "rounds (round, winners) without exactly one winner: {bad:?}");
}
