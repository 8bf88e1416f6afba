//! Keys and self-describing values, so every returned value can be checked
//! without remembering what was written.
//!
//! A key is its index in decimal, zero-padded to `key_size`, behind an
//! `sb:` prefix when there is room: key 42 at 20 bytes is
//! `sb:00000000000000042`. It parses back to its index.
//!
//! A value is a function of (key, generation, length):
//!
//! ```text
//!  length >= 12:  | generation, 8 hex digits | filler(seed(key, gen, len)) ...|
//!  length <  12:  | filler(seed(key, 0, len)) ...                            |
//! ```
//!
//! The filler repeats a 32-byte block of letters drawn from the seed. The
//! client flags are a hash of the key. A reply is accepted only if its
//! length is one the size spec can produce, its flags belong to the key,
//! and its bytes equal the regenerated value: a value from another key, a
//! torn write or a stale buffer fails this (a value short enough to carry
//! no generation is checked for key and length only).

use crate::workload::ValueSize;

const PREFIX: &[u8] = b"sb:";
const GEN_DIGITS: usize = 8;
const BLOCK: usize = 32;

/// Why a returned value was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    Length,
    Flags,
    Bytes,
}

#[derive(Clone, Debug)]
pub struct Keyspace {
    pub key_size: usize,
    pub key_count: u32,
    pub sizes: ValueSize,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The filler's block for (key, generation, len): its first
/// `min(len, BLOCK)` bytes rounded up to whole 8-byte words (a value
/// shorter than the block never reads the rest; the words are a sequence,
/// so a shorter prefix is the same bytes).
fn filler_block(key: u32, generation: u32, len: u32) -> [u8; BLOCK] {
    let mut block = [0u8; BLOCK];
    for (chunk, word) in block.chunks_mut(8).zip(filler_words(key, generation, len)) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    block
}

/// The block as little-endian words: one SplitMix64 output for the
/// (key, generation, length), then word `i` is its letters after rotating
/// it by `16 i` bits and mixing in a constant of its own. One multiply
/// chain a value, not one a word: the chained words (each `splitmix` of the
/// one before) were most of a check's time, and LLVM vectorized a loop of
/// independent ones into emulated 64-bit SSE2 multiplies, slower still.
#[inline(always)]
fn filler_words(key: u32, generation: u32, len: u32) -> [u64; BLOCK / 8] {
    const MIX: [u64; BLOCK / 8] = [0, 0x5bd1_e995_5bd1_e995, 0x27d4_eb2f_1656_67c5, 0x85eb_ca6b_c2b2_ae35];
    let seed = splitmix((u64::from(key) << 32) ^ u64::from(generation) ^ (u64::from(len) << 17));
    let mut words = [0u64; BLOCK / 8];
    let used = (len as usize).min(BLOCK).div_ceil(8);
    for (i, word) in words[..used].iter_mut().enumerate() {
        *word = letters(seed.rotate_left(16 * i as u32) ^ MIX[i]);
    }
    words
}

/// Eight lowercase hex digits (first digit in the low byte) as their
/// number, or None if any byte is not one: each byte's nibble in parallel,
/// then joined by shifts.
fn eight_hex(word: u64) -> Option<u32> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte b is in [lo, hi] iff (b + 0x80 - lo) has its top bit set and
    // (b + 0x7f - hi) has not; no byte carries into the next (all < 0x80).
    let in_range = |lo: u64, hi: u64| (word + ONES * (0x80 - lo)) & !(word + ONES * (0x7f - hi)) & HIGH;
    if word & HIGH != 0 {
        return None;
    }
    let digit = in_range(u64::from(b'0'), u64::from(b'9'));
    let letter = in_range(u64::from(b'a'), u64::from(b'f'));
    if digit | letter != HIGH {
        return None;
    }
    // '0'..'9' -> 0..9 (low nibble); 'a'..'f' -> 10..15 (low nibble + 9).
    let nibbles = (word & (ONES * 0x0f)) + (letter >> 7) * 9;
    // Byte k holds the digit of weight 16^(7-k): gather them high first.
    let mut n = 0u32;
    for k in 0..8 {
        n = n << 4 | ((nibbles >> (8 * k)) & 0x0f) as u32;
    }
    Some(n)
}

/// Eight letters from eight random bytes, each `b'a' + byte * 26 / 256`,
/// computed on all eight at once (byte lanes in 16-bit lanes, whose
/// products cannot carry into each other): a `% 26` per byte was a tenth
/// of the load generator's instructions per get.
fn letters(random: u64) -> u64 {
    const LOW: u64 = 0x00ff_00ff_00ff_00ff;
    let even = (((random & LOW) * 26) >> 8) & LOW;
    let odd = (((random >> 8) & LOW) * 26) & !LOW;
    (even | odd) + 0x6161_6161_6161_6161
}

/// Eight ASCII digits (first digit in the low byte) as their number, or
/// None if any byte is not a digit: three multiply-and-mask steps that
/// join pairs, then quads, then the halves.
fn eight_digits(word: u64) -> Option<u64> {
    const ZEROS: u64 = u64::from_ne_bytes([b'0'; 8]);
    const HIGH_NIBBLES: u64 = u64::from_ne_bytes([0xf0; 8]);
    const SIXES: u64 = u64::from_ne_bytes([0x06; 8]);
    // Each byte 0x30..=0x39: high nibble 3, and adding 6 keeps it 3.
    if word & HIGH_NIBBLES != ZEROS || word.wrapping_add(SIXES) & HIGH_NIBBLES != ZEROS {
        return None;
    }
    let v = word - ZEROS;
    let v = (v * 10 + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v * 100 + (v >> 16)) & 0x0000_ffff_0000_ffff;
    Some((v * 10_000 + (v >> 32)) & 0xffff_ffff)
}

/// "00", "01", .. "99".
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

fn hex_digit(n: u32) -> u8 {
    b"0123456789abcdef"[(n & 15) as usize]
}

impl Keyspace {
    /// Append key `index` (exactly `key_size` bytes).
    pub fn write_key(&self, index: u32, out: &mut Vec<u8>) {
        if self.key_size <= 32 {
            // The common case built on the stack, digits written in place
            // from the right, and appended as a constant 32 bytes then cut:
            // inline moves, not two `memcpy` calls of variable length.
            let mut key = [b'0'; 32];
            let mut at = self.key_size;
            let mut n = index as usize;
            // Two digits a step, from a table of "00".."99".
            while n >= 100 {
                at -= 2;
                key[at..at + 2].copy_from_slice(&PAIRS[n % 100 * 2..n % 100 * 2 + 2]);
                n /= 100;
            }
            if n >= 10 {
                at -= 2;
                key[at..at + 2].copy_from_slice(&PAIRS[n * 2..n * 2 + 2]);
            } else {
                at -= 1;
                key[at] = b'0' + n as u8;
            }
            if self.key_size >= PREFIX.len() + (self.key_size - at) {
                key[..PREFIX.len()].copy_from_slice(PREFIX);
            }
            let len = out.len();
            out.extend_from_slice(&key);
            out.truncate(len + self.key_size);
            return;
        }
        let mut buf = [0u8; 10];
        let mut at = buf.len();
        let mut n = index;
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let digits = &buf[at..];
        let prefix = if self.key_size >= PREFIX.len() + digits.len() { PREFIX } else { b"" };
        out.extend_from_slice(prefix);
        out.resize(out.len() + self.key_size - prefix.len() - digits.len(), b'0');
        out.extend_from_slice(digits);
    }

    /// The index a returned key names, if it is one of ours.
    pub fn key_index(&self, key: &[u8]) -> Option<u32> {
        if key.len() != self.key_size {
            return None;
        }
        let digits = key.strip_prefix(PREFIX).unwrap_or(key);
        // The leading digits one at a time, then eight at a time.
        let (head, words) = digits.split_at(digits.len() % 8);
        let mut index = 0u64;
        for &d in head {
            if !d.is_ascii_digit() {
                return None;
            }
            index = index * 10 + u64::from(d - b'0');
        }
        for word in words.chunks_exact(8) {
            let eight = eight_digits(u64::from_le_bytes(word.try_into().expect("8 bytes")))?;
            index = index.checked_mul(100_000_000)?.checked_add(eight)?;
        }
        u32::try_from(index).ok().filter(|&i| i < self.key_count && !digits.is_empty())
    }

    /// The client flags stored with key `index`.
    pub fn flags(&self, index: u32) -> u32 {
        splitmix(u64::from(index)) as u32
    }

    /// Append the value for (`index`, `generation`) of `len` bytes.
    pub fn write_value(&self, index: u32, generation: u32, len: u32, out: &mut Vec<u8>) {
        let (generation, head) = if len as usize >= 12 { (generation, GEN_DIGITS) } else { (0, 0) };
        for shift in (0..head).rev() {
            out.push(hex_digit(generation >> (shift * 4)));
        }
        let block = filler_block(index, generation, len);
        let mut at = head;
        while at < len as usize {
            let take = (len as usize - at).min(BLOCK - at % BLOCK);
            out.extend_from_slice(&block[at % BLOCK..at % BLOCK + take]);
            at += take;
        }
    }

    /// Check a value returned for key `index`.
    pub fn check_value(&self, index: u32, flags: u32, data: &[u8]) -> Result<(), Mismatch> {
        if !self.sizes.allows(data.len()) {
            return Err(Mismatch::Length);
        }
        if flags != self.flags(index) {
            return Err(Mismatch::Flags);
        }
        let (generation, head) = if data.len() >= 12 {
            let word = u64::from_le_bytes(data[..GEN_DIGITS].try_into().expect("8 bytes"));
            (eight_hex(word).ok_or(Mismatch::Bytes)?, GEN_DIGITS)
        } else {
            (0, 0)
        };
        // Word by word against the filler's words, in registers (comparing
        // with a block just written to memory stalled on reading it back).
        // `head` is 0 or 8, so the data's words line up with the block's.
        let words = filler_words(index, generation, data.len() as u32);
        let mut at = head;
        for chunk in data[head..].chunks(8) {
            let want = words[at % BLOCK / 8];
            let equal = match <[u8; 8]>::try_from(chunk) {
                Ok(word) => u64::from_le_bytes(word) == want,
                Err(_) => chunk.iter().zip(want.to_le_bytes()).all(|(&a, b)| a == b),
            };
            if !equal {
                return Err(Mismatch::Bytes);
            }
            at += 8;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ks(key_size: usize) -> Keyspace {
        Keyspace { key_size, key_count: 100_000, sizes: ValueSize::Range(1, 5000) }
    }

    #[test]
    fn keys_round_trip() {
        let k = ks(20);
        let mut out = Vec::new();
        k.write_key(42, &mut out);
        assert_eq!(out, b"sb:00000000000000042");
        assert_eq!(k.key_index(&out), Some(42));
        for (i, text) in [(0, &b"sb:00000000000000000"[..]), (4_294_967_295, b"sb:00000004294967295")] {
            out.clear();
            k.write_key(i, &mut out);
            assert_eq!(out, text);
        }
        let short = ks(5);
        out.clear();
        short.write_key(99_999, &mut out);
        assert_eq!((out.as_slice(), short.key_index(&out)), (&b"99999"[..], Some(99_999)));
        assert_eq!(k.key_index(b"sb:00000000000999999"), None);
        assert_eq!(k.key_index(b"sb:42"), None);
        assert_eq!(k.key_index(b"sb:0000000000000x042"), None);
        assert_eq!(k.key_index(b"sb:99999999999999999"), None);
        assert_eq!(k.key_index(b"sb:00000000000099999"), Some(99_999));
        assert_eq!(k.key_index(b"sb:00000000000100000"), None);
        // Each position of both eight-digit words, with the bytes either
        // side of the digits ('/' and ':').
        for at in 3..20 {
            for bad in [b'/', b':', b' ', 0xb0] {
                let mut key = *b"sb:00000000000012345";
                key[at] = bad;
                assert_eq!(k.key_index(&key), None, "{}", String::from_utf8_lossy(&key));
            }
        }
        for i in [0, 7, 12_345, 99_999, 10_000_000, 12_345_678] {
            let wide = Keyspace { key_count: u32::MAX, ..ks(20) };
            out.clear();
            wide.write_key(i, &mut out);
            assert_eq!(wide.key_index(&out), Some(i));
        }
    }

    #[test]
    fn letters_are_a_byte_times_26_over_256() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        for _ in 0..1000 {
            x = splitmix(x);
            let want: Vec<u8> = x.to_le_bytes().iter().map(|&b| b'a' + ((u16::from(b) * 26) >> 8) as u8).collect();
            assert_eq!(letters(x).to_le_bytes().to_vec(), want);
        }
        assert_eq!(letters(u64::MAX).to_le_bytes(), [b'z'; 8]);
        assert_eq!(letters(0).to_le_bytes(), [b'a'; 8]);
    }

    /// scripts/bench/flash.py builds values itself (its `value`): this is
    /// what it makes for key 7, 40 bytes.
    #[test]
    fn values_match_the_flash_scripts_copy() {
        let mut v = Vec::new();
        ks(20).write_value(7, 0, 40, &mut v);
        assert_eq!(v, b"00000000kbhedommlhrxsnkjnvcxoelypksmrdzz");
    }

    #[test]
    fn eight_hex_reads_lowercase_hex_only() {
        for n in [0u32, 1, 0xabcdef01, 0x12345678, u32::MAX, 0x9a9a_0f0f] {
            let text = format!("{n:08x}");
            assert_eq!(eight_hex(u64::from_le_bytes(text.as_bytes().try_into().unwrap())), Some(n), "{text}");
        }
        // Every byte value at every position, in an otherwise valid word.
        for at in 0..8 {
            for b in 0..=255u8 {
                let mut word = *b"0a1b2c3d";
                word[at] = b;
                let valid = b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
                let got = eight_hex(u64::from_le_bytes(word));
                assert_eq!(got.is_some(), valid, "byte {b:#x} at {at}");
                if valid {
                    assert_eq!(got, u32::from_str_radix(std::str::from_utf8(&word).unwrap(), 16).ok());
                }
            }
        }
    }

    #[test]
    fn long_keys() {
        let k = ks(40);
        let mut out = Vec::new();
        k.write_key(12, &mut out);
        assert_eq!(out.len(), 40);
        assert!(out.starts_with(b"sb:0000") && out.ends_with(b"00012"));
        assert_eq!(k.key_index(&out), Some(12));
    }

    #[test]
    fn values_validate_and_mismatches_are_caught() {
        let k = ks(16);
        for len in [1u32, 11, 12, 31, 32, 33, 100, 4999] {
            let mut v = Vec::new();
            k.write_value(7, 0xabcdef01, len, &mut v);
            assert_eq!(v.len(), len as usize);
            assert_eq!(k.check_value(7, k.flags(7), &v), Ok(()));
            assert_eq!(k.check_value(7, k.flags(8), &v), Err(Mismatch::Flags));
            if len >= 2 {
                assert_eq!(k.check_value(8, k.flags(8), &v), Err(Mismatch::Bytes), "len {len}");
                let mut torn = v.clone();
                *torn.last_mut().unwrap() ^= 1;
                assert_eq!(k.check_value(7, k.flags(7), &torn), Err(Mismatch::Bytes));
            }
        }
        assert_eq!(k.check_value(7, k.flags(7), &[]), Err(Mismatch::Length));
        let mut v = Vec::new();
        k.write_value(7, 1, 64, &mut v);
        assert!(v.starts_with(b"00000001"));
        assert!(v[8..].iter().all(u8::is_ascii_lowercase));
        let mut upper = v.clone();
        upper[..8].copy_from_slice(b"0000000A");
        assert_eq!(k.check_value(7, k.flags(7), &upper), Err(Mismatch::Bytes));
    }
}
