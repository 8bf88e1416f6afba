//! The `conn` target's store with a flash tier, built once per process:
//! a `SegStore` of 2 MiB of RAM over 16 MiB of flash whose keys `f0..f15`
//! (even ones larger items, odd ones the small store's) were pushed onto
//! flash by 3.5 MiB of filler, so reads of them park their connection.
//!
//! Building it costs ~100 ms (a file, the writer thread, the filler), far
//! over a fuzz input's budget, so inputs share it. What carries over from
//! one input to the next is the store's contents (values and CAS of
//! `k*`/`f*`, which flash keys are still on flash) and its counters; no
//! connection, flash read or buffer does, nor `verbosity` (reset before
//! each input; every input's connections are
//! closed and their reads finished or abandoned, checked by
//! `extstore_io_queue` going back to where it was). The flash-mode oracle
//! checks nothing that depends on that state (no panic, bounded buffers,
//! every parked request resumes, reads balanced), so it stays sound; a
//! crash that needs earlier inputs' state shows with `-runs` over the
//! corpus rather than alone. Before each input, when fewer than a quarter of
//! the flash keys are still on flash (a script overwrote or deleted
//! them), the keys are set again and pushed back out ([`FlashStore::prime`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use strata_store::{Clock, Engine, EngineConfig, ExtConfig, ExtPath, ExtTunable, ExtTunables, SegStore, StoreRequest};

use super::script::{key, FLASH_KEYS, RAM_KEYS};
use crate::settings::Settings;
use crate::shared::Shared;

const RAM_BYTES: u64 = 2 << 20;
const FLASH_BYTES: u64 = 16 << 20;
const FILLER_BYTES: usize = 3 << 20;
const FILLER_VALUE_BYTES: usize = 1000;
/// Small items fill the small store's log blocks, so that those holding
/// the small flash keys reach the file.
const SMALL_FILLER_BYTES: usize = 512 << 10;
const SMALL_FILLER_VALUE_BYTES: usize = 100;
/// Even flash keys' values: over `ext_small_item_max` (512), so their
/// reads take the larger items' path; odd ones take the small store's.
const LARGE_VALUE_BYTES: usize = 600;

pub struct FlashStore {
    pub shared: Arc<Shared>,
    /// Primings done (each one's filler keys are new, so they push the
    /// flash keys out of RAM again).
    rounds: u32,
    dir: PathBuf,
}

static STORE: Mutex<Option<FlashStore>> = Mutex::new(None);

/// The process's flash store (built on first use), ready for an input.
pub fn store() -> MutexGuard<'static, Option<FlashStore>> {
    let mut guard = STORE.lock().unwrap_or_else(|e| e.into_inner());
    let store = guard.get_or_insert_with(FlashStore::new);
    // An earlier input's `verbosity 1` would trace every later one.
    store.shared.ops.verbose.set(0);
    if store.on_flash() < usize::from(FLASH_KEYS) / 4 {
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
            tunables,
            ..ExtConfig::default()
        };
        let mut engine = SegStore::new(EngineConfig { memory_limit_bytes: RAM_BYTES, ..EngineConfig::default() });
        engine.attach_flash(ext).expect("fuzz flash tier");
        let clock = Clock::starting_at(1_700_000_000);
        prime(&engine, 0, clock.now());
        engine.flash_flush();
        let settings = Settings { threads: 1, ..Settings::default() };
        let shared = Arc::new(Shared::new(settings, Box::new(engine), clock));
        FlashStore { shared, rounds: 1, dir }
    }

    /// Prime again: the flash keys' records of the earlier rounds sit on
    /// the file by now, this round's last ones maybe still in the write
    /// buffer (a read copies those straight back to RAM, no park).
    fn prime(&mut self) {
        prime(self.shared.engine.as_ref(), self.rounds, self.shared.clock.now());
        self.rounds += 1;
    }

    /// Flash keys not in RAM that the tier finds on flash.
    fn on_flash(&self) -> usize {
        let engine = self.shared.engine.as_ref();
        let Some(tier) = engine.flash() else { return 0 };
        let now = self.shared.clock.now();
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
        self.shared.engine.flash().map_or(0, |tier| tier.ext_stats().io_queue)
    }
}

impl Drop for FlashStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Set every key, then enough filler (named by `round`, so new) that RAM
/// pushes them out to flash.
fn prime(engine: &dyn Engine, round: u32, now: strata_store::RelTime) {
    for n in 0..RAM_KEYS + FLASH_KEYS {
        let mut value = format!("value-of-{}", String::from_utf8_lossy(&key(n))).into_bytes();
        if n % 2 == 0 {
            value.resize(LARGE_VALUE_BYTES, b'.');
        }
        engine.store(&StoreRequest::set(&key(n), &value).with_flags(u32::from(n)), now);
    }
    for (size, bytes) in [(FILLER_VALUE_BYTES, FILLER_BYTES), (SMALL_FILLER_VALUE_BYTES, SMALL_FILLER_BYTES)] {
        let filler = vec![b'z'; size];
        for i in 0..bytes / size {
            engine.store(&StoreRequest::set(format!("filler:{round}:{size}:{i}").as_bytes(), &filler), now);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flash_keys_start_on_flash() {
        let guard = super::store();
        let store = guard.as_ref().unwrap();
        let on_flash = store.on_flash();
        assert!(on_flash >= usize::from(super::FLASH_KEYS) / 2, "{on_flash} flash keys on flash");
    }
}
