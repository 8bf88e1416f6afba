//! Key choice: uniform over `0..n`, or Zipf over ranks (rand_distr's
//! rejection-inversion sampler, O(1) per draw). Rank 1 (the most popular)
//! maps to key 0; with exponent 0.99 over 10k keys the top key takes ~10%
//! of draws and the top 1% of keys about half (see the test).

use crate::workload::KeyDist;
use rand::rngs::SmallRng;
use rand::RngExt;
use rand_distr::{Distribution, Zipf};

pub enum KeySampler {
    Uniform(u32),
    Zipf(Zipf<f64>),
}

impl KeySampler {
    pub fn new(dist: KeyDist, key_count: u32) -> KeySampler {
        match dist {
            KeyDist::Uniform => KeySampler::Uniform(key_count),
            KeyDist::Zipf(s) => {
                KeySampler::Zipf(Zipf::new(f64::from(key_count), s).expect("exponent checked when parsed"))
            }
        }
    }

    /// A key index in `0..key_count`.
    pub fn sample(&self, rng: &mut SmallRng) -> u32 {
        match self {
            KeySampler::Uniform(n) => rng.random_range(0..*n),
            KeySampler::Zipf(z) => (z.sample(rng) as u32).saturating_sub(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn histogram(dist: KeyDist, n: u32, draws: usize) -> Vec<u32> {
        let sampler = KeySampler::new(dist, n);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut counts = vec![0u32; n as usize];
        for _ in 0..draws {
            counts[sampler.sample(&mut rng) as usize] += 1;
        }
        counts
    }

    #[test]
    fn uniform_covers_the_range_evenly() {
        let counts = histogram(KeyDist::Uniform, 100, 200_000);
        // 2000 expected per key; 5 standard deviations is about +-220.
        assert!(counts.iter().all(|&c| (1780..=2220).contains(&c)), "{counts:?}");
    }

    #[test]
    fn zipf_is_skewed_as_theory_says() {
        let n = 10_000u32;
        let counts = histogram(KeyDist::Zipf(0.99), n, 400_000);
        let h: f64 = (1..=n).map(|k| 1.0 / f64::from(k).powf(0.99)).sum();
        let expect_top = 400_000.0 / h;
        let top = f64::from(counts[0]);
        assert!((top - expect_top).abs() < expect_top * 0.05, "top {top} expected {expect_top}");
        // Rank order holds between well separated ranks.
        assert!(counts[0] > counts[9] && counts[9] > counts[999]);
        let top_1pct: u32 = counts[..100].iter().sum();
        assert!(top_1pct > 400_000 * 45 / 100, "top 1% took {top_1pct}");
        assert!(counts.iter().all(|&c| c < 400_000));
    }
}
