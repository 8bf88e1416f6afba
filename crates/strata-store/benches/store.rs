//! The segment store alone, in process: a 90% get / 10% set mix on uniform
//! keys (20-byte keys, 32-byte values, all preloaded), on one thread and on
//! two. Criterion reports operations per second for each; the scaling figure
//! in docs/bench/store.md is the ratio of the two. Two sizes:
//!
//! - `cached`: 10,000 keys, `-m 16`: store and index fit in the L3 cache, so
//!   the ratio measures the store's own concurrency (locks, shared lines);
//! - `dram`: 100,000 keys, `-m 64`: every operation misses the caches, so the
//!   ratio is bounded by the machine's memory system (on the 2-core CI
//!   machines, random reads themselves scale 1.1-1.3x from one core to two).
//!
//!     cargo bench -p strata-store --bench store
//!
//! Each thread runs `iters` operations; an iteration is one operation per
//! thread, so the throughput line reads directly as total operations/s.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use strata_store::{Engine, EngineConfig, GetAction, GetOptions, SegStore, StoreRequest};

const NOW: u32 = 100;

fn key(i: u64) -> [u8; 20] {
    let mut k = *b"key:0000000000000000";
    let mut n = i;
    for at in (4..20).rev() {
        k[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

fn set(store: &SegStore, i: u64) {
    let k = key(i);
    let req = StoreRequest::set(&k, &[b'v'; 32]);
    store.store(&req, NOW);
}

fn run(store: &SegStore, keys: u64, seed: u64, ops: u64) -> u64 {
    let mut x = seed | 1;
    let mut hits = 0;
    for _ in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = x % keys;
        if x >> 60 == 0 {
            set(store, i);
        } else {
            let k = key(i);
            hits += u64::from(store.get(&k, GetOptions::default(), NOW, &mut |_, _| GetAction::default()));
        }
    }
    hits
}

fn mix(c: &mut Criterion) {
    for (name, keys, memory_mb) in [("cached", 10_000, 16), ("dram", 100_000, 64)] {
        mix_on(c, name, keys, memory_mb);
    }
}

fn mix_on(c: &mut Criterion, name: &str, keys: u64, memory_mb: u64) {
    let store = SegStore::new(EngineConfig { memory_limit_bytes: memory_mb << 20, ..EngineConfig::default() });
    for i in 0..keys {
        set(&store, i);
    }
    let mut group = c.benchmark_group(format!("get90_set10_{name}"));
    for threads in [1u64, 2] {
        group.throughput(Throughput::Elements(threads));
        group.bench_function(format!("{threads}_threads"), |b| {
            b.iter_custom(|iters| {
                let barrier = Barrier::new(threads as usize);
                let mut elapsed = Duration::ZERO;
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            let (store, barrier) = (&store, &barrier);
                            s.spawn(move || {
                                barrier.wait();
                                let start = Instant::now();
                                std::hint::black_box(run(store, keys, 0x9e37_79b9_7f4a_7c15 * (t + 1), iters));
                                start.elapsed()
                            })
                        })
                        .collect();
                    for h in handles {
                        elapsed = elapsed.max(h.join().expect("bench thread"));
                    }
                });
                elapsed
            })
        });
    }
    group.finish();
}

criterion_group!(benches, mix);
criterion_main!(benches);
