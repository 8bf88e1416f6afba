//! The result of one run: what was sent, what came back, and the latency
//! percentiles, printed for people or written as JSON (the same fields).

use crate::histogram::{Percentiles, PRECISION};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub server: String,
    pub protocol: String,
    /// `closed` or `open`.
    pub mode: String,
    pub target_rate_rps: Option<f64>,
    pub threads: usize,
    pub conns: usize,
    pub pipeline: usize,
    pub keys: u32,
    pub key_size: usize,
    pub value_size: String,
    pub get_ratio: f64,
    pub mget: usize,
    pub dist: String,
    pub elapsed_s: f64,
    /// Requests completed (a multi-get is one request).
    pub requests: u64,
    pub throughput_rps: f64,
    pub gets: u64,
    pub sets: u64,
    pub keys_requested: u64,
    pub hits: u64,
    pub misses: u64,
    pub sent: u64,
    pub aborted: u64,
    pub timed_out: u64,
    /// Open loop: requests due but never sent (the server fell behind).
    pub unsent: u64,
    pub error_total: u64,
    pub errors: BTreeMap<String, u64>,
    pub latency: Percentiles,
    /// The gets' and the sets' own latencies (a mix's tail by kind).
    pub latency_gets: Percentiles,
    pub latency_sets: Percentiles,
    pub precision: String,
    /// Keys the prefill stored, and its seconds (0 without a prefill, and
    /// for `sweep` and `compare`, which do not report theirs).
    pub prefill_keys: u64,
    pub prefill_s: f64,
}

impl Report {
    pub fn precision() -> String {
        format!("{PRECISION}; timer: monotonic clock, ns; open-loop send slack < 1 ms (counted in latency)")
    }

    /// `sent == completed + aborted + timed_out`, and hits + misses cover
    /// every key asked for.
    pub fn counts_add_up(&self) -> bool {
        self.sent == self.requests + self.aborted + self.timed_out
            && self.hits + self.misses == self.keys_requested
            && self.gets + self.sets == self.requests
    }

    pub fn print(&self) {
        let l = &self.latency;
        let rate = self.target_rate_rps.map(|r| format!(" at {r:.0} req/s")).unwrap_or_default();
        println!(
            "{} {} loop{rate}: {} threads, {} conns, pipeline {}, {} keys of {} B, values {} B, get ratio {}, mget {}, {}",
            self.protocol,
            self.mode,
            self.threads,
            self.conns,
            self.pipeline,
            self.keys,
            self.key_size,
            self.value_size,
            self.get_ratio,
            self.mget,
            self.dist
        );
        println!("requests    {:>12} in {:.2} s = {:.0} req/s", self.requests, self.elapsed_s, self.throughput_rps);
        let hit_pct = if self.keys_requested > 0 { 100.0 * self.hits as f64 / self.keys_requested as f64 } else { 0.0 };
        println!("gets / sets {:>12} / {}", self.gets, self.sets);
        println!("hits        {:>12} ({hit_pct:.2}% of {} keys), misses {}", self.hits, self.keys_requested, self.misses);
        println!("sent        {:>12}: aborted {}, timed out {}, unsent {}", self.sent, self.aborted, self.timed_out, self.unsent);
        println!("errors      {:>12} {:?}", self.error_total, self.errors);
        println!(
            "latency µs  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
            l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us
        );
        if self.gets > 0 && self.sets > 0 {
            for (kind, l) in [("gets", &self.latency_gets), ("sets", &self.latency_sets)] {
                println!("  {kind} µs   p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}", l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us);
            }
        }
        if self.prefill_keys > 0 {
            let rate = self.prefill_keys as f64 / self.prefill_s.max(1e-9);
            println!("prefill     {:>12} keys in {:.2} s = {rate:.0} sets/s", self.prefill_keys, self.prefill_s);
        }
        println!("precision   {}", self.precision);
    }
}
