//! Making a `SegStore`: a new one, or one restored from its memory file
//! (`-e`), whose segments go back to their shards in the order they were
//! written (recovery runs the shards on every CPU at once); and the file
//! header's state (CAS counter, flush epoch) written back as it changes.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::buffer::Buffer;
use super::file::{self, Geometry, MemFile, Opened, SEGMENT_HEADER};
use super::region::Region;
use super::shard::{Recovered, Shard};
use super::hits::Hits;
use super::view::ShardLock;
use super::{geometry, table, Globals, Line, SegStore};
use crate::{Clock, Engine, EngineConfig, RelTime, RestartStats};

/// CAS numbers skipped after a crash: the header's counter is written once a
/// second, and numbers handed out after it (to items since deleted) must
/// never be handed out again.
const CAS_GAP_AFTER_CRASH: u64 = 1 << 24;

impl SegStore {
    pub fn new(config: EngineConfig) -> SegStore {
        SegStore::build(config, None)
    }

    /// A store whose segments live in the memory file at `path` (`-e`),
    /// restoring every item the file holds. A file that is damaged, of
    /// another version or made with other settings is logged and started
    /// cold, or refused when `strict` (`-o restart_strict`). Returns the
    /// store and a line for the log.
    pub fn open_file(config: EngineConfig, path: &std::path::Path, strict: bool) -> std::io::Result<(SegStore, String)> {
        let started = std::time::Instant::now();
        let (shards, segment) = geometry(config.memory_limit_bytes);
        let geo = Geometry {
            memory: config.memory_limit_bytes.max(1 << 20),
            segment: segment as u64,
            item_max: config.item_size_max_bytes as u64,
            shards: shards as u32,
        };
        // A new file takes a new clock's origin; a restored one keeps its own,
        // and recovery reads the time the server's clock will start from.
        let (file, opened) = MemFile::open(path, geo, strict, Clock::new().process_started_unix())?;
        let mut store = SegStore::build(config, Some(file));
        let file = store.g.file.as_ref().expect("memory file");
        let now = Clock::resuming(file.origin_unix()).now();
        let (mut stats, line) = match opened {
            Opened::Fresh { why } => {
                let line = match why {
                    Some(why) => format!("memory file {}: {why}; starting with an empty cache", path.display()),
                    None => format!("memory file {}: created", path.display()),
                };
                (RestartStats::default(), line)
            }
            Opened::Existing { clean, state } => {
                store.g.oldest_live.store(state.oldest_live, Ordering::Relaxed);
                store.g.oldest_cas.store(state.oldest_cas, Ordering::Relaxed);
                // The counter is saved every second: a CAS far above it was
                // given explicitly (meta `E`) and does not move it on.
                let found = store.recover(now, state.cas.saturating_add(CAS_GAP_AFTER_CRASH));
                let gap = if clean { 0 } else { CAS_GAP_AFTER_CRASH };
                store.g.cas_counter.store(state.cas.max(found.max_counter_cas).saturating_add(gap), Ordering::Relaxed);
                store.g.explicit_cas_max.store(found.max_cas, Ordering::Relaxed);
                let items = store.stats().curr_items;
                let stats = RestartStats {
                    ok: true,
                    clean,
                    items,
                    damaged: found.damaged,
                    expired: found.expired,
                    seconds: 0.0,
                    last_alive_unix: state.alive_unix,
                };
                let how = if clean { "after a graceful stop" } else { "after a crash (no graceful stop)" };
                let line = format!(
                    "memory file {}: restored {items} items {how}; {} expired or flushed meanwhile, {} damaged and dropped",
                    path.display(),
                    found.expired,
                    found.damaged
                );
                (stats, line)
            }
        };
        stats.seconds = started.elapsed().as_secs_f64();
        store.restart = Some(stats);
        store.persist_state();
        Ok((store, format!("{line} ({:.3} s)", stats.seconds)))
    }

    /// Recovery: every segment the file's directory lists, in the order they
    /// were written, goes back to its shard (`Shard::recover_segment`).
    fn recover(&mut self, now: RelTime, counter_ceiling: u64) -> Recovered {
        let file = self.g.file.as_ref().expect("memory file");
        let entries = file.entries();
        let mut found = Recovered { counter_ceiling, ..Recovered::default() };
        let mut segments = Vec::new();
        for e in &entries {
            let header = file.map_entry(e).and_then(|buf| Some((file.read_segment_header(&buf, e.seq)?, buf)));
            let usable = header.filter(|(h, buf)| {
                usize::from(h.shard) < self.shards.len() && (h.jumbo || buf.len() == self.g.segment_size)
            });
            match usable {
                Some((h, buf)) => {
                    self.g.allocated.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    segments.push((h, buf));
                }
                None => {
                    found.damaged += 1;
                    file.free_pages(e.page, e.pages);
                }
            }
        }
        segments.sort_by_key(|(h, _)| h.seq);
        let mut per_shard: Vec<Vec<(file::SegmentHeader, Buffer)>> = (0..self.shards.len()).map(|_| Vec::new()).collect();
        for (h, buf) in segments {
            per_shard[usize::from(h.shard)].push((h, buf));
        }
        // Shards are independent: recover them on every CPU at once.
        let shard_bits = self.shard_bits;
        let shard_of = move |hash: u64| if shard_bits == 0 { 0 } else { (hash >> (64 - shard_bits)) as usize };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(self.shards.len());
        let mut work: Vec<Vec<(usize, Vec<(file::SegmentHeader, Buffer)>)>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, segs) in per_shard.into_iter().enumerate() {
            work[i % threads].push((i, segs));
        }
        let (shards, g) = (&self.shards, &self.g);
        let results: Vec<Recovered> = std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .into_iter()
                .map(|jobs| {
                    scope.spawn(move || {
                        let mut found = Recovered { counter_ceiling, ..Recovered::default() };
                        for (i, segs) in jobs {
                            let mut shard = shards[i].lock();
                            shard.reserve_for(g, &segs.iter().map(|(_, b)| b).collect::<Vec<_>>());
                            for (h, buf) in segs {
                                shard.recover_segment(g, buf, &h, now, shard_of, &mut found);
                            }
                        }
                        found
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("recovery thread")).collect()
        });
        for r in &results {
            found.add(r);
        }
        found
    }

    /// Memory file: record the CAS counter and flush epoch in its header.
    pub(super) fn persist_state(&self) {
        if let Some(file) = &self.g.file {
            file.write_state(self.file_state());
        }
    }

    pub(super) fn file_state(&self) -> file::State {
        file::State {
            cas: self.g.cas_counter.load(Ordering::Relaxed),
            oldest_live: self.g.oldest_live.load(Ordering::Relaxed),
            oldest_cas: self.g.oldest_cas.load(Ordering::Relaxed),
            alive_unix: crate::clock::unix_time(),
        }
    }

    fn build(config: EngineConfig, file: Option<MemFile>) -> SegStore {
        let (shards, segment_size) = geometry(config.memory_limit_bytes);
        let checked = file.is_some();
        let shard_locks: Box<[Line<ShardLock>]> = (0..shards)
            .map(|i| {
                let mut shard = Shard::new(i as u16, checked, config.track_sizes);
                shard.set_base_table(table::Table::presized(config.index_slots_initial, shards));
                Line(ShardLock::new(shard))
            })
            .collect();
        SegStore {
            restart: None,
            hits: Hits::new(),
            views: shard_locks.iter().map(|s| std::sync::Arc::clone(&s.view)).collect(),
            shards: shard_locks,
            shard_bits: shards.trailing_zeros(),
            g: Globals {
                data_start: if checked { SEGMENT_HEADER } else { 0 },
                file,
                region: Region::new(config.large_pages),
                flash: None,
                small: None,
                segment_size,
                jumbo_threshold: segment_size / 4,
                memory_limit: AtomicU64::new(config.memory_limit_bytes),
                allocated: AtomicU64::new(config.initial_malloced_bytes),
                pool: Mutex::new(Vec::new()),
                pooled: AtomicUsize::new(0),
                shard_count: shards,
                jumbo_pool: Mutex::new(Vec::new()),
                cas_counter: Line(AtomicU64::new(0)),
                eviction_log: std::sync::OnceLock::new(),
                sampler: std::sync::OnceLock::new(),
                sample_threshold: AtomicU64::new(0),
                exhausted: std::sync::atomic::AtomicBool::new(false),
                oldest_live: AtomicU32::new(0),
                oldest_cas: AtomicU64::new(0),
                explicit_cas_max: AtomicU64::new(0),
                walk_buffers: Mutex::new(Vec::new()),
                walk_buffer_bytes: AtomicUsize::new(0),
                per_item_charged: AtomicU64::new(0),
                config,
            },
        }
    }
}
