//! In-process hit-ratio run of the segment store (a tuning aid, seconds
//! instead of minutes over the wire): a demand-filled zipf(0.99) stream over
//! 1M keys with 200-byte values, optionally with a share of one-time scan
//! keys. `distinct` is the floor: every first request of a key misses.
//!
//!     cargo run --release -p strata-store --example lab -- hitsim [requests] [memory_mb] [scan_share]
use strata_store::*;
pub fn main(args: Vec<String>) {
    let requests: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3_000_000);
    let keys: usize = 1_000_000;
    let mem: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64) << 20;
    let scan: f64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let mut cdf = Vec::with_capacity(keys);
    let mut total = 0.0;
    for r in 1..=keys { total += 1.0 / (r as f64).powf(0.99); cdf.push(total); }
    let mut x: u64 = 88172645463325252;
    let mut rnd = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; (x >> 11) as f64 / (1u64 << 53) as f64 };
    let store = SegStore::new(EngineConfig { memory_limit_bytes: mem, ..EngineConfig::default() });
    let value = vec![b'x'; 200];
    let mut misses = 0;
    let mut seen = std::collections::HashSet::new();
    let mut scan_next = 0;
    for _ in 0..requests {
        let key = if scan > 0.0 && rnd() < scan { scan_next += 1; format!("scan:{scan_next}") } else {
            let u = rnd() * total;
            let rank = cdf.partition_point(|&c| c < u);
            format!("key:{}", (rank as u64).wrapping_mul(2654435761) % keys as u64)
        };
        seen.insert(key.clone());
        let hit = store.get(key.as_bytes(), GetOptions::default(), 100, &mut |_, _| GetAction::default());
        if !hit {
            misses += 1;
            let req = StoreRequest::set(key.as_bytes(), &value);
            store.store(&req, 100);
        }
    }
    let s = store.stats();
    println!("distinct={} miss_ratio={:.4} items={} evictions={} queues={:?} seg={}", seen.len(), misses as f64 / requests as f64, s.curr_items, s.evictions, store.queue_counts(), store.segment_size());
}
