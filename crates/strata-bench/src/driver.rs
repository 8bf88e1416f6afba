//! The load loop of one thread: a mio poll over that thread's channels
//! (TCP connections or UDP sockets), issuing requests closed- or open-loop
//! and handing readiness events to the channels.
//!
//! Closed loop: every live channel keeps `pipeline` requests in flight; a
//! request's latency runs from when it was written.
//!
//! Open loop: requests are due at `start + i * interval` (`interval =
//! threads / rate`). A due request goes to the next channel with room
//! (fewer than `pipeline` in flight); when none has room it waits, and its
//! latency still runs from its due time, so a stalled server shows up in
//! the tail instead of slowing the schedule (no coordinated omission). The
//! backlog is only the schedule's position, so it costs no memory; requests
//! still unsent at the end are reported as `unsent`. The poll sleeps until
//! 1 ms before the next due time and spins after that, because epoll's
//! timeout has millisecond granularity.
//!
//! A request budget (`--requests`, split over the threads) ends issuing
//! like the end of the duration does, once the thread has issued its
//! share: the replies in flight are then drained as at the end.

use crate::exchange::{Codec, Pending};
use crate::mix::{Mix, Op};
use crate::tally::Tally;
use mio::{Events, Poll};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A connection or socket that carries requests.
pub trait Channel {
    fn in_flight(&self) -> usize;
    fn alive(&self) -> bool;
    /// Write `op` (latency measured from `start`).
    fn issue(&mut self, codec: &mut Codec, op: Op, start: Instant, tally: &mut Tally);
    /// Push buffered requests to the socket.
    fn flush(&mut self, tally: &mut Tally);
    /// Handle readiness: read, decode and complete replies.
    fn ready(&mut self, codec: &Codec, tally: &mut Tally);
    /// Time out requests that waited too long (UDP); `now` is current.
    fn expire(&mut self, now: Instant, tally: &mut Tally);
    /// Give up on everything in flight (the drain deadline passed).
    fn abandon(&mut self, tally: &mut Tally);
}

/// Record a finished request; `now` is when its reply was read (one clock
/// read per batch of replies, not per reply).
pub fn complete(p: &Pending, now: Instant, tally: &mut Tally) {
    let ns = now.saturating_duration_since(p.start).as_nanos().min(u128::from(u64::MAX)) as u64;
    tally.latency.record_ns(ns);
    tally.completed += 1;
    match &p.op {
        Op::Get { keys } => {
            tally.latency_gets.record_ns(ns);
            tally.gets += 1;
            tally.keys_requested += keys.len() as u64;
        }
        Op::Set { .. } => {
            tally.latency_sets.record_ns(ns);
            tally.sets += 1;
        }
    }
}

pub struct LoadSpec {
    pub pipeline: usize,
    /// Requests per second for this thread; None is closed loop.
    pub rate: Option<f64>,
    pub start: Instant,
    pub end: Instant,
    /// Requests this thread issues at most (None: until `end`).
    pub budget: Option<u64>,
    /// How long to wait for replies in flight after `end` (or after the
    /// budget is spent).
    pub drain: Duration,
}

/// What a thread reports besides its tally.
pub struct ThreadResult {
    pub tally: Tally,
    /// Open loop: requests that were due before `end` but never sent.
    pub unsent: u64,
    pub finished: Instant,
}

pub fn drive<C: Channel>(
    poll: &mut Poll,
    chans: &mut [C],
    codec: &mut Codec,
    mix: &mut Mix,
    spec: &LoadSpec,
    progress: &AtomicU64,
) -> ThreadResult {
    let mut tally = Tally::default();
    let mut events = Events::with_capacity(1024);
    let interval = spec.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut next_due = spec.start;
    let mut turn = 0usize;
    let mut reported = 0u64;
    // Requests left to issue, and when issuing stopped (the end, or the
    // moment the budget ran out).
    let mut left = spec.budget.unwrap_or(u64::MAX);
    let mut end = spec.end;
    loop {
        let now = Instant::now();
        if left == 0 && end > now {
            end = now;
        }
        let issuing = now < end;
        if issuing {
            match interval {
                None => {
                    // A channel's requests are written together by the
                    // flush below: one clock read for all of them.
                    for c in chans.iter_mut().filter(|c| c.alive() && c.in_flight() < spec.pipeline) {
                        let sent = Instant::now();
                        while c.in_flight() < spec.pipeline && left > 0 {
                            c.issue(codec, mix.next_op(), sent, &mut tally);
                            left -= 1;
                        }
                    }
                }
                Some(step) => {
                    while next_due <= now && next_due < spec.end && left > 0 {
                        let Some(i) = (0..chans.len())
                            .map(|k| (turn + k) % chans.len())
                            .find(|&i| chans[i].alive() && chans[i].in_flight() < spec.pipeline)
                        else {
                            break;
                        };
                        chans[i].issue(codec, mix.next_op(), next_due, &mut tally);
                        left -= 1;
                        next_due += step;
                        turn = i + 1;
                    }
                }
            }
            chans.iter_mut().for_each(|c| c.flush(&mut tally));
        } else {
            let idle = chans.iter().all(|c| c.in_flight() == 0 || !c.alive());
            if idle || now >= end + spec.drain {
                chans.iter_mut().for_each(|c| c.abandon(&mut tally));
                break;
            }
        }
        if !chans.iter().any(|c| c.alive()) {
            break;
        }
        let timeout = poll_timeout(now, issuing, interval.map(|_| next_due), end);
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                panic!("poll failed: {e}");
            }
        }
        for event in events.iter() {
            if let Some(c) = chans.get_mut(event.token().0) {
                c.ready(codec, &mut tally);
            }
        }
        let now = Instant::now();
        chans.iter_mut().for_each(|c| c.expire(now, &mut tally));
        progress.fetch_add(tally.completed - reported, Ordering::Relaxed);
        reported = tally.completed;
    }
    let unsent = match interval {
        Some(step) if next_due < spec.end && left > 0 => (((spec.end - next_due).as_secs_f64() / step.as_secs_f64()).ceil() as u64).min(left),
        _ => 0,
    };
    ThreadResult { tally, unsent, finished: Instant::now() }
}

fn poll_timeout(now: Instant, issuing: bool, next_due: Option<Instant>, end: Instant) -> Duration {
    const CAP: Duration = Duration::from_millis(50);
    if !issuing {
        return Duration::from_millis(5);
    }
    let until_end = end.saturating_duration_since(now);
    match next_due {
        Some(due) if due > now => {
            let wait = due - now;
            if wait <= Duration::from_millis(1) {
                Duration::ZERO
            } else {
                (wait - Duration::from_millis(1)).min(CAP).min(until_end)
            }
        }
        // Closed loop, or open loop with a backlog: wait for replies.
        _ => CAP.min(until_end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Keyspace;
    use crate::workload::{KeyDist, Protocol, ValueSize, Workload};

    /// A channel whose requests are answered as they are issued (a hit
    /// each), keeping the keys asked for.
    #[derive(Default)]
    struct Echo {
        keys: Vec<u32>,
    }

    impl Channel for Echo {
        fn in_flight(&self) -> usize {
            0
        }
        fn alive(&self) -> bool {
            true
        }
        fn issue(&mut self, _: &mut Codec, op: Op, start: Instant, tally: &mut Tally) {
            tally.sent += 1;
            if let Op::Get { keys } = &op {
                self.keys.extend_from_slice(keys);
                tally.hits += keys.len() as u64;
            }
            complete(&Pending::new(op, start, 0), Instant::now(), tally);
        }
        fn flush(&mut self, _: &mut Tally) {}
        fn ready(&mut self, _: &Codec, _: &mut Tally) {}
        fn expire(&mut self, _: Instant, _: &mut Tally) {}
        fn abandon(&mut self, _: &mut Tally) {}
    }

    fn budget_run(rate: Option<f64>, budget: u64, seed: u64) -> (Tally, Vec<u32>, Duration) {
        let w = Workload {
            protocol: Protocol::Text,
            key_count: 1000,
            key_offset: 5000,
            key_size: 10,
            value_size: ValueSize::Fixed(20),
            get_ratio: 1.0,
            mget: 1,
            dist: KeyDist::Uniform,
        };
        let mut codec = Codec::new(Protocol::Text, Keyspace { key_size: 10, key_count: w.key_end(), sizes: w.value_size.clone() });
        let mut mix = Mix::new(&w, seed);
        let mut chans = vec![Echo::default(), Echo::default()];
        let start = Instant::now();
        let spec = LoadSpec { pipeline: 1, rate, start, end: start + Duration::from_secs(30), budget: Some(budget), drain: Duration::from_secs(2) };
        let r = drive(&mut Poll::new().unwrap(), &mut chans, &mut codec, &mut mix, &spec, &AtomicU64::new(0));
        let keys = chans.into_iter().flat_map(|c| c.keys).collect();
        (r.tally, keys, start.elapsed())
    }

    #[test]
    fn a_budget_ends_the_run_after_that_many_requests() {
        for rate in [None, Some(200_000.0)] {
            let (tally, keys, took) = budget_run(rate, 3000, 7);
            assert_eq!((tally.sent, tally.completed, tally.gets, tally.hits), (3000, 3000, 3000, 3000), "{rate:?}");
            assert!(took < Duration::from_secs(10), "{rate:?}: {took:?}");
            assert!(keys.iter().all(|k| (5000..6000).contains(k)), "{rate:?}: a key outside the offset range");
        }
        // The same seed asks for the same keys.
        let mut a = budget_run(None, 500, 3).1;
        let mut b = budget_run(None, 500, 3).1;
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
}
