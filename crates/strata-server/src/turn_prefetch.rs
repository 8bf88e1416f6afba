//! Prefetch across connections: at pipeline depth 1 a loop turn finds one
//! request in each of many connections, and each `get` then waits for its
//! own index-slot and item cache misses in turn. Before running a batch of
//! ready connections, the worker peeks at each one's first request and,
//! when it is a text `get`/`gets` or a meta `mg`, hands its key to
//! `Engine::prefetch` (the same two-pass hint a multi-get uses,
//! `strata-store/src/seg/prefetch.rs`), so the batch's misses overlap.
//!
//! A peek is a hint, never a parse: it looks at the first line only, takes
//! the bytes after the verb up to a space, `\r` or `\n`, and nothing it
//! finds changes what the request does. A wrong or partial key costs one
//! useless prefetch.

use strata_store::Engine;

/// Connections whose first key is prefetched together.
pub const BATCH: usize = 16;

/// The key of a `get`/`gets`/`mg` at the front of `input`, if one is there.
pub fn first_get_key(input: &[u8]) -> Option<&[u8]> {
    let rest = input
        .strip_prefix(b"get ")
        .or_else(|| input.strip_prefix(b"gets "))
        .or_else(|| input.strip_prefix(b"mg "))?;
    let window = &rest[..rest.len().min(strata_proto::KEY_MAX_LENGTH + 1)];
    let end = memchr::memchr3(b' ', b'\r', b'\n', window)?;
    (end > 0).then(|| &rest[..end])
}

/// Prefetch the keys found (at most [`BATCH`]); nothing for fewer than 2.
pub fn prefetch<'a>(engine: &dyn Engine, inputs: impl Iterator<Item = &'a [u8]>) {
    let mut hashes = [0u64; BATCH];
    let mut n = 0;
    for key in inputs.filter_map(first_get_key).take(BATCH) {
        hashes[n] = strata_store::hash_key(key);
        n += 1;
    }
    if n > 1 {
        engine.prefetch(&hashes[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::first_get_key;

    #[test]
    fn peeks_only_at_a_leading_get_key() {
        assert_eq!(first_get_key(b"get foo\r\n"), Some(&b"foo"[..]));
        assert_eq!(first_get_key(b"gets foo bar\r\n"), Some(&b"foo"[..]));
        assert_eq!(first_get_key(b"mg foo v\r\n"), Some(&b"foo"[..]));
        assert_eq!(first_get_key(b"get foo"), None, "no end seen yet");
        assert_eq!(first_get_key(b"set foo 0 0 1\r\nx\r\n"), None);
        assert_eq!(first_get_key(b"get  foo\r\n"), None);
        assert_eq!(first_get_key(&[b'g'; 3]), None);
        let long = [b"get ".as_slice(), &[b'k'; 400], b"\r\n"].concat();
        assert_eq!(first_get_key(&long), None, "past the key limit: not scanned further");
    }
}
