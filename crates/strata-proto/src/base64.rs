//! Base64 as memcached's meta `b` flag uses it (memcached's `base64.c`, from
//! hostapd): characters outside the alphabet are skipped, the count of
//! alphabet characters must be a non-zero multiple of four, and decoding stops
//! at the first padded block. Encoding is standard, padded, without newlines.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn decode_char(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// Decode into `out` (cleared first); false where memcached's decoder returns 0.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let count = src.iter().filter(|&&c| decode_char(c).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return false;
    }
    let mut block = [0u8; 4];
    let mut filled = 0;
    let mut pad = 0;
    for &c in src {
        let Some(v) = decode_char(c) else { continue };
        if c == b'=' {
            pad += 1;
        }
        block[filled] = v;
        filled += 1;
        if filled == 4 {
            out.push((block[0] << 2) | (block[1] >> 4));
            out.push((block[1] << 4) | (block[2] >> 2));
            out.push((block[2] << 6) | block[3]);
            filled = 0;
            if pad > 0 {
                match pad {
                    1 => out.truncate(out.len() - 1),
                    2 => out.truncate(out.len() - 2),
                    _ => {
                        out.clear();
                        return false;
                    }
                }
                break;
            }
        }
    }
    !out.is_empty()
}

/// Append the padded encoding of `src`.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    for chunk in src.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        out.push(ALPHABET[usize::from(b[0] >> 2)]);
        out.push(ALPHABET[usize::from(((b[0] & 0x03) << 4) | (b[1] >> 4))]);
        if chunk.len() > 1 {
            out.push(ALPHABET[usize::from(((b[1] & 0x0f) << 2) | (b[2] >> 6))]);
        } else {
            out.push(b'=');
        }
        if chunk.len() > 2 {
            out.push(ALPHABET[usize::from(b[2] & 0x3f)]);
        } else {
            out.push(b'=');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_quirks() {
        let mut out = Vec::new();
        assert!(decode(b"YWJj", &mut out));
        assert_eq!(out, b"abc");
        assert!(decode(b"YQ==", &mut out));
        assert_eq!(out, b"a");
        assert!(!decode(b"a", &mut out));
        assert!(!decode(b"", &mut out));
        assert!(decode(b"Y!WJj", &mut out), "non-alphabet characters are skipped");
        let mut enc = Vec::new();
        encode(b"ab", &mut enc);
        assert_eq!(enc, b"YWI=");
    }
}
