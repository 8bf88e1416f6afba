//! Store-only multi-key read scaling (issue 17): threads each run 48-key
//! multi-gets (20-byte keys, 20-byte values, uniform over `--keys`) the way
//! the server's executor does (`Engine::prefetch` per 16 keys, then one
//! `Engine::get` per key), first on 1 thread, then on 2, for `--secs` each.
//!
//! It prints multi-gets per second, the 2-thread/1-thread ratio, and each
//! thread's voluntary context switches (from `/proc/thread-self/status`):
//! a shard lock that makes a thread wait long enough to sleep (a futex
//! wait) is a voluntary switch, so 0 means no thread ever slept on a lock.
//! Run it under `perf stat -e syscalls:sys_enter_futex` to count the futex
//! calls themselves (each run's thread spawn/join costs a few).
//!
//!     cargo run --release -p strata-store --example mget_scaling -- [--keys N] [--secs S] [--no-prefetch]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use strata_store::{Engine, EngineConfig, GetAction, GetOptions, SegStore, StoreMode, StoreRequest};

const NOW: u32 = 100;
const KEYS_PER_GET: usize = 48;
const WINDOW: usize = 16;

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
    let req = StoreRequest {
        key: &k,
        value: &[b'v'; 20],
        flags: 0,
        exptime: 0,
        mode: StoreMode::Set,
        cas: 0,
        invalidate: false,
        vivify_ttl: None,
        key_binary: false,
        new_cas: None,
    };
    store.store(&req, NOW);
}

fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Multi-gets until `stop`; returns (multi-gets, hits, voluntary switches).
fn mgets(store: &SegStore, keys: u64, seed: u64, prefetch: bool, stop: &AtomicBool) -> (u64, u64, u64) {
    let switches = voluntary_switches();
    let mut x = seed | 1;
    let (mut done, mut hits) = (0, 0);
    let mut batch = [[0u8; 20]; KEYS_PER_GET];
    while !stop.load(Ordering::Relaxed) {
        for k in batch.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *k = key(x % keys);
        }
        for window in batch.chunks(WINDOW) {
            if prefetch {
                let refs: Vec<&[u8]> = window.iter().map(|k| &k[..]).collect();
                store.prefetch(&refs);
            }
            for k in window {
                hits += u64::from(store.get(k, GetOptions::default(), NOW, &mut |item, _| {
                    std::hint::black_box(item.value);
                    GetAction::default()
                }));
            }
        }
        done += 1;
    }
    (done, hits, voluntary_switches() - switches)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str, default: u64| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let keys = value("--keys", 100_000);
    let secs = value("--secs", 2);
    let prefetch = !args.iter().any(|a| a == "--no-prefetch");
    let store = SegStore::new(EngineConfig { memory_limit_bytes: 64 << 20, ..EngineConfig::default() });
    for i in 0..keys {
        set(&store, i);
    }
    let mut single = 0.0;
    for threads in [1u64, 2] {
        let stop = AtomicBool::new(false);
        let barrier = Barrier::new(threads as usize + 1);
        let results: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (store, stop, barrier) = (&store, &stop, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        mgets(store, keys, 0x9e37_79b9_7f4a_7c15 * (t + 1), prefetch, stop)
                    })
                })
                .collect();
            barrier.wait();
            let start = Instant::now();
            std::thread::sleep(Duration::from_secs(secs));
            stop.store(true, Ordering::Relaxed);
            let r = handles.into_iter().map(|h| h.join().expect("thread")).collect();
            eprintln!("({threads} thread(s): {:.2} s)", start.elapsed().as_secs_f64());
            r
        });
        let total: u64 = results.iter().map(|r| r.0).sum();
        let hits: u64 = results.iter().map(|r| r.1).sum();
        assert_eq!(hits, total * KEYS_PER_GET as u64, "every key was preloaded");
        let rate = total as f64 / secs as f64;
        if threads == 1 {
            single = rate;
        }
        let switches: Vec<u64> = results.iter().map(|r| r.2).collect();
        println!(
            "threads {threads}  prefetch {prefetch}  {rate:10.0} mget48/s  scaling {:.2}x  voluntary switches per thread {switches:?}",
            rate / single
        );
    }
}
