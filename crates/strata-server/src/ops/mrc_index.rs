//! The key index of one `stats mrc` simulation (`mrc_sim.rs`): key hash ->
//! a packed word, in one open-addressed array with linear probing and
//! backward-shift deletion, so a removal leaves no tombstone.
//!
//! ```text
//!  slots: [(key, value); 2^k]   key 0 = empty (a key hashing to 0 is kept as 1)
//!  home = key's low k bits (the keys are xxh3 hashes already), probe +1
//!  remove: shift later entries of the same run back into the hole
//! ```
//!
//! Invariants: every key is found by probing from its home without
//! crossing an empty slot; at most 3/4 of the slots are taken (grown x2
//! past that); the array never shrinks.
//!
//! Why not std's `HashMap`: a simulation removes as often as it inserts
//! (every eviction), and hashbrown's removals leave tombstones that, at the
//! load a simulation sits at, end in a doubling at each churn; with a 20%
//! one-time scan the 1x simulation's index had 3x the buckets its 4,700
//! keys need (14,336 for 4,677: 240 KB where 128 KB do). Here the size
//! follows the keys held: 16 bytes a slot, 21-32 bytes a key.

/// Key hash -> value, for the simulations.
pub struct Index {
    slots: Vec<(u64, u64)>,
    len: usize,
}

const MIN_SLOTS: usize = 16;

impl Default for Index {
    fn default() -> Index {
        Index { slots: vec![(0, 0); MIN_SLOTS], len: 0 }
    }
}

/// The key as stored: never 0 (0 marks an empty slot).
#[inline]
fn stored(key: u64) -> u64 {
    key.max(1)
}

impl Index {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated (16 bytes each).
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `key`, if any.
    fn find(&self, key: u64) -> Option<usize> {
        let key = stored(key);
        let mut i = key as usize & self.mask();
        loop {
            match self.slots[i].0 {
                0 => return None,
                k if k == key => return Some(i),
                _ => i = (i + 1) & self.mask(),
            }
        }
    }

    pub fn get(&self, key: u64) -> Option<u64> {
        self.find(key).map(|i| self.slots[i].1)
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut u64> {
        self.find(key).map(|i| &mut self.slots[i].1)
    }

    /// Set `key`'s value, adding the key if it is not there.
    pub fn insert(&mut self, key: u64, value: u64) {
        if let Some(i) = self.find(key) {
            self.slots[i].1 = value;
            return;
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        self.place(stored(key), value);
        self.len += 1;
    }

    fn place(&mut self, key: u64, value: u64) {
        let mut i = key as usize & self.mask();
        while self.slots[i].0 != 0 {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = (key, value);
    }

    fn grow(&mut self) {
        let slots = vec![(0, 0); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, slots);
        for (k, v) in old.into_iter().filter(|&(k, _)| k != 0) {
            self.place(k, v);
        }
    }

    /// Remove `key`; its value if it was there.
    pub fn remove(&mut self, key: u64) -> Option<u64> {
        let mut hole = self.find(key)?;
        let value = self.slots[hole].1;
        self.len -= 1;
        // Backward shift: an entry after the hole moves into it unless its
        // home lies cyclically in (hole, its slot], where it would no longer
        // be reachable from its home.
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask();
            let k = self.slots[j].0;
            if k == 0 {
                break;
            }
            let home = k as usize & self.mask();
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = (0, 0);
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_hash_map_under_churn_and_stays_small() {
        let mut index = Index::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut most = 0;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 6,000 keys, a fifth of them sharing the table's last home
            // slots (runs that wrap around); 0 is a key too (1, which it is
            // stored as, is not).
            let id = x % 6_000;
            let spread = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 2;
            let key = if step % 97 == 0 { 0 } else if id % 5 == 0 { spread | 0xfff } else { spread };
            match x >> 62 {
                0 | 1 => {
                    index.insert(key, step);
                    model.insert(key, step);
                }
                2 => assert_eq!(index.remove(key), model.remove(&key), "step {step}"),
                _ => assert_eq!(index.get(key), model.get(&key).copied(), "step {step}"),
            }
            assert_eq!(index.len(), model.len());
            most = most.max(model.len());
        }
        for (&k, &v) in &model {
            assert_eq!(index.get(k), Some(v));
        }
        assert!(index.slot_count() <= (most * 4 / 3 + 1).next_power_of_two(), "{} slots for at most {most} keys", index.slot_count());
    }
}
