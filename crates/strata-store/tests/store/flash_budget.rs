//! The flash indexes are counted in `-m` (`seg/flash/budget.rs`): RAM
//! segments give way as the index grows, and the index stops growing at
//! half of `-m` (further items are evicted as without flash, counted).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_store::{
    Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable, ExtTunables, FlashFinish, GetAction, GetOptions, RelTime, SegStore,
    StoreRequest, StoreResult,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("strata-flash-budget-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tier without the small store: these tests are about the flash index
/// of larger items (`small_budget.rs` has the small store's).
fn flash_store(memory_bytes: u64, path: &Path, flash_bytes: u64) -> SegStore {
    let tunables = Arc::new(ExtTunables::default());
    tunables.set(ExtTunable::ItemSize(0));
    let ext = ExtConfig {
        paths: vec![ExtPath { path: path.to_path_buf(), size_bytes: flash_bytes, bucket: Default::default() }],
        page_size_bytes: 1 << 20,
        wbuf_size_bytes: 64 << 10,
        tunables,
        small_item_max: 0,
        ..ExtConfig::default()
    };
    let mut s = SegStore::new(EngineConfig { memory_limit_bytes: memory_bytes, ..EngineConfig::default() });
    s.attach_flash(ext).expect("flash tier");
    s
}

fn set(s: &SegStore, key: &[u8], value: &[u8], now: RelTime) -> StoreResult {
    let req = StoreRequest::set(key, value);
    s.store(&req, now)
}

/// The value a key holds, read as the server does (RAM, then flash).
fn get(s: &SegStore, key: &[u8], now: RelTime) -> Option<Vec<u8>> {
    let mut seen = None;
    let mut visit = |view: strata_store::ItemView<'_>, _created: bool| {
        seen = Some(view.value.to_vec());
        GetAction::default()
    };
    if s.get(key, GetOptions::default(), now, &mut visit) {
        return seen;
    }
    match s.flash_check(key, now) {
        None => {
            s.get(key, GetOptions::default(), now, &mut visit);
        }
        Some(read) => {
            let data = read.read_blocking().ok();
            if s.finish_flash_read(&read, data.as_deref(), GetOptions::default(), false, now, &mut visit) != FlashFinish::Visited {
                s.get(key, GetOptions::default(), now, &mut visit);
            }
        }
    }
    seen
}

fn value_for(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect()
}

#[test]
fn the_flash_index_is_counted_in_memory_limit() {
    let dir = TempDir::new("charged");
    let limit = 4u64 << 20;
    let s = flash_store(limit, &dir.0.join("flash"), 256 << 20);
    let now = 100;
    let n = 100_000;
    for i in 0..n {
        let key = format!("key:{i}");
        assert!(matches!(set(&s, key.as_bytes(), &value_for(i, 200), now), StoreResult::Stored { .. }), "set {i}");
    }
    s.check_integrity();
    let e = s.ext_stats().expect("flash stats");
    let entries = s.flash_entries() as u64;
    assert!(entries > 80_000, "{entries} entries");
    // The tables' bytes are charged (checked exactly by check_integrity),
    // at most 1/0.8 of 12 bytes an entry once grown.
    assert!(e.index_bytes >= entries * 12 && e.index_bytes <= entries * 12 * 100 / 78, "{} bytes for {entries}", e.index_bytes);
    // Segments, write buffers and index together within -m (plus one
    // growth step: the segments pay a charge back at the next eviction).
    let allocated = s.allocated_bytes();
    assert!(allocated <= limit + e.index_bytes / 8, "{allocated} allocated of {limit}");
    // So the RAM segments shrank by the index's bytes: fewer items in RAM.
    let in_ram = s.stats().curr_items - e.objects_used;
    assert!(in_ram * 200 < limit - e.index_bytes, "{in_ram} items in RAM");
    assert!(e.memory_pressure > e.index_bytes as f64 / limit as f64, "{}", e.memory_pressure);
    assert_eq!(e.write_fallbacks, 0);
    for i in (0..n).step_by(97) {
        assert_eq!(get(&s, format!("key:{i}").as_bytes(), now), Some(value_for(i, 200)), "key {i}");
    }
    s.check_integrity();
}

#[test]
fn a_full_index_budget_evicts_instead_of_growing_and_the_store_goes_on() {
    let dir = TempDir::new("cap");
    let limit = 2u64 << 20;
    let s = flash_store(limit, &dir.0.join("flash"), 128 << 20);
    let now = 100;
    let n = 250_000;
    for i in 0..n {
        let key = format!("key:{i}");
        assert!(matches!(set(&s, key.as_bytes(), &value_for(i, 64), now), StoreResult::Stored { .. }), "set {i}");
    }
    s.check_integrity();
    let e = s.ext_stats().expect("flash stats");
    // The indexes stopped at half of -m (one shard's last step may pass it
    // while another checks), holding ~75,000 entries of 12 bytes at 95%.
    assert!(e.index_bytes <= limit / 2 + limit / 16, "{} index bytes", e.index_bytes);
    assert!(e.index_bytes > limit / 2 * 8 / 10, "{} index bytes", e.index_bytes);
    assert!(e.write_fallbacks > 100_000, "{} fallbacks", e.write_fallbacks);
    assert!(s.stats().evictions >= e.write_fallbacks, "fallbacks are evictions");
    // The newest items are still served, from RAM or flash; none wrong.
    let mut served = 0;
    for i in n - 2000..n {
        if let Some(v) = get(&s, format!("key:{i}").as_bytes(), now) {
            assert_eq!(v, value_for(i, 64), "key {i}");
            served += 1;
        }
    }
    assert!(served > 1500, "{served} of the newest 2000 served");
    s.check_integrity();
}
