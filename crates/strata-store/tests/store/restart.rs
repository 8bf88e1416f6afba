//! The segment store on a memory file (`-e`): what comes back after a
//! graceful stop, after a crash (the store dropped without `close`, which
//! leaves the file as `kill -9` does: every byte written is in it), and
//! from a file damaged on purpose. The rule throughout: an item comes back
//! with exactly the value, flags and CAS it had, or not at all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use strata_store::{
    DeleteRequest, DeltaMode, DeltaRequest, Engine, EngineConfig, GetAction, GetOptions, RelTime, SegStore,
    StoreRequest, StoreResult,
};

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let path = scratch_dir().join(format!("strata-restart-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// tmpfs when there is one (where a memory file belongs: on a disk, the
/// graceful stop's write-back is a real disk write).
fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn config(mb: u64) -> EngineConfig {
    EngineConfig { memory_limit_bytes: mb << 20, ..EngineConfig::default() }
}

fn open(path: &Path, mb: u64) -> (SegStore, String) {
    SegStore::open_file(config(mb), path, false).expect("open memory file")
}

/// The store's relative time now (its clock origin is the file's).
fn now(store: &SegStore) -> RelTime {
    (strata_store::clock::unix_time() - store.clock_origin().expect("file-backed")) as RelTime
}

fn set(store: &SegStore, key: &[u8], value: &[u8], flags: u32, exptime: RelTime) -> u64 {
    let req = StoreRequest::set(key, value).with_flags(flags).with_exptime(exptime);
    match store.store(&req, now(store)) {
        StoreResult::Stored { cas, .. } => cas,
        other => panic!("set {}: {other:?}", String::from_utf8_lossy(key)),
    }
}

fn read(store: &SegStore, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    let mut out = None;
    let opts = GetOptions { no_bump: true, ..GetOptions::default() };
    store.get(key, opts, now(store), &mut |view, _| {
        out = Some((view.value.to_vec(), view.meta.flags, view.meta.cas));
        GetAction::default()
    });
    out
}

fn value_for(i: usize, round: usize) -> Vec<u8> {
    // Mixed sizes: mostly small, some over a quarter segment (their own extent).
    let len = match i % 50 {
        0 => 70_000 + i % 5000,
        1..=5 => 3000 + i % 1000,
        _ => 10 + (i * 7) % 300,
    };
    let mut v = format!("{i}:{round}:").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

/// Load `n` items, overwrite every 3rd, delete every 7th, bump a counter,
/// give every 11th a TTL that ends in a second; returns what should remain.
fn load(store: &SegStore, n: usize) -> HashMap<Vec<u8>, (Vec<u8>, u32, u64)> {
    let mut expect = HashMap::new();
    for i in 0..n {
        let key = format!("key:{i}").into_bytes();
        let ttl = if i % 11 == 0 { now(store) + 1 } else { 0 };
        let value = value_for(i, 0);
        let cas = set(store, &key, &value, i as u32, ttl);
        if ttl == 0 {
            expect.insert(key, (value, i as u32, cas));
        }
    }
    for i in (0..n).step_by(3) {
        let key = format!("key:{i}").into_bytes();
        let value = value_for(i, 1);
        let cas = set(store, &key, &value, 7, 0);
        expect.insert(key, (value, 7, cas));
    }
    for i in (0..n).step_by(7) {
        let key = format!("key:{i}").into_bytes();
        store.delete(&DeleteRequest { key: &key, ..DeleteRequest::default() }, now(store));
        expect.remove(&key);
    }
    set(store, b"counter", b"10", 0, 0);
    let req = DeltaRequest { key: b"counter", delta: 5, mode: DeltaMode::Incr, cas: 0, initial: 0, vivify: None, touch: None, in_place: true, new_cas: None };
    store.delta(&req, now(store));
    let (value, flags, cas) = read(store, b"counter").unwrap();
    assert_eq!(value, b"15");
    expect.insert(b"counter".to_vec(), (value, flags, cas));
    expect
}

#[test]
fn a_graceful_stop_keeps_every_item_with_its_cas() {
    let file = TempFile::new("graceful");
    let (store, line) = open(&file.0, 64);
    assert!(line.contains("created"), "{line}");
    let expect = load(&store, 20_000);
    let items = store.stats().curr_items;
    store.close().expect("close");
    drop(store);
    std::thread::sleep(std::time::Duration::from_millis(2100));

    let (store, line) = open(&file.0, 64);
    store.check_integrity();
    let restart = store.stats().restart.expect("restart stats");
    assert!(restart.ok && restart.clean, "{line}");
    assert_eq!(restart.damaged, 0, "{line}");
    assert!(restart.expired > 0, "the 1-second TTLs ran out during the stop: {line}");
    assert_eq!(store.stats().curr_items, expect.len() as u64, "{line} (had {items} before)");
    for (key, want) in &expect {
        assert_eq!(read(&store, key).as_ref(), Some(want), "{}", String::from_utf8_lossy(key));
    }
    for i in (0..20_000).filter(|i| i % 11 == 0 && i % 3 != 0) {
        assert_eq!(read(&store, format!("key:{i}").as_bytes()), None, "expired key:{i}");
    }
    // New CAS values continue past the old ones.
    let cas = set(&store, b"after", b"x", 0, 0);
    assert!(expect.values().all(|v| v.2 < cas));
}

#[test]
fn a_crash_keeps_every_acknowledged_item() {
    let file = TempFile::new("crash");
    let (store, _) = open(&file.0, 64);
    let expect = load(&store, 20_000);
    // Dropped without close: the file holds what memory held, as after kill -9.
    drop(store);
    let (store, line) = open(&file.0, 64);
    store.check_integrity();
    let restart = store.stats().restart.expect("restart stats");
    assert!(restart.ok && !restart.clean, "{line}");
    for (key, want) in &expect {
        assert_eq!(read(&store, key).as_ref(), Some(want), "{}", String::from_utf8_lossy(key));
    }
    for i in (0..20_000).step_by(7).filter(|i| i % 3 != 0) {
        assert_eq!(read(&store, format!("key:{i}").as_bytes()), None, "deleted key:{i} came back");
    }
}

#[test]
fn eviction_and_reuse_of_segments_never_resurrect_old_values() {
    let file = TempFile::new("evict");
    let (store, _) = open(&file.0, 4);
    let mut last = HashMap::new();
    for round in 0..6 {
        for i in 0..3000 {
            let key = format!("k{i}").into_bytes();
            let value = value_for(i + 2, round);
            let cas = set(&store, &key, &value, round as u32, 0);
            last.insert(key, (value, round as u32, cas));
        }
    }
    assert!(store.stats().evictions > 0);
    drop(store);
    let (store, line) = open(&file.0, 4);
    store.check_integrity();
    let mut back = 0;
    for (key, want) in &last {
        if let Some(got) = read(&store, key) {
            assert_eq!(&got, want, "{}: {line}", String::from_utf8_lossy(key));
            back += 1;
        }
    }
    assert_eq!(back as u64, store.stats().curr_items);
    assert!(back > 0, "{line}");
}

/// Damage `file` with `hurt`, reopen, and check nothing wrong is served.
fn reopen_damaged(name: &str, hurt: impl Fn(&Path, &SegStore), cold: bool) {
    let file = TempFile::new(name);
    let (store, _) = open(&file.0, 16);
    let expect = load(&store, 3000);
    store.close().unwrap();
    hurt(&file.0, &store);
    drop(store);
    let (store, line) = open(&file.0, 16);
    store.check_integrity();
    let restart = store.stats().restart.unwrap();
    assert_eq!(!restart.ok, cold, "{name}: {line}");
    let mut back = 0;
    for (key, want) in &expect {
        if let Some(got) = read(&store, key) {
            assert_eq!(&got, want, "{name}: {}", String::from_utf8_lossy(key));
            back += 1;
        }
    }
    if cold {
        assert_eq!(back, 0, "{name}");
    } else {
        assert!(back > 0 && back < expect.len(), "{name}: {back} of {} back; {line}", expect.len());
    }
}

fn flip(path: &Path, offsets: impl Iterator<Item = u64>) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    for at in offsets {
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
    }
}

#[test]
fn damaged_files_serve_nothing_wrong() {
    let len = |p: &Path| std::fs::metadata(p).unwrap().len();
    reopen_damaged("magic", |p, _| flip(p, 0..1), true);
    reopen_damaged("version", |p, _| flip(p, 8..9), true);
    reopen_damaged("settings", |p, _| flip(p, 16..17), true);
    reopen_damaged("truncated", |p, _| std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(len(p) / 2).unwrap(), true);
    reopen_damaged("empty", |p, _| std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(0).unwrap(), true);
    // The directory (page 1 on): every entry's first byte.
    reopen_damaged("directory", |p, _| flip(p, (4096..8192).step_by(16 * 7)), false);
    // Items: a byte every 64 KiB of the arena, past the directory.
    reopen_damaged("items", |p, _| flip(p, (16384 + 1000..len(p)).step_by(65536 + 17)), false);
    // Whole pages of garbage.
    reopen_damaged(
        "pages",
        |p, _| {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            for page in (8..len(p) / 4096).step_by(37) {
                f.write_all_at(&[0xa5; 4096], page * 4096).unwrap();
            }
        },
        false,
    );
}

#[test]
fn other_settings_start_cold_or_are_refused_when_strict() {
    let file = TempFile::new("settings-change");
    let (store, _) = open(&file.0, 16);
    load(&store, 100);
    store.close().unwrap();
    drop(store);
    let err = SegStore::open_file(config(32), &file.0, true).err().expect("strict refuses");
    assert!(err.to_string().contains("other settings"), "{err}");
    let (store, line) = open(&file.0, 32);
    assert!(line.contains("other settings") && line.contains("empty cache"), "{line}");
    assert_eq!(store.stats().curr_items, 0);
    assert!(!store.stats().restart.unwrap().ok);
}

#[test]
fn a_file_in_use_is_refused() {
    let file = TempFile::new("locked");
    let (_store, _) = open(&file.0, 8);
    let started = std::time::Instant::now();
    let err = SegStore::open_file(config(8), &file.0, false).err().expect("second opener refused");
    assert!(err.to_string().contains("in use"), "{err}");
    assert!(started.elapsed() >= strata_store::MEMORY_FILE_LOCK_WAIT, "refused only after waiting");
}

/// A start right after the previous owner was told to stop (a restart that
/// does not wait for it to exit) waits for the lock and gets the cache.
#[test]
fn a_file_released_while_waiting_is_opened_with_its_items() {
    let file = TempFile::new("handover");
    let (store, _) = open(&file.0, 8);
    let expect = load(&store, 100);
    let stopping = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        store.close().unwrap();
        drop(store);
    });
    let started = std::time::Instant::now();
    let (store, line) = open(&file.0, 8);
    assert!(started.elapsed() >= std::time::Duration::from_millis(400), "waited for the lock");
    stopping.join().unwrap();
    assert!(store.stats().restart.expect("restart stats").clean, "{line}");
    for (key, want) in &expect {
        assert_eq!(read(&store, key).as_ref(), Some(want), "{}", String::from_utf8_lossy(key));
    }
}

/// Meta `E`: items numbered explicitly, below the counter, far above it and
/// at `u64::MAX`, come back as stored after a crash and after a graceful
/// stop; the newest value of a key wins even when its CAS is the lowest,
/// and the counter after a restart stays usable.
#[test]
fn explicit_cas_items_come_back_as_stored() {
    let file = TempFile::new("explicit-cas");
    let store_e = |store: &SegStore, key: &[u8], value: &[u8], cas: u64| {
        let req = StoreRequest::set(key, value).with_new_cas(cas);
        assert!(matches!(store.store(&req, now(store)), StoreResult::Stored { cas: got, .. } if got == cas));
    };
    {
        let (store, _) = open(&file.0, 8);
        for round in 0..5u8 {
            set(&store, b"low", &[b'a' + round], 0, 0);
        }
        store_e(&store, b"low", b"newest", 1);
        store_e(&store, b"high", b"h", 1 << 50);
        set(&store, b"high", b"after-high", 0, 0);
        store_e(&store, b"max", b"m", u64::MAX);
        // A crash: dropped without close.
    }
    for graceful in [false, true] {
        let (store, _) = open(&file.0, 8);
        assert_eq!(read(&store, b"low"), Some((b"newest".to_vec(), 0, 1)), "graceful {graceful}");
        assert_eq!(read(&store, b"high").map(|(v, _, _)| v), Some(b"after-high".to_vec()));
        assert_eq!(read(&store, b"max"), Some((b"m".to_vec(), 0, u64::MAX)));
        let cas = set(&store, b"fresh", b"f", 0, 0);
        assert!(cas != 0);
        assert_eq!(read(&store, b"fresh").map(|(v, _, _)| v), Some(b"f".to_vec()));
        // Rewrite "low" with a low explicit CAS again: still the newest.
        store_e(&store, b"low", b"again", 2);
        assert_eq!(read(&store, b"low"), Some((b"again".to_vec(), 0, 2)));
        store_e(&store, b"low", b"newest", 1);
        if graceful {
            store.close().expect("graceful stop");
        }
    }
}
