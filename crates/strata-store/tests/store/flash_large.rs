//! Records larger than a flash write buffer (`seg/flash/tier/large.rs`):
//! written with a write of their own, read back from flash, and through a
//! restart, never an old or wrong value.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_store::{
    DeleteRequest, Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable, ExtTunables, FlashFinish, GetAction, GetOptions, RelTime,
    SegStore, StoreRequest, StoreResult,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("strata-flash-large-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 1 MiB pages and a 32 KiB write buffer: every value over ~28 KiB is a
/// large record.
fn ext(path: &Path, size_bytes: u64) -> ExtConfig {
    let tunables = Arc::new(ExtTunables::default());
    tunables.set(ExtTunable::ItemSize(0));
    ExtConfig {
        paths: vec![ExtPath { path: path.to_path_buf(), size_bytes, bucket: Default::default() }],
        page_size_bytes: 1 << 20,
        wbuf_size_bytes: 32 << 10,
        tunables,
        ..ExtConfig::default()
    }
}

fn set(s: &SegStore, key: &str, value: &[u8], now: RelTime) -> StoreResult {
    let req = StoreRequest::set(key.as_bytes(), value).with_flags(3);
    s.store(&req, now)
}

/// The value `key` holds, as the server reads it (RAM, then flash), and
/// whether it came from a flash read.
fn get(s: &SegStore, key: &str, now: RelTime) -> (Option<Vec<u8>>, bool) {
    let mut seen = None;
    let mut visit = |view: strata_store::ItemView<'_>, _created: bool| {
        seen = Some(view.value.to_vec());
        GetAction::default()
    };
    if s.get(key.as_bytes(), GetOptions::default(), now, &mut visit) {
        return (seen, false);
    }
    let Some(read) = s.flash_check(key.as_bytes(), now) else {
        s.get(key.as_bytes(), GetOptions::default(), now, &mut visit);
        return (seen, false);
    };
    let data = read.read_blocking().ok();
    if s.finish_flash_read(&read, data.as_deref(), GetOptions::default(), false, now, &mut visit) != FlashFinish::Visited {
        s.get(key.as_bytes(), GetOptions::default(), now, &mut visit);
    }
    (seen, true)
}

/// Sizes from 40 KB to ~470 KB (larger than the write buffer), and a
/// pattern that shows a shifted or mixed-up read.
fn big_value(i: usize, generation: usize) -> Vec<u8> {
    let len = 40_000 + (i * 37_813) % 430_000;
    (0..len).map(|j| b'a' + ((i * 31 + j * 7 + generation * 3 + j / 4096) % 26) as u8).collect()
}

fn small_fill(s: &SegStore, round: usize, now: RelTime) {
    for j in 0..300 {
        assert!(matches!(set(s, &format!("fill:{round}:{j}"), &[b'f'; 1000], now), StoreResult::Stored { .. }));
    }
}

#[test]
fn records_larger_than_the_write_buffer_go_to_flash_and_come_back() {
    let dir = TempDir::new("basic");
    let mut s = SegStore::new(EngineConfig { memory_limit_bytes: 2 << 20, ..EngineConfig::default() });
    s.attach_flash(ext(&dir.file("flash"), 64 << 20)).expect("flash tier");
    let now = 100;
    let n = 40;
    for i in 0..n {
        assert!(matches!(set(&s, &format!("big:{i}"), &big_value(i, 0), now), StoreResult::Stored { .. }), "big {i}");
        small_fill(&s, i, now);
    }
    s.check_integrity();
    let e = s.ext_stats().expect("flash stats");
    assert_eq!(e.write_fallbacks, 0, "a large record was evicted instead");
    let mut from_flash = 0;
    for i in 0..n {
        let (value, flash) = get(&s, &format!("big:{i}"), now);
        assert_eq!(value.map(|v| v.len()), Some(big_value(i, 0).len()), "big {i}");
        assert_eq!(get(&s, &format!("big:{i}"), now).0, Some(big_value(i, 0)), "big {i}: a wrong value");
        from_flash += usize::from(flash);
    }
    assert!(from_flash >= n - 8, "{from_flash} of {n} read from flash");
    // Small records around the large ones are intact too.
    let (small, _) = get(&s, "fill:3:17", now);
    assert_eq!(small.as_deref(), Some(&[b'f'; 1000][..]));
    let e = s.ext_stats().expect("flash stats");
    assert_eq!(e.badcrc_from_extstore, 0);
    s.check_integrity();
}

fn persistent_store(dir: &TempDir) -> (SegStore, String) {
    let config = EngineConfig { memory_limit_bytes: 2 << 20, ..EngineConfig::default() };
    let (mut s, _) = SegStore::open_file(config, &dir.file("memory"), false).expect("memory file");
    let line = s.attach_flash(ext(&dir.file("flash"), 64 << 20)).expect("flash tier");
    (s, line)
}

#[test]
fn large_records_survive_a_crash_and_replaced_ones_never_come_back() {
    let dir = TempDir::new("crash");
    let (s, _) = persistent_store(&dir);
    let now = 100;
    let n = 40;
    for i in 0..n {
        set(&s, &format!("big:{i}"), &big_value(i, 0), now);
        small_fill(&s, i, now);
    }
    // Replace every 3rd (a new large value), delete every 5th.
    for i in (0..n).step_by(3) {
        set(&s, &format!("big:{i}"), &big_value(i, 1), now);
        small_fill(&s, 100 + i, now);
    }
    for i in (0..n).step_by(5) {
        s.delete(&DeleteRequest { key: format!("big:{i}").as_bytes(), ..DeleteRequest::default() }, now);
    }
    // kill -9: no close (the write buffer's records are lost).
    drop(s);
    let (s, line) = persistent_store(&dir);
    assert!(line.contains("restored"), "{line}");
    let expect = |i: usize| match (i % 5, i % 3) {
        (0, _) => None,
        (_, 0) => Some(big_value(i, 1)),
        _ => Some(big_value(i, 0)),
    };
    let (mut hits, mut live) = (0, 0);
    for i in 0..n {
        let (value, _) = get(&s, &format!("big:{i}"), now);
        live += usize::from(expect(i).is_some());
        if let Some(v) = value {
            assert_eq!(Some(v), expect(i), "big {i}: an old, deleted or wrong value after a crash");
            hits += 1;
        }
    }
    assert!(hits + 2 >= live, "{hits} of {live} large values after a crash");
    s.check_integrity();
}

#[test]
fn threads_writing_large_records_at_once_never_read_a_wrong_value() {
    let dir = TempDir::new("threads");
    // 8 MiB: four items of up to 470 KB in flight at once fit (at 2 MiB a
    // set may find no memory to free while the other shards are busy).
    let mut s = SegStore::new(EngineConfig { memory_limit_bytes: 8 << 20, ..EngineConfig::default() });
    s.attach_flash(ext(&dir.file("flash"), 128 << 20)).expect("flash tier");
    let s = Arc::new(s);
    let now = 100;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let (mut hits, mut from_flash) = (0, 0);
                for round in 0..60 {
                    let i = t * 1000 + round;
                    assert!(matches!(set(&s, &format!("big:{i}"), &big_value(i, 0), now), StoreResult::Stored { .. }));
                    small_fill(&s, i, now);
                    // An older one of this thread's: on flash, in a queue or in RAM.
                    let j = t * 1000 + round / 2;
                    let (value, flash) = get(&s, &format!("big:{j}"), now);
                    if let Some(v) = value {
                        assert!(v == big_value(j, 0), "big {j}: a wrong value");
                        hits += 1;
                        from_flash += usize::from(flash);
                    }
                }
                (hits, from_flash)
            })
        })
        .collect();
    let (mut hits, mut from_flash) = (0, 0);
    for t in threads {
        let (h, f) = t.join().expect("thread");
        hits += h;
        from_flash += f;
    }
    eprintln!("{hits} of 240 older large values served, {from_flash} from flash");
    // A few may be evicted while the flash writer lags (a busy machine:
    // under 230 once, beside a benchmark); a wrong value never.
    assert!(hits >= 216, "{hits} of 240 older large values served");
    assert!(from_flash > 60, "{from_flash} read from flash");
    assert_eq!(s.ext_stats().expect("stats").write_fallbacks, 0);
    s.check_integrity();
}
