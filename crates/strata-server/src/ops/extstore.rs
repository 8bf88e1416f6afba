//! The flash tier's operator side: the tunables `extstore <name> <value>`
//! changes at run time (memcached 1.6.45's `process_extstore_command`), and
//! what `stats settings` prints of them.
//!
//! memcached keeps these in its global `settings` and its storage threads
//! read them as they go; here they are one [`ExtTunables`] of relaxed
//! atomics in `Shared`, read by `stats settings` and handed to the engine
//! on each change. As in memcached, the command is answered (`OK`) whether
//! or not a flash tier runs; without one the values only show in `stats
//! settings`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use strata_proto::admin::ExtTunable;

use crate::exec::Executor;
use crate::settings::ExtSettings;

/// The run-time copy of the `ext_*` values `extstore` may change.
pub struct ExtTunables {
    pub item_size_bytes: AtomicU32,
    pub item_age_s: AtomicU32,
    pub low_ttl_s: AtomicU32,
    pub recache_rate: AtomicU32,
    pub compact_under: AtomicU32,
    pub drop_under: AtomicU32,
    pub max_sleep_us: AtomicU32,
    /// `f64::to_bits` of `ext_max_frag`.
    max_frag_bits: AtomicU64,
    pub drop_unread: AtomicBool,
}

impl ExtTunables {
    pub fn new(ext: &ExtSettings) -> ExtTunables {
        ExtTunables {
            item_size_bytes: AtomicU32::new(ext.item_size_bytes),
            item_age_s: AtomicU32::new(ext.item_age_s),
            low_ttl_s: AtomicU32::new(ext.low_ttl_s),
            recache_rate: AtomicU32::new(ext.recache_rate),
            compact_under: AtomicU32::new(ext.compact_under),
            drop_under: AtomicU32::new(ext.drop_under),
            max_sleep_us: AtomicU32::new(ext.max_sleep_us),
            max_frag_bits: AtomicU64::new(ext.max_frag.to_bits()),
            drop_unread: AtomicBool::new(ext.drop_unread),
        }
    }

    pub fn max_frag(&self) -> f64 {
        f64::from_bits(self.max_frag_bits.load(Ordering::Relaxed))
    }

    /// The current values, as the command line's struct (paths and sizes
    /// from `base`, which the command cannot change).
    pub fn current(&self, base: &ExtSettings) -> ExtSettings {
        let load = |a: &AtomicU32| a.load(Ordering::Relaxed);
        ExtSettings {
            item_size_bytes: load(&self.item_size_bytes),
            item_age_s: load(&self.item_age_s),
            low_ttl_s: load(&self.low_ttl_s),
            recache_rate: load(&self.recache_rate),
            compact_under: load(&self.compact_under),
            drop_under: load(&self.drop_under),
            max_sleep_us: load(&self.max_sleep_us),
            max_frag: self.max_frag(),
            drop_unread: self.drop_unread.load(Ordering::Relaxed),
            ..base.clone()
        }
    }

    fn set(&self, tunable: ExtTunable) {
        let store = |a: &AtomicU32, v: u32| a.store(v, Ordering::Relaxed);
        match tunable {
            ExtTunable::ItemSize(v) => store(&self.item_size_bytes, v),
            ExtTunable::ItemAge(v) => store(&self.item_age_s, v),
            ExtTunable::LowTtl(v) => store(&self.low_ttl_s, v),
            ExtTunable::RecacheRate(v) => store(&self.recache_rate, v),
            ExtTunable::CompactUnder(v) => store(&self.compact_under, v),
            ExtTunable::DropUnder(v) => store(&self.drop_under, v),
            ExtTunable::MaxSleep(v) => store(&self.max_sleep_us, v),
            ExtTunable::MaxFrag(v) => self.max_frag_bits.store(v.to_bits(), Ordering::Relaxed),
            ExtTunable::DropUnread(v) => self.drop_unread.store(v, Ordering::Relaxed),
            ExtTunable::FreeMemchunks => {}
        }
    }
}

/// `extstore <name> <value>`: memcached answers `OK` once the value
/// parsed, `ERROR` otherwise (`None`).
pub fn command(exec: &Executor<'_>, set: Option<ExtTunable>) -> &'static str {
    let Some(tunable) = set else { return "ERROR" };
    let shared = exec.shared;
    shared.ops.ext.set(tunable);
    let _current = shared.ops.ext.current(&shared.settings.ext);
    "OK"
}

/// memcached 1.6.45's extstore lines of `stats settings` (a build with
/// extstore, as Debian's and 1.6.45's are, prints them with or without
/// `ext_path`), `slab_automove_freeratio` among them.
pub fn settings_lines(exec: &Executor<'_>, stat: &mut dyn FnMut(&'static str, String)) {
    let settings = &exec.shared.settings;
    let ext = exec.shared.ops.ext.current(&settings.ext);
    stat("ext_item_size", ext.item_size_bytes.to_string());
    stat("ext_item_age", ext.item_age_s.to_string());
    stat("ext_low_ttl", ext.low_ttl_s.to_string());
    stat("ext_recache_rate", ext.recache_rate.to_string());
    stat("ext_wbuf_size", ext.wbuf_size_bytes.to_string());
    stat("ext_compact_under", ext.compact_under.to_string());
    stat("ext_drop_under", ext.drop_under.to_string());
    stat("ext_max_sleep", ext.max_sleep_us.to_string());
    stat("ext_max_frag", format!("{:.2}", ext.max_frag));
    stat("slab_automove_freeratio", format!("{:.3}", settings.tunables.slab_automove_freeratio));
    stat("ext_drop_unread", if ext.drop_unread { "yes" } else { "no" }.to_string());
}
