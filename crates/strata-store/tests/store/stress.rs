//! The segment store under several threads on shared keys.
//!
//! - No lost updates: `incr`, compare-and-swap loops and `append` from four
//!   threads add up exactly.
//! - No torn values: under constant eviction (and so items being moved and
//!   segments reused while others read), every value read is one that some
//!   thread wrote whole, with its own flags.

use std::sync::Arc;
use std::thread;

use strata_store::{
    DeltaMode, DeltaRequest, DeltaResult, Engine, EngineConfig, GetAction, GetOptions, SegStore, StoreMode,
    StoreRequest, StoreResult,
};

const THREADS: usize = 4;
const NOW: u32 = 100;

fn store(engine: &SegStore, key: &[u8], value: &[u8], flags: u32, mode: StoreMode, cas: u64) -> StoreResult {
    let req = StoreRequest::new(mode, key, value).with_flags(flags).with_cas(cas);
    engine.store(&req, NOW)
}

fn read(engine: &SegStore, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    let mut out = None;
    engine.get(key, GetOptions::default(), NOW, &mut |view, _| {
        out = Some((view.value.to_vec(), view.meta.flags, view.meta.cas));
        GetAction::default()
    });
    out
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn no_lost_updates() {
    let engine = Arc::new(SegStore::new(EngineConfig { memory_limit_bytes: 64 << 20, ..EngineConfig::default() }));
    const COUNTERS: usize = 16;
    const CAS_KEYS: usize = 8;
    const ROUNDS: usize = 5000;
    for i in 0..COUNTERS {
        store(&engine, format!("counter:{i}").as_bytes(), b"0", 0, StoreMode::Set, 0);
    }
    for i in 0..CAS_KEYS {
        store(&engine, format!("cas:{i}").as_bytes(), b"0", 0, StoreMode::Set, 0);
    }
    store(&engine, b"list", b"", 0, StoreMode::Set, 0);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let engine = Arc::clone(&engine);
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + t as u64);
                let mut cas_wins = vec![0u64; CAS_KEYS];
                for round in 0..ROUNDS {
                    let key = format!("counter:{}", rng.below(COUNTERS as u64));
                    let req = DeltaRequest {
                        key: key.as_bytes(),
                        mode: DeltaMode::Incr,
                        delta: 1,
                        cas: 0,
                        vivify: None,
                        initial: 0,
                        touch: None,
                        in_place: round % 2 == 0,
                        new_cas: None,
                    };
                    assert!(matches!(engine.delta(&req, NOW), DeltaResult::Ok { .. }));
                    let i = rng.below(CAS_KEYS as u64) as usize;
                    let key = format!("cas:{i}");
                    loop {
                        let (value, _, cas) = read(&engine, key.as_bytes()).expect("cas key present");
                        let n: u64 = std::str::from_utf8(&value).unwrap().trim().parse().unwrap();
                        let next = (n + 1).to_string();
                        match store(&engine, key.as_bytes(), next.as_bytes(), 0, StoreMode::Cas, cas) {
                            StoreResult::Stored { .. } => break,
                            StoreResult::Exists => continue,
                            other => panic!("cas: {other:?}"),
                        }
                    }
                    cas_wins[i] += 1;
                    if round % 10 == 0 {
                        store(&engine, b"list", &[b'a' + t as u8], 0, StoreMode::Append, 0);
                    }
                }
                cas_wins
            })
        })
        .collect();
    let mut cas_wins = vec![0u64; CAS_KEYS];
    for t in threads {
        for (i, wins) in t.join().expect("thread").into_iter().enumerate() {
            cas_wins[i] += wins;
        }
    }
    let total: u64 = (0..COUNTERS)
        .map(|i| {
            let (value, _, _) = read(&engine, format!("counter:{i}").as_bytes()).expect("counter present");
            std::str::from_utf8(&value).unwrap().trim().parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(total, (THREADS * ROUNDS) as u64, "incr updates lost");
    for (i, wins) in cas_wins.iter().enumerate() {
        let (value, _, _) = read(&engine, format!("cas:{i}").as_bytes()).unwrap();
        assert_eq!(std::str::from_utf8(&value).unwrap().parse::<u64>().unwrap(), *wins, "cas updates lost on cas:{i}");
    }
    let (list, _, _) = read(&engine, b"list").unwrap();
    for t in 0..THREADS {
        assert_eq!(list.iter().filter(|&&b| b == b'a' + t as u8).count(), ROUNDS / 10, "appends lost");
    }
    assert_eq!(engine.stats().evictions, 0);
    engine.check_integrity();
}

/// A value that says which key and version it is, with a length and filler
/// and flags that follow from both, so any mix of two writes is detected.
fn value_for(key: u64, version: u64) -> (Vec<u8>, u32) {
    let mix = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mut value = format!("{key}:{version}:").into_bytes();
    let len = value.len() + [0, 100, 1000, 5000, 30_000][(mix % 5) as usize] + (mix >> 8) as usize % 50;
    let fill = b'a' + (mix >> 16) as u8 % 26;
    value.resize(len, fill);
    (value, (mix >> 32) as u32)
}

fn check_value(key: u64, value: &[u8], flags: u32) {
    let text = String::from_utf8_lossy(&value[..value.len().min(40)]).into_owned();
    let mut parts = text.splitn(3, ':');
    let k: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("torn value {text:?}"));
    let version: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("torn value {text:?}"));
    assert_eq!(k, key, "value of another key");
    let (expected, expected_flags) = value_for(key, version);
    if value != expected.as_slice() {
        let at = value.iter().zip(&expected).position(|(a, b)| a != b);
        panic!("torn value for key {key} version {version}: len {} expected {}, first difference at {at:?}: {:?}", value.len(), expected.len(), at.map(|i| String::from_utf8_lossy(&value[i..(i + 40).min(value.len())]).into_owned()));
    }
    assert_eq!(flags, expected_flags, "flags of another write");
}

#[test]
fn no_torn_values_under_eviction() {
    let engine = Arc::new(SegStore::new(EngineConfig { memory_limit_bytes: 2 << 20, ..EngineConfig::default() }));
    const KEYS: u64 = 3000;
    const OPS: usize = 60_000;
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let engine = Arc::clone(&engine);
            thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t as u64);
                for i in 0..OPS {
                    // Skewed, so some keys are hot and get kept and moved.
                    let bound = rng.below(KEYS) + 1;
                    let key = rng.below(bound);
                    let k = format!("key:{key}");
                    match rng.below(10) {
                        0..=3 => {
                            let version = (i * THREADS + t) as u64;
                            let (value, flags) = value_for(key, version);
                            let result = store(&engine, k.as_bytes(), &value, flags, StoreMode::Set, 0);
                            assert!(matches!(result, StoreResult::Stored { .. }), "{result:?}");
                        }
                        4 => {
                            engine.touch(k.as_bytes(), if rng.below(2) == 0 { 0 } else { NOW + 1000 }, NOW);
                        }
                        _ => {
                            if let Some((value, flags, _)) = read(&engine, k.as_bytes()) {
                                check_value(key, &value, flags);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread saw a torn value");
    }
    assert!(engine.stats().evictions > 1000, "the test must evict: {:?}", engine.stats());
    assert!(engine.allocated_bytes() <= 2 << 20);
    engine.check_integrity();
    for key in 0..KEYS {
        if let Some((value, flags, _)) = read(&engine, format!("key:{key}").as_bytes()) {
            check_value(key, &value, flags);
        }
    }
}
