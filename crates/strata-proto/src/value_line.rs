//! A text get's hit: `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
//!
//! A 48-key multi-get writes 48 of these, and byte-at-a-time appends cost
//! more than the store's lookup: each `Vec` append reloads and stores the
//! length (the vector is behind a reference) and checks the capacity, and
//! each number found its digit count with a logarithm. Here the line takes
//! one capacity check; the numbers' part (` <flags> <bytes>[ <cas>]\r\n`,
//! at most 65 bytes) is appended as a constant block of zeros, written in
//! place through one fixed-size view and cut back to its length, and the
//! usual small numbers (flags 0, lengths under 100) skip the division
//! loop. Safe code: the fixed-size view bounds every write.

use crate::number::push_digits;

/// Bytes of the numbers' part at most: two spaces, 10 + 20 digits, an
/// optional space and 20 digits, CRLF.
const NUMBERS_MAX: usize = 1 + 10 + 1 + 20 + 1 + 20 + 2;
const BLOCK: usize = 64 + 8;

/// Append a text get's hit for `key`: its line, then `value` and CRLF;
/// `cas` for `gets`/`gats`.
#[inline]
pub fn push_value(out: &mut Vec<u8>, key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) {
    const _: () = assert!(NUMBERS_MAX <= BLOCK);
    out.reserve(6 + key.len() + BLOCK + value.len() + 2);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    let at = out.len();
    out.extend_from_slice(&[0; BLOCK]);
    let block: &mut [u8; BLOCK] = (&mut out[at..]).try_into().expect("the block just appended");
    block[0] = b' ';
    let mut n = 1 + push_small(&mut block[1..], u64::from(flags));
    block[n] = b' ';
    n += 1;
    n += push_small(&mut block[n..], value.len() as u64);
    if let Some(cas) = cas {
        block[n] = b' ';
        n += 1;
        n += push_small(&mut block[n..], cas);
    }
    block[n..n + 2].copy_from_slice(b"\r\n");
    out.truncate(at + n + 2);
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Write `value`'s digits at the start of `dst` (at least 20 bytes); how
/// many. 0-99 without a division.
#[inline(always)]
fn push_small(dst: &mut [u8], value: u64) -> usize {
    if value < 10 {
        dst[0] = b'0' + value as u8;
        1
    } else if value < 100 {
        dst[..2].copy_from_slice(&crate::number::digit_pair(value as usize));
        2
    } else {
        push_digits(dst, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) -> Vec<u8> {
        let mut line = format!("VALUE {} {flags} {}", String::from_utf8_lossy(key), value.len()).into_bytes();
        if let Some(cas) = cas {
            line.extend_from_slice(format!(" {cas}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        line.extend_from_slice(value);
        line.extend_from_slice(b"\r\n");
        line
    }

    #[test]
    fn the_widest_line_and_the_edges_of_each_number() {
        let key = [b'k'; 250];
        for flags in [0, 9, 10, 99, 100, 12345, u32::MAX] {
            for len in [0, 1, 9, 10, 99, 100, 1000, 100_000] {
                for cas in [None, Some(0), Some(9), Some(99), Some(100), Some(u64::MAX)] {
                    let value = vec![b'v'; len];
                    let mut out = b"before".to_vec();
                    push_value(&mut out, &key, flags, &value, cas);
                    assert_eq!(&out[..6], b"before");
                    assert_eq!(out[6..], reference(&key, flags, &value, cas)[..], "flags {flags} len {len} cas {cas:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn matches_format(key in proptest::collection::vec(b'!'..=b'~', 1..=250), flags: u32,
                          value in proptest::collection::vec(any::<u8>(), 0..300), cas: Option<u64>) {
            let mut out = Vec::new();
            push_value(&mut out, &key, flags, &value, cas);
            prop_assert_eq!(out, reference(&key, flags, &value, cas));
        }
    }
}
