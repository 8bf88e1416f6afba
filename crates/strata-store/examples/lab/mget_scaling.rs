//! Store-only multi-key read scaling (issues 17 and 30): threads each run
//! 48-key multi-gets (20-byte keys, 20-byte values, uniform over `--keys`)
//! the way the server's executor does (`Engine::prefetch` per 16 keys, then
//! one `Engine::get` per key), for `--secs` each at every thread count of
//! `--threads` (default `1,2`; `1,2,8` adds 8 threads sharing 2 cores).
//!
//! Per thread count it prints multi-gets per second, the ratio to the first
//! count's rate, the CPU time per key (user and system, summed over the
//! threads from `getrusage(RUSAGE_THREAD)`) and its ratio to the first
//! count's, and each thread's voluntary context switches (`ru_nvcsw`): a
//! shard lock that makes a thread wait long enough to sleep (a futex wait)
//! is a voluntary switch, so 0 means no thread ever slept on a lock. With
//! more threads than cores, CPU per key is the figure to watch (throughput
//! is capped by the cores; a lock handed between preempted threads shows
//! as CPU and switches). Run it pinned (`taskset -c 0,1`) and under
//! `perf stat -e syscalls:sys_enter_futex` to count the futex calls.
//!
//! `--writers N` adds N threads that set random keys of the same key space
//! for the whole run (a set-heavy load beside the readers), and each line
//! then also gives the sets per second and, per key read, the lock-free
//! read's attempts repeated because a writer ran in the shard
//! (`get_retries`) and the gets it handed to the shard lock (`get_locked`).
//!
//!     cargo run --release -p strata-store --example lab -- mget_scaling [--keys N] [--secs S] [--threads 1,2,8] [--writers N] [--no-prefetch]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use strata_store::{Engine, EngineConfig, GetAction, GetOptions, SegStore, StoreRequest};

/// What the text protocol's `get` asks of the store (front/text.rs).
const PLAIN_GET: GetOptions = GetOptions { no_token: true, fetched_unseen: true, touch: None, no_bump: false, vivify: None, uncounted: false, vivify_cas: None, hash: None };

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
    let req = StoreRequest::set(&k, &[b'v'; 20]);
    store.store(&req, NOW);
}

/// This thread's (user µs, system µs, voluntary context switches) so far.
fn thread_usage() -> (u64, u64, u64) {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD on the calling thread, a valid out pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime), ru.ru_nvcsw as u64)
}

/// What one thread did: multi-gets, hits, user and system µs, voluntary switches.
struct Done {
    mgets: u64,
    hits: u64,
    user_us: u64,
    sys_us: u64,
    switches: u64,
}

/// The next of a thread's keys (xorshift64).
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Multi-gets until `stop`.
fn mgets(store: &SegStore, keys: u64, seed: u64, prefetch: bool, stop: &AtomicBool) -> Done {
    let start = thread_usage();
    let mut x = seed | 1;
    let (mut done, mut hits) = (0, 0);
    let mut batch = [[0u8; 20]; KEYS_PER_GET];
    while !stop.load(Ordering::Relaxed) {
        for k in batch.iter_mut() {
            *k = key(xorshift(&mut x) % keys);
        }
        let _batch = store.read_batch();
        for window in batch.chunks(WINDOW) {
            let hashes: Vec<u64> = window.iter().map(|k| strata_store::hash_key(k)).collect();
            if prefetch {
                store.prefetch(&hashes);
            }
            for (k, &hash) in window.iter().zip(&hashes) {
                let opts = GetOptions { hash: Some(hash), ..PLAIN_GET };
                hits += u64::from(store.get(k, opts, NOW, &mut |item, _| {
                    std::hint::black_box(item.value);
                    GetAction::default()
                }));
            }
        }
        done += 1;
    }
    let end = thread_usage();
    Done { mgets: done, hits, user_us: end.0 - start.0, sys_us: end.1 - start.1, switches: end.2 - start.2 }
}

/// Sets of random keys until `stop`; how many.
fn sets(store: &SegStore, keys: u64, seed: u64, stop: &AtomicBool) -> u64 {
    let mut x = seed | 1;
    let mut done = 0;
    while !stop.load(Ordering::Relaxed) {
        set(store, xorshift(&mut x) % keys);
        done += 1;
    }
    done
}

pub fn main(args: Vec<String>) {
    let value = |name: &str, default: u64| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let keys = value("--keys", 100_000);
    let secs = value("--secs", 2);
    let prefetch = !args.iter().any(|a| a == "--no-prefetch");
    let writers = value("--writers", 0);
    let thread_counts: Vec<u64> = match args.iter().position(|a| a == "--threads").and_then(|i| args.get(i + 1)) {
        Some(list) => list.split(',').map(|n| n.parse().expect("--threads: a list like 1,2,8")).collect(),
        None => vec![1, 2],
    };
    let store = SegStore::new(EngineConfig { memory_limit_bytes: 64 << 20, ..EngineConfig::default() });
    for i in 0..keys {
        set(&store, i);
    }
    let (mut first_rate, mut first_cpu) = (0.0, 0.0);
    for (round, &threads) in thread_counts.iter().enumerate() {
        let stop = AtomicBool::new(false);
        let barrier = Barrier::new(threads as usize + 1);
        let before = store.stats();
        let mut set_count = 0;
        let results: Vec<Done> = std::thread::scope(|s| {
            let setters: Vec<_> = (0..writers)
                .map(|w| {
                    let (store, stop) = (&store, &stop);
                    s.spawn(move || sets(store, keys, 0x2545_f491_4f6c_dd1d * (w + 1), stop))
                })
                .collect();
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
            set_count = setters.into_iter().map(|h| h.join().expect("writer")).sum::<u64>();
            eprintln!("({threads} thread(s): {:.2} s)", start.elapsed().as_secs_f64());
            r
        });
        let total: u64 = results.iter().map(|r| r.mgets).sum();
        let hits: u64 = results.iter().map(|r| r.hits).sum();
        // Sets replace items, never remove one (64 MB holds every key).
        assert_eq!(hits, total * KEYS_PER_GET as u64, "every key was preloaded");
        let after = store.stats();
        let rate = total as f64 / secs as f64;
        let keys_read = (total * KEYS_PER_GET as u64).max(1) as f64;
        let user_ns = results.iter().map(|r| r.user_us).sum::<u64>() as f64 * 1e3 / keys_read;
        let sys_ns = results.iter().map(|r| r.sys_us).sum::<u64>() as f64 * 1e3 / keys_read;
        if round == 0 {
            (first_rate, first_cpu) = (rate, user_ns + sys_ns);
        }
        let switches: Vec<u64> = results.iter().map(|r| r.switches).collect();
        println!(
            "threads {threads}  prefetch {prefetch}  {rate:10.0} mget48/s  scaling {:.2}x  cpu/key {:.1} ns (user {user_ns:.1}, sys {sys_ns:.1}) {:.2}x  voluntary switches per thread {switches:?}",
            rate / first_rate,
            user_ns + sys_ns,
            (user_ns + sys_ns) / first_cpu,
        );
        if writers > 0 {
            println!(
                "          writers {writers}  {:10.0} sets/s  per key read: get_retries {:.5}, get_locked {:.5}",
                set_count as f64 / secs as f64,
                (after.get_retries - before.get_retries) as f64 / keys_read,
                (after.get_locked - before.get_locked) as f64 / keys_read,
            );
        }
    }
}
