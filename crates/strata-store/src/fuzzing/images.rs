//! Pristine images of the files a store writes, built once per process in a
//! scratch directory (tmpfs when there is one), with what was written to
//! them: every key's versions, so a read after damage can be checked
//! against the set of values ever written for its key.
//!
//! ```text
//!  <scratch>/strata-damage-<pid>/
//!    memory/{clean,crash}/memory            -e only, 4 MiB of -m
//!    flash/{clean,crash}/memory             -e with ext_path: 4 MiB of -m,
//!    flash/{clean,crash}/memory.flash/...   16 MiB of flash in 1 MiB pages;
//!    flash/{clean,crash}/flash              items in the larger-item tier and
//!                                           in the small store's sets and logs
//! ```
//!
//! `clean` is the files after a graceful stop; `crash` a copy taken while
//! the store was still open and idle (the files as a `kill -9` leaves them:
//! shared mappings hold every byte written). A value is `<key>:<version>:`
//! padded with bytes derived from both, its flags the version, so any
//! value read names the key and version it claims to be.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{
    DeleteRequest, Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable, ExtTunables, FlashRewrite, RelTime, SegStore, StoreRequest,
    StoreResult,
};

/// The relative time every image is written and read at.
pub const NOW: RelTime = 100;

/// What a pristine image holds: per key (index), every version written
/// (`versions`, in order) and the last (`last`: None when deleted last).
pub struct History {
    pub keys: usize,
    pub versions: Vec<Vec<u32>>,
    pub last: Vec<Option<u32>>,
}

impl History {
    fn new(keys: usize) -> History {
        History { keys, versions: vec![Vec::new(); keys], last: vec![None; keys] }
    }

    fn set(&mut self, s: &SegStore, i: usize, version: u32, len: usize) {
        let (k, v) = (key(i), value(i, version, len));
        let r = s.store(&StoreRequest::set(&k, &v).with_flags(version), NOW);
        assert!(matches!(r, StoreResult::Stored { .. }), "pristine image: set {i}: {r:?}");
        self.versions[i].push(version);
        self.last[i] = Some(version);
    }

    fn delete(&mut self, s: &SegStore, i: usize) {
        s.delete(&DeleteRequest { key: &key(i), ..DeleteRequest::default() }, NOW);
        self.last[i] = None;
    }
}

pub fn key(i: usize) -> Vec<u8> {
    format!("dmg:{i:06}").into_bytes()
}

/// Key `i`'s value at `version`, `len` bytes (at least its prefix).
pub fn value(i: usize, version: u32, len: usize) -> Vec<u8> {
    let mut v = format!("dmg:{i:06}:{version}:").into_bytes();
    let seed = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(version);
    let mut x = seed | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

/// The length of key `i`'s value at `version`: the length is a function of
/// both, so a checker can rebuild the value from the version it names.
pub fn value_len(i: usize, version: u32, flash: bool) -> usize {
    let h = (i as u64 * 31 + u64::from(version) * 7) % 100;
    match (flash, h) {
        // Mostly small, some larger, a few over a quarter segment.
        (false, 0..=1) => 9000 + (i % 4000),
        (false, 2..=15) => 1000 + (i % 1500),
        (false, _) => 20 + (i * 13) % 200,
        // Small items for the small store (key + value up to 512 bytes), the
        // rest for the larger-item tier.
        (true, 0..=34) => 600 + (i * 7) % 2400,
        (true, _) => 30 + (i * 13) % 400,
    }
}

fn scratch_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A scratch directory for this process: /dev/shm when there is one.
pub fn scratch() -> PathBuf {
    scratch_base().join(format!("strata-damage-{}", std::process::id()))
}

/// Remove the scratch directories of processes that are gone (a fuzzer
/// ends with `exit`, leaving its images behind).
pub fn remove_stale_scratch() {
    for entry in std::fs::read_dir(scratch_base()).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("strata-damage-")) else { continue };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Remove this process's scratch directory.
pub fn remove_scratch() {
    let _ = std::fs::remove_dir_all(scratch());
}

pub const MEMORY_MB: u64 = 4;
pub const FLASH_BYTES: u64 = 16 << 20;
pub const FLASH_PAGE: u64 = 1 << 20;

pub fn engine_config() -> EngineConfig {
    EngineConfig { memory_limit_bytes: MEMORY_MB << 20, ..EngineConfig::default() }
}

/// The flash tier's settings: 1 MiB pages, a 256 KiB write buffer, every
/// item size to flash, the small store on (its default item size).
pub fn ext_config(dir: &Path) -> ExtConfig {
    let tunables = Arc::new(ExtTunables::default());
    tunables.set(ExtTunable::ItemSize(0));
    ExtConfig {
        paths: vec![ExtPath { path: dir.join("flash"), size_bytes: FLASH_BYTES, bucket: Default::default() }],
        page_size_bytes: FLASH_PAGE,
        wbuf_size_bytes: 256 << 10,
        tunables,
        ..ExtConfig::default()
    }
}

/// Open the store in `dir` as a restart does: the memory file, then (for
/// flash) the tier beside it.
pub fn open(dir: &Path, flash: bool) -> std::io::Result<SegStore> {
    let (mut s, _) = SegStore::open_file(engine_config(), &dir.join("memory"), false)?;
    if flash {
        s.attach_flash(ext_config(dir))?;
    }
    Ok(s)
}

/// Copy every file under `from` to `to` (made anew).
///
/// A copy interrupted by a signal starts over: libFuzzer's SIGALRM (its
/// `-timeout` check, a handler without `SA_RESTART`) can stop the kernel's
/// copy with EINTR, which `std::fs::copy` returns.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    loop {
        match copy_tree_once(from, to) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            done => return done,
        }
    }
}

fn copy_tree_once(from: &Path, to: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree_once(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Write a store in `root/work` with `load`, copy it to `root/crash` while
/// open, stop it gracefully and copy it to `root/clean`.
fn build(root: &Path, flash: bool, load: impl FnOnce(&SegStore, &mut History), keys: usize) -> History {
    let work = root.join("work");
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(&work).expect("scratch directory");
    let s = open(&work, flash).expect("pristine store");
    let mut h = History::new(keys);
    load(&s, &mut h);
    copy_tree(&work, &root.join("crash")).expect("crash image");
    s.close().expect("graceful stop");
    drop(s);
    copy_tree(&work, &root.join("clean")).expect("clean image");
    std::fs::remove_dir_all(&work).expect("scratch");
    h
}

/// The memory file: 4,000 keys, versions 1-3, every 5th deleted.
pub fn build_memory(root: &Path) -> History {
    let keys = 4000;
    build(
        root,
        false,
        |s, h| {
            for i in 0..keys {
                h.set(s, i, 1, value_len(i, 1, false));
            }
            for i in (0..keys).step_by(3) {
                h.set(s, i, 2, value_len(i, 2, false));
            }
            for i in (0..keys).step_by(5) {
                h.delete(s, i);
            }
            for i in (1..keys).step_by(11) {
                h.set(s, i, 3, value_len(i, 3, false));
            }
        },
        keys,
    )
}

/// The flash files: 12,000 keys through 4 MiB of RAM; merged once (small
/// items into sets), then overwrites and deletes and new keys (into the
/// logs and the larger-item tier's write buffer).
pub fn build_flash(root: &Path) -> History {
    let (first, keys) = (8000, 12000);
    build(
        root,
        true,
        |s, h| {
            for i in 0..first {
                h.set(s, i, 1, value_len(i, 1, true));
            }
            s.flash_merge_all(NOW, &mut FlashRewrite::default());
            for i in (0..first).step_by(3) {
                h.set(s, i, 2, value_len(i, 2, true));
            }
            for i in (0..first).step_by(5) {
                h.delete(s, i);
            }
            for i in first..keys {
                h.set(s, i, 1, value_len(i, 1, true));
            }
        },
        keys,
    )
}

/// Every file under `dir`, relative, sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).expect("under base").to_path_buf());
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}
