//! Latency histogram: an HDR histogram of nanoseconds, 1 ns to 1 hour, 3
//! significant digits. Every recorded value lands in a bucket no wider than
//! 0.1% of the value (so a reported p99 of 250.0 µs means 249.75-250.25 µs);
//! the whole structure is ~180 KiB and merging is bucket-wise addition, so
//! each load thread keeps its own and the run adds them up at the end.

use hdrhistogram::Histogram;
use serde::Serialize;

pub const SIGNIFICANT_DIGITS: u8 = 3;
const HIGHEST_NS: u64 = 3_600_000_000_000;

/// What the reports say about the instrument's own error.
pub const PRECISION: &str = "HDR histogram, 3 significant digits (each figure within 0.1%), 1 ns to 1 h";

pub struct Latency {
    hist: Histogram<u64>,
    /// Values above the histogram's range, clamped to it.
    pub clamped: u64,
}

/// The figures every report prints, in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        let hist = Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS).expect("static bounds are valid");
        Latency { hist, clamped: 0 }
    }

    pub fn record_ns(&mut self, ns: u64) {
        if ns > HIGHEST_NS {
            self.clamped += 1;
        }
        self.hist.saturating_record(ns.max(1));
    }

    pub fn merge(&mut self, other: &Latency) {
        self.hist.add(&other.hist).expect("same bounds");
        self.clamped += other.clamped;
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn percentiles(&self) -> Percentiles {
        if self.hist.is_empty() {
            return Percentiles::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Percentiles {
            count: self.hist.len(),
            mean_us: self.hist.mean() / 1000.0,
            p50_us: us(self.hist.value_at_quantile(0.50)),
            p90_us: us(self.hist.value_at_quantile(0.90)),
            p99_us: us(self.hist.value_at_quantile(0.99)),
            p999_us: us(self.hist.value_at_quantile(0.999)),
            max_us: us(self.hist.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = Latency::new();
        for us in 1..=10_000u64 {
            h.record_ns(us * 1000);
        }
        let p = h.percentiles();
        assert_eq!(p.count, 10_000);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 0.001;
        assert!(close(p.p50_us, 5000.0), "{p:?}");
        assert!(close(p.p90_us, 9000.0), "{p:?}");
        assert!(close(p.p99_us, 9900.0), "{p:?}");
        assert!(close(p.p999_us, 9990.0), "{p:?}");
        assert!(close(p.max_us, 10_000.0), "{p:?}");
        assert!(close(p.mean_us, 5000.5), "{p:?}");
    }

    #[test]
    fn merge_adds_and_extremes_clamp() {
        let (mut a, mut b) = (Latency::new(), Latency::new());
        a.record_ns(1_000);
        b.record_ns(3_000);
        b.record_ns(0);
        b.record_ns(HIGHEST_NS * 10);
        a.merge(&b);
        assert_eq!((a.count(), a.clamped), (4, 1));
        assert!(a.percentiles().max_us >= HIGHEST_NS as f64 / 1000.0 * 0.999);
        assert_eq!(Latency::new().percentiles(), Percentiles::default());
    }
}
