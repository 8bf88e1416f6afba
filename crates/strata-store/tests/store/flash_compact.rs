//! The log's compaction (`seg/flash/compact.rs`) on a store stepped by
//! hand, as the server's `strata-flash-compact` thread steps it: under
//! overwrites a file with room keeps every live item and evicts no page;
//! expired and flushed records are dropped, never moved; a file full of
//! live data evicts its oldest pages and keeps their read items; readers
//! never see a wrong value while it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use strata_store::{Engine, ExtStats, FlashCompact, SegStore, StoreRequest, StoreResult};

use super::flash::{flash_store, get, TempDir};

/// Values naming key and version, so a wrong or old value shows.
fn value(i: usize, version: usize, len: usize) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(len, b'a' + ((i + version) % 26) as u8);
    v
}

fn set(s: &SegStore, i: usize, version: usize, len: usize, ttl: u32, now: u32) {
    let key = format!("key:{i}");
    let v = value(i, version, len);
    let req = StoreRequest::set(key.as_bytes(), &v).with_exptime(if ttl == 0 { 0 } else { now + ttl });
    assert!(matches!(s.store(&req, now), StoreResult::Stored { .. }), "key {i}");
}

/// The counters that matter here, without the page rows.
fn brief(st: &ExtStats) -> String {
    format!(
        "written {} B, compact: pages {} evict_pages {} rescues {} lost {} skipped {} expired {} read {} B moved {} B behind {}; \
         page evictions {} reclaims {}, objects evicted {}, fallbacks {}",
        st.bytes_written,
        st.compact_pages,
        st.compact_evict_pages,
        st.compact_rescues,
        st.compact_lost,
        st.compact_skipped,
        st.compact_expired,
        st.compact_bytes_read,
        st.compact_bytes_moved,
        st.compact_behind,
        st.page_evictions,
        st.page_reclaims,
        st.objects_evicted,
        st.write_fallbacks
    )
}

/// Step the compactor until it has nothing to do.
fn compact(s: &SegStore, state: &mut FlashCompact, now: u32) {
    let mut steps = 0;
    while s.flash_compact(now, state) {
        steps += 1;
        assert!(steps < 1_000_000, "the compactor never settles");
    }
}

/// Keys `from..from + n`, version 0, read back: (hits, wrong values).
fn read_all_from(s: &SegStore, from: usize, n: usize, len: usize, now: u32) -> (usize, usize) {
    let (mut hits, mut wrong) = (0, 0);
    for i in from..from + n {
        match get(s, format!("key:{i}").as_bytes(), false, now).0 {
            Some((v, _)) if v == value(i, 0, len) => hits += 1,
            Some(_) => wrong += 1,
            None => {}
        }
    }
    (hits, wrong)
}

/// Every key 0..n read back: (hits, wrong values). `version(i)` is the
/// version key i must have, if it must be there.
fn read_all(s: &SegStore, n: usize, len: usize, now: u32, version: impl Fn(usize) -> Option<usize>) -> (usize, usize) {
    let (mut hits, mut wrong) = (0, 0);
    for i in 0..n {
        let (seen, _) = get(s, format!("key:{i}").as_bytes(), false, now);
        match (seen, version(i)) {
            (Some((v, _)), Some(want)) if v == value(i, want, len) => hits += 1,
            (Some(_), _) => wrong += 1,
            (None, _) => {}
        }
    }
    (hits, wrong)
}

/// 1,000-byte values, live data half of a 16 MiB file (256 pages of 64
/// KiB) at `-m 2`: 20 rounds of overwrites (10 times the file's bytes
/// written) with the compactor stepped after each hundred sets. Pages
/// do not empty on their own: the compactor must empty them.
#[test]
fn overwrites_keep_every_live_item_while_the_file_has_room() {
    let dir = TempDir::new("compact-overwrite");
    let s = flash_store(2 << 20, &dir.file("flash"), 16 << 20);
    let (n, len, now) = (8000, 1000, 100);
    let mut state = FlashCompact::default();
    let mut versions = vec![0usize; n];
    for i in 0..n {
        set(&s, i, 0, len, 0, now);
    }
    let mut x = 7u64;
    for step in 0..20 * n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let i = (x >> 33) as usize % n;
        versions[i] += 1;
        set(&s, i, versions[i], len, 0, now);
        if step % 100 == 0 {
            compact(&s, &mut state, now);
        }
    }
    compact(&s, &mut state, now);
    s.flash_flush();
    let st = s.ext_stats().expect("flash stats");
    assert!(st.bytes_written > 10 * (16 << 20) / 2, "the file turned over: {}", brief(&st));
    assert!(st.compact_pages > 100, "{}", brief(&st));
    assert_eq!(st.page_evictions, 0, "a page evicted while the file had room: {}", brief(&st));
    assert_eq!((st.compact_evict_pages, st.compact_lost, st.compact_behind), (0, 0, 0), "{}", brief(&st));
    assert!(st.compact_rescues > 0 && st.compact_bytes_moved > 0 && st.compact_bytes_read > st.compact_bytes_moved, "{}", brief(&st));
    // Pages emptied are mostly dead: what the compactor moves is a small
    // part of what was written.
    assert!(st.compact_bytes_moved * 4 < st.bytes_written, "{}", brief(&st));
    assert_eq!(st.write_fallbacks, 0, "{}", brief(&st));
    let (hits, wrong) = read_all(&s, n, len, now, |i| Some(versions[i]));
    assert_eq!(wrong, 0);
    assert_eq!(hits, n, "every live item served");
    assert_eq!(s.stats().evictions, 0);
    s.check_integrity();
}

/// Records that expired, or that a flush_all made invalid, on pages the
/// file needs are dropped (their entries go), never moved.
#[test]
fn expired_and_flushed_records_are_dropped_never_moved() {
    let dir = TempDir::new("compact-expired");
    let s = flash_store(2 << 20, &dir.file("flash"), 16 << 20);
    let len = 1000;
    let mut state = FlashCompact::default();
    // 12 MB of items that live 50 s: most of the file.
    let old = 12_000;
    for i in 0..old {
        set(&s, i, 0, len, 50, 100);
        if i % 100 == 0 {
            compact(&s, &mut state, 100);
        }
    }
    s.flash_flush();
    assert!(s.flash_entries() > old / 2, "items went to flash: {}", s.flash_entries());
    // They expired; 8 MB of new items need their pages.
    let now = 200;
    let fresh = 8000;
    for i in 0..fresh {
        set(&s, old + i, 0, len, 0, now);
        if i % 100 == 0 {
            compact(&s, &mut state, now);
        }
    }
    compact(&s, &mut state, now);
    let st = s.ext_stats().expect("stats");
    assert!(st.compact_expired > 1000, "{}", brief(&st));
    assert!(st.compact_rescues < st.compact_expired / 10, "expired records moved? {}", brief(&st));
    assert_eq!((st.page_evictions, st.write_fallbacks), (0, 0), "{}", brief(&st));
    let (hits, wrong) = read_all(&s, old, len, now, |_| None);
    assert_eq!((hits, wrong), (0, 0), "an expired key came back");
    let (hits, wrong) = read_all_from(&s, old, fresh, len, now);
    assert_eq!((hits, wrong), (fresh, 0), "every new item kept");

    // A flush_all: what was on flash before it is dropped, not moved, when
    // 14 MB of new items need its pages.
    let flushed_at = now + 1;
    s.flush_all(0, flushed_at);
    let before = s.ext_stats().expect("stats");
    let later = flushed_at + 1;
    let newer = 14_000;
    for i in 0..newer {
        set(&s, old + fresh + i, 0, len, 0, later);
        if i % 100 == 0 {
            compact(&s, &mut state, later);
        }
    }
    compact(&s, &mut state, later);
    let st = s.ext_stats().expect("stats");
    assert!(st.compact_expired - before.compact_expired > 1000, "{}", brief(&st));
    assert!(st.compact_rescues - before.compact_rescues < (st.compact_expired - before.compact_expired) / 10, "{}", brief(&st));
    let (hits, wrong) = read_all_from(&s, old, fresh, len, later);
    assert_eq!((hits, wrong), (0, 0), "a flushed key came back");
    let (hits, wrong) = read_all_from(&s, old + fresh, newer, len, later);
    assert_eq!(wrong, 0);
    assert!(hits >= newer * 99 / 100, "{hits} of {newer}: {}", brief(&s.ext_stats().expect("stats")));
    s.check_integrity();
}

/// Live data past what the file holds under `ext_max_frag`: the compactor
/// evicts the oldest pages (counted), moving their items read since written,
/// and nothing served is wrong.
#[test]
fn a_file_full_of_live_data_evicts_its_oldest_pages_and_keeps_read_items() {
    let dir = TempDir::new("compact-full");
    let s = flash_store(2 << 20, &dir.file("flash"), 16 << 20);
    let (len, now) = (1000, 100);
    let mut state = FlashCompact::default();
    // A few keys read often: they must survive the evictions.
    let hot = 50;
    let n = 40_000; // 40 MB of values: 2.5 times the file.
    for i in 0..n {
        set(&s, i, 0, len, 0, now);
        if i % 100 == 0 {
            compact(&s, &mut state, now);
            for h in 0..hot {
                let (seen, _) = get(&s, format!("key:{h}").as_bytes(), false, now);
                if let Some((v, _)) = seen {
                    assert_eq!(v, value(h, 0, len));
                }
            }
        }
    }
    compact(&s, &mut state, now);
    let st = s.ext_stats().expect("stats");
    assert!(st.compact_evict_pages > 0 && st.page_evictions > 0, "{}", brief(&st));
    assert!(st.compact_skipped > 0, "unread items were evicted with their pages: {}", brief(&st));
    let (hits, wrong) = read_all(&s, n, len, now, |_| Some(0));
    assert_eq!(wrong, 0);
    assert!(hits > n / 4 && hits < n, "{hits} of {n}");
    let (hot_hits, _) = read_all(&s, hot, len, now, |_| Some(0));
    assert!(hot_hits >= hot * 9 / 10, "read items kept: {hot_hits} of {hot}");
    s.check_integrity();
}

/// Readers on their own threads against writers and the compactor (its
/// moves and evictions, expiry): never a wrong value, never an old one.
#[test]
fn readers_never_see_a_wrong_value_while_the_compactor_runs() {
    let dir = TempDir::new("compact-readers");
    let s = Arc::new(flash_store(2 << 20, &dir.file("flash"), 8 << 20));
    let (n, len, now) = (4000, 1000, 100);
    for i in 0..n {
        set(&s, i, 0, len, 0, now);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut state = FlashCompact::default();
            while !stop.load(Ordering::Relaxed) {
                if !s.flash_compact(now, &mut state) {
                    s.flash_compact_wait(std::time::Duration::from_millis(1));
                }
            }
        })
    };
    // Each writer owns half of the keys and overwrites them in a random
    // order (so pages do not empty on their own), each key's versions in
    // order; a reader may see any version from the last acknowledged on,
    // never older than one it saw before.
    let written: Arc<Vec<std::sync::atomic::AtomicUsize>> = Arc::new((0..n).map(|_| std::sync::atomic::AtomicUsize::new(0)).collect());
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (s, written) = (s.clone(), written.clone());
            std::thread::spawn(move || {
                let mut x = 11 + w as u64;
                for _ in 0..6 * n {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let i = ((x >> 33) as usize % (n / 2)) * 2 + w;
                    let version = written[i].load(Ordering::Relaxed) + 1;
                    set(&s, i, version, len, 0, now);
                    written[i].store(version, Ordering::Release);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (s, written, stop) = (s.clone(), written.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = vec![0usize; n];
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    for i in (r..n).step_by(7) {
                        let floor = written[i].load(Ordering::Acquire);
                        let (got, _) = get(&s, format!("key:{i}").as_bytes(), false, now);
                        let Some((v, _)) = got else { continue };
                        let text = String::from_utf8_lossy(&v[..16]).to_string();
                        let mut parts = text.split(':');
                        assert_eq!(parts.next(), Some(i.to_string().as_str()), "key {i}: another key's value {text}");
                        let version: usize = parts.next().and_then(|p| p.parse().ok()).expect("a version");
                        assert_eq!(v, value(i, version, len), "key {i}: damaged");
                        assert!(version >= floor.max(seen[i]), "key {i}: version {version} after {}", floor.max(seen[i]));
                        seen[i] = version;
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    stop.store(true, Ordering::Relaxed);
    compactor.join().expect("compactor");
    let reads: usize = readers.into_iter().map(|r| r.join().expect("reader")).sum();
    assert!(reads > 1000, "{reads}");
    let st = s.ext_stats().expect("stats");
    assert!(st.compact_pages > 0 && st.compact_rescues > 0, "{}", brief(&st));
    // Writers at memory speed on 64 KiB pages outrun the compactor: an
    // item with no page ready is evicted (counted); every other key is
    // served, with its last value.
    let (hits, wrong) = read_all(&s, n, len, now, |i| Some(written[i].load(Ordering::Relaxed)));
    assert_eq!(wrong, 0);
    assert!(hits as u64 + st.write_fallbacks >= n as u64, "{hits} of {n}: {}", brief(&st));
    s.check_integrity();
}
