//! The server clock: memcached's `rel_time_t`.
//!
//! Time inside the cache is a `u32` count of seconds since a point a little
//! before the process started, exactly as memcached keeps it: the clock starts
//! at `ITEM_UPDATE_INTERVAL + 2 = 62` so that an expiry of "1" is always in
//! the past. Client expiry times are converted with [`Clock::expiry`]:
//! 0 never expires, a negative value is already expired, a value up to
//! 30 days is relative to now, and anything larger is an absolute unix time.
//!
//! The clock reads a monotonic source for "now" and the wall clock once, at
//! start, to place absolute times; [`Clock::tick`] is called by a timer (or by
//! tests with a simulated time) and the hot path reads one atomic.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Seconds on the server's relative clock.
pub type RelTime = u32;

/// Largest relative expiry, 30 days; larger values are unix times.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// memcached starts its clock this far in: `ITEM_UPDATE_INTERVAL + 2`.
pub const CLOCK_START: RelTime = 62;

#[derive(Debug)]
pub struct Clock {
    /// Unix time at relative time 0.
    process_started_unix: i64,
    started: Instant,
    /// Relative time at `started`.
    start_rel: RelTime,
    now: AtomicU32,
    /// Seconds `debugtime` moved the clock by, and whether it stopped it
    /// (memcached's debug builds; read only by `tick`).
    skew_s: AtomicI64,
    paused: AtomicBool,
}

/// The wall clock, in unix seconds.
pub fn unix_time() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Clock {
    /// A clock reading the system time.
    pub fn new() -> Clock {
        Clock::starting_at(unix_time())
    }

    /// A clock whose relative time `CLOCK_START` is unix time `unix_now`.
    pub fn starting_at(unix_now: i64) -> Clock {
        Clock {
            process_started_unix: unix_now - i64::from(CLOCK_START),
            started: Instant::now(),
            start_rel: CLOCK_START,
            now: AtomicU32::new(CLOCK_START),
            skew_s: AtomicI64::new(0),
            paused: AtomicBool::new(false),
        }
    }

    /// A clock continuing one whose relative time 0 was unix time `origin`
    /// (a memory file's): times written before a restart keep their
    /// meaning, and the downtime counts towards every TTL.
    pub fn resuming(origin: i64) -> Clock {
        let rel = (unix_time() - origin).clamp(i64::from(CLOCK_START), i64::from(u32::MAX / 2)) as RelTime;
        Clock {
            process_started_unix: origin,
            started: Instant::now(),
            start_rel: rel,
            now: AtomicU32::new(rel),
            skew_s: AtomicI64::new(0),
            paused: AtomicBool::new(false),
        }
    }

    /// Current relative time, as of the last tick.
    #[inline]
    pub fn now(&self) -> RelTime {
        self.now.load(Ordering::Relaxed)
    }

    /// Advance from the monotonic source; called by the server's timer.
    pub fn tick(&self) {
        if self.paused.load(Ordering::Relaxed) {
            return;
        }
        let elapsed = self.started.elapsed().as_secs().min(u64::from(u32::MAX / 2)) as i64;
        let now = i64::from(self.start_rel) + elapsed + self.skew_s.load(Ordering::Relaxed);
        self.now.store(now.clamp(1, i64::from(u32::MAX / 2)) as RelTime, Ordering::Relaxed);
    }

    /// memcached's `debugtime <seconds>` (debug builds): move the clock.
    pub fn debug_advance(&self, secs: i64) {
        self.skew_s.fetch_add(secs, Ordering::Relaxed);
        let now = i64::from(self.now()) + secs;
        self.now.store(now.clamp(1, i64::from(u32::MAX / 2)) as RelTime, Ordering::Relaxed);
    }

    /// memcached's `debugtime p` / `debugtime r`: stop the clock, or let it
    /// run again from the real time.
    pub fn debug_pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// Set the relative time directly (tests with a simulated clock).
    pub fn set(&self, now: RelTime) {
        self.now.store(now, Ordering::Relaxed);
    }

    /// Unix time of relative time 0 (`stats` `time` and absolute expiry).
    pub fn process_started_unix(&self) -> i64 {
        self.process_started_unix
    }

    /// Current unix time as the cache sees it.
    pub fn unix_now(&self) -> i64 {
        self.process_started_unix + i64::from(self.now())
    }

    /// Convert a client expiry to relative time, memcached's `realtime()`
    /// after `EXPTIME_TO_POSITIVE_TIME`.
    pub fn expiry(&self, exptime: i64) -> RelTime {
        // A negative expiry becomes an absolute time before the start.
        let exptime = if exptime < 0 { REALTIME_MAXDELTA + 1 } else { exptime };
        if exptime == 0 {
            return 0;
        }
        if exptime > REALTIME_MAXDELTA {
            if exptime <= self.process_started_unix {
                return 1;
            }
            return (exptime - self.process_started_unix).min(i64::from(u32::MAX)) as RelTime;
        }
        (exptime + i64::from(self.now())).min(i64::from(u32::MAX)) as RelTime
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_follows_memcached_realtime() {
        let clock = Clock::starting_at(1_700_000_000);
        assert_eq!(clock.now(), 62);
        assert_eq!(clock.expiry(0), 0);
        assert_eq!(clock.expiry(10), 72);
        assert_eq!(clock.expiry(-1), 1);
        assert_eq!(clock.expiry(REALTIME_MAXDELTA), REALTIME_MAXDELTA as u32 + 62);
        assert_eq!(clock.expiry(1_700_000_100), 162);
        assert_eq!(clock.expiry(1_600_000_000), 1);
    }

    #[test]
    fn debugtime_moves_and_stops_the_clock() {
        let clock = Clock::starting_at(1_700_000_000);
        clock.debug_advance(3);
        assert_eq!(clock.now(), 65);
        clock.tick();
        assert_eq!(clock.now(), 65, "a tick keeps the skew");
        clock.debug_advance(-10);
        assert_eq!(clock.now(), 55);
        clock.debug_pause(true);
        clock.debug_advance(1);
        clock.tick();
        assert_eq!(clock.now(), 56, "paused: ticks do not move it");
        clock.debug_pause(false);
        clock.tick();
        assert_eq!(clock.now(), 56);
    }
}
