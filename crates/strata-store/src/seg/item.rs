//! The item layout inside a segment: a few bytes of header, the key, the value.
//!
//! Items are packed back to back from the start of a segment, with no
//! alignment, so a segment can be walked from offset 0 by decoding each header.
//!
//! ```text
//!  0        1        2            2+v
//!  ┌────────┬────────┬────────────┬─────────────┬──────────┬──────────┬──────────┬─────┬───────┐
//!  │ bits   │ keylen │ valuelen   │ cas         │ access   │ check    │ flags    │ exptime  │ key │ value │
//!  │ u8     │ u8     │ LEB128 1-5 │ 0/2/3/8 B   │ i16      │ u32 (-e) │ u32 if F │ u32 if E │     │       │
//!  └────────┴────────┴────────────┴─────────────┴──────────┴──────────┴──────────┴──────────┴─────┴───────┘
//!  bits: F=0x01 flags present, E=0x02 exptime present, 0x0C cas width code
//!        (00 none, 01 i16 delta, 10 i24 delta, 11 u64 absolute), 0x10 fetched,
//!        0x20 stale, 0x40 recache token sent, 0x80 key stored as binary (meta b)
//! ```
//!
//! The header of a 20-byte key and 32-byte value with no flags and no TTL is
//! 7 bytes (memcached's is 56): one bits byte, one key length, one value
//! length, a 2-byte CAS delta and a 2-byte access delta. CAS and last access
//! are stored relative to the segment's `cas_base` and `create_time`, which
//! is why a CAS or access time that no longer fits its field makes the store
//! rewrite the item (CAS) or clamp the time (access, see [`access_delta`]).
//!
//! With a memory file (`-e`) every item also carries a 32-bit check: a hash,
//! seeded with the file's secret and the segment's sequence number, of every
//! byte but the access time, the check itself and the `FETCHED` and
//! `TOKEN_SENT` bits (the fields a read rewrites). Recovery serves an item
//! only if its check matches; an unlinked item has its check inverted, so a
//! deleted or replaced value never comes back. Key length 0 (no key is empty)
//! marks the end of a segment's items.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::RelTime;

pub const HAS_FLAGS: u8 = 0x01;
pub const HAS_EXPTIME: u8 = 0x02;
const CAS_SHIFT: u8 = 2;
const CAS_MASK: u8 = 0x0C;
pub const FETCHED: u8 = 0x10;
pub const STALE: u8 = 0x20;
pub const TOKEN_SENT: u8 = 0x40;
pub const KEY_BINARY: u8 = 0x80;
/// Bits a read may change without rewriting the check.
const VOLATILE_BITS: u8 = FETCHED | TOKEN_SENT;
/// Bytes of the end-of-items marker written after the last item (`-e`).
pub const END_MARK: usize = 2;

/// How an item's CAS is stored, relative to its segment's `cas_base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasField {
    None,
    Delta16(i16),
    /// 24-bit signed delta: a segment's items reach a few hundred thousand
    /// CAS numbers past its base when 32 shards share the counter.
    Delta24(i32),
    Absolute(u64),
}

const I24_MIN: i64 = -(1 << 23);
const I24_MAX: i64 = (1 << 23) - 1;

fn write_i24(out: &mut [u8], d: i32) {
    out[..3].copy_from_slice(&d.to_le_bytes()[..3]);
}

fn read_i24(b: &[u8]) -> i32 {
    // Sign-extend from bit 23.
    (i32::from_le_bytes([b[0], b[1], b[2], 0]) << 8) >> 8
}

impl CasField {
    pub fn encode(cas: u64, base: u64) -> CasField {
        if cas == 0 {
            return CasField::None;
        }
        let delta = cas.wrapping_sub(base) as i64;
        if let Ok(d) = i16::try_from(delta) {
            CasField::Delta16(d)
        } else if (I24_MIN..=I24_MAX).contains(&delta) {
            CasField::Delta24(delta as i32)
        } else {
            CasField::Absolute(cas)
        }
    }

    fn code(self) -> u8 {
        match self {
            CasField::None => 0,
            CasField::Delta16(_) => 1,
            CasField::Delta24(_) => 2,
            CasField::Absolute(_) => 3,
        }
    }

    fn width(code: u8) -> usize {
        [0, 2, 3, 8][usize::from(code)]
    }
}

/// Last access relative to the segment's creation, in seconds, clamped to
/// i16. Clamping only matters for an item read more than nine hours after
/// its segment was made (recorded as nine hours: `l` reads older, and a later
/// delayed flush may drop it early) or moved by eviction more than nine hours
/// after its last access (recorded as later; eviction drops flushed items
/// before moving them, so no flush decision depends on it).
pub fn access_delta(access: RelTime, create_time: RelTime) -> i16 {
    (i64::from(access) - i64::from(create_time)).clamp(i64::from(i16::MIN), i64::from(i16::MAX)) as i16
}

/// The fields of a new item.
#[derive(Clone, Copy, Debug)]
pub struct NewItem {
    pub bits: u8,
    pub key_len: usize,
    pub value_len: usize,
    pub cas: CasField,
    pub access: i16,
    pub flags: u32,
    pub exptime: RelTime,
    /// Carry a check field (memory file).
    pub checked: bool,
}

impl NewItem {
    pub fn encoded_len(&self) -> usize {
        self.header_len() + self.key_len + self.value_len
    }

    fn header_len(&self) -> usize {
        2 + leb128_len(self.value_len)
            + CasField::width(self.cas.code())
            + 2
            + if self.checked { 4 } else { 0 }
            + if self.flags != 0 { 4 } else { 0 }
            + if self.exptime != 0 { 4 } else { 0 }
    }

    /// Write the header and the key into `out` (exactly `encoded_len` bytes);
    /// returns where the value starts. The caller writes the value.
    pub fn write_header(&self, key: &[u8], out: &mut [u8]) -> usize {
        debug_assert_eq!(out.len(), self.encoded_len());
        debug_assert!(!key.is_empty() && key.len() <= 255 && key.len() == self.key_len);
        let mut bits = self.bits & (FETCHED | STALE | TOKEN_SENT | KEY_BINARY);
        bits |= self.cas.code() << CAS_SHIFT;
        if self.flags != 0 {
            bits |= HAS_FLAGS;
        }
        if self.exptime != 0 {
            bits |= HAS_EXPTIME;
        }
        out[0] = bits;
        out[1] = key.len() as u8;
        let mut at = 2 + write_leb128(self.value_len, &mut out[2..]);
        match self.cas {
            CasField::None => {}
            CasField::Delta16(d) => at += put(&mut out[at..], &d.to_le_bytes()),
            CasField::Delta24(d) => {
                write_i24(&mut out[at..], d);
                at += 3;
            }
            CasField::Absolute(c) => at += put(&mut out[at..], &c.to_le_bytes()),
        }
        at += put(&mut out[at..], &self.access.to_le_bytes());
        if self.checked {
            // Zero until the value is in place (Header::write_check).
            at += put(&mut out[at..], &[0; 4]);
        }
        if self.flags != 0 {
            at += put(&mut out[at..], &self.flags.to_le_bytes());
        }
        if self.exptime != 0 {
            at += put(&mut out[at..], &self.exptime.to_le_bytes());
        }
        at += put(&mut out[at..], key);
        at
    }
}

fn put(out: &mut [u8], bytes: &[u8]) -> usize {
    out[..bytes.len()].copy_from_slice(bytes);
    bytes.len()
}

/// A decoded header: field values and where each mutable field lives,
/// relative to the item's first byte.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub bits: u8,
    pub key_len: usize,
    pub value_len: usize,
    cas_at: usize,
    cas_code: u8,
    access_at: usize,
    check_at: Option<usize>,
    pub flags: u32,
    exptime_at: Option<usize>,
    pub key_at: usize,
}

/// What recovery finds at an item's check field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Live,
    /// Unlinked before the stop (check inverted).
    Dead,
    /// Neither: torn, half-written or damaged.
    Bad,
}

impl Header {
    /// Decode the header at the start of `item`. The bytes were written by
    /// [`NewItem::write_header`]; a walk stops at the segment's write offset.
    pub fn decode(item: &[u8], checked: bool) -> Header {
        Header::try_decode(item, checked).expect("item header inside its segment")
    }

    /// Decode a header from bytes that may be anything (a memory file being
    /// recovered): None unless every field, the key and the value lie inside
    /// `item`. The end-of-items marker (key length 0) is None too.
    pub fn try_decode(item: &[u8], checked: bool) -> Option<Header> {
        Header::try_decode_within(item, checked, item.len())
    }

    /// As [`Header::try_decode`], from the first bytes of an item whose
    /// header lies in `item` and which ends within `limit` bytes of its
    /// start (a read without the lock copies an item's first bytes, then
    /// the rest: seg/read.rs). Always inlined: returned through memory,
    /// the header's narrow stores stalled the caller's wide copy of it
    /// (no store-to-load forwarding; perf, docs/bench/wire.md).
    #[inline(always)]
    pub fn try_decode_within(item: &[u8], checked: bool, limit: usize) -> Option<Header> {
        let bits = *item.first()?;
        let key_len = usize::from(*item.get(1)?);
        if key_len == 0 {
            return None;
        }
        let (value_len, n) = read_leb128(item.get(2..)?)?;
        let cas_at = 2 + n;
        let cas_code = (bits & CAS_MASK) >> CAS_SHIFT;
        let access_at = cas_at + CasField::width(cas_code);
        let mut at = access_at + 2;
        let check_at = checked.then(|| {
            at += 4;
            at - 4
        });
        let mut flags = 0;
        if bits & HAS_FLAGS != 0 {
            flags = u32::from_le_bytes(item.get(at..at + 4)?.try_into().ok()?);
            at += 4;
        }
        let exptime_at = if bits & HAS_EXPTIME != 0 {
            at += 4;
            Some(at - 4)
        } else {
            None
        };
        let h = Header { bits, key_len, value_len, cas_at, cas_code, access_at, check_at, flags, exptime_at, key_at: at };
        (at <= item.len() && h.total_len() <= limit).then_some(h)
    }

    /// The check of this item's bytes, seeded with `seed`.
    fn checksum(&self, item: &[u8], seed: u64) -> u32 {
        let check_at = self.check_at.expect("item has a check field");
        // Two one-shot hashes (the header's lengths and CAS, then flags,
        // TTL, key and value seeded with the first): a streaming hasher
        // derives a fresh secret per seed, several times the cost.
        let head = xxh3_64_with_seed(&item[1..self.access_at], seed ^ u64::from(item[0] & !VOLATILE_BITS));
        xxh3_64_with_seed(&item[check_at + 4..self.total_len()], head) as u32
    }

    fn stored_check(&self, item: &[u8]) -> u32 {
        let at = self.check_at.expect("item has a check field");
        u32::from_le_bytes(item[at..at + 4].try_into().expect("4 bytes"))
    }

    /// Write the check of the item as it is now (after any change but to
    /// its access time or volatile bits). No-op without a check field.
    pub fn write_check(&self, item: &mut [u8], seed: u64) {
        if let Some(at) = self.check_at {
            let sum = self.checksum(item, seed);
            item[at..at + 4].copy_from_slice(&sum.to_le_bytes());
        }
    }

    /// Mark an unlinked item dead for recovery (its check inverted).
    pub fn mark_dead(&self, item: &mut [u8], seed: u64) {
        if let Some(at) = self.check_at {
            let sum = !self.checksum(item, seed);
            item[at..at + 4].copy_from_slice(&sum.to_le_bytes());
        }
    }

    pub fn check(&self, item: &[u8], seed: u64) -> Check {
        let (stored, sum) = (self.stored_check(item), self.checksum(item, seed));
        if stored == sum {
            Check::Live
        } else if stored == !sum {
            Check::Dead
        } else {
            Check::Bad
        }
    }

    #[inline]
    pub fn value_at(&self) -> usize {
        self.key_at + self.key_len
    }

    #[inline]
    pub fn total_len(&self) -> usize {
        self.value_at() + self.value_len
    }

    #[inline]
    pub fn key<'a>(&self, item: &'a [u8]) -> &'a [u8] {
        &item[self.key_at..self.key_at + self.key_len]
    }

    #[inline]
    pub fn value<'a>(&self, item: &'a [u8]) -> &'a [u8] {
        &item[self.value_at()..self.total_len()]
    }

    #[inline]
    pub fn cas(&self, item: &[u8], base: u64) -> u64 {
        let at = self.cas_at;
        match self.cas_code {
            0 => 0,
            1 => base.wrapping_add(i16::from_le_bytes([item[at], item[at + 1]]) as u64),
            2 => base.wrapping_add(read_i24(&item[at..]) as i64 as u64),
            _ => u64::from_le_bytes(item[at..at + 8].try_into().expect("8 bytes")),
        }
    }

    /// Whether `cas` can be written into this item's CAS field.
    pub fn cas_fits(&self, cas: u64, base: u64) -> bool {
        match (self.cas_code, CasField::encode(cas, base)) {
            (0, CasField::None) | (1, CasField::Delta16(_)) | (2, CasField::Delta16(_) | CasField::Delta24(_)) => true,
            (3, f) => f != CasField::None,
            _ => false,
        }
    }

    /// Whether `exptime` can be written into this item (it has a TTL field,
    /// or the new TTL is 0).
    pub fn exptime_fits(&self, exptime: RelTime) -> bool {
        self.exptime_at.is_some() || exptime == 0
    }

    /// Overwrite the CAS in place if it fits the item's field; false if the
    /// item must be rewritten to hold it.
    pub fn set_cas(&self, item: &mut [u8], cas: u64, base: u64) -> bool {
        let at = self.cas_at;
        match (self.cas_code, CasField::encode(cas, base)) {
            (0, CasField::None) => true,
            (1, CasField::Delta16(d)) => {
                item[at..at + 2].copy_from_slice(&d.to_le_bytes());
                true
            }
            (2, CasField::Delta16(d)) => {
                write_i24(&mut item[at..], i32::from(d));
                true
            }
            (2, CasField::Delta24(d)) => {
                write_i24(&mut item[at..], d);
                true
            }
            (3, f) if f != CasField::None => {
                item[at..at + 8].copy_from_slice(&cas.to_le_bytes());
                true
            }
            _ => false,
        }
    }

    #[inline]
    pub fn access(&self, item: &[u8], create_time: RelTime) -> RelTime {
        let d = i16::from_le_bytes([item[self.access_at], item[self.access_at + 1]]);
        (i64::from(create_time) + i64::from(d)).max(0) as RelTime
    }

    pub fn set_access(&self, item: &mut [u8], access: RelTime, create_time: RelTime) {
        let d = access_delta(access, create_time);
        item[self.access_at..self.access_at + 2].copy_from_slice(&d.to_le_bytes());
    }

    #[inline]
    pub fn exptime(&self, item: &[u8]) -> RelTime {
        match self.exptime_at {
            Some(at) => u32::from_le_bytes(item[at..at + 4].try_into().expect("4 bytes")),
            None => 0,
        }
    }

    /// Overwrite the TTL in place; false if the item has no TTL field and a
    /// non-zero TTL must be written (the item must be rewritten).
    pub fn set_exptime(&self, item: &mut [u8], exptime: RelTime) -> bool {
        match self.exptime_at {
            Some(at) => {
                item[at..at + 4].copy_from_slice(&exptime.to_le_bytes());
                true
            }
            None => exptime == 0,
        }
    }

    pub fn set_bits(&self, item: &mut [u8], set: u8, clear: u8) {
        item[0] = (item[0] | set) & !clear;
    }
}

fn leb128_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

fn write_leb128(mut n: usize, out: &mut [u8]) -> usize {
    let mut i = 0;
    while n >= 0x80 {
        out[i] = (n as u8 & 0x7f) | 0x80;
        n >>= 7;
        i += 1;
    }
    out[i] = n as u8;
    i + 1
}

/// A value length and its encoded size; None past 5 bytes (more than 2^35,
/// which no writer produces) or past the end of `bytes`.
fn read_leb128(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut n = 0usize;
    let mut shift = 0;
    for (i, &b) in bytes.iter().enumerate().take(5) {
        n |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((n, i + 1));
        }
        shift += 7;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(value_len: usize, cas: u64, base: u64, flags: u32, exptime: RelTime) {
        roundtrip_with(value_len, cas, base, flags, exptime, false);
        roundtrip_with(value_len, cas, base, flags, exptime, true);
    }

    fn roundtrip_with(value_len: usize, cas: u64, base: u64, flags: u32, exptime: RelTime, checked: bool) {
        let key = b"some-key";
        let new = NewItem {
            bits: FETCHED | KEY_BINARY,
            key_len: key.len(),
            value_len,
            cas: CasField::encode(cas, base),
            access: access_delta(130, 100),
            flags,
            exptime,
            checked,
        };
        let mut buf = vec![0u8; new.encoded_len()];
        let value_at = new.write_header(key, &mut buf);
        let h = Header::decode(&buf, checked);
        assert_eq!(h.value_at(), value_at);
        assert_eq!(h.total_len(), buf.len());
        assert_eq!(h.key(&buf), key);
        assert_eq!(h.value_len, value_len);
        assert_eq!(h.cas(&buf, base), cas);
        assert_eq!(h.access(&buf, 100), 130);
        assert_eq!(h.flags, flags);
        assert_eq!(h.exptime(&buf), exptime);
        assert_eq!(h.bits & (FETCHED | KEY_BINARY | STALE), FETCHED | KEY_BINARY);
    }

    #[test]
    fn headers_roundtrip() {
        roundtrip(0, 0, 0, 0, 0);
        roundtrip(32, 1005, 1000, 0, 0);
        roundtrip(200, 990, 1000, 7, 12345);
        let base = 1 << 30;
        roundtrip(200, base - (1 << 23), base, 7, 12345);
        roundtrip(200, base - (1 << 23) - 1, base, 7, 12345);
        roundtrip(200, base + (1 << 23) - 1, base, 7, 12345);
        roundtrip(200, base + (1 << 23), base, 7, 12345);
        roundtrip(1 << 20, 1 << 40, 5, u32::MAX, 1);
        roundtrip((1 << 30) + 3, 100_000, 1, 1, 0);
    }

    #[test]
    fn a_small_item_has_a_seven_byte_header() {
        let new = NewItem {
            bits: 0,
            key_len: 20,
            value_len: 32,
            cas: CasField::encode(1_000_123, 1_000_000),
            access: 0,
            flags: 0,
            exptime: 0,
            checked: false,
        };
        assert_eq!(new.encoded_len(), 7 + 20 + 32);
        assert_eq!(NewItem { checked: true, ..new }.encoded_len(), 11 + 20 + 32);
    }

    #[test]
    fn cas_is_rewritten_in_place_only_when_it_fits() {
        let new = NewItem {
            bits: 0,
            key_len: 1,
            value_len: 0,
            cas: CasField::encode(10, 5),
            access: 0,
            flags: 0,
            exptime: 0,
            checked: false,
        };
        let mut buf = vec![0u8; new.encoded_len()];
        new.write_header(b"k", &mut buf);
        let h = Header::decode(&buf, false);
        assert!(h.set_cas(&mut buf, 300, 5));
        assert_eq!(h.cas(&buf, 5), 300);
        assert!(!h.set_cas(&mut buf, 1 << 20, 5));
        assert!(!h.set_cas(&mut buf, 0, 5));
        assert!(!h.set_exptime(&mut buf, 10));
        assert!(h.set_exptime(&mut buf, 0));
    }

    #[test]
    fn access_clamps_to_the_field() {
        assert_eq!(access_delta(100_000, 10), i16::MAX);
        assert_eq!(access_delta(10, 100_000), i16::MIN);
    }

    #[test]
    fn the_check_covers_all_but_access_and_volatile_bits() {
        let new = NewItem {
            bits: 0,
            key_len: 3,
            value_len: 5,
            cas: CasField::encode(7, 1),
            access: 0,
            flags: 9,
            exptime: 100,
            checked: true,
        };
        let mut buf = vec![0u8; new.encoded_len()];
        let at = new.write_header(b"key", &mut buf);
        buf[at..].copy_from_slice(b"value");
        let h = Header::decode(&buf, true);
        assert_eq!(h.check(&buf, 42), Check::Bad, "zero until written");
        h.write_check(&mut buf, 42);
        assert_eq!(h.check(&buf, 42), Check::Live);
        assert_eq!(h.check(&buf, 43), Check::Bad, "another segment's seed");
        h.set_access(&mut buf, 500, 0);
        h.set_bits(&mut buf, FETCHED | TOKEN_SENT, 0);
        assert_eq!(h.check(&buf, 42), Check::Live);
        for i in 0..buf.len() {
            if (h.access_at..h.access_at + 2).contains(&i) {
                continue;
            }
            for bit in 0..8 {
                let mut flipped = buf.clone();
                flipped[i] ^= 1 << bit;
                if bit == 4 || bit == 6 {
                    if i == 0 {
                        continue; // FETCHED, TOKEN_SENT
                    }
                }
                let same = Header::try_decode(&flipped, true).map(|f| f.check(&flipped, 42));
                assert_ne!(same, Some(Check::Live), "byte {i} bit {bit}");
            }
        }
        h.mark_dead(&mut buf, 42);
        assert_eq!(h.check(&buf, 42), Check::Dead);
    }

    #[test]
    fn decoding_garbage_never_panics_or_overruns() {
        let mut state = 0x9e3779b97f4a7c15u64;
        for len in 0..64 {
            for _ in 0..2000 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    })
                    .collect();
                for checked in [false, true] {
                    if let Some(h) = Header::try_decode(&bytes, checked) {
                        assert!(h.total_len() <= bytes.len());
                        if checked {
                            h.check(&bytes, 1);
                        }
                    }
                }
            }
        }
        assert!(Header::try_decode(&[0, 0, 0], false).is_none(), "end marker");
    }
}
