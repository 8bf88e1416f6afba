//! The `conn` target's store with a flash tier, built once per process:
//! a `SegStore` of 2 MiB of RAM over 16 MiB of flash whose keys `f0..f15`
//! (even ones larger items, odd ones the small store's) sit on the file,
//! so reads of them park their connection.
//!
//! Building it costs a file and the writer thread, far over a fuzz
//! input's budget, so inputs share it, 32 at a time ([`store`]). What
//! carries over from one input to
//! the next is the store's contents (values and CAS of `k*`/`f*`) and its
//! counters; no connection, flash read or buffer does, nor `verbosity`
//! or the crawler's settings (reset before each input; every input's
//! connections are closed and their reads finished or abandoned, checked
//! by `extstore_io_queue` going back to where it was). The flash-mode oracle checks nothing that
//! depends on that state (no panic, bounded buffers, every parked request
//! resumes, reads balanced), so it stays sound; a crash that needs earlier
//! inputs' state (at most the 31 before it) shows with `-runs` over the
//! corpus rather than alone.
//!
//! Before each input every flash key a script overwrote, deleted or read
//! back into RAM is put back on the file ([`FlashStore::prime`]): the keys
//! are set, the idle writer runs with `ext_item_age` 0 a second ahead of
//! the clock (memcached's storage writer with no memory pressure: every
//! item in RAM goes to flash), the small store's open log blocks are
//! sealed and the write buffer written out
//! ([`FlashTier::flash_flush`](strata_store::FlashTier::flash_flush)),
//! and the RAM keys are set again. That is a few dozen stores; pushing the
//! keys out with 3.5 MiB of filler instead took 8,400 stores and 42-74% of
//! the target's time, and could leave the last of them in the write
//! buffer, read without the device (docs/bench/fuzz-conn.md).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use strata_store::{Clock, Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable, ExtTunables, FlashIdle, RelTime, SegStore, StoreRequest};

use super::script::{key, FLASH_KEYS, RAM_KEYS};
use crate::settings::Settings;
use crate::runtime::Runtime;

const RAM_BYTES: u64 = 2 << 20;
/// Inputs one store serves before it is built anew.
const INPUTS_PER_BUILD: usize = 32;
const FLASH_BYTES: u64 = 16 << 20;
/// Even flash keys' values: over `ext_small_item_max` (512), so their
/// reads take the larger items' path; odd ones take the small store's.
const LARGE_VALUE_BYTES: usize = 600;

pub struct FlashStore {
    pub shared: Arc<Runtime>,
    /// The tier's tunables, for `ext_item_age` while priming.
    tunables: Arc<ExtTunables>,
    dir: PathBuf,
    /// Inputs it has served.
    inputs: usize,
}

static STORE: Mutex<Option<FlashStore>> = Mutex::new(None);

/// The process's flash store (built on first use), ready for an input.
pub fn store() -> MutexGuard<'static, Option<FlashStore>> {
    let mut guard = STORE.lock().unwrap_or_else(|e| e.into_inner());
    // Every crawl or dump walks each item written to RAM, live or not, and
    // what inputs write piles up there until the 2 MiB are full: an input
    // of 32 crawls then passed the fuzzer's 1 s timeout under
    // AddressSanitizer (12-07). After INPUTS_PER_BUILD inputs the
    // store is built anew, so an input's walks cover its own writes and
    // a few dozen inputs' (about 25 ms a build, in release).
    if guard.as_ref().is_some_and(|store| store.inputs >= INPUTS_PER_BUILD) {
        *guard = None;
    }
    let store = guard.get_or_insert_with(FlashStore::new);
    store.inputs += 1;
    // An earlier input's `verbosity 1` would trace every later one, and
    // its `lru_crawler sleep 1000000` rest a second per 1,000 items in
    // every later crawl or dump of this store.
    store.shared.ops.verbose.set(0);
    store.shared.ops.crawler.restore(&store.shared.core.settings);
    if store.on_flash() < usize::from(FLASH_KEYS) {
        store.prime();
    }
    guard
}

impl FlashStore {
    fn new() -> FlashStore {
        let dir = std::env::temp_dir().join(format!("strata-fuzz-conn-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fuzz flash dir");
        let tunables = Arc::new(ExtTunables::default());
        tunables.set(ExtTunable::ItemSize(0));
        let ext = ExtConfig {
            paths: vec![ExtPath { path: dir.join("flash"), size_bytes: FLASH_BYTES, bucket: Default::default() }],
            page_size_bytes: 64 << 10,
            wbuf_size_bytes: 32 << 10,
            tunables: tunables.clone(),
            ..ExtConfig::default()
        };
        let mut engine = SegStore::new(EngineConfig { memory_limit_bytes: RAM_BYTES, ..EngineConfig::default() });
        engine.attach_flash(ext).expect("fuzz flash tier");
        let settings = Settings { threads: 1, inline_background: true, ..Settings::default() };
        let shared = Arc::new(Runtime::new(settings, Box::new(engine), Clock::starting_at(1_700_000_000)));
        let store = FlashStore { shared, tunables, dir, inputs: 0 };
        store.prime();
        store
    }

    /// Put every flash key on the file and every RAM key in RAM (module
    /// docs).
    fn prime(&self) {
        let engine = self.shared.core.engine.as_ref();
        let tier = engine.flash().expect("the fuzz store has a flash tier");
        let now = self.shared.core.clock.now();
        set_keys(engine, RAM_KEYS..RAM_KEYS + FLASH_KEYS, now);
        let age = self.tunables.item_age.load(Ordering::Relaxed);
        self.tunables.set(ExtTunable::ItemAge(0));
        tier.flash_write_idle(now + 1, &mut FlashIdle::default());
        self.tunables.set(ExtTunable::ItemAge(age));
        tier.flash_flush();
        set_keys(engine, 0..RAM_KEYS, now);
    }

    /// Flash keys not in RAM that the tier finds on flash.
    fn on_flash(&self) -> usize {
        let engine = self.shared.core.engine.as_ref();
        let Some(tier) = engine.flash() else { return 0 };
        let now = self.shared.core.clock.now();
        (RAM_KEYS..RAM_KEYS + FLASH_KEYS)
            .filter(|&n| {
                let in_ram = engine.get(&key(n), Default::default(), now, &mut |_, _| Default::default());
                let read = (!in_ram).then(|| tier.flash_check(&key(n), now)).flatten();
                read.map(|read| tier.abandon_flash_read(&read)).is_some()
            })
            .count()
    }

    /// `extstore_io_queue`: reads handed out and not yet finished.
    pub fn io_queue(&self) -> u64 {
        self.shared.core.engine.flash().map_or(0, |tier| tier.ext_stats().io_queue)
    }
}

impl Drop for FlashStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Set keys `range`, each with a value naming it and its number as flags
/// (even keys' values over the small store's item size).
fn set_keys(engine: &dyn Engine, range: std::ops::Range<u8>, now: RelTime) {
    for n in range {
        let mut value = format!("value-of-{}", String::from_utf8_lossy(&key(n))).into_bytes();
        if n % 2 == 0 {
            value.resize(LARGE_VALUE_BYTES, b'.');
        }
        engine.store(&StoreRequest::set(&key(n), &value).with_flags(u32::from(n)), now);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flash_keys_start_on_flash() {
        let guard = super::store();
        let store = guard.as_ref().unwrap();
        let on_flash = store.on_flash();
        assert_eq!(on_flash, usize::from(super::FLASH_KEYS), "flash keys on flash");
    }
}
