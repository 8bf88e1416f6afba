//! Catch-up: the return gap closed after the node listens.
//!
//! The sync before listening covers the writes peers saw until then, but a
//! front end sends the node its keys again only at its next retry
//! (nutcracker `server_retry_timeout`, `HashClient` `dead_timeout`), and
//! writes made to peers meanwhile would be missed. For `-o restart_catchup`
//! seconds after it listens, the node polls its peers' journals every
//! 100 ms (from the previous poll minus the margin) and marks the tags they
//! name as suspect:
//!
//! ```text
//!  suspect bits: 2^23 bits (1 MiB), bit = tag's low 23 bits   (lock-free test)
//!  suspect set:  HashSet<u32> of the exact tags, under a mutex (a bit's confirm)
//!  restored_cas_max: the CAS counter when the node listened
//! ```
//!
//! Before any request touches a key (the journal's and the catch-up's hooks
//! in service/hooks.rs, which the service runs before every read and
//! mutation), a suspect key's item is deleted if it was
//! restored (its CAS is at or below `restored_cas_max`: an item stored since
//! has a higher one), so it is a miss, never a stale hit. A peer that
//! cannot answer a poll makes every restored item suspect. When the period
//! ends, one walk deletes the suspect restored items never touched, and the
//! hooks go quiet (`active` false: one relaxed load per request).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_store::{DeleteRequest, DeleteResult, Engine, GetAction, GetOptions, RelTime, Visit, WalkCursor};

use crate::core::Core;

const BITS_LOG2: u32 = 23;
const POLL_EVERY: Duration = Duration::from_millis(100);

pub struct CatchUp {
    active: AtomicBool,
    /// Every restored item is suspect (a peer could not vouch).
    all: AtomicBool,
    restored_cas_max: AtomicU64,
    bits: Box<[AtomicU64]>,
    set: Mutex<HashSet<u32>>,
    /// Polls answered, tags named, restored items dropped.
    pub polls: AtomicU64,
    pub named: AtomicU64,
    pub dropped: AtomicU64,
}

impl Default for CatchUp {
    fn default() -> Self {
        CatchUp {
            active: AtomicBool::new(false),
            all: AtomicBool::new(false),
            restored_cas_max: AtomicU64::new(0),
            bits: Box::new([]),
            set: Mutex::new(HashSet::new()),
            polls: AtomicU64::new(0),
            named: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }
}

impl CatchUp {
    /// An active catch-up for items with a CAS at or below `restored_cas_max`.
    pub fn started(restored_cas_max: u64) -> CatchUp {
        CatchUp {
            active: AtomicBool::new(true),
            restored_cas_max: AtomicU64::new(restored_cas_max),
            bits: (0..(1usize << BITS_LOG2) / 64).map(|_| AtomicU64::new(0)).collect(),
            ..CatchUp::default()
        }
    }

    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    fn mark(&self, tags: &[u32]) {
        let mut set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        for &tag in tags {
            if set.insert(tag) {
                self.named.fetch_add(1, Ordering::Relaxed);
            }
            let bit = (tag as usize) & ((1 << BITS_LOG2) - 1);
            self.bits[bit / 64].fetch_or(1 << (bit % 64), Ordering::Release);
        }
    }

    fn is_suspect(&self, tag: u32) -> bool {
        if self.all.load(Ordering::Relaxed) {
            return true;
        }
        let bit = (tag as usize) & ((1 << BITS_LOG2) - 1);
        self.bits[bit / 64].load(Ordering::Acquire) & (1 << (bit % 64)) != 0
            && self.set.lock().unwrap_or_else(|e| e.into_inner()).contains(&tag)
    }

    fn restored(&self, cas: u64) -> bool {
        cas <= self.restored_cas_max.load(Ordering::Relaxed)
    }

    /// Before a request touches `key`: delete its restored item if suspect.
    pub fn check(&self, engine: &dyn Engine, key: &[u8], now: RelTime) {
        if !self.is_suspect(super::tag(key)) {
            return;
        }
        let mut cas = None;
        let opts = GetOptions { no_bump: true, uncounted: true, no_token: true, ..GetOptions::default() };
        engine.get(key, opts, now, &mut |item, _| {
            cas = Some(item.meta.cas);
            GetAction::default()
        });
        if let Some(cas) = cas.filter(|&c| self.restored(c)) {
            // Only that copy: a store racing in between has a new CAS.
            let req = DeleteRequest { key, cas: (cas != 0).then_some(cas), ..DeleteRequest::default() };
            if engine.delete(&req, now) == DeleteResult::Deleted {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The end: delete every suspect restored item left, then go quiet.
    fn finish(&self, engine: &dyn Engine, now: RelTime) {
        let mut doomed: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut cursor = if engine.flash().is_some() { WalkCursor::with_flash() } else { WalkCursor::default() };
        while !engine.walk(&mut cursor, 4096, now, &mut |item, visit| {
            if visit == Visit::Live && self.restored(item.meta.cas) && self.is_suspect(super::tag(item.key)) {
                doomed.push((item.key.to_vec(), item.meta.cas));
            }
            false
        }) {}
        for (key, cas) in &doomed {
            let req = DeleteRequest { key, cas: (*cas != 0).then_some(*cas), ..DeleteRequest::default() };
            if engine.delete(&req, now) == DeleteResult::Deleted {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.active.store(false, Ordering::Relaxed);
    }
}

/// Run the catch-up on its own thread for `seconds`, polling `peers` (this
/// node's own address already left out) from unix second `from_unix`.
/// `born_by_unix`: this node's last heartbeat before it restarted (see
/// `peer::ask`). A peer that cannot be reached (it is restarting too, in a
/// rolling restart) is asked again at every poll from where its last answer
/// left off, its journal covering its own downtime; one that refuses, or is
/// still unreachable when the period ends, makes every restored item a miss.
pub fn spawn(shared: Arc<Core>, catchup: Arc<CatchUp>, peers: Vec<std::net::SocketAddr>, from_unix: i64, born_by_unix: i64, login: Option<Vec<u8>>) {
    let seconds = shared.settings.warm.catchup_s;
    let margin = shared.settings.warm.margin_s as i64;
    let timeout = Duration::from_millis(shared.settings.warm.peer_timeout_ms.max(1));
    let (on_failure, failing) = (shared.clone(), catchup.clone());
    let spawned = std::thread::Builder::new().name("strata-catchup".into()).spawn(move || {
        let end = Instant::now() + Duration::from_secs(seconds);
        // Per peer: the unix second its changes are known up to, and
        // whether it was gone at its last poll.
        let mut since: Vec<(i64, bool)> = vec![(from_unix, false); peers.len()];
        while Instant::now() < end && !shared.is_shutting_down() && !catchup.all.load(Ordering::Relaxed) {
            std::thread::sleep(POLL_EVERY);
            for (peer, (known, gone)) in peers.iter().zip(since.iter_mut()) {
                let polled_at = strata_store::clock::unix_time();
                match super::peer::ask(*peer, *known - margin, born_by_unix, timeout, login.as_deref()) {
                    Ok(tags) => {
                        catchup.mark(&tags);
                        if *gone {
                            crate::log_line!("strata: warm return catch-up: peer {peer} is back; its journal covered the time it was away");
                        }
                        *known = polled_at;
                        *gone = false;
                    }
                    Err(e) if e.gone => {
                        if !*gone {
                            crate::log_line!("strata: warm return catch-up: peer {peer}: {e}; asking again at the next poll");
                        }
                        *gone = true;
                    }
                    Err(e) => {
                        crate::log_line!("strata: warm return catch-up: peer {peer}: {e}; every restored item is now a miss");
                        catchup.all.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            }
            catchup.polls.fetch_add(1, Ordering::Relaxed);
        }
        if let Some((peer, _)) = peers.iter().zip(&since).find(|(_, &(_, gone))| gone) {
            crate::log_line!("strata: warm return catch-up: peer {peer} still unreachable at the end; every restored item is now a miss");
            catchup.all.store(true, Ordering::Relaxed);
        }
        catchup.finish(&*shared.engine, shared.clock.now());
        crate::log_line!(
            "strata: warm return catch-up done: {} polls, {} changed keys named, {} restored items dropped",
            catchup.polls.load(Ordering::Relaxed),
            catchup.named.load(Ordering::Relaxed),
            catchup.dropped.load(Ordering::Relaxed)
        );
    });
    if let Err(e) = spawned {
        crate::log_line!("strata: cannot start the warm return catch-up ({e}); every restored item is now a miss");
        failing.all.store(true, Ordering::Relaxed);
        failing.finish(&*on_failure.engine, on_failure.clock.now());
    }
}
