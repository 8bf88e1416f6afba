//! The memory governor's decision, a pure function of readings: when to
//! shrink the item limit, by how much, and when to grow it back.
//!
//! ```text
//!  free = cap - used                        (source.rs: cgroup or host)
//!  headroom = max(32 MiB, cap / 8)          kept free for the index, connections,
//!                                           the page cache and the neighbours
//!  shrink at once when   free < headroom / 2          (reason: usage)
//!                   or   the cgroup's limit was hit   (reason: limit_events)
//!                   or   PSI some avg10 >= 10% and free < headroom   (reason: psi)
//!      to  min(limit, held) - (headroom - free)  (at least a quarter headroom
//!          on an event or PSI), never under FLOOR_BYTES
//!  grow after CALM_TICKS readings with free > 1.5 x headroom, by at most
//!      cap / 256 a reading and by no more than free - headroom, up to max
//! ```
//!
//! `held` is the bytes the store's buffers hold now: a limit above them has
//! not been used yet, so lowering it to `held` frees nothing and shrinking
//! starts from what is really there. Growth is slow on purpose (with the
//! governor's 100 ms readings, cap / 256 a reading is about 4% of the cap a
//! second, after 3 calm seconds), so a neighbour that comes and goes is not
//! chased up and down.
//!
//! A [`Reading`] is this module's input; `source.rs` fills it from the
//! cgroup or host files. This module reads no file and imports nothing of
//! the crate.

/// One look at memory: what is allowed, what is used, how often the limit bit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub cap_bytes: u64,
    pub used_bytes: u64,
    /// Times the cgroup hit its limit (v1 failcnt, v2 high + max + oom
    /// events), cumulative: a rise between two readings is pressure.
    pub limit_events: u64,
    /// PSI `some avg10` (percent of the last 10 s some task stalled on
    /// memory), where the kernel has PSI.
    pub psi_some_avg10: Option<f64>,
}

/// Smallest limit the governor sets (memcached's smallest `cache_memlimit`).
pub const FLOOR_BYTES: u64 = 8 << 20;
/// Readings of calm before the limit grows.
pub const CALM_TICKS: u32 = 30;
/// PSI `some avg10` (percent) that counts as pressure when free is short.
pub const PSI_PRESSURE_PERCENT: f64 = 10.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Usage,
    LimitEvents,
    Psi,
    Grow,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Usage => "usage",
            Reason::LimitEvents => "limit_events",
            Reason::Psi => "psi",
            Reason::Grow => "grow",
        }
    }
}

pub fn headroom_bytes(cap_bytes: u64) -> u64 {
    (cap_bytes / 8).max(32 << 20)
}

/// The largest limit `-m auto` starts with: the cap less headroom and what
/// is in use already (the process itself, neighbours in the cgroup).
pub fn start_limit(cap_bytes: u64, used_bytes: u64) -> u64 {
    cap_bytes.saturating_sub(headroom_bytes(cap_bytes)).saturating_sub(used_bytes).max(FLOOR_BYTES)
}

#[derive(Clone, Debug)]
pub struct Policy {
    /// The limit never grows past this (`-m auto`: its start; a fixed `-m`
    /// that yields: `-m`).
    pub max_bytes: u64,
    pub limit_bytes: u64,
    last_events: Option<u64>,
    calm: u32,
}

impl Policy {
    pub fn new(max_bytes: u64) -> Policy {
        Policy { max_bytes, limit_bytes: max_bytes, last_events: None, calm: 0 }
    }

    /// A new limit and why, or None to keep it.
    pub fn step(&mut self, r: &Reading, held_bytes: u64) -> Option<(u64, Reason)> {
        let headroom = headroom_bytes(r.cap_bytes);
        let free = r.cap_bytes.saturating_sub(r.used_bytes);
        let events = self.last_events.is_some_and(|last| r.limit_events > last);
        self.last_events = Some(r.limit_events);
        let psi = r.psi_some_avg10.is_some_and(|p| p >= PSI_PRESSURE_PERCENT) && free < headroom;
        let reason = if free < headroom / 2 {
            Some(Reason::Usage)
        } else if events {
            Some(Reason::LimitEvents)
        } else if psi {
            Some(Reason::Psi)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.calm = 0;
            let mut deficit = headroom.saturating_sub(free);
            if reason != Reason::Usage {
                deficit = deficit.max(headroom / 4);
            }
            let new = self.limit_bytes.min(held_bytes).saturating_sub(deficit).max(FLOOR_BYTES);
            if new < self.limit_bytes {
                self.limit_bytes = new;
                return Some((new, reason));
            }
            return None;
        }
        if free <= headroom + headroom / 2 {
            self.calm = 0;
            return None;
        }
        self.calm = self.calm.saturating_add(1);
        if self.calm < CALM_TICKS || self.limit_bytes >= self.max_bytes {
            return None;
        }
        let step = (r.cap_bytes / 256).min(free - headroom).max(1 << 20);
        self.limit_bytes = (self.limit_bytes + step).min(self.max_bytes);
        Some((self.limit_bytes, Reason::Grow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn reading(cap: u64, used: u64) -> Reading {
        Reading { cap_bytes: cap * MIB, used_bytes: used * MIB, limit_events: 0, psi_some_avg10: None }
    }

    #[test]
    fn starts_below_the_cap_with_headroom() {
        assert_eq!(headroom_bytes(512 * MIB), 64 * MIB);
        assert_eq!(start_limit(512 * MIB, 10 * MIB), 438 * MIB);
        assert_eq!(headroom_bytes(128 * MIB), 32 * MIB);
        assert_eq!(start_limit(16 * MIB, 10 * MIB), FLOOR_BYTES);
    }

    #[test]
    fn shrinks_at_once_by_the_deficit_and_grows_back_slowly() {
        let mut p = Policy::new(438 * MIB);
        // Filled, 10 MiB free in a 512 MiB cgroup (headroom 64): give back 54.
        assert_eq!(p.step(&reading(512, 502), 430 * MIB), Some((376 * MIB, Reason::Usage)));
        // Within headroom / 2 .. 1.5 x headroom: hold.
        for _ in 0..100 {
            assert_eq!(p.step(&reading(512, 460), 376 * MIB), None);
        }
        // Calm: nothing for CALM_TICKS readings, then 2 MiB (cap / 256) a reading.
        for _ in 1..CALM_TICKS {
            assert_eq!(p.step(&reading(512, 300), 376 * MIB), None);
        }
        assert_eq!(p.step(&reading(512, 300), 376 * MIB), Some((378 * MIB, Reason::Grow)));
        for _ in 0..100 {
            p.step(&reading(512, 300), 376 * MIB);
        }
        assert_eq!(p.limit_bytes, 438 * MIB, "never past the start");
        assert_eq!(p.step(&reading(512, 300), 376 * MIB), None);
    }

    #[test]
    fn shrinks_from_what_is_held_and_never_under_the_floor() {
        let mut p = Policy::new(438 * MIB);
        // Only 100 MiB held: the cut starts there, not at the 438 MiB limit.
        assert_eq!(p.step(&reading(512, 490), 100 * MIB), Some((58 * MIB, Reason::Usage)));
        assert_eq!(p.step(&reading(512, 511), 50 * MIB), Some((FLOOR_BYTES, Reason::Usage)));
        assert_eq!(p.step(&reading(512, 511), 8 * MIB), None);
    }

    #[test]
    fn limit_events_and_psi_count_as_pressure() {
        let mut p = Policy::new(400 * MIB);
        let mut r = reading(512, 440);
        r.limit_events = 7;
        assert_eq!(p.step(&r, 400 * MIB), None, "the first reading is the baseline");
        r.limit_events = 9;
        assert_eq!(p.step(&r, 400 * MIB), Some((384 * MIB, Reason::LimitEvents)));
        let mut r = reading(512, 460);
        r.limit_events = 9;
        r.psi_some_avg10 = Some(25.0);
        assert_eq!(p.step(&r, 384 * MIB), Some((368 * MIB, Reason::Psi)));
        r.used_bytes = 100 * MIB;
        assert_eq!(p.step(&r, 368 * MIB), None, "PSI with memory free is someone else's stall");
    }
}
