//! In-process capacity run of the flash tier (the figure, at store
//! level, without sockets): load `keys` items of `value_bytes` into a store
//! of `memory_mb` with an `ext_path` of `flash_mb`, then read every key once
//! in a shuffled order through the server's protocol (RAM get, else
//! `flash_check`, a blocking O_DIRECT read, `finish_flash_read`), and
//! report hits, wrong values, RSS, the flash index's share and write
//! amplification. Then overwrite keys uniformly at random for `overwrites`
//! stores and report write amplification under that steady load.
//!
//!     cargo run --release -p strata-store --example lab -- flashsim FILE [keys] [value_bytes] [memory_mb] [flash_mb] [overwrites]
use std::sync::Arc;
use std::time::Instant;

use strata_store::*;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn value(i: usize, len: usize, round: usize) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i * 31 + j + round) % 26) as u8).collect()
}

pub fn main(args: Vec<String>) {
    let path = args.get(1).expect("flash file path").clone();
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (keys, len, mem_mb, flash_mb, overwrites) = (arg(2, 1_000_000) as usize, arg(3, 1024) as usize, arg(4, 64), arg(5, 2048), arg(6, 0) as usize);
    let mut store = SegStore::new(EngineConfig { memory_limit_bytes: mem_mb << 20, ..EngineConfig::default() });
    let tunables = Arc::new(ExtTunables::default());
    let ext = ExtConfig {
        paths: vec![ExtPath { path: path.clone().into(), size_bytes: flash_mb << 20, bucket: ExtBucket::Default }],
        tunables,
        ..ExtConfig::default()
    };
    println!("{}", store.attach_flash(ext).expect("flash tier"));
    let rss_empty = rss_kib();
    let now = 100;
    let started = Instant::now();
    for i in 0..keys {
        let key = format!("key:{i:08}");
        let v = value(i, len, 0);
        let req = StoreRequest::set(key.as_bytes(), &v);
        store.store(&req, now);
    }
    store.flash_flush();
    let load_s = started.elapsed().as_secs_f64();
    let rss_loaded = rss_kib();
    // Shuffled read of every key.
    let mut order: Vec<usize> = (0..keys).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let (mut hits, mut wrong, mut flash_reads) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    for &i in &order {
        let key = format!("key:{i:08}");
        let expect = value(i, len, 0);
        let mut ok = None;
        let mut visit = |view: ItemView<'_>, _| {
            ok = Some(view.value == expect.as_slice());
            GetAction::default()
        };
        if !store.get(key.as_bytes(), GetOptions::default(), now, &mut visit) {
            if let Some(read) = store.flash_check(key.as_bytes(), now) {
                flash_reads += 1;
                let data = read.read_blocking().ok();
                if store.finish_flash_read(&read, data.as_deref(), GetOptions::default(), false, now, &mut visit) != FlashFinish::Visited {
                    store.get(key.as_bytes(), GetOptions::default(), now, &mut visit);
                }
            } else {
                store.get(key.as_bytes(), GetOptions::default(), now, &mut visit);
            }
        }
        match ok {
            Some(true) => hits += 1,
            Some(false) => wrong += 1,
            None => {}
        }
    }
    let read_s = started.elapsed().as_secs_f64();
    let st = store.ext_stats().expect("flash stats");
    println!(
        "keys={keys} value={len} -m {mem_mb} MiB flash {flash_mb} MiB: load {load_s:.1} s, read {read_s:.1} s ({:.0} reads/s, {flash_reads} from flash)",
        keys as f64 / read_s
    );
    println!("hits={hits} ({:.2}%) wrong={wrong} items_on_flash={} flash_index_entries={}", 100.0 * hits as f64 / keys as f64, st.objects_used, store.flash_entries());
    println!(
        "RSS: empty store {} MiB, loaded {} MiB, after reads {} MiB; (RSS - 64 MiB) / keys = {:.1} bytes",
        rss_empty >> 10,
        rss_loaded >> 10,
        rss_kib() >> 10,
        (rss_kib() as f64 * 1024.0 - (mem_mb << 20) as f64) / keys as f64
    );
    println!("write amplification after the load: {:.3} (flash bytes {} / stored bytes {}); records written {}, page allocs {}", st.write_amplification(), st.bytes_written, st.client_bytes_stored, st.objects_written, st.page_allocs);
    if overwrites > 0 {
        let before = store.ext_stats().expect("stats");
        for n in 0..overwrites {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % keys as u64) as usize;
            let key = format!("key:{i:08}");
            let v = value(i, len, n);
            let req = StoreRequest::set(key.as_bytes(), &v);
            store.store(&req, now);
        }
        store.flash_flush();
        let after = store.ext_stats().expect("stats");
        let written = after.bytes_written - before.bytes_written;
        let stored = after.client_bytes_stored - before.client_bytes_stored;
        println!(
            "steady overwrites: {overwrites} sets, flash bytes {written} / stored bytes {stored} = write amplification {:.3}; pages reclaimed {} (with live items {}), objects evicted from flash {}",
            written as f64 / stored as f64,
            after.page_reclaims - before.page_reclaims + after.page_evictions - before.page_evictions,
            after.page_evictions - before.page_evictions,
            after.objects_evicted - before.objects_evicted
        );
    }
    let _ = std::fs::remove_file(&path);
}
