//! Key equality for the index probe, without a `memcmp` call for the keys
//! most caches hold: a key of 4 to 32 bytes is compared as two or four
//! machine words, the last of which may overlap the first (a 10-byte key is
//! bytes 0..8 and 2..10), so there is no byte loop and no library call; a
//! call into libc's `memcmp` costs more than the compare for such keys.
//!
//! ```text
//!  len  4..=7    u32 @0, u32 @len-4
//!  len  8..=16   u64 @0, u64 @len-8
//!  len 17..=32   u64 @0, @8, @len-16, @len-8
//!  else          slice equality (memcmp)
//! ```

/// `a == b`, for keys.
#[inline]
pub fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let w64 = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let w32 = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    match n {
        4..=7 => w32(a, 0) == w32(b, 0) && w32(a, n - 4) == w32(b, n - 4),
        8..=16 => w64(a, 0) == w64(b, 0) && w64(a, n - 8) == w64(b, n - 8),
        17..=32 => {
            w64(a, 0) == w64(b, 0) && w64(a, 8) == w64(b, 8) && w64(a, n - 16) == w64(b, n - 16) && w64(a, n - 8) == w64(b, n - 8)
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::same_key;

    #[test]
    fn agrees_with_slice_equality_at_every_length_and_position() {
        for n in 0..=40usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37).wrapping_add(5)).collect();
            assert!(same_key(&a, &a.clone()), "len {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!same_key(&a, &b), "len {n}, byte {at} differs");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same_key(&a, &longer) && !same_key(&longer, &a));
        }
    }
}
