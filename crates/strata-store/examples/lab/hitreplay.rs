//! Replays a key stream written by `scripts/bench/hitratio.py --dump FILE`
//! against the segment store in process, exactly as hitratio.py sends it
//! (batches of `mg`, then `ms` of that batch's misses), and prints the miss
//! ratio of the counted part: a tuning aid that matches the server's figure
//! in seconds, without sockets.
//!
//!     scripts/bench/hitratio.py --warmup 3000000 --scan 0.2 --dump /tmp/scan.keys
//!     cargo run --release -p strata-store --example lab -- hitreplay /tmp/scan.keys [warmup] [memory_mb] [batch]
//!
//! With `HITREPLAY_PROGRESS=1` in the environment it prints the queues'
//! segment counts every 500,000 requests.
use std::io::BufRead;

use strata_store::*;

pub fn main(args: Vec<String>) {
    let path = args.get(1).expect("usage: hitreplay FILE [warmup] [memory_mb] [batch]");
    let warmup: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3_000_000);
    let mem: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64) << 20;
    let batch: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(100);
    let progress = std::env::var_os("HITREPLAY_PROGRESS").is_some();
    let file = std::io::BufReader::new(std::fs::File::open(path).expect("stream file"));
    let keys: Vec<Vec<u8>> = file.split(b'\n').map(|l| l.expect("read")).filter(|l| !l.is_empty()).collect();
    // The server's index starts at 2^16 slots (`-o hashpower`'s default),
    // which are not charged to -m: the same here, for the server's figure.
    let config = EngineConfig { memory_limit_bytes: mem, index_slots_initial: 1 << 16, ..EngineConfig::default() };
    let store = SegStore::new(config);
    let value = vec![b'x'; 200];
    let mut misses = 0usize;
    let mut missed: Vec<&[u8]> = Vec::new();
    for (n, chunk) in keys.chunks(batch).enumerate() {
        missed.clear();
        for key in chunk {
            if !store.get(key, GetOptions::default(), 100, &mut |_, _| GetAction::default()) {
                missed.push(key);
            }
        }
        if progress && (n * batch) % 500_000 == 0 {
            eprintln!("{:8} (small, main, open segments) {:?}", n * batch, store.queue_counts());
        }
        if n * batch >= warmup {
            misses += missed.len();
        }
        for key in &missed {
            let req = StoreRequest::set(key, &value);
            store.store(&req, 100);
        }
    }
    let s = store.stats();
    let counted = keys.len().saturating_sub(warmup);
    println!(
        "miss_ratio={:.4} misses={misses} items={} evictions={} queues={:?} ghost_bytes={} ({:.2} per item) ghost_hits={}",
        misses as f64 / counted as f64,
        s.curr_items,
        s.evictions,
        store.queue_counts(),
        s.ghost_bytes,
        s.ghost_bytes as f64 / s.curr_items as f64,
        s.ghost_hits
    );
}
