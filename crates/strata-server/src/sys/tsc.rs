//! A cheap monotonic tick counter for timing requests (`ops/latency.rs`):
//! the CPU's time-stamp counter where the kernel reports it invariant
//! (`constant_tsc` and `nonstop_tsc` in /proc/cpuinfo: the same rate on
//! every core, in every power state), else nanoseconds since start from
//! `Instant` (a vDSO `clock_gettime`, several times the cost).
//!
//! `unsafe` here: `_rdtsc` is an intrinsic; it reads a register and has no
//! memory effects. Ticks become nanoseconds by the rate measured between
//! [`init`] and the first [`ns_per_tick`] (at least 10 ms apart), so no
//! frequency table is needed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static USE_TSC: AtomicBool = AtomicBool::new(false);
static BASE: OnceLock<(Instant, u64)> = OnceLock::new();
static RATE: OnceLock<f64> = OnceLock::new();

#[inline]
fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    #[allow(unused_unsafe)]
    // SAFETY: reads the time-stamp counter; no memory is touched.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// Choose the source and take the calibration base (once; later calls do
/// nothing).
pub fn init() {
    BASE.get_or_init(|| {
        let invariant = cfg!(target_arch = "x86_64")
            && std::fs::read_to_string("/proc/cpuinfo")
                .map(|c| c.contains(" constant_tsc") && c.contains(" nonstop_tsc"))
                .unwrap_or(false);
        USE_TSC.store(invariant, Ordering::Relaxed);
        (Instant::now(), rdtsc())
    });
}

/// Ticks since some fixed point.
#[inline]
pub fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        rdtsc()
    } else {
        BASE.get().map_or(0, |(at, _)| at.elapsed().as_nanos() as u64)
    }
}

/// Nanoseconds per tick (1 without the TSC).
pub fn ns_per_tick() -> f64 {
    if !USE_TSC.load(Ordering::Relaxed) {
        return 1.0;
    }
    *RATE.get_or_init(|| {
        let (at, ticks0) = *BASE.get().unwrap_or(&(Instant::now(), rdtsc()));
        let min = Duration::from_millis(10);
        if at.elapsed() < min {
            std::thread::sleep(min - at.elapsed());
        }
        let ns = at.elapsed().as_nanos() as f64;
        let ticks = rdtsc().wrapping_sub(ticks0).max(1) as f64;
        ns / ticks
    })
}
