//! Number parsing with the semantics of memcached's `safe_strto*` helpers.
//!
//! memcached parses tokens with C's `strtol`/`strtoull`: leading white space
//! and a sign are accepted, at least one digit is required, and the number
//! must end the token or be followed by white space. `strtoull` negates a
//! leading '-', so `safe_strtoull` refuses a '-' only when the result looks
//! negative as a signed number ("-0" is 0). Flags go through `strtoul` and are
//! then truncated to 32 bits (so 4294967296 becomes 0), exactly as memcached
//! 1.6 stores them. Matching these quirks keeps replies byte-identical.

/// C `isspace` in the "C" locale.
#[inline]
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Parse the digits of a C number: returns (negative, magnitude) or None on
/// no digits, overflow of u64, or trailing garbage.
fn parse_c_number(token: &[u8]) -> Option<(bool, u64, usize)> {
    let mut i = 0;
    while i < token.len() && is_c_space(token[i]) {
        i += 1;
    }
    let sign_at = i;
    let negative = token.get(i) == Some(&b'-');
    if matches!(token.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits_at = i;
    let mut value: u64 = 0;
    while i < token.len() && token[i].is_ascii_digit() {
        value = value.checked_mul(10)?.checked_add(u64::from(token[i] - b'0'))?;
        i += 1;
    }
    if i == digits_at {
        return None;
    }
    if i < token.len() && !is_c_space(token[i]) {
        return None;
    }
    Some((negative, value, sign_at))
}

/// `safe_strtoull`.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let (negative, magnitude, _) = parse_c_number(token)?;
    let value = if negative { magnitude.wrapping_neg() } else { magnitude };
    if negative && (value as i64) < 0 {
        return None;
    }
    Some(value)
}

/// `safe_strtoul` into a 32-bit flags field: parsed as unsigned long (64-bit),
/// then truncated.
pub fn parse_flags(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|v| v as u32)
}

/// `safe_strtol` into an `int32_t`.
pub fn parse_i32(token: &[u8]) -> Option<i32> {
    let (negative, magnitude, _) = parse_c_number(token)?;
    if magnitude > i64::MAX as u64 + u64::from(negative) {
        return None; // strtol's ERANGE
    }
    let value = if negative { (magnitude as i64).wrapping_neg() } else { magnitude as i64 };
    i32::try_from(value).ok()
}

/// memcached 1.6.45's strict token parsers (`mcmc_toktou32`, `mcmc_toktou64`,
/// `mcmc_tokto32`), which most tokens go through since its parser rewrite:
/// digits only (no white space, no '+'; the signed one takes a leading '-'),
/// at most 11 (32-bit) or 22 (64-bit) bytes, and no overflow. An empty token
/// is 0, as there; callers pass only non-empty tokens or flag arguments they
/// checked.
pub fn strict_u64(token: &[u8]) -> Option<u64> {
    if token.len() > 22 {
        return None;
    }
    token.iter().try_fold(0u64, |sum, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        sum.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// `mcmc_toktou32`: as [`strict_u64`], 32 bits.
pub fn strict_u32(token: &[u8]) -> Option<u32> {
    if token.len() > 11 {
        return None;
    }
    strict_u64(token).and_then(|v| u32::try_from(v).ok())
}

/// `mcmc_tokto32`: an optional '-', then digits ("-" alone is 0).
pub fn strict_i32(token: &[u8]) -> Option<i32> {
    if token.len() > 11 {
        return None;
    }
    let (negative, digits) = match token.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, token),
    };
    let magnitude = i64::try_from(strict_u64(digits)?).ok()?;
    i32::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// "00" to "99": two digits per division (a get's reply line carries its
/// flags, often ten digits, and its length).
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Append the decimal form of `value`. Always inlined: on the get path
/// (value lengths, flags) LLVM's choice flips with unrelated code in the
/// binary (rustls' arrival moved it out of line: +40 instructions a get).
#[inline(always)]
pub fn push_u64(out: &mut Vec<u8>, value: u64) {
    // Room for the longest number is appended as a constant, cut back to
    // the digit count, and the digits are written in place. Building them
    // in a stack buffer and appending that cost a stall per number: the
    // wide load of the buffer waited for the narrow stores that had just
    // filled it (no store-to-load forwarding), about 5% of a 48-key get's
    // CPU (perf, docs/bench/wire.md).
    let len = out.len();
    out.extend_from_slice(&[b'0'; 20]);
    let digits = push_digits(&mut out[len..], value);
    out.truncate(len + digits);
}

/// Write the decimal form of `value` at the start of `dst` (room for 20
/// digits); how many digits.
#[inline(always)]
pub fn push_digits(dst: &mut [u8], value: u64) -> usize {
    let digits = value.checked_ilog10().unwrap_or(0) as usize + 1;
    let dst = &mut dst[..digits];
    let mut i = digits;
    let mut v = value;
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        dst[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        dst[0..2].copy_from_slice(&DIGIT_PAIRS[v as usize * 2..v as usize * 2 + 2]);
    } else {
        dst[0] = b'0' + v as u8;
    }
    digits
}

/// The two digits of `n` (0-99).
#[inline(always)]
pub fn digit_pair(n: usize) -> [u8; 2] {
    [DIGIT_PAIRS[n * 2], DIGIT_PAIRS[n * 2 + 1]]
}

/// Append the decimal form of a signed value.
#[inline]
pub fn push_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    push_u64(out, value.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtoull_quirks() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b" 7"), Some(7));
        assert_eq!(parse_u64(b"7\t"), Some(7));
        assert_eq!(parse_u64(b"7x"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
    }

    #[test]
    fn flags_truncate_like_memcached() {
        assert_eq!(parse_flags(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_flags(b"4294967296"), Some(0));
        assert_eq!(parse_flags(b"-1"), None);
    }

    #[test]
    fn strtol_range() {
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"abc"), None);
    }

    #[test]
    fn strict_parsers_follow_mcmc() {
        assert_eq!(strict_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strict_u64(b"18446744073709551616"), None);
        assert_eq!(strict_u64(b"+5"), None);
        assert_eq!(strict_u64(b"-0"), None);
        assert_eq!(strict_u64(b" 5"), None);
        assert_eq!(strict_u64(b"007"), Some(7));
        assert_eq!(strict_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(strict_u32(b"4294967296"), None);
        assert_eq!(strict_i32(b"-1"), Some(-1));
        assert_eq!(strict_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(strict_i32(b"2147483648"), None);
        assert_eq!(strict_i32(b"+1"), None);
        assert_eq!(strict_i32(b"-"), Some(0));
    }

    #[test]
    fn decimal_output() {
        let mut out = Vec::new();
        push_u64(&mut out, 0);
        out.push(b' ');
        push_u64(&mut out, u64::MAX);
        out.push(b' ');
        push_i64(&mut out, -42);
        assert_eq!(out, b"0 18446744073709551615 -42");
        let mut v = 1u64;
        for _ in 0..20 {
            for n in [v - 1, v, v + 1, v.saturating_mul(7) / 3] {
                out.clear();
                push_u64(&mut out, n);
                assert_eq!(out, n.to_string().as_bytes());
            }
            v = v.saturating_mul(10);
        }
    }
}
