//! The small store's block: one set, or one block of a partition's log,
//! `ext_set_size` bytes (4 KiB by default), read whole by one device read.
//! Records are packed back to back with a header of a few bytes each; the
//! block has one check for all of them.
//!
//! ```text
//!  0       4       6       8       10      12          20           24
//!  ┌───────┬───────┬───────┬───────┬───────┬───────────┬────────────┬───────────────┬───────┐
//!  │ check │ magic │ count │ used  │ kind  │ base cas  │ base time  │ records ...   │ zeros │
//!  │ u32   │ u16   │ u16   │ u16   │ u16   │ u64       │ u32        │               │       │
//!  └───────┴───────┴───────┴───────┴───────┴───────────┴────────────┴───────────────┴───────┘
//!  record: bits u8 │ key len u8 │ value len varint │ flags varint (F) │ exptime varint (E) │
//!          cas: zigzag varint from base cas │ access: zigzag varint from base time │ key │ value
//!  bits:   0x01 F flags present, 0x02 E exptime present, 0x0C rrpv (0..3),
//!          0x10 fetched, 0x20 stale, 0x40 token sent, 0x80 binary key (item.rs's)
//! ```
//!
//! - A 20-byte key with a 64-byte value, no flags and no TTL, takes 84 + 7
//!   bytes or so (memcached's item: 48 + key + value + CAS), so a 4 KiB set
//!   holds 44 of them.
//! - `check` is xxh3 of bytes 4..used, seeded with the block's place on the
//!   device (the tier's secret, its page and the page's version, its block
//!   number in the page): a block read from a reclaimed page, from the
//!   wrong place, or damaged fails it, and none of its records is served.
//! - The bases are the first record's CAS and access time; the others are
//!   stored as signed differences (items of one block are written within
//!   seconds of each other, and their CAS numbers are close).
//! - `rrpv` is the record's re-reference prediction (RRIP, as Kangaroo's
//!   RRIParoo): 0 soon, 3 distant; a set's rewrite evicts the highest first.
//! - A block in RAM (a partition's open log block) is built in place by
//!   [`Builder`] and sealed (its check written) when it goes to the device.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::RelTime;

pub const HEADER: usize = 24;
const MAGIC: u16 = 0x5342; // "SB"
const HAS_FLAGS: u8 = 0x01;
const HAS_EXPTIME: u8 = 0x02;
const RRPV_SHIFT: u8 = 2;
const RRPV_MASK: u8 = 0x0C;
/// The item bits a record keeps (item.rs: fetched, stale, token, binary key).
pub const ITEM_BITS: u8 = 0xF0;
/// The most distant re-reference prediction.
pub const RRPV_MAX: u8 = 3;

/// What a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One set of a partition's extent.
    Set = 1,
    /// One block of a partition's log.
    Log = 2,
}

/// A record's fields besides its key and value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub cas: u64,
    pub flags: u32,
    pub exptime: RelTime,
    pub access: RelTime,
    /// Item bits (`ITEM_BITS` of item.rs's bits byte).
    pub bits: u8,
    pub rrpv: u8,
}

fn varint_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

fn put_varint(out: &mut [u8], mut n: u64) -> usize {
    let mut i = 0;
    while n >= 0x80 {
        out[i] = (n as u8 & 0x7f) | 0x80;
        n >>= 7;
        i += 1;
    }
    out[i] = n as u8;
    i + 1
}

/// A varint at the start of `b`: its value and length (None if cut short
/// or longer than 10 bytes).
fn get_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut n = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((n, i + 1));
        }
    }
    None
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    (z >> 1) as i64 ^ -((z & 1) as i64)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The seed of partition `part`'s open block's check (`Builder::push_open`).
pub fn open_seed(secret: u64, part: usize) -> u64 {
    secret ^ 0x4f50_454e_0000_0000 ^ (part as u64).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The open block's chain (`Builder::push_open`) after the record `rec`.
fn link(chain: u32, rec: &[u8], seed: u64) -> u32 {
    xxh3_64_with_seed(rec, seed ^ u64::from(chain)) as u32
}

/// The open block's header's part of its check (`Builder::push_open`).
fn head_check(buf: &[u8], seed: u64) -> u32 {
    (xxh3_64_with_seed(&buf[4..HEADER], seed) >> 32) as u32
}

/// The seed of the block at `block` of a page whose records' seed (the
/// tier's secret, the page and its version) is `page_seed`.
pub fn seed(page_seed: u64, block: u32) -> u64 {
    page_seed ^ u64::from(block).wrapping_add(1).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// Bytes a record takes in a block whose bases are `base_cas` and `base_time`.
pub fn record_len(key_len: usize, value_len: usize, m: &Meta, base_cas: u64, base_time: RelTime) -> usize {
    2 + varint_len(value_len as u64)
        + if m.flags != 0 { varint_len(u64::from(m.flags)) } else { 0 }
        + if m.exptime != 0 { varint_len(u64::from(m.exptime)) } else { 0 }
        + varint_len(zigzag(m.cas.wrapping_sub(base_cas) as i64))
        + varint_len(zigzag(i64::from(m.access) - i64::from(base_time)))
        + key_len
        + value_len
}

/// Bytes of a record in a block it is the first of (its own bases): the
/// smallest it takes anywhere.
pub fn first_record_len(key_len: usize, value_len: usize, m: &Meta) -> usize {
    record_len(key_len, value_len, m, m.cas, m.access)
}

/// Fills a block in place: a fresh one, or a partly filled one kept in
/// memory (a partition's open log block, resumed after a restart).
pub struct Builder<'a> {
    buf: &'a mut [u8],
    used: usize,
    count: usize,
    /// The most records this block may take (a set's hit bits: `summary.rs`).
    max_records: usize,
}

impl<'a> Builder<'a> {
    /// Start an empty block of `kind` in `buf` (zeroed past the header as
    /// records are added; the tail is zeroed at `seal`).
    pub fn new(buf: &'a mut [u8], kind: Kind, max_records: usize) -> Builder<'a> {
        buf[..HEADER].fill(0);
        buf[4..6].copy_from_slice(&MAGIC.to_le_bytes());
        buf[10..12].copy_from_slice(&(kind as u16).to_le_bytes());
        buf[6..8].copy_from_slice(&0u16.to_le_bytes());
        buf[8..10].copy_from_slice(&(HEADER as u16).to_le_bytes());
        Builder { buf, used: HEADER, count: 0, max_records }
    }

    /// Go on filling an open block an earlier process left in its
    /// directory; None if its header is not one or its check (seeded with
    /// `seed`: `open_seed`, see [`Builder::push_open`]) fails (a damaged
    /// file: the caller drops the block).
    pub fn resume(buf: &'a mut [u8], max_records: usize, seed: u64) -> Option<Builder<'a>> {
        if buf.len() < HEADER || u16_at(buf, 4) != MAGIC {
            return None;
        }
        let (count, used) = (usize::from(u16_at(buf, 6)), usize::from(u16_at(buf, 8)));
        if used < HEADER || used > buf.len() {
            return None;
        }
        // Every record must parse to exactly `used`, and the chain over
        // them must give the check (`push_open`).
        let view = View::unchecked(buf)?;
        if view.records().count() != count || view.records().last().map_or(HEADER, |r| r.end) != used {
            return None;
        }
        let chain = view.records().fold(0, |chain, r| link(chain, &buf[r.end - r.len..r.end], seed));
        if count > 0 && chain ^ head_check(buf, seed) != u32_at(buf, 0) {
            return None;
        }
        Some(Builder { buf, used, count, max_records })
    }

    /// Go on filling a block this process started and kept (its header is
    /// trusted: only `Builder` wrote it since `new` or `resume`).
    pub fn resume_fast(buf: &'a mut [u8], max_records: usize) -> Builder<'a> {
        let (count, used) = (usize::from(u16_at(buf, 6)), usize::from(u16_at(buf, 8)));
        debug_assert!(u16_at(buf, 4) == MAGIC && used >= HEADER && used <= buf.len());
        Builder { buf, used, count, max_records }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn used(&self) -> usize {
        self.used
    }

    fn bases(&self) -> (u64, RelTime) {
        (u64_at(self.buf, 12), u32_at(self.buf, 20))
    }

    /// Whether a record of these lengths and fields would fit.
    pub fn fits(&self, key_len: usize, value_len: usize, m: &Meta) -> bool {
        if self.count >= self.max_records {
            return false;
        }
        let len = if self.count == 0 {
            first_record_len(key_len, value_len, m)
        } else {
            let (cas, time) = self.bases();
            record_len(key_len, value_len, m, cas, time)
        };
        self.used + len <= self.buf.len()
    }

    /// Append a record; its index in the block, or None if it does not fit.
    pub fn push(&mut self, key: &[u8], value: &[u8], m: &Meta) -> Option<usize> {
        if key.is_empty() || key.len() > 255 || !self.fits(key.len(), value.len(), m) {
            return None;
        }
        if self.count == 0 {
            self.buf[12..20].copy_from_slice(&m.cas.to_le_bytes());
            self.buf[20..24].copy_from_slice(&m.access.to_le_bytes());
        }
        let (base_cas, base_time) = self.bases();
        let out = &mut self.buf[self.used..];
        let mut bits = (m.bits & ITEM_BITS) | (m.rrpv.min(RRPV_MAX) << RRPV_SHIFT);
        if m.flags != 0 {
            bits |= HAS_FLAGS;
        }
        if m.exptime != 0 {
            bits |= HAS_EXPTIME;
        }
        out[0] = bits;
        out[1] = key.len() as u8;
        let mut at = 2 + put_varint(&mut out[2..], value.len() as u64);
        if m.flags != 0 {
            at += put_varint(&mut out[at..], u64::from(m.flags));
        }
        if m.exptime != 0 {
            at += put_varint(&mut out[at..], u64::from(m.exptime));
        }
        at += put_varint(&mut out[at..], zigzag(m.cas.wrapping_sub(base_cas) as i64));
        at += put_varint(&mut out[at..], zigzag(i64::from(m.access) - i64::from(base_time)));
        out[at..at + key.len()].copy_from_slice(key);
        at += key.len();
        out[at..at + value.len()].copy_from_slice(value);
        at += value.len();
        self.used += at;
        self.count += 1;
        self.buf[6..8].copy_from_slice(&(self.count as u16).to_le_bytes());
        self.buf[8..10].copy_from_slice(&(self.used as u16).to_le_bytes());
        Some(self.count - 1)
    }

    /// `push` to an open block (a partition's, in its directory file) and
    /// keep its check, seeded with `open_seed`, so a restart serves no
    /// record of a block damaged in the file ([`Builder::resume`]). The
    /// check is a chain over the records, each linked to the one before,
    /// with the header's hash mixed in: a push hashes its own record and the
    /// header, not the whole block. `seal` replaces it with the block's
    /// place on the device.
    pub fn push_open(&mut self, key: &[u8], value: &[u8], m: &Meta, seed: u64) -> Option<usize> {
        let (from, chain) = (self.used, if self.count == 0 { 0 } else { u32_at(self.buf, 0) ^ head_check(self.buf, seed) });
        let index = self.push(key, value, m)?;
        let check = link(chain, &self.buf[from..self.used], seed) ^ head_check(self.buf, seed);
        self.buf[0..4].copy_from_slice(&check.to_le_bytes());
        Some(index)
    }

    /// Zero the unused tail and write the check for a block placed where
    /// `seed` says (`seed()`).
    pub fn seal(&mut self, seed: u64) {
        let used = self.used;
        self.buf[used..].fill(0);
        let check = xxh3_64_with_seed(&self.buf[4..used], seed) as u32;
        self.buf[0..4].copy_from_slice(&check.to_le_bytes());
    }
}

/// A block's records, read (checked or not).
#[derive(Clone, Copy)]
pub struct View<'a> {
    bytes: &'a [u8],
    count: usize,
    base_cas: u64,
    base_time: RelTime,
}

/// One record of a [`View`].
#[derive(Clone, Copy, Debug)]
pub struct Rec<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: Meta,
    /// Its position in the block (0 = first).
    pub index: usize,
    /// Where it ends in the block.
    pub end: usize,
    /// Bytes it takes in the block.
    pub len: usize,
}

impl<'a> View<'a> {
    /// The block at the start of `bytes`, if its header, its extent and
    /// its check (seeded with `seed`) hold.
    pub fn open(bytes: &'a [u8], seed: u64, kind: Kind) -> Option<View<'a>> {
        let view = View::unchecked(bytes)?;
        if u16_at(bytes, 10) != kind as u16 || xxh3_64_with_seed(&view.bytes[4..], seed) as u32 != u32_at(bytes, 0) {
            return None;
        }
        Some(view)
    }

    /// A block's records without the check (a block still in memory).
    pub fn unchecked(bytes: &'a [u8]) -> Option<View<'a>> {
        if bytes.len() < HEADER || u16_at(bytes, 4) != MAGIC {
            return None;
        }
        let used = usize::from(u16_at(bytes, 8));
        if used < HEADER || used > bytes.len() {
            return None;
        }
        Some(View { bytes: &bytes[..used], count: usize::from(u16_at(bytes, 6)), base_cas: u64_at(bytes, 12), base_time: u32_at(bytes, 20) })
    }

    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Every record, in order; stops early at a record that does not parse
    /// (only possible in an unchecked block).
    pub fn records(&self) -> Records<'a> {
        Records { view: *self, at: HEADER, index: 0 }
    }

    /// The record for `key`, if the block holds one.
    pub fn find(&self, key: &[u8]) -> Option<Rec<'a>> {
        self.records().find(|r| r.key == key)
    }
}

/// Iterator over a block's records.
pub struct Records<'a> {
    view: View<'a>,
    at: usize,
    index: usize,
}

impl<'a> Records<'a> {
    fn parse(&self) -> Option<Rec<'a>> {
        let b = self.view.bytes;
        let rest = b.get(self.at..)?;
        let bits = *rest.first()?;
        let key_len = usize::from(*rest.get(1)?);
        let mut at = 2;
        let (value_len, n) = get_varint(rest.get(at..)?)?;
        at += n;
        let mut field = |present: bool| -> Option<u64> {
            if !present {
                return Some(0);
            }
            let (v, n) = get_varint(rest.get(at..)?)?;
            at += n;
            Some(v)
        };
        let flags = u32::try_from(field(bits & HAS_FLAGS != 0)?).ok()?;
        let exptime = u32::try_from(field(bits & HAS_EXPTIME != 0)?).ok()?;
        let cas = self.view.base_cas.wrapping_add(unzigzag(field(true)?) as u64);
        let access = i64::from(self.view.base_time) + unzigzag(field(true)?);
        let access = RelTime::try_from(access).ok()?;
        let value_len = usize::try_from(value_len).ok()?;
        let end = at.checked_add(key_len)?.checked_add(value_len)?;
        if key_len == 0 || end > rest.len() {
            return None;
        }
        Some(Rec {
            key: &rest[at..at + key_len],
            value: &rest[at + key_len..end],
            meta: Meta { cas, flags, exptime, access, bits: bits & ITEM_BITS, rrpv: (bits & RRPV_MASK) >> RRPV_SHIFT },
            index: self.index,
            end: self.at + end,
            len: end,
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Rec<'a>;

    fn next(&mut self) -> Option<Rec<'a>> {
        if self.index >= self.view.count {
            return None;
        }
        let rec = self.parse()?;
        self.at = rec.end;
        self.index += 1;
        Some(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(n: u64) -> Meta {
        Meta {
            cas: 1_000_000 + n * 37,
            flags: if n % 3 == 0 { 0 } else { n as u32 * 1000 },
            exptime: if n % 4 == 0 { 0 } else { 5000 + n as u32 },
            access: 7000 - n as u32 % 50,
            bits: if n % 5 == 0 { 0x10 } else { 0x80 },
            rrpv: (n % 4) as u8,
        }
    }

    #[test]
    fn records_round_trip_and_fill_the_block() {
        let mut buf = vec![0xAAu8; 4096];
        let mut b = Builder::new(&mut buf, Kind::Set, 64);
        let mut pushed = Vec::new();
        for n in 0..100u64 {
            let key = format!("key:{n:016}");
            let value = vec![n as u8; 64];
            match b.push(key.as_bytes(), &value, &meta(n)) {
                Some(i) => pushed.push((i, key, value, meta(n))),
                None => break,
            }
        }
        assert!(pushed.len() >= 40, "a 4 KiB set takes {} records of 20 + 64 bytes", pushed.len());
        let seed = seed(42, 7);
        b.seal(seed);
        let view = View::open(&buf, seed, Kind::Set).expect("sealed block opens");
        assert_eq!(view.count(), pushed.len());
        for ((i, key, value, m), rec) in pushed.iter().zip(view.records()) {
            assert_eq!((rec.index, rec.key, rec.value, rec.meta), (*i, key.as_bytes(), &value[..], *m));
        }
        assert_eq!(view.find(b"key:0000000000000003").map(|r| r.index), Some(3));
        assert!(view.find(b"key:none").is_none());
        assert!(View::open(&buf, seed ^ 1, Kind::Set).is_none(), "another place");
        assert!(View::open(&buf, seed, Kind::Log).is_none(), "another kind");
        for at in [0, 5, 30, 100, 2000] {
            let mut bad = buf.clone();
            bad[at] ^= 0x04;
            assert!(View::open(&bad, seed, Kind::Set).is_none(), "flipped byte {at}");
        }
    }

    #[test]
    fn a_block_resumes_where_it_was_left_and_refuses_garbage() {
        let seed = open_seed(0x1234, 3);
        let mut buf = vec![0u8; 4096];
        let mut b = Builder::new(&mut buf, Kind::Log, 255);
        for n in 0..10u64 {
            b.push_open(format!("k{n}").as_bytes(), b"v", &meta(n), seed).expect("fits");
        }
        assert!(Builder::resume(&mut buf.clone(), 255, open_seed(0x1234, 4)).is_none(), "another partition's seed");
        let mut b = Builder::resume(&mut buf, 255, seed).expect("a block in progress");
        assert_eq!((b.count(), b.push_open(b"k10", b"v", &meta(10), seed)), (10, Some(10)));
        let used = b.used();
        assert_eq!(View::unchecked(&buf).expect("view").records().count(), 11);
        let mut cut = buf.clone();
        cut[8..10].copy_from_slice(&((used - 1) as u16).to_le_bytes());
        assert!(Builder::resume(&mut cut, 255, seed).is_none(), "used cuts the last record");
        let mut zeros = vec![0u8; 4096];
        assert!(Builder::resume(&mut zeros, 255, seed).is_none());
        // A byte of a value changed in the file: the records still parse,
        // the check does not hold (a restart served the damaged value).
        let mut flipped = buf.clone();
        flipped[used - 1] ^= 0x01;
        assert!(View::unchecked(&flipped).expect("parses").records().count() == 11);
        assert!(Builder::resume(&mut flipped, 255, seed).is_none(), "a damaged value");
        let mut base = buf.clone();
        base[13] ^= 0x01;
        assert!(Builder::resume(&mut base, 255, seed).is_none(), "a damaged base CAS");
        let mut swapped = vec![0u8; 4096];
        let mut b = Builder::new(&mut swapped, Kind::Log, 255);
        for n in [1u64, 0, 2] {
            b.push_open(format!("k{n}").as_bytes(), b"v", &meta(0), seed).expect("fits");
        }
        let mut b = Builder::new(&mut buf, Kind::Log, 255);
        for n in [0u64, 1, 2] {
            b.push_open(format!("k{n}").as_bytes(), b"v", &meta(0), seed).expect("fits");
        }
        let (at, len) = (HEADER, swapped.len());
        let mut moved = buf.clone();
        moved[at..len].copy_from_slice(&swapped[at..len]);
        assert!(Builder::resume(&mut buf, 255, seed).is_some());
        assert!(Builder::resume(&mut moved, 255, seed).is_none(), "records in another order");
    }

    #[test]
    fn extremes_survive() {
        let mut buf = vec![0u8; 8192];
        let mut b = Builder::new(&mut buf, Kind::Set, 128);
        let far = Meta { cas: u64::MAX, flags: u32::MAX, exptime: u32::MAX, access: u32::MAX, bits: 0xF0, rrpv: 3 };
        let near = Meta { cas: 0, flags: 1, exptime: 1, access: 0, bits: 0, rrpv: 0 };
        b.push(&[7u8; 255], &[1u8; 1000], &far).expect("fits");
        b.push(b"k", b"", &near).expect("fits");
        b.push(b"j", b"x", &far).expect("fits");
        assert!(b.push(b"", b"x", &near).is_none(), "empty key");
        b.seal(1);
        let recs: Vec<_> = View::open(&buf, 1, Kind::Set).expect("view").records().collect();
        assert_eq!(recs.iter().map(|r| r.meta).collect::<Vec<_>>(), vec![far, near, far]);
        assert_eq!((recs[0].key.len(), recs[0].value.len(), recs[1].value.len()), (255, 1000, 0));
    }
}
