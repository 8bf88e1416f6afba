//! The request stream: each draw is a get of `mget` keys (probability
//! `get_ratio`) or a set of one key with a size from the value-size spec
//! and a fresh random generation (see `keyspace.rs` for what it is for).

use crate::dist::KeySampler;
use crate::workload::{ValueSize, Workload};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

/// One request, as the bench knows it (keys are indices into the key space).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Get { keys: Keys },
    Set { key: u32, len: u32, generation: u32 },
}

/// The keys of a get: a single key inline (no allocation per request, the
/// common case of every preset but `mget48`), a multi-get's in a `Vec`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    One([u32; 1]),
    Many(Vec<u32>),
}

impl std::ops::Deref for Keys {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match self {
            Keys::One(k) => k,
            Keys::Many(v) => v,
        }
    }
}

impl From<Vec<u32>> for Keys {
    fn from(v: Vec<u32>) -> Keys {
        match v[..] {
            [k] => Keys::One([k]),
            _ => Keys::Many(v),
        }
    }
}

pub struct Mix {
    rng: SmallRng,
    keys: KeySampler,
    key_offset: u32,
    get_ratio: f64,
    mget: usize,
    sizes: ValueSize,
}

impl Mix {
    pub fn new(w: &Workload, seed: u64) -> Mix {
        Mix {
            rng: SmallRng::seed_from_u64(seed),
            keys: KeySampler::new(w.dist, w.key_count),
            key_offset: w.key_offset,
            get_ratio: w.get_ratio,
            mget: w.mget,
            sizes: w.value_size.clone(),
        }
    }

    /// A key drawn from the distribution, `key_offset` on.
    fn key(&mut self) -> u32 {
        self.key_offset + self.keys.sample(&mut self.rng)
    }

    pub fn next_op(&mut self) -> Op {
        if self.rng.random_bool(self.get_ratio) {
            let keys = match self.mget {
                1 => Keys::One([self.key()]),
                n => Keys::Many((0..n).map(|_| self.key()).collect()),
            };
            Op::Get { keys }
        } else {
            let key = self.key();
            let len = self.value_len();
            Op::Set { key, len, generation: self.rng.random() }
        }
    }

    /// A value length drawn from the size spec (classes equally likely).
    pub fn value_len(&mut self) -> u32 {
        let (a, b) = match &self.sizes {
            ValueSize::Fixed(n) => (*n, *n),
            ValueSize::Range(a, b) => (*a, *b),
            ValueSize::Classes(c) => c[self.rng.random_range(0..c.len())],
        };
        self.rng.random_range(a..=b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{KeyDist, Protocol};

    fn workload(get_ratio: f64, mget: usize, sizes: ValueSize) -> Workload {
        Workload {
            protocol: Protocol::Text,
            key_count: 1000,
            key_offset: 0,
            key_size: 16,
            value_size: sizes,
            get_ratio,
            mget,
            dist: KeyDist::Uniform,
        }
    }

    #[test]
    fn get_set_ratio_and_mget_width() {
        let mut mix = Mix::new(&workload(0.9, 48, ValueSize::Fixed(20)), 7);
        let (mut gets, mut sets) = (0u32, 0u32);
        for _ in 0..100_000 {
            match mix.next_op() {
                Op::Get { keys } => {
                    assert_eq!(keys.len(), 48);
                    assert!(keys.iter().all(|&k| k < 1000));
                    gets += 1;
                }
                Op::Set { key, len, .. } => {
                    assert!(key < 1000 && len == 20);
                    sets += 1;
                }
            }
        }
        // 90,000 expected, standard deviation ~95.
        assert!((89_500..=90_500).contains(&gets), "gets {gets} sets {sets}");
    }

    #[test]
    fn object_mix_draws_each_class_equally() {
        let sizes = ValueSize::parse("mix").unwrap();
        let mut mix = Mix::new(&workload(0.0, 1, sizes.clone()), 3);
        let mut per_class = [0u32; 3];
        for _ in 0..30_000 {
            let Op::Set { len, .. } = mix.next_op() else { panic!("get at ratio 0") };
            assert!(sizes.allows(len as usize));
            let class = ValueSize::OBJECT_MIX.iter().position(|&(a, b)| (a..=b).contains(&len)).unwrap();
            per_class[class] += 1;
        }
        assert!(per_class.iter().all(|&c| (9_600..=10_400).contains(&c)), "{per_class:?}");
    }
}
