//! Damage to a file, described structurally: a list of operations whose
//! offsets are chosen relative to the file's real layout (its header, its
//! pages, its entry slots), so a fuzzer's few bytes reach the fields that
//! matter in a multi-MB image where plain byte mutation gets nowhere.
//!
//! ```text
//!  Op { file, at, kind }
//!  at:   Header(o)              o within the file's header
//!        Grain(g, n, o)         unit n of the file's g-th grain (page,
//!                               directory entry, index slot...), byte o in it
//!        Raw(x)                 x scaled to the file's length
//!        FromEnd(o)             o bytes before the end
//!  kind: FlipBit, Zero(len), Fill(len, byte), Set(width, extreme),
//!        Copy(from, len) (a unit of the file over another: a duplicated
//!        entry or record), Truncate (down to the unit boundary at `at`)
//! ```
//!
//! Lengths are capped (a zeroed run or a copy reaches at most 64 KiB), so an
//! input is cheap to apply however large the file.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use arbitrary::Arbitrary;

/// The shape of a file, for [`At`]: its header's length and the unit sizes
/// (strides) of its structures, e.g. `[4096, 16]` for pages and 16-byte
/// directory entries. `base` is where the grains start (past the header).
#[derive(Clone, Debug)]
pub struct Layout {
    pub header: u64,
    pub grains: Vec<Grain>,
}

/// A run of equal units: `stride` bytes each, the first at `base`.
#[derive(Clone, Copy, Debug)]
pub struct Grain {
    pub base: u64,
    pub stride: u64,
}

impl Layout {
    pub fn new(header: u64, grains: &[(u64, u64)]) -> Layout {
        Layout { header, grains: grains.iter().map(|&(base, stride)| Grain { base, stride: stride.max(1) }).collect() }
    }
}

/// Where an operation lands.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum At {
    Header(u16),
    Grain(u8, u32, u32),
    Raw(u32),
    FromEnd(u16),
}

/// A value a field is set to.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Extreme {
    Zero,
    One,
    Max,
    /// The maximum of the signed type (a length that overflows when added to).
    SignedMax,
    /// The file's length plus a little: a length or offset past the end.
    PastEnd(u8),
    Any(u64),
}

#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Kind {
    FlipBit(u8),
    Zero(u16),
    Fill(u16, u8),
    /// Width 1, 2, 4 or 8 bytes (from the low two bits), little-endian.
    Set(u8, Extreme),
    /// `len` bytes from `from` copied over `at`.
    Copy(At, u16),
    Truncate,
}

#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct Op {
    /// Which of the damaged kind's files (modulo their count).
    pub file: u8,
    pub at: At,
    pub kind: Kind,
}

/// Longest run an operation writes.
const MAX_RUN: u64 = 64 << 10;

/// The byte offset `at` names in a file of `len` bytes (below `len`; 0 for
/// an empty file), and the stride of the unit it is in (1 for bytes).
pub fn offset(at: At, layout: &Layout, len: u64) -> (u64, u64) {
    if len == 0 {
        return (0, 1);
    }
    match at {
        At::Header(o) => (u64::from(o) % layout.header.clamp(1, len), 1),
        At::Grain(g, n, o) if !layout.grains.is_empty() => {
            let grain = layout.grains[g as usize % layout.grains.len()];
            let base = grain.base.min(len - 1);
            let units = ((len - base) / grain.stride).max(1);
            let unit = base + (u64::from(n) % units) * grain.stride;
            ((unit + u64::from(o) % grain.stride).min(len - 1), grain.stride)
        }
        At::Grain(_, _, o) | At::Raw(o) => ((u64::from(o) as u128 * len as u128 >> 32) as u64, 1),
        At::FromEnd(o) => (len - 1 - (u64::from(o) % len), 1),
    }
}

/// Apply `op` to the file at `path` (its shape `layout`).
pub fn apply(path: &Path, layout: &Layout, op: &Op) -> io::Result<()> {
    let f = OpenOptions::new().read(true).write(true).open(path)?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let (at, stride) = offset(op.at, layout, len);
    let run = |n: u16| (u64::from(n) + 1).min(MAX_RUN).min(len - at) as usize;
    match op.kind {
        Kind::FlipBit(bit) => {
            let mut b = [0u8];
            f.read_exact_at(&mut b, at)?;
            f.write_all_at(&[b[0] ^ (1 << (bit % 8))], at)
        }
        Kind::Zero(n) => f.write_all_at(&vec![0; run(n)], at),
        Kind::Fill(n, byte) => f.write_all_at(&vec![byte; run(n)], at),
        Kind::Set(width, value) => {
            let width = 1usize << (width % 4);
            let v = match value {
                Extreme::Zero => 0,
                Extreme::One => 1,
                Extreme::Max => u64::MAX,
                Extreme::SignedMax => u64::MAX >> (65 - 8 * width as u32),
                Extreme::PastEnd(k) => len + u64::from(k),
                Extreme::Any(x) => x,
            };
            let bytes = v.to_le_bytes();
            let n = width.min((len - at) as usize);
            f.write_all_at(&bytes[..n], at)
        }
        Kind::Copy(from, n) => {
            let (from, _) = offset(from, layout, len);
            let n = run(n).min((len - from) as usize);
            let mut buf = vec![0; n];
            f.read_exact_at(&mut buf, from)?;
            f.write_all_at(&buf, at)
        }
        Kind::Truncate => f.set_len(at - at % stride),
    }
}
