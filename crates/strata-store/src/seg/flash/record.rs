//! An item as written to flash: a fixed 32-byte header, the key, the value,
//! padded to 16 bytes (the unit of a flash offset).
//!
//! ```text
//!  0       4           8        16      20        24       28   29     30      32
//!  ┌───────┬───────────┬────────┬───────┬─────────┬────────┬────┬──────┬───────┬─────┬───────┬─────┐
//!  │ check │ value_len │ cas    │ flags │ exptime │ access │bits│keylen│ magic │ key │ value │ pad │
//!  │ u32   │ u32       │ u64    │ u32   │ u32     │ u32    │ u8 │ u8   │ u16   │     │       │     │
//!  └───────┴───────────┴────────┴───────┴─────────┴────────┴────┴──────┴───────┴─────┴───────┴─────┘
//! ```
//!
//! `check` is xxh3 of bytes 4.. (header, key, value), seeded with the tier's
//! secret, the page number and the page's full version: a record read from
//! a reclaimed and rewritten page, from another tier's file, or damaged on
//! the device fails it (`badcrc_from_extstore`), so no wrong value is ever
//! served. `bits` are the item's bits (item.rs: stale, token, fetched,
//! binary key); TTL and times are on the server's relative clock.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::RelTime;

pub const HEADER: usize = 32;
const MAGIC: u16 = 0x5346;

/// The fields of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub cas: u64,
    pub flags: u32,
    pub exptime: RelTime,
    pub access: RelTime,
    pub bits: u8,
}

/// A record's length on flash.
pub fn record_len(key_len: usize, value_len: usize) -> usize {
    (HEADER + key_len + value_len + 15) & !15
}

pub fn seed(secret: u64, page: u32, version: u32) -> u64 {
    secret ^ (u64::from(page) << 32 | u64::from(version)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Write a record into `out` (at least `record_len` long).
pub fn encode(out: &mut [u8], key: &[u8], value: &[u8], m: &Meta, seed: u64) -> usize {
    let len = record_len(key.len(), value.len());
    let out = &mut out[..len];
    out[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    out[8..16].copy_from_slice(&m.cas.to_le_bytes());
    out[16..20].copy_from_slice(&m.flags.to_le_bytes());
    out[20..24].copy_from_slice(&m.exptime.to_le_bytes());
    out[24..28].copy_from_slice(&m.access.to_le_bytes());
    out[28] = m.bits;
    out[29] = key.len() as u8;
    out[30..32].copy_from_slice(&MAGIC.to_le_bytes());
    out[HEADER..HEADER + key.len()].copy_from_slice(key);
    let v = HEADER + key.len();
    out[v..v + value.len()].copy_from_slice(value);
    out[v + value.len()..].fill(0);
    let check = xxh3_64_with_seed(&out[4..v + value.len()], seed) as u32;
    out[0..4].copy_from_slice(&check.to_le_bytes());
    len
}

/// A checked record: its key, value and fields.
pub struct Record<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: Meta,
    pub len: usize,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The length on flash of the record that seems to start `bytes` (its
/// header is whole and has the magic); None for padding or damage. Not
/// checked: `decode` does that.
pub fn peek_len(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < HEADER || u16::from_le_bytes([bytes[30], bytes[31]]) != MAGIC || bytes[29] == 0 {
        return None;
    }
    Some(record_len(usize::from(bytes[29]), u32_at(bytes, 4) as usize))
}

/// Decode and check the record at the start of `bytes`; None if it is cut
/// short or fails its check.
pub fn decode(bytes: &[u8], seed: u64) -> Option<Record<'_>> {
    let rec = parse(bytes)?;
    let end = HEADER + rec.key.len() + rec.value.len();
    (xxh3_64_with_seed(&bytes[4..end], seed) as u32 == u32_at(bytes, 0)).then_some(rec)
}

/// The record at the start of `bytes` as its header describes it, not
/// checked (for bytes [`decode`] has checked); None if it is cut short.
pub fn parse(bytes: &[u8]) -> Option<Record<'_>> {
    if bytes.len() < HEADER || u16::from_le_bytes([bytes[30], bytes[31]]) != MAGIC {
        return None;
    }
    let value_len = u32_at(bytes, 4) as usize;
    let key_len = usize::from(bytes[29]);
    let end = HEADER.checked_add(key_len)?.checked_add(value_len)?;
    if key_len == 0 || end > bytes.len() {
        return None;
    }
    let mut cas = [0u8; 8];
    cas.copy_from_slice(&bytes[8..16]);
    Some(Record {
        key: &bytes[HEADER..HEADER + key_len],
        value: &bytes[HEADER + key_len..end],
        meta: Meta {
            cas: u64::from_le_bytes(cas),
            flags: u32_at(bytes, 16),
            exptime: u32_at(bytes, 20),
            access: u32_at(bytes, 24),
            bits: bytes[28],
        },
        len: record_len(key_len, value_len),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_caught() {
        let m = Meta { cas: 77, flags: 5, exptime: 1000, access: 900, bits: 0x20 };
        let mut buf = vec![0u8; 256];
        let seed = seed(1, 2, 3);
        let len = encode(&mut buf, b"key", b"value!", &m, seed);
        assert_eq!(len, 48);
        let r = decode(&buf, seed).expect("valid");
        assert_eq!((r.key, r.value, r.meta, r.len), (&b"key"[..], &b"value!"[..], m, 48));
        assert!(decode(&buf, self::seed(1, 2, 4)).is_none(), "another page version");
        assert!(decode(&buf[..40], seed).is_none(), "cut short");
        for i in 0..41 {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad, seed).is_none(), "flipped byte {i}");
        }
    }
}
