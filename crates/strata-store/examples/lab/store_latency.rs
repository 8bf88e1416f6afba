//! How long single stores take once memory is full: the tail is where a
//! store that walks a whole victim segment (thousands of index updates
//! under the shard's lock) shows. Fills `-m` with small items, then times
//! each of a run of stores of new keys, and prints percentiles in ns.
//!
//!     cargo run --release -p strata-store --example lab -- store_latency [MEGABYTES] [STORES]
//!
//! Defaults: 1024 MB (256 KiB segments, 32 shards), 4,000,000 timed stores
//! of 16-byte keys and 32-byte values.

use std::time::Instant;

use strata_store::{Engine, EngineConfig, SegStore, StoreRequest};

pub fn main(args: Vec<String>) {
    let mut args = args.into_iter().skip(1);
    let megabytes: u64 = args.next().map_or(1024, |a| a.parse().expect("MEGABYTES"));
    let stores: usize = args.next().map_or(4_000_000, |a| a.parse().expect("STORES"));
    let store = SegStore::new(EngineConfig { memory_limit_bytes: megabytes << 20, ..EngineConfig::default() });
    let value = [b'v'; 32];
    let mut next = 0u64;
    let set = |next: &mut u64| {
        let key = format!("key:{:012}", *next);
        *next += 1;
        let req = StoreRequest::set(key.as_bytes(), &value);
        store.store(&req, 100);
    };
    // Fill until stores evict, then as many again so every shard turns over.
    while next % 4096 != 0 || store.stats().evictions == 0 {
        set(&mut next);
    }
    let filled = next;
    for _ in 0..filled {
        set(&mut next);
    }
    let mut ns: Vec<u32> = Vec::with_capacity(stores);
    for _ in 0..stores {
        let t = Instant::now();
        set(&mut next);
        ns.push(t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)];
    let mean = ns.iter().map(|&n| u64::from(n)).sum::<u64>() as f64 / ns.len() as f64;
    println!(
        "-m {megabytes}: {filled} items filled it; {stores} stores: mean {mean:.0} ns, p50 {} p99 {} p99.9 {} p99.99 {} max {} ns; evictions {}",
        at(0.5),
        at(0.99),
        at(0.999),
        at(0.9999),
        ns[ns.len() - 1],
        store.stats().evictions
    );
}
