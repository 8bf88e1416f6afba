//! From the command line's slab settings to the engine's class table
//! (`strata_store::classes`, memcached's `slabs_init`) and the rest of the
//! engine's configuration. The server reports every per-class figure (`me`'s
//! `cls=`, `stats items`, `stats slabs`) by this one table, so they agree.

use strata_store::{ClassGeometry, EngineConfig, SlabClasses};

use crate::settings::Settings;

/// memcached's test hook (slabs.c): bytes counted as already allocated at
/// start, so t/64bit.t can check a limit above 4 GiB without the memory.
const INITIAL_MALLOC_ENV: &str = "T_MEMD_INITIAL_MALLOC";

impl Settings {
    /// The size classes memcached would use with these settings.
    pub fn slab_classes(&self) -> SlabClasses {
        SlabClasses::new(&ClassGeometry {
            growth_factor: self.slabs.growth_factor,
            min_size_bytes: self.slabs.min_size_bytes,
            chunk_max_bytes: self.slabs.chunk_max_bytes,
            sizes: self.slabs.sizes.clone(),
            item_size_max_bytes: self.item_size_max,
        })
    }

    /// What the engine needs from the command line (and memcached's
    /// `T_MEMD_INITIAL_MALLOC` test hook from the environment).
    pub fn engine_config(&self) -> EngineConfig {
        let initial = std::env::var(INITIAL_MALLOC_ENV).ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
        EngineConfig {
            memory_limit_bytes: self.memory_limit_bytes,
            item_size_max_bytes: self.item_size_max,
            evictions_disabled: self.evictions_disabled,
            cas_disabled: self.cas_disabled,
            classes: self.slab_classes(),
            track_sizes: self.track_sizes,
            initial_malloced_bytes: initial,
            large_pages: self.large_pages,
            index_slots_initial: self.index_slots_initial(),
        }
    }

    /// memcached's `-o hashpower` (16 unless set): its hash table starts
    /// with 2^N buckets, Strata's key index with 2^N slots over its shards;
    /// at most `-m` bytes of them (8 bytes a slot), as a table larger than
    /// the cache has no use.
    pub fn index_slots_initial(&self) -> u64 {
        let power = if self.tunables.hashpower_init == 0 { 16 } else { self.tunables.hashpower_init };
        (1u64 << power.min(40)).min(self.memory_limit_bytes / 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::SlabSettings;

    #[test]
    fn settings_shape_the_classes() {
        let settings = Settings::default();
        let classes = settings.slab_classes();
        assert_eq!(classes.chunk_size(1), 96);
        assert_eq!(classes.class_of(97), 2);
        let f2 = Settings { slabs: SlabSettings { growth_factor: 2.0, min_size_bytes: 100, ..SlabSettings::default() }, ..Settings::default() };
        assert_eq!(f2.slab_classes().chunk_size(2), 304);
        assert_eq!(f2.engine_config().classes, f2.slab_classes());
    }
}
