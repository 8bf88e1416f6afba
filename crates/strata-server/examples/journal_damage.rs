//! The journal's row of the damaged-file figure (issue 46; the store's
//! files are `strata-store`'s `examples/lab/damage.rs`): N mutated images of
//! the invalidation journal (1 to 8 structure-aware operations each, on
//! the image of a graceful stop or of a crash), each opened as a start
//! opens it and asked for the changes since every 4th second of its life.
//! Prints crashes, lost invalidations the reader could have seen (should
//! be 0), losses from words the format does not check, refusals.
//!
//!     cargo run --release -p strata-server --example journal_damage -- [IMAGES] [SEED]

use arbitrary::{Arbitrary, Unstructured};
use strata_server::fuzzing::journal::{run, Damage};
use strata_store::fuzzing::mutate::Op;

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let images: usize = args.next().map_or(1000, |a| a.parse().expect("IMAGES: a number"));
    let seed: u64 = args.next().map_or(46, |a| a.parse().expect("SEED: a number"));
    std::panic::set_hook(Box::new(|_| {}));
    let (mut crashes, mut lost, mut unprotected, mut hit, mut asked, mut answered, mut remade) = (0, 0, 0, 0, 0, 0, 0);
    let mut first = None;
    let started = std::time::Instant::now();
    for n in 0..images {
        let mut x = seed ^ (7 << 48) ^ n as u64;
        let bytes: Vec<u8> = (0..64).flat_map(|_| splitmix(&mut x).to_le_bytes()).collect();
        let count = 1 + (splitmix(&mut x) % 8) as usize;
        let mut u = Unstructured::new(&bytes);
        let input = Damage { crash: splitmix(&mut x) & 1 == 1, ops: (0..count).filter_map(|_| Op::arbitrary(&mut u).ok()).collect() };
        match std::panic::catch_unwind(|| run(&input)) {
            Ok(out) => {
                if !out.lost.is_empty() && first.is_none() {
                    first = Some(format!("image {n}: {input:?}: {:?}", &out.lost[..out.lost.len().min(3)]));
                }
                lost += out.lost.len();
                unprotected += out.unprotected;
                hit += usize::from(out.unprotected > 0);
                asked += out.asked;
                answered += out.answered;
                remade += usize::from(out.remade);
            }
            Err(_) => {
                crashes += 1;
                first.get_or_insert_with(|| format!("image {n}: {input:?}: panic"));
            }
        }
    }
    let ms = started.elapsed().as_secs_f64() * 1000.0 / images.max(1) as f64;
    println!("{images} images, seed {seed}");
    println!("| file kind | images | crashes | lost invalidations (checked) | lost, unchecked words (images) | windows answered | made anew | ms/image |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    println!("| journal | {images} | {crashes} | {lost} | {unprotected} ({hit}) | {answered} of {asked} | {remade} | {ms:.1} |");
    if let Some(f) = first {
        eprintln!("first failure: {f}");
    }
    strata_store::fuzzing::images::remove_scratch();
}
