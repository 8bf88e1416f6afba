//! The damaged-file figure (issue 46): for each kind of file the store
//! reads back, N mutated images (1 to 8 structure-aware operations each:
//! bit flips, zeroed and filled runs, fields set to extremes, units copied
//! over others, truncation at unit boundaries; on the image of a graceful
//! stop or of a crash, at random), each opened as a restart opens it and
//! every key read. Prints crashes (panics), wrong values (a value nobody
//! wrote for the key), stale values (an older version, allowed) and the
//! share of items kept.
//!
//!     cargo run --release -p strata-store --example lab -- damage [IMAGES] [SEED]
//!
//! `DAMAGE_KINDS=2,3` runs those rows only; `DAMAGE_ONLY=KIND,IMAGE` one image.

use std::time::Instant;

use arbitrary::{Arbitrary, Unstructured};
use strata_store::fuzzing::mutate::Op;
use strata_store::fuzzing::{remove_images, run, Damage, FileKind};

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Image `n` of `kind`'s damage, from the seed alone.
fn damage(seed: u64, kind: usize, n: usize) -> Damage {
    let mut x = seed ^ ((kind as u64) << 48) ^ n as u64;
    let bytes: Vec<u8> = (0..64).flat_map(|_| splitmix(&mut x).to_le_bytes()).collect();
    let ops = 1 + (splitmix(&mut x) % 8) as usize;
    let mut u = Unstructured::new(&bytes);
    let ops = (0..ops).filter_map(|_| Op::arbitrary(&mut u).ok()).collect();
    Damage { crash: splitmix(&mut x) & 1 == 1, ops }
}

pub fn main(args: Vec<String>) {
    let mut args = args.into_iter().skip(1);
    let images_per_kind: usize = args.next().map_or(1000, |a| a.parse().expect("IMAGES: a number"));
    let seed: u64 = args.next().map_or(46, |a| a.parse().expect("SEED: a number"));
    // One image alone, its panic shown in full: DAMAGE_ONLY=KIND,IMAGE
    // (KIND: the row, from 0).
    if let Ok(only) = std::env::var("DAMAGE_ONLY") {
        let (k, n) = only.split_once(',').expect("DAMAGE_ONLY=KIND,IMAGE");
        let (k, n): (usize, usize) = (k.parse().expect("KIND"), n.parse().expect("IMAGE"));
        let input = damage(seed, k, n);
        println!("{input:?}");
        println!("{:?}", run(FileKind::ALL[k], &input));
        remove_images();
        return;
    }
    // Quiet: a panic is counted, its message shown once per kind.
    std::panic::set_hook(Box::new(|_| {}));
    println!("{images_per_kind} images per kind, seed {seed}");
    println!("| file kind | images | crashes | wrong values | stale values | cold starts | items kept: mean | min | ms/image |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Some rows only: DAMAGE_KINDS=2,3 (rows from 0).
    let rows: Option<Vec<usize>> = std::env::var("DAMAGE_KINDS").ok().map(|v| v.split(',').map(|k| k.parse().expect("DAMAGE_KINDS")).collect());
    for (k, kind) in FileKind::ALL.into_iter().enumerate() {
        if rows.as_ref().is_some_and(|r| !r.contains(&k)) {
            continue;
        }
        let (mut crashes, mut wrong, mut stale, mut cold, mut shares) = (0, 0, 0, 0, Vec::new());
        let mut first_failure = None;
        let started = Instant::now();
        for n in 0..images_per_kind {
            let input = damage(seed, k, n);
            match std::panic::catch_unwind(|| run(kind, &input)) {
                Ok(out) => {
                    if !out.wrong.is_empty() && first_failure.is_none() {
                        first_failure = Some(format!("image {n}: {input:?}: {:?}", &out.wrong[..out.wrong.len().min(3)]));
                    }
                    wrong += out.wrong.len();
                    stale += out.stale;
                    cold += usize::from(out.cold);
                    shares.push(out.kept as f64 / out.live.max(1) as f64);
                }
                Err(e) => {
                    crashes += 1;
                    if first_failure.is_none() {
                        let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                        first_failure = Some(format!("image {n}: {input:?}: panic {msg:?}"));
                    }
                }
            }
        }
        let ms = started.elapsed().as_secs_f64() * 1000.0 / images_per_kind.max(1) as f64;
        let mean = shares.iter().sum::<f64>() / shares.len().max(1) as f64;
        let min = shares.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "| {} | {images_per_kind} | {crashes} | {wrong} | {stale} | {cold} | {:.2}% | {:.2}% | {ms:.1} |",
            kind.name(),
            mean * 100.0,
            if shares.is_empty() { 0.0 } else { min * 100.0 }
        );
        if let Some(f) = first_failure {
            eprintln!("{}: first failure: {f}", kind.name());
        }
    }
    remove_images();
}
