//! How the machine itself scales from one core to two: random 8-byte reads
//! over arrays of 1, 8 and 64 MiB, one thread and then two. The store's
//! DRAM-sized benchmark cannot scale better than this.
//!
//!     cargo run --release -p strata-store --example lab -- memscale

use std::time::Instant;

fn reads(buf: &[u64], n: usize, seed: u64) -> u64 {
    let (mut x, mut sum) = (seed | 1, 0u64);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sum = sum.wrapping_add(buf[(x as usize) % buf.len()]);
    }
    sum
}

pub fn main(_args: Vec<String>) {
    const READS: usize = 5_000_000;
    for mib in [1usize, 8, 64] {
        let buf: Vec<u64> = (0..mib << 17).map(|i| i as u64).collect();
        let start = Instant::now();
        std::hint::black_box(reads(&buf, READS, 1));
        let one = start.elapsed();
        let start = Instant::now();
        std::thread::scope(|s| {
            let a = s.spawn(|| reads(&buf, READS, 2));
            let b = s.spawn(|| reads(&buf, READS, 3));
            std::hint::black_box(a.join().expect("thread") ^ b.join().expect("thread"));
        });
        let two = start.elapsed();
        println!("{mib:3} MiB: one thread {:.1} ns/read, two threads scale {:.2}x", one.as_nanos() as f64 / READS as f64, 2.0 * one.as_secs_f64() / two.as_secs_f64());
    }
}
