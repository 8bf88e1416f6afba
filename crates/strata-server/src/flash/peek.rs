//! The keys of the plain reads queued behind a request that parked on a
//! flash read: a pipeline of single-key gets (libmemcached's binary
//! multi-get is a `GETKQ` per key and a `NOOP`; a meta client's is an `mg`
//! per key and an `mn`) would otherwise read its keys from flash one after
//! another, each request waiting for the one before. `Service::read_ahead`
//! queues their reads with the parked one's.
//!
//! A peek is a hint, never a parse that counts: it looks only at whole
//! requests already buffered, stops at the first that is not a plain read
//! (a storage command's data block, anything else), and nothing it finds
//! changes what a request does. Each request still runs as usual and
//! finds its key's finished read; a key read for nothing (the request was
//! malformed, or it is in RAM by then) costs a read that is dropped.

/// Visit the keys of the whole plain-read requests at the front of
/// `input` (text `get`/`gets` and meta `mg` without a base64 key; binary
/// `GET`, `GETQ`, `GETK`, `GETKQ`, passing `NOOP`s), in order, until
/// `each` answers false.
pub fn later_read_keys(input: &[u8], binary: bool, each: &mut dyn FnMut(&[u8]) -> bool) {
    if binary {
        binary_keys(input, each);
    } else {
        text_keys(input, each);
    }
}

fn text_keys(mut input: &[u8], each: &mut dyn FnMut(&[u8]) -> bool) {
    while let Some(end) = input.iter().take(strata_proto::text::READ_BUFFER_SIZE).position(|&b| b == b'\n') {
        let line = input[..end].strip_suffix(b"\r").unwrap_or(&input[..end]);
        input = &input[end + 1..];
        let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
        match tokens.next() {
            Some(b"get" | b"gets") => {
                for key in tokens {
                    if !each(key) {
                        return;
                    }
                }
            }
            Some(b"mg") => {
                let Some(key) = tokens.next() else { return };
                // `b`: the key is base64, not the bytes on the line.
                if tokens.any(|flag| flag == b"b") {
                    return;
                }
                if !each(key) {
                    return;
                }
            }
            Some(b"mn") => {}
            _ => return,
        }
    }
}

/// memcached's binary header: magic, opcode, key length (2), extras
/// length, data type, vbucket (2), total body length (4), ...
const HEADER: usize = 24;
const REQUEST: u8 = 0x80;
const GET: u8 = 0x00;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;

fn binary_keys(mut input: &[u8], each: &mut dyn FnMut(&[u8]) -> bool) {
    while input.len() >= HEADER && input[0] == REQUEST {
        let key_len = usize::from(u16::from_be_bytes([input[2], input[3]]));
        let extras = usize::from(input[4]);
        let body = u32::from_be_bytes([input[8], input[9], input[10], input[11]]) as usize;
        let Some(request) = input.get(..HEADER.saturating_add(body)) else { return };
        match input[1] {
            GET | GETQ | GETK | GETKQ => {
                let Some(key) = request.get(HEADER + extras..HEADER + extras + key_len) else { return };
                if key.is_empty() || !each(key) {
                    return;
                }
            }
            NOOP => {}
            _ => return,
        }
        input = &input[request.len()..];
    }
}

#[cfg(test)]
mod tests {
    use super::later_read_keys;

    fn keys(input: &[u8], binary: bool) -> Vec<String> {
        let mut found = Vec::new();
        later_read_keys(input, binary, &mut |k| {
            found.push(String::from_utf8_lossy(k).into_owned());
            true
        });
        found
    }

    fn binary_get(opcode: u8, key: &[u8]) -> Vec<u8> {
        let mut r = vec![0x80, opcode, 0, key.len() as u8, 0, 0, 0, 0];
        r.extend_from_slice(&(key.len() as u32).to_be_bytes());
        r.extend_from_slice(&[0; 12]);
        r.extend_from_slice(key);
        r
    }

    #[test]
    fn text_and_meta_reads_until_anything_else() {
        assert_eq!(keys(b"get a b\r\ngets c\r\nmg d v f\r\nmn\r\nmg e\r\n", false), ["a", "b", "c", "d", "e"]);
        assert_eq!(keys(b"get a\r\nset x 0 0 1\r\nget b\r\n", false), ["a"], "a storage command ends the peek");
        assert_eq!(keys(b"get a\r\nget b", false), ["a"], "a partial line is not read");
        assert_eq!(keys(b"mg YQ== b v\r\nget c\r\n", false), Vec::<String>::new(), "a base64 key ends it");
        assert_eq!(keys(b"get  a\nget b\r\n", false), ["a", "b"]);
    }

    #[test]
    fn binary_gets_and_noops() {
        let mut input = binary_get(0x0d, b"k1");
        input.extend(binary_get(0x0c, b"k2"));
        input.extend(binary_get(0x0a, b""));
        input.extend(binary_get(0x00, b"k3"));
        input.extend(binary_get(0x01, b"set"));
        input.extend(binary_get(0x00, b"k4"));
        assert_eq!(keys(&input, true), ["k1", "k2", "k3"]);
        let whole = binary_get(0x09, b"k5");
        assert_eq!(keys(&whole[..whole.len() - 1], true), Vec::<String>::new(), "a partial request is not read");
        assert_eq!(keys(b"\x81\x00", true), Vec::<String>::new());
    }

    #[test]
    fn a_visitor_that_has_enough_stops_it() {
        let mut n = 0;
        later_read_keys(b"get a b c d\r\n", false, &mut |_| {
            n += 1;
            n < 2
        });
        assert_eq!(n, 2);
    }
}
