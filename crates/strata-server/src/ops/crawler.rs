//! memcached's LRU crawler for a segment store: `lru_crawler enable|disable|
//! sleep|tocrawl|crawl` and its stats, plus `slabs reassign` (which has
//! nothing to move here).
//!
//! There is one crawler, server-wide, as in memcached: a crawl (a thread
//! of its own, `strata-crawler`) or a metadump/mgdump (`dump_feed.rs`,
//! threads of their own; both on the worker under the fuzz harnesses'
//! `inline_background`) holds it through a [`Busy`] guard, and another
//! request for it meanwhile answers `BUSY currently processing crawler
//! request`. A crawl
//! walks the store with [`strata_store::Engine::walk`] (256 items per
//! shard-lock hold), unlinks the expired and flushed items of the classes
//! asked for, at most `tocrawl` items checked per class (0: all), and
//! pauses `sleep` microseconds every 1000 items checked (memcached's
//! `crawls_persleep`). Whole expired segments are still reclaimed by
//! `Engine::maintain` each second; the crawl finds single expired items in
//! live segments, which nothing else reclaims until their segment goes.
//!
//! Per-class counts (`crawler_reclaimed`, `crawler_items_checked`) are kept
//! in the crawl's thread and added to the totals once it ends.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_proto::admin::{Classes, MAX_CLASSES};
use strata_store::{Visit, WalkCursor, WALK_BATCH};

use strata_store::SlabClasses;
use crate::core::Core;
use crate::ctx::Ctx;
use crate::settings::Settings;

/// Items checked between two pauses (memcached's `crawls_persleep`).
const CRAWLS_PER_SLEEP: u64 = 1000;

const CLASSES: usize = MAX_CLASSES as usize;

/// Counts of one class, memcached's `itemstats[].crawler_*`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassCounts {
    pub reclaimed: u64,
    pub items_checked: u64,
}

pub struct Crawler {
    enabled: AtomicBool,
    sleep_us: AtomicU32,
    tocrawl: AtomicU32,
    /// A crawl or a crawler dump is running (`lru_crawler_running`).
    running: AtomicBool,
    starts: AtomicU64,
    counts: Mutex<[ClassCounts; CLASSES]>,
}

/// The crawler, held by a crawl or a dump; released when dropped.
pub struct Busy(Arc<Crawler>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

impl Crawler {
    pub fn new(settings: &Settings) -> Crawler {
        Crawler {
            enabled: AtomicBool::new(settings.lru_crawler),
            sleep_us: AtomicU32::new(settings.lru_crawler_sleep_us),
            tocrawl: AtomicU32::new(settings.lru_crawler_tocrawl),
            running: AtomicBool::new(false),
            starts: AtomicU64::new(0),
            counts: Mutex::new([ClassCounts::default(); CLASSES]),
        }
    }

    /// Back to the start-up settings' `lru_crawler`, `lru_crawler_sleep`
    /// and `lru_crawler_tocrawl` (the conn fuzz target's store, shared by
    /// its inputs, between two of them).
    pub fn restore(&self, settings: &Settings) {
        self.enabled.store(settings.lru_crawler, Ordering::Relaxed);
        self.sleep_us.store(settings.lru_crawler_sleep_us, Ordering::Relaxed);
        self.tocrawl.store(settings.lru_crawler_tocrawl, Ordering::Relaxed);
    }

    /// `lru_crawler` in `stats settings`.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// `lru_crawler_sleep` in `stats settings`.
    pub fn sleep_us(&self) -> u32 {
        self.sleep_us.load(Ordering::Relaxed)
    }

    /// `lru_crawler_tocrawl` in `stats settings`.
    pub fn tocrawl(&self) -> u32 {
        self.tocrawl.load(Ordering::Relaxed)
    }

    pub fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// `items:<class>:crawler_reclaimed` and `..._items_checked`.
    pub fn class_counts(&self, class: usize) -> ClassCounts {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).get(class).copied().unwrap_or_default()
    }

    /// Take the crawler, or None if a crawl or dump holds it.
    pub fn begin(self: &Arc<Crawler>) -> Option<Busy> {
        self.running.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).ok()?;
        self.starts.fetch_add(1, Ordering::Relaxed);
        Some(Busy(self.clone()))
    }
}

/// The crawler's figures for the general `stats`.
pub struct Totals {
    pub enabled: bool,
    pub running: bool,
    pub starts: u64,
    pub reclaimed: u64,
    pub items_checked: u64,
}

pub fn totals(crawler: &Crawler) -> Totals {
    let counts = crawler.counts.lock().unwrap_or_else(|e| e.into_inner());
    Totals {
        enabled: crawler.enabled(),
        running: crawler.running(),
        starts: crawler.starts.load(Ordering::Relaxed),
        reclaimed: counts.iter().map(|c| c.reclaimed).sum(),
        items_checked: counts.iter().map(|c| c.items_checked).sum(),
    }
}

/// The run-time values `stats settings` must show (memcached prints the
/// state `lru_crawler enable|disable|sleep|tocrawl` and `stats detail
/// on|off` left): `lru_crawler`, `lru_crawler_sleep`, `lru_crawler_tocrawl`,
/// `detail_enabled`, in that order, for the settings group to place.
pub fn settings_values(crawler: &Crawler, detail_on: bool) -> [(&'static str, String); 4] {
    let yes_no = |on: bool| if on { "yes" } else { "no" }.to_string();
    [
        ("lru_crawler", yes_no(crawler.enabled())),
        ("lru_crawler_sleep", crawler.sleep_us().to_string()),
        ("lru_crawler_tocrawl", crawler.tocrawl().to_string()),
        ("detail_enabled", yes_no(detail_on)),
    ]
}

/// `lru_crawler crawl <classes>`.
pub fn crawl(crawler: &Arc<Crawler>, ctx: &Ctx<'_>, classes: Classes) -> &'static str {
    if !crawler.enabled() {
        return "CLIENT_ERROR lru crawler disabled";
    }
    if classes == Classes::Bad {
        return "BADCLASS invalid class id";
    }
    if crawler.running() {
        return "BUSY currently processing crawler request";
    }
    match classes {
        // memcached walks the hash table only for dumps.
        Classes::Hash => return "ERROR an unknown error happened",
        Classes::List(0) => return "NOTSTARTED no items to crawl",
        _ => {}
    }
    let Some(busy) = crawler.begin() else {
        return "BUSY currently processing crawler request";
    };
    let sizes = ctx.core.classes.clone();
    if ctx.core.settings.inline_background {
        run(ctx.core, busy, classes, sizes);
        return "OK";
    }
    let core = ctx.core.clone();
    let spawned = std::thread::Builder::new()
        .name("strata-crawler".into())
        .spawn(move || run(&core, busy, classes, sizes));
    match spawned {
        Ok(_) => "OK",
        Err(_) => "ERROR an unknown error happened",
    }
}

/// A crawl's thread (or, with `inline_background`, the worker's call,
/// which never pauses): walk everything, reclaim the expired items of
/// `classes`, then add up the counts and let go of the crawler.
fn run(shared: &Core, busy: Busy, classes: Classes, sizes: SlabClasses) {
    let crawler = busy.0.clone();
    let tocrawl = u64::from(crawler.tocrawl());
    let mut counts = [ClassCounts::default(); CLASSES];
    let mut cursor = WalkCursor::default();
    let mut since_sleep = 0u64;
    loop {
        let now = shared.clock.now();
        let cas_enabled = !shared.settings.cas_disabled;
        let done = shared.engine.walk(&mut cursor, WALK_BATCH, now, &mut |item, how| {
            let size = strata_store::memcached_item_size(item.key.len(), item.meta.flags, item.value.len(), cas_enabled);
            let class = usize::from(sizes.class_of(size));
            let Some(c) = counts.get_mut(class).filter(|_| classes.contains(class)) else { return false };
            if tocrawl != 0 && c.items_checked >= tocrawl {
                return false;
            }
            c.items_checked += 1;
            since_sleep += 1;
            let reclaim = how == Visit::Expired;
            c.reclaimed += u64::from(reclaim);
            reclaim
        });
        if done || !crawler.enabled() || shared.is_shutting_down() {
            break;
        }
        if since_sleep >= CRAWLS_PER_SLEEP && !shared.settings.inline_background {
            since_sleep = 0;
            let us = crawler.sleep_us();
            if us > 0 {
                std::thread::sleep(Duration::from_micros(u64::from(us)));
            }
        }
    }
    let mut totals = crawler.counts.lock().unwrap_or_else(|e| e.into_inner());
    for (total, c) in totals.iter_mut().zip(counts.iter()) {
        total.reclaimed += c.reclaimed;
        total.items_checked += c.items_checked;
    }
    drop(totals);
    drop(busy);
}

/// `lru_crawler tocrawl <n>`.
pub fn set_tocrawl(crawler: &Crawler, n: u32) -> &'static str {
    crawler.tocrawl.store(n, Ordering::Relaxed);
    "OK"
}

/// `lru_crawler sleep <us>` (the parser refused more than a second).
pub fn set_sleep(crawler: &Crawler, us: u32) -> &'static str {
    crawler.sleep_us.store(us, Ordering::Relaxed);
    "OK"
}

/// `lru_crawler enable|disable`: memcached refuses to start a crawler
/// thread that runs already; stopping a stopped one is fine.
pub fn enable(crawler: &Crawler, on: bool) -> &'static str {
    let was = crawler.enabled.swap(on, Ordering::Relaxed);
    match (on, was) {
        (true, true) => "ERROR failed to start lru crawler thread",
        _ => "OK",
    }
}

/// `slabs reassign <src> <dst>`: memcached's checks, then the answer for
/// a class with no page to give (segments are not slab pages).
pub fn reassign(ctx: &Ctx<'_>, src: i32, dst: i32) -> &'static str {
    let largest = ctx.core.classes.len() as i32;
    if src == dst {
        "SAME src and dst class are identical"
    } else if !(0..=largest).contains(&src) || !(0..=largest).contains(&dst) {
        "BADCLASS invalid src or dst class id"
    } else {
        "NOSPARE source class has no spare pages"
    }
}
