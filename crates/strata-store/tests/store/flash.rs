//! The flash tier (`-o ext_path`) at store level: a tiny `-m` forces items
//! to flash; every flash read goes through the server's protocol
//! (`flash_check`, a blocking read, `finish_flash_read`) as `Driven` below
//! does it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable,
    ExtTunables, FlashFinish, GetAction, GetOptions, ItemMeta, RelTime, SegStore, StoreMode, StoreRequest, StoreResult,
};

pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("strata-flash-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 64 KiB pages, 32 KiB write buffer, `size_mb` of flash, every item size.
pub fn ext(path: &Path, size_bytes: u64) -> ExtConfig {
    let tunables = Arc::new(ExtTunables::default());
    tunables.set(ExtTunable::ItemSize(0));
    ExtConfig {
        paths: vec![ExtPath { path: path.to_path_buf(), size_bytes, bucket: Default::default() }],
        page_size_bytes: 64 << 10,
        wbuf_size_bytes: 32 << 10,
        tunables,
        ..ExtConfig::default()
    }
}

pub fn flash_store(memory_bytes: u64, path: &Path, flash_bytes: u64) -> SegStore {
    let mut s = SegStore::new(EngineConfig { memory_limit_bytes: memory_bytes, ..EngineConfig::default() });
    s.attach_flash(ext(path, flash_bytes)).expect("flash tier");
    s
}

fn set(s: &dyn Engine, key: &[u8], value: &[u8], now: RelTime) -> StoreResult {
    let req = StoreRequest::set(key, value).with_flags(7);
    s.store(&req, now)
}

/// A read as the server does it: RAM first, then flash.
pub fn get(s: &SegStore, key: &[u8], into_ram: bool, now: RelTime) -> (Option<(Vec<u8>, ItemMeta)>, Option<FlashFinish>) {
    let mut seen = None;
    let mut visit = |view: strata_store::ItemView<'_>, _created: bool| {
        seen = Some((view.value.to_vec(), view.meta));
        GetAction::default()
    };
    if s.get(key, GetOptions::default(), now, &mut visit) {
        return (seen, None);
    }
    // A record that moved while it was read (compaction, a merge) is read
    // again where it is now, as the server does (`FlashFinish::Moved`).
    let mut done = None;
    for _ in 0..4 {
        let Some(read) = s.flash_check(key, now) else {
            // Maybe it was in the write buffer and went straight back to RAM.
            s.get(key, GetOptions::default(), now, &mut visit);
            return (seen, done);
        };
        let (found, finish) = read_flash(s, key, &read, into_ram, now);
        if finish != FlashFinish::Moved {
            return (found, Some(finish));
        }
        done = Some(finish);
    }
    (seen, done)
}

/// `read` (the key's `flash_check`) done as the server does it: the blocking
/// read, `finish_flash_read`, and RAM again when the bytes were not visited.
pub fn read_flash(
    s: &SegStore,
    key: &[u8],
    read: &strata_store::FlashRead,
    into_ram: bool,
    now: RelTime,
) -> (Option<(Vec<u8>, ItemMeta)>, FlashFinish) {
    let mut seen = None;
    let mut visit = |view: strata_store::ItemView<'_>, _created: bool| {
        seen = Some((view.value.to_vec(), view.meta));
        GetAction::default()
    };
    let data = read.read_blocking().ok();
    let done = s.finish_flash_read(read, data.as_deref(), GetOptions::default(), into_ram, now, &mut visit);
    if done != FlashFinish::Visited {
        s.get(key, GetOptions::default(), now, &mut visit);
    }
    (seen, done)
}

fn value_for(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect()
}

#[test]
fn items_evicted_from_ram_are_served_from_flash() {
    let dir = TempDir::new("basic");
    let s = flash_store(2 << 20, &dir.file("flash"), 16 << 20);
    let now = 100;
    let n = 6000;
    for i in 0..n {
        let key = format!("key:{i}");
        assert!(matches!(set(&s, key.as_bytes(), &value_for(i, 1000), now), StoreResult::Stored { .. }));
    }
    s.flash_flush();
    let before = s.ext_stats().expect("flash stats");
    assert!(before.objects_written > 3000, "{before:?}");
    assert!(s.stats().evictions < 100, "evicted instead of written: {}", s.stats().evictions);
    let (mut hits, mut from_flash) = (0, 0);
    for i in 0..n {
        let key = format!("key:{i}");
        let (seen, done) = get(&s, key.as_bytes(), false, now);
        if let Some((value, meta)) = seen {
            assert_eq!(value, value_for(i, 1000), "key {i}: a wrong value");
            assert_eq!(meta.flags, 7);
            hits += 1;
        }
        from_flash += usize::from(done.is_some());
        s.check_integrity();
    }
    let after = s.ext_stats().expect("flash stats");
    assert!(hits >= n * 99 / 100, "{hits} of {n} served");
    assert!(from_flash > 3000, "{from_flash} read from flash");
    assert_eq!(after.badcrc_from_extstore, 0);
    assert!(after.objects_read >= from_flash as u64 - after.miss_from_extstore);
    assert!(after.bytes_written > 3_000_000);
    assert!(after.write_amplification() > 0.5, "{}", after.write_amplification());
    assert_eq!(after.io_queue, 0);
}

#[test]
fn every_command_works_on_a_flash_item() {
    let dir = TempDir::new("commands");
    let s = flash_store(1 << 20, &dir.file("flash"), 8 << 20);
    let now = 100;
    for i in 0..3000 {
        set(&s, format!("key:{i}").as_bytes(), &value_for(i, 600), now);
    }
    s.flash_flush();
    // Key 0 is long gone from RAM: on flash.
    let on_flash = |key: &[u8]| {
        let mut hit = false;
        s.get(key, GetOptions { no_bump: true, uncounted: true, ..GetOptions::default() }, now, &mut |_, _| {
            hit = true;
            GetAction::default()
        });
        !hit && s.flash_check(key, now).inspect(|r| s.abandon_flash_read(r)).is_some()
    };
    let bring = |key: &[u8]| {
        if let Some(read) = s.flash_check(key, now) {
            let data = read.read_blocking().expect("read");
            let done = s.finish_flash_read(&read, Some(&data), GetOptions::default(), true, now, &mut |_, _| GetAction::default());
            assert_eq!(done, FlashFinish::InRam);
        }
    };
    assert!(on_flash(b"key:0"));
    // add: the item exists.
    bring(b"key:0");
    let add = StoreRequest::new(StoreMode::Add, b"key:0", b"x");
    assert_eq!(s.store(&add, now), StoreResult::NotStored);
    // append keeps the old value.
    assert!(on_flash(b"key:1"));
    bring(b"key:1");
    let app = StoreRequest::new(StoreMode::Append, b"key:1", b"TAIL");
    assert!(matches!(s.store(&app, now), StoreResult::Stored { value_len: 604, .. }));
    let (seen, _) = get(&s, b"key:1", true, now);
    let mut expect = value_for(1, 600);
    expect.extend_from_slice(b"TAIL");
    assert_eq!(seen.expect("hit").0, expect);
    // delete of a flash item: gone for good.
    assert!(on_flash(b"key:2"));
    bring(b"key:2");
    assert_eq!(s.delete(&DeleteRequest { key: b"key:2", ..DeleteRequest::default() }, now), DeleteResult::Deleted);
    assert!(get(&s, b"key:2", false, now).0.is_none());
    // A delete that raced an eviction to flash (no pre-check) still deletes.
    assert!(on_flash(b"key:3"));
    assert_eq!(s.delete(&DeleteRequest { key: b"key:3", ..DeleteRequest::default() }, now), DeleteResult::NotFound);
    assert!(s.flash_check(b"key:3", now).is_none(), "the flash copy is dropped");
    // incr on a numeric flash item.
    let mut counter = b"42".to_vec();
    counter.resize(600, b' ');
    set(&s, b"counter", &counter, now);
    for i in 3000..6000 {
        set(&s, format!("key:{i}").as_bytes(), &value_for(i, 600), now);
    }
    s.flash_flush();
    assert!(on_flash(b"counter"));
    bring(b"counter");
    let incr = DeltaRequest { key: b"counter", mode: DeltaMode::Incr, delta: 1, cas: 0, vivify: None, initial: 0, touch: None, in_place: true, new_cas: None };
    assert!(matches!(s.delta(&incr, now), DeltaResult::Ok { value: 43, .. }));
    // A set over a flash item replaces it; the flash copy never comes back.
    assert!(on_flash(b"key:5"));
    set(&s, b"key:5", b"new", now);
    assert_eq!(get(&s, b"key:5", false, now).0.expect("hit").0, b"new");
    s.check_integrity();
}

#[test]
fn a_corrupted_or_truncated_file_is_a_counted_miss_never_a_wrong_value() {
    let dir = TempDir::new("corrupt");
    let path = dir.file("flash");
    let s = flash_store(1 << 20, &path, 8 << 20);
    let now = 100;
    let n = 3000;
    for i in 0..n {
        set(&s, format!("key:{i}").as_bytes(), &value_for(i, 700), now);
    }
    s.flash_flush();
    // Flip bytes all over the file's first half.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open");
        let len = f.metadata().expect("len").len();
        let mut at = 4096 + 100;
        while at < len / 2 {
            f.write_all_at(&[0x5a; 8], at).expect("write");
            at += 1500;
        }
    }
    let mut wrong = 0;
    for i in 0..n {
        if let (Some((value, _)), _) = get(&s, format!("key:{i}").as_bytes(), false, now) {
            wrong += usize::from(value != value_for(i, 700));
        }
    }
    assert_eq!(wrong, 0);
    let st = s.ext_stats().expect("stats");
    assert!(st.badcrc_from_extstore > 100, "{st:?}");
    // Truncated: reads past the end fail; a miss, counted. (A demotion
    // written after the truncation extends the file again with a hole,
    // whose zeros fail the check instead: counted as badcrc.)
    std::fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(4096).expect("truncate");
    let counted = |st: strata_store::ExtStats| st.miss_from_extstore + st.badcrc_from_extstore;
    let misses_before = counted(s.ext_stats().expect("stats"));
    for i in 0..n {
        if let (Some((value, _)), _) = get(&s, format!("key:{i}").as_bytes(), false, now) {
            assert_eq!(value, value_for(i, 700));
        }
    }
    assert!(counted(s.ext_stats().expect("stats")) > misses_before);
    s.check_integrity();
}

#[test]
fn a_bad_ext_path_is_an_error_at_start() {
    let dir = TempDir::new("bad");
    let mut s = SegStore::new(EngineConfig::default());
    let missing = ext(&dir.file("no/such/dir/flash"), 8 << 20);
    assert!(s.attach_flash(missing).is_err());
    let small = ext(&dir.file("small"), 64 << 10);
    let err = s.attach_flash(small).expect_err("one page");
    assert!(err.to_string().contains("fewer than 2 pages"), "{err}");
    assert!(s.flash().is_none());
}

#[test]
fn the_flash_fifo_wraps_and_reclaims_pages() {
    let dir = TempDir::new("wrap");
    // 1 MiB of flash: 16 pages; write 8x that.
    let s = flash_store(1 << 20, &dir.file("flash"), 1 << 20);
    let now = 100;
    let n = 8000;
    for i in 0..n {
        set(&s, format!("key:{i}").as_bytes(), &value_for(i, 1000), now);
    }
    s.maintain(now, true);
    let st = s.ext_stats().expect("stats");
    assert!(st.page_evictions + st.page_reclaims > 16, "{st:?}");
    assert!(st.objects_evicted > 0);
    assert_eq!(st.pages_free, 0);
    let mut hits = 0;
    for i in 0..n {
        if let (Some((value, _)), _) = get(&s, format!("key:{i}").as_bytes(), false, now) {
            assert_eq!(value, value_for(i, 1000));
            hits += 1;
        }
    }
    // RAM (~1 MiB) plus flash (~1 MiB) of ~1 KiB items: the newest ~1,500.
    assert!(hits > 1000 && hits < 3000, "{hits}");
    for _ in 0..10 {
        s.maintain(now, true);
    }
    assert!(s.flash_entries() < 3000, "stale entries are swept: {}", s.flash_entries());
    s.check_integrity();
}

/// A store on a memory file (`-e`) with a flash tier, as `-e` and
/// `ext_path` together start.
fn persistent_store(dir: &TempDir) -> (SegStore, String) {
    let config = EngineConfig { memory_limit_bytes: 1 << 20, ..EngineConfig::default() };
    let (mut s, _) = SegStore::open_file(config, &dir.file("memory"), false).expect("memory file");
    let line = s.attach_flash(ext(&dir.file("flash"), 8 << 20)).expect("flash tier");
    (s, line)
}

fn fill(s: &SegStore, n: usize, len: usize, now: RelTime) {
    for i in 0..n {
        assert!(matches!(set(s, format!("key:{i}").as_bytes(), &value_for(i, len), now), StoreResult::Stored { .. }));
    }
}

/// (served, wrong) over keys 0..n, with `expect(i)` the value key i must have.
fn served(s: &SegStore, n: usize, now: RelTime, expect: impl Fn(usize) -> Option<Vec<u8>>) -> (usize, usize) {
    let (mut hits, mut wrong) = (0, 0);
    for i in 0..n {
        let (seen, _) = get(s, format!("key:{i}").as_bytes(), false, now);
        if let Some((value, _)) = seen {
            hits += 1;
            wrong += usize::from(Some(value) != expect(i));
        }
    }
    (hits, wrong)
}

#[test]
fn the_flash_tier_survives_a_graceful_restart() {
    let dir = TempDir::new("graceful");
    let (s, line) = persistent_store(&dir);
    assert!(line.contains("persistent"), "{line}");
    let now = 100;
    fill(&s, 4000, 1000, now);
    assert!(s.ext_stats().expect("stats").objects_used > 2500);
    s.close().expect("graceful stop");
    drop(s);
    let (s, line) = persistent_store(&dir);
    assert!(line.contains("restored"), "{line}");
    let (hits, wrong) = served(&s, 4000, now, |i| Some(value_for(i, 1000)));
    assert_eq!(wrong, 0);
    assert!(hits >= 3960, "{hits} of 4000 after a graceful restart");
    s.check_integrity();
}

#[test]
fn the_flash_tier_survives_a_crash_and_never_brings_back_old_values() {
    let dir = TempDir::new("crash");
    let (s, _) = persistent_store(&dir);
    let now = 100;
    fill(&s, 4000, 1000, now);
    // Delete every 5th key, overwrite every 7th with a new value: most of
    // them are on flash by now.
    for i in (0..4000).step_by(5) {
        s.delete(&DeleteRequest { key: format!("key:{i}").as_bytes(), ..DeleteRequest::default() }, now);
    }
    for i in (0..4000).step_by(7) {
        set(&s, format!("key:{i}").as_bytes(), format!("new {i}").as_bytes(), now);
    }
    // kill -9: no close; the write buffer's items are lost.
    drop(s);
    let (s, line) = persistent_store(&dir);
    assert!(line.contains("restored"), "{line}");
    let expect = |i: usize| {
        if i % 7 == 0 {
            Some(format!("new {i}").into_bytes())
        } else if i % 5 == 0 {
            None
        } else {
            Some(value_for(i, 1000))
        }
    };
    let (hits, wrong) = served(&s, 4000, now, expect);
    assert_eq!(wrong, 0, "a deleted or replaced value came back");
    let live = (0..4000).filter(|&i| expect(i).is_some()).count();
    assert!(hits * 100 >= live * 98, "{hits} of {live} after a crash");
    s.check_integrity();
}

#[test]
fn a_corrupted_flash_file_at_restart_serves_only_what_verifies() {
    let dir = TempDir::new("restart-corrupt");
    let (s, _) = persistent_store(&dir);
    let now = 100;
    fill(&s, 4000, 1000, now);
    s.close().expect("graceful stop");
    drop(s);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(dir.file("flash")).expect("open");
        let mut at = 4096 + 10;
        while at < 4 << 20 {
            f.write_all_at(&[0xa5; 16], at).expect("write");
            at += 3000;
        }
    }
    let (s, _) = persistent_store(&dir);
    let (hits, wrong) = served(&s, 4000, now, |i| Some(value_for(i, 1000)));
    assert_eq!(wrong, 0);
    assert!(hits > 500, "{hits}: the undamaged items are still served");
    assert!(s.ext_stats().expect("stats").badcrc_from_extstore > 100);
}

#[test]
fn without_a_memory_file_the_flash_tier_starts_empty() {
    let dir = TempDir::new("cold");
    let s = flash_store(1 << 20, &dir.file("flash"), 8 << 20);
    fill(&s, 3000, 1000, 100);
    s.close().expect("stop");
    drop(s);
    let s = flash_store(1 << 20, &dir.file("flash"), 8 << 20);
    assert_eq!(served(&s, 3000, 100, |i| Some(value_for(i, 1000))), (0, 0));
}

#[test]
fn write_errors_fall_back_to_eviction_and_are_counted() {
    // Every write to /dev/full fails (ENOSPC); its reads return zeros.
    if !Path::new("/dev/full").exists() {
        return;
    }
    let s = flash_store(1 << 20, Path::new("/dev/full"), 1 << 20);
    let now = 100;
    for i in 0..4000 {
        set(&s, format!("key:{i}").as_bytes(), &value_for(i, 1000), now);
    }
    s.flash_flush();
    let st = s.ext_stats().expect("stats");
    assert!(st.write_errors > 0, "{st:?}");
    assert!(st.write_fallbacks > 0, "items evicted once flash gave up: {st:?}");
    assert!(s.stats().evictions > 1000);
    let (hits, wrong) = served(&s, 4000, now, |i| Some(value_for(i, 1000)));
    assert_eq!(wrong, 0);
    assert!(hits > 100, "RAM still serves: {hits}");
    assert_eq!(st.bytes_written, 0);
}

#[test]
fn threads_reading_and_writing_through_flash_never_see_a_wrong_value() {
    let dir = TempDir::new("threads");
    let s = Arc::new(flash_store(1 << 20, &dir.file("flash"), 2 << 20));
    let keys = 3000;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut x: u64 = 0x1234_5678 + t;
                let mut hits = 0;
                for n in 0..20_000usize {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = (x % keys) as usize;
                    let key = format!("key:{i}");
                    // A value names its key, so any wrong value shows.
                    let value = |round: usize| format!("{key}:{round}:{}", "v".repeat(600)).into_bytes();
                    if n % 3 == 0 {
                        set(&*s, key.as_bytes(), &value(n), 100);
                    } else if let (Some((v, _)), _) = get(&s, key.as_bytes(), n % 2 == 0, 100) {
                        assert!(v.starts_with(format!("{key}:").as_bytes()) && v.len() > 600, "wrong value for {key}");
                        hits += 1;
                    }
                }
                hits
            })
        })
        .collect();
    let hits: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
    assert!(hits > 1000, "{hits}");
    let st = s.ext_stats().expect("stats");
    assert!(st.objects_read > 100, "{st:?}");
    assert_eq!(st.badcrc_from_extstore, 0);
    s.check_integrity();
}

#[test]
fn a_flash_item_read_once_reports_fetched() {
    let dir = TempDir::new("fetched");
    let s = flash_store(1 << 20, &dir.file("flash"), 8 << 20);
    for i in 0..3000 {
        set(&s, format!("key:{i}").as_bytes(), &value_for(i, 600), 100);
    }
    s.flash_flush();
    let read = |key: &[u8]| {
        let read = s.flash_check(key, 100).expect("on flash");
        let data = read.read_blocking().expect("read");
        let mut fetched = None;
        let done = s.finish_flash_read(&read, Some(&data), GetOptions::default(), false, 100, &mut |view, _| {
            fetched = Some(view.meta.fetched);
            GetAction::default()
        });
        (done, fetched)
    };
    // The first flash hit of the run is the recache_rate-th: take it on key 0.
    let _ = read(b"key:0");
    assert_eq!(read(b"key:1"), (FlashFinish::Visited, Some(false)));
    assert_eq!(read(b"key:1"), (FlashFinish::Visited, Some(true)), "h after a read");
}

#[test]
fn stats_reset_zeroes_the_flash_read_counters_as_memcached() {
    let dir = TempDir::new("reset");
    let s = flash_store(1 << 20, &dir.file("flash"), 8 << 20);
    fill_plain(&s);
    let before = s.ext_stats().expect("stats");
    assert!(before.get_extstore > 0 && before.objects_read > 0);
    s.reset_stats();
    let after = s.ext_stats().expect("stats");
    assert_eq!((after.get_extstore, after.miss_from_extstore, after.recache_from_extstore), (0, 0, 0));
    assert_eq!(after.objects_read, before.objects_read, "extstore's own counters stay");
}

fn fill_plain(s: &SegStore) {
    for i in 0..3000 {
        set(s, format!("key:{i}").as_bytes(), &value_for(i, 600), 100);
    }
    s.flash_flush();
    for i in 0..100 {
        get(s, format!("key:{i}").as_bytes(), false, 100);
    }
}

#[test]
fn many_shards_growing_their_flash_indexes_at_once_restart_intact() {
    let dir = TempDir::new("shards");
    let open = || {
        let config = EngineConfig { memory_limit_bytes: 16 << 20, ..EngineConfig::default() };
        let (mut s, _) = SegStore::open_file(config, &dir.file("memory"), false).expect("memory file");
        s.attach_flash(ext(&dir.file("flash"), 64 << 20)).expect("flash tier");
        s
    };
    let s = Arc::new(open());
    // -m 16 makes 4 shards (seg/mod.rs geometry, never fewer): 4 threads
    // grow their indexes at once.
    assert!(s.shard_count() >= 4);
    let per_thread = 8000;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in t * per_thread..(t + 1) * per_thread {
                    set(&*s, format!("key:{i}").as_bytes(), &value_for(i, 1000), 100);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let on_flash = s.ext_stats().expect("stats").objects_used;
    assert!(on_flash > 10_000, "{on_flash}");
    s.close().expect("graceful stop");
    drop(s);
    let s = open();
    let (hits, wrong) = served(&s, 4 * per_thread, 100, |i| Some(value_for(i, 1000)));
    assert_eq!(wrong, 0);
    assert!(hits * 100 >= 4 * per_thread * 99, "{hits}");
}

/// No record of up to 256 bytes straddles a 4 KiB block: each such item
/// is read from flash with exactly one block (values of 1 to 6,000 bytes
/// in steps that land records at every 16-byte offset of a block), longer
/// ones are padded only where that leaves at most 256 bytes empty, and
/// the zero bytes written to keep records whole are counted.
#[test]
fn a_record_of_at_most_256_bytes_is_read_with_one_block() {
    let dir = TempDir::new("noncrossing");
    let s = flash_store(2 << 20, &dir.file("flash"), 64 << 20);
    let now = 100;
    let n = 8000;
    let len_of = |i: usize| 1 + (i * 577) % 6000;
    for i in 0..n {
        let key = format!("key:{i}");
        assert!(matches!(set(&s, key.as_bytes(), &value_for(i, len_of(i)), now), StoreResult::Stored { .. }));
    }
    s.flash_flush();
    let (mut from_flash, mut longer, mut straddling) = (0, 0, 0);
    for i in 0..n {
        let key = format!("key:{i}");
        let Some(read) = s.flash_check(key.as_bytes(), now) else { continue };
        // 32-byte header, key, value, padded to 16 bytes.
        let record = (32 + key.len() + len_of(i) + 15) & !15;
        if record <= 256 {
            assert_eq!(read.len_bytes, 4096, "key {i}: a record of {record} bytes read with {} bytes", read.len_bytes);
        } else if record <= 4096 {
            assert!(read.len_bytes <= 8192, "key {i}: a record of {record} bytes read with {} bytes", read.len_bytes);
            straddling += usize::from(read.len_bytes == 8192);
        } else {
            longer += 1;
        }
        let (seen, done) = read_flash(&s, key.as_bytes(), &read, false, now);
        // InRam: the ext_recache_rate-th flash hit goes back to RAM, and is read there.
        assert!(matches!(done, FlashFinish::Visited | FlashFinish::InRam), "key {i}: {done:?}");
        assert_eq!(seen.map(|(v, _)| v).as_deref(), Some(&value_for(i, len_of(i))[..]), "key {i}: a wrong value");
        from_flash += 1;
    }
    assert!(from_flash > n / 2, "{from_flash} of {n} read from flash");
    assert!(longer > 0, "no record longer than a block was tried");
    // Records of 256 B-4 KiB straddle only where padding would leave more
    // than 256 bytes empty: some do, and padding stays under a sixteenth
    // of the bytes.
    assert!(straddling > 0, "no record of 256 B-4 KiB straddles: padding unbounded?");
    let stats = s.ext_stats().expect("flash stats");
    assert!(stats.bytes_padded > 0, "{stats:?}");
    assert!(stats.bytes_padded * 16 < stats.bytes_written, "{stats:?}");
    assert_eq!(stats.badcrc_from_extstore, 0);
    s.check_integrity();
}
