//! The memory governor: `-m auto` (the item limit follows what the memory
//! cgroup or the host can give) and `-o memory_pressure_yield` (a fixed
//! `-m` that gives memory back under pressure and takes it again after).
//!
//! ```text
//!  strata-memory thread, every TICK (100 ms), and at once when the fast
//!  check (the cgroup's usage file alone, every FAST_TICK = 10 ms) finds
//!  free memory under half the headroom:
//!    source.rs  read cap / used / limit events / PSI  (cgroup v1, v2, or host)
//!    policy.rs  Policy::step(reading, held bytes) -> new limit + reason
//!    on a change: Engine::set_memory_limit (cache_memlimit's mechanism),
//!                 Core::memory_limit_bytes (limit_maxbytes in stats),
//!                 and on a shrink Engine::shed_to_limit (seg/shrink.rs:
//!                 evict whole segments, MADV_DONTNEED their pages);
//!                 after a shrink, read again at once (no sleep), up to
//!                 BURST_STEPS times, while pressure lasts
//! ```
//!
//! The fast check and the burst steps are what let a neighbour allocate
//! quickly: at 1 GiB/s a 64 MiB headroom lasts about 60 ms, so a 100 ms
//! reading alone would find the cgroup at its limit (and the kernel's OOM
//! killer) first. The check is a read of one short file (a few us) 100
//! times a second; a full reading (memory.stat, meminfo, PSI) ten times.
//!
//! Nothing here runs on the request path: requests see only the limit the
//! store already reads. Without `-m auto` or `memory_pressure_yield`
//! there is no governor and no thread. `cache_memlimit` keeps memcached's
//! meaning: it sets a fixed limit, which then stays (`-m auto` stops
//! sizing) unless `memory_pressure_yield` is on, in which case it becomes
//! the ceiling the limit yields from and returns to.
//!
//! `-m auto` with a memory file (`-e`) is refused by the CLI: a freed
//! extent's pages stay in the file's page cache, charged to the cgroup, so
//! shrinking would not give memory back.

pub mod policy;
pub mod source;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::policy::{Policy, Reason};
use self::source::Source;
use crate::core::Core;

/// Time between readings: a neighbour allocating 300 MiB/s takes 30 MiB of
/// a 64 MiB headroom per tick, and a shrink is done well within one.
pub const TICK: Duration = Duration::from_millis(100);
/// Time between fast checks of the cgroup's usage.
pub const FAST_TICK: Duration = Duration::from_millis(10);
/// Readings in a row, without sleeping, while each one shrinks the limit.
pub const BURST_STEPS: usize = 200;

pub use crate::settings::GovernorConfig;

/// `-m auto`'s starting limit and where it came from.
pub fn auto_config() -> Result<GovernorConfig, String> {
    let source = Source::discover();
    let r = source.read().map_err(|e| format!("-m auto: cannot read memory use ({}): {e}", source.name()))?;
    Ok(GovernorConfig { auto: true, max_limit_bytes: policy::start_limit(r.cap_bytes, r.used_bytes), source })
}

/// `-o memory_pressure_yield` for a fixed `-m`.
pub fn yield_config(limit_bytes: u64) -> GovernorConfig {
    GovernorConfig { auto: false, source: Source::discover(), max_limit_bytes: limit_bytes }
}

const REASON_NONE: u8 = 0;
const REASON_MEMLIMIT: u8 = 5;

pub struct Governor {
    config: GovernorConfig,
    policy: Mutex<Policy>,
    /// False once `cache_memlimit` fixed the limit of an `-m auto` server.
    active: AtomicBool,
    cap_bytes: AtomicU64,
    used_bytes: AtomicU64,
    shrinks: AtomicU64,
    grows: AtomicU64,
    shed_bytes: AtomicU64,
    last_reason: AtomicU8,
}

impl Governor {
    pub fn new(config: GovernorConfig) -> Governor {
        let first = config.source.read().unwrap_or_default();
        Governor {
            policy: Mutex::new(Policy::new(config.max_limit_bytes)),
            config,
            active: AtomicBool::new(true),
            cap_bytes: AtomicU64::new(first.cap_bytes),
            used_bytes: AtomicU64::new(first.used_bytes),
            shrinks: AtomicU64::new(0),
            grows: AtomicU64::new(0),
            shed_bytes: AtomicU64::new(0),
            last_reason: AtomicU8::new(REASON_NONE),
        }
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, Policy> {
        self.policy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `cache_memlimit`: a fixed limit from now on (the ceiling, if
    /// yielding). Set again under the policy's lock, so a reading that was
    /// deciding meanwhile cannot put its own limit over it.
    pub fn on_cache_memlimit(&self, shared: &Core, bytes: u64, yield_on_pressure: bool) {
        let mut p = self.policy();
        *p = Policy::new(bytes);
        shared.engine.set_memory_limit(bytes);
        shared.memory_limit_bytes.store(bytes, Ordering::Relaxed);
        self.active.store(yield_on_pressure, Ordering::Relaxed);
        self.last_reason.store(REASON_MEMLIMIT, Ordering::Relaxed);
    }

    /// Whether the cgroup's usage alone says free memory is under half the
    /// headroom (the cap from the last full reading).
    fn short_now(&self) -> bool {
        if !self.active.load(Ordering::Relaxed) {
            return false;
        }
        let cap = self.cap_bytes.load(Ordering::Relaxed);
        match self.config.source.usage_bytes() {
            Some(usage) => cap.saturating_sub(usage) < policy::headroom_bytes(cap) / 2,
            None => false,
        }
    }

    /// Full readings while they shrink the limit (a burst), at most BURST_STEPS.
    fn settle(&self, shared: &Core) {
        for _ in 0..BURST_STEPS {
            if !self.tick(shared) {
                return;
            }
        }
    }

    /// One reading and, if the policy says so, a new limit; true if it shrank.
    fn tick(&self, shared: &Core) -> bool {
        if !self.active.load(Ordering::Relaxed) {
            return false;
        }
        let Ok(reading) = self.config.source.read() else { return false };
        self.cap_bytes.store(reading.cap_bytes, Ordering::Relaxed);
        self.used_bytes.store(reading.used_bytes, Ordering::Relaxed);
        let held = shared.engine.malloced_bytes();
        let mut p = self.policy();
        if !self.active.load(Ordering::Relaxed) {
            return false;
        }
        let Some((limit, reason)) = p.step(&reading, held) else { return false };
        shared.engine.set_memory_limit(limit);
        shared.memory_limit_bytes.store(limit, Ordering::Relaxed);
        drop(p);
        self.last_reason.store(reason as u8 + 1, Ordering::Relaxed);
        if reason == Reason::Grow {
            self.grows.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.shrinks.fetch_add(1, Ordering::Relaxed);
        let shed = shared.engine.shed_to_limit(shared.clock.now());
        self.shed_bytes.fetch_add(shed, Ordering::Relaxed);
        true
    }

    /// Strata's own lines in `stats` (only with a governor).
    pub fn stats(&self, emit: &mut dyn FnMut(&str, String)) {
        let mode = match (self.config.auto, self.active.load(Ordering::Relaxed)) {
            (true, true) => "auto",
            (false, true) => "yield",
            (_, false) => "fixed",
        };
        let reason = match self.last_reason.load(Ordering::Relaxed) {
            REASON_NONE => "none",
            REASON_MEMLIMIT => "cache_memlimit",
            1 => Reason::Usage.name(),
            2 => Reason::LimitEvents.name(),
            3 => Reason::Psi.name(),
            _ => Reason::Grow.name(),
        };
        let cap = self.cap_bytes.load(Ordering::Relaxed);
        emit("memory_governor", mode.to_string());
        emit("memory_source", self.config.source.name().to_string());
        emit("memory_cap_bytes", cap.to_string());
        emit("memory_used_bytes", self.used_bytes.load(Ordering::Relaxed).to_string());
        emit("memory_headroom_bytes", policy::headroom_bytes(cap).to_string());
        emit("memory_limit_max_bytes", self.policy().max_bytes.to_string());
        emit("memory_limit_shrinks", self.shrinks.load(Ordering::Relaxed).to_string());
        emit("memory_limit_grows", self.grows.load(Ordering::Relaxed).to_string());
        emit("memory_shed_bytes", self.shed_bytes.load(Ordering::Relaxed).to_string());
        emit("memory_limit_last_reason", reason.to_string());
    }
}

/// Start the `strata-memory` thread when a governor is configured.
pub fn start(core: &Arc<Core>, governor: Option<&Arc<Governor>>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let Some(g) = governor.cloned() else {
        return Ok(None);
    };
    let shared = core.clone();
    let handle = std::thread::Builder::new().name("strata-memory".into()).spawn(move || {
        let mut last_full = std::time::Instant::now();
        while !shared.is_shutting_down() {
            if last_full.elapsed() >= TICK || g.short_now() {
                last_full = std::time::Instant::now();
                g.settle(&shared);
            }
            std::thread::sleep(FAST_TICK);
        }
    })?;
    Ok(Some(handle))
}
