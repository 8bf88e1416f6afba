//! The idle writer (`ext_item_age`, `seg/flash/age.rs`) at store level:
//! items idle more than `ext_item_age` seconds go to flash with no memory
//! pressure, a pass at a time, and come back intact; small, young,
//! expired and rewritten items stay in RAM.

use std::path::PathBuf;
use std::sync::Arc;

use strata_store::{
    Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable, ExtTunables, FlashFinish, FlashIdle, GetAction, GetOptions, RelTime, SegStore,
    StoreRequest,
};

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn store(age: Option<u32>, name: &str) -> (SegStore, TempFile) {
    let path = std::env::temp_dir().join(format!("strata-flash-age-{name}-{}", std::process::id()));
    let tunables = Arc::new(ExtTunables::default());
    tunables.set(ExtTunable::ItemSize(512));
    if let Some(age) = age {
        tunables.set(ExtTunable::ItemAge(age));
    }
    let ext = ExtConfig {
        paths: vec![ExtPath { path: path.clone(), size_bytes: 16 << 20, bucket: Default::default() }],
        page_size_bytes: 1 << 20,
        wbuf_size_bytes: 64 << 10,
        tunables,
        ..ExtConfig::default()
    };
    let mut s = SegStore::new(EngineConfig { memory_limit_bytes: 8 << 20, ..EngineConfig::default() });
    s.attach_flash(ext).expect("flash tier");
    (s, TempFile(path))
}

fn set(s: &SegStore, key: &str, value: &[u8], exptime: RelTime, now: RelTime) {
    let req = StoreRequest::set(key.as_bytes(), value).with_exptime(exptime);
    s.store(&req, now);
}

/// A read as the server does it: RAM first, then flash (a blocking read).
fn get(s: &SegStore, key: &str, now: RelTime) -> Option<Vec<u8>> {
    let mut seen = None;
    let mut visit = |view: strata_store::ItemView<'_>, _: bool| {
        seen = Some(view.value.to_vec());
        GetAction::default()
    };
    let opts = GetOptions::default();
    if s.get(key.as_bytes(), opts, now, &mut visit) {
        return seen;
    }
    if let Some(read) = s.flash_check(key.as_bytes(), now) {
        let data = read.read_blocking().ok();
        if s.finish_flash_read(&read, data.as_deref(), opts, false, now, &mut visit) == FlashFinish::Visited {
            return seen;
        }
    }
    s.get(key.as_bytes(), opts, now, &mut visit);
    seen
}

fn value_for(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect()
}

fn written(s: &SegStore) -> u64 {
    s.ext_stats().expect("flash stats").objects_written
}

#[test]
fn idle_items_go_to_flash_after_ext_item_age() {
    let (s, _file) = store(Some(2), "idle");
    let mut idle = FlashIdle::default();
    for i in 0..500 {
        set(&s, &format!("big:{i}"), &value_for(i, 1000), 0, 100);
    }
    for i in 0..200 {
        set(&s, &format!("small:{i}"), &value_for(i, 50), 0, 100);
    }
    set(&s, "expires", &value_for(0, 1000), 102, 100);
    let ram_before = s.stats().bytes;
    // memcached's rule: idle *more than* ext_item_age seconds.
    assert_eq!((s.flash_write_idle(101, &mut idle), s.flash_write_idle(102, &mut idle)), (0, 0));
    assert_eq!(s.flash_write_idle(103, &mut idle), 500, "every big item, not the small or expired ones");
    assert_eq!((written(&s), s.stats().evictions), (500, 0));
    assert_eq!(s.stats().curr_items, 701, "items on flash still count");
    assert!(s.stats().bytes < ram_before / 5, "RAM let go: {} of {ram_before} bytes", s.stats().bytes);
    assert_eq!(s.flash_write_idle(104, &mut idle), 0, "nothing left to write");
    for i in (0..500).step_by(7) {
        assert_eq!(get(&s, &format!("big:{i}"), 104).as_deref(), Some(&value_for(i, 1000)[..]), "big:{i}");
    }
    for i in (0..200).step_by(13) {
        assert_eq!(get(&s, &format!("small:{i}"), 104).as_deref(), Some(&value_for(i, 50)[..]));
    }
    // Reads brought some back to RAM (those still in the write buffer, a
    // recache), read at 104: written again once idle more than 2 seconds.
    assert_eq!(s.flash_write_idle(106, &mut idle), 0);
    assert!(s.flash_write_idle(107, &mut idle) > 0);
    // A rewritten item is young again.
    set(&s, "big:1", &value_for(9, 1000), 0, 107);
    let before = written(&s);
    assert_eq!(s.flash_write_idle(109, &mut idle), 0);
    assert_eq!(s.flash_write_idle(110, &mut idle), 1);
    assert_eq!(written(&s), before + 1);
    assert_eq!(get(&s, "big:1", 110).as_deref(), Some(&value_for(9, 1000)[..]));
    s.check_integrity();
}

#[test]
fn without_ext_item_age_nothing_goes_with_no_pressure() {
    let (s, _file) = store(None, "noage");
    let mut idle = FlashIdle::default();
    for i in 0..100 {
        set(&s, &format!("big:{i}"), &value_for(i, 1000), 0, 100);
    }
    assert_eq!(s.flash_write_idle(100_000, &mut idle), 0);
    assert_eq!(written(&s), 0);
}
