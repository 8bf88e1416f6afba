//! What of a connection's replies the `conn` oracle compares between the
//! split run and the canonical one (`conn.rs`), and why the rest is not:
//!
//! - `STAT` lines (text) and STAT responses (binary, opcode 0x10): their
//!   figures are the process's (rusage) or the engine's.
//! - A watcher's log lines (`ts=... gid=...`, `skipped=N`): their times and
//!   ids are the run's, and which of them a watcher has shown turns on
//!   when the harness last drove it (the split run drives every
//!   connection at its end, the canonical run only with its requests).
//! - The two Unix times of an `mj` reply's `JR` line (`journal/answer.rs`):
//!   the wall clock's, read when each run's journal began and answered.
//! - Access times, `me`'s `la=` and a meta reply's `l` flag, once
//!   `debugtime` moved a run's clock further than a `SegStore` item's
//!   access time follows (16 bits of seconds from its segment's
//!   creation, a deviation COMPATIBILITY.md lists): the `MapStore` keeps
//!   them exactly.
//! - Which items a key dump's lines name (`ITEM ...` of `stats
//!   cachedump`, `key=...` of `lru_crawler metadump`, `mg ...` of
//!   `mgdump`): each engine walks in its own order, so under a limit each
//!   lists other items (compared: how many lines), and the lines at all
//!   once another connection ran requests while the dump was in
//!   progress: a cachedump walks in refills across the worker's turns
//!   (`ops/dump.rs`), so it shows the other connection's writes that came
//!   before its cursor, and the canonical run, driving each request to its
//!   end, never interleaves them. (The harness drives a crawler dump to
//!   its end before other connections run, `conn.rs`.)

/// How a connection's replies are compared.
#[derive(Clone, Copy, Debug)]
pub struct Compare {
    /// The connection speaks the binary protocol.
    pub binary: bool,
    /// Access times are comparable (no clock moved far).
    pub access_times: bool,
    /// A key dump's lines are comparable by number (no other connection
    /// ran while a dump was in progress).
    pub dump_items: bool,
}

/// A key dump's line as compared.
const ANY_KEY: &[u8] = b"<key>\r\n";

/// `replies` as compared.
pub fn comparable(replies: &[u8], how: Compare) -> Vec<u8> {
    let mut out = Vec::with_capacity(replies.len());
    if how.binary {
        let mut rest = replies;
        while rest.len() >= 24 {
            let len = 24 + u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
            let packet = &rest[..len.min(rest.len())];
            if rest[1] != 0x10 {
                out.extend_from_slice(packet);
            }
            rest = &rest[packet.len()..];
        }
        out.extend_from_slice(rest);
        return out;
    }
    for line in replies.split_inclusive(|&b| b == b'\n') {
        if is_dump_line(line) {
            if how.dump_items {
                out.extend_from_slice(ANY_KEY);
            }
            continue;
        }
        if line.starts_with(b"STAT ") || is_log_line(line) {
            continue;
        }
        if line.starts_with(b"JR ") {
            mask_journal_times(line, &mut out);
        } else if !how.access_times && is_meta_reply(line) {
            mask_access_times(line, &mut out);
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// One item's line of a key dump (`ops/dump_lines.rs`); a metadump line,
/// like a watcher's, ends in a newline without a carriage return.
fn is_dump_line(line: &[u8]) -> bool {
    line.starts_with(b"ITEM ") || line.starts_with(b"mg ") || (line.starts_with(b"key=") && !line.ends_with(b"\r\n"))
}

/// A watcher's line (`ops/logger.rs`): `ts=...` or `skipped=N`, ended by a
/// newline without a carriage return, as no other reply line is (a
/// value's own bytes aside, dropped alike in both runs).
fn is_log_line(line: &[u8]) -> bool {
    (line.starts_with(b"ts=") || line.starts_with(b"skipped=")) && !line.ends_with(b"\r\n")
}

/// `JR <bytes> <count> <from_unix> <now_unix>`, the times written as `*`.
fn mask_journal_times(line: &[u8], out: &mut Vec<u8>) {
    rewrite_tokens(line, out, |i, token, out| out.extend_from_slice(if i >= 3 { b"*" } else { token }));
}

/// A meta command's reply line, whose tokens may carry an access time (a
/// value's own bytes may look like one too: masked alike in both runs).
fn is_meta_reply(line: &[u8]) -> bool {
    [&b"ME "[..], b"VA ", b"HD", b"NF", b"NS", b"EX"].iter().any(|code| line.starts_with(code))
}

/// `line` with `la=<n>` and `l<n>` tokens written as `la=*` and `l*`.
fn mask_access_times(line: &[u8], out: &mut Vec<u8>) {
    let digits = |rest: &[u8]| !rest.is_empty() && rest.iter().all(u8::is_ascii_digit);
    rewrite_tokens(line, out, |i, token, out| {
        if token.strip_prefix(b"la=").is_some_and(digits) {
            out.extend_from_slice(b"la=*");
        } else if i > 0 && token.strip_prefix(b"l").is_some_and(digits) {
            out.extend_from_slice(b"l*");
        } else {
            out.extend_from_slice(token);
        }
    });
}

/// `line` to `out` with each space-separated token (and its index) written
/// by `each`, the line's `\r\n` kept.
fn rewrite_tokens(line: &[u8], out: &mut Vec<u8>, mut each: impl FnMut(usize, &[u8], &mut Vec<u8>)) {
    let body = line.strip_suffix(b"\r\n").unwrap_or(line);
    for (i, token) in body.split(|&b| b == b' ').enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        each(i, token, out);
    }
    out.extend_from_slice(&line[body.len()..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: Compare = Compare { binary: false, access_times: true, dump_items: true };

    #[test]
    fn stat_and_watcher_lines_are_left_out() {
        let replies = b"STAT pid 1\r\nEND\r\nts=1.5 gid=2 type=item_get key=a\nskipped=3\nBUSY currently processing crawler request\r\nts=x\r\n";
        assert_eq!(comparable(replies, TEXT), b"END\r\nBUSY currently processing crawler request\r\nts=x\r\n");
    }

    #[test]
    fn a_journal_replys_wall_clock_times_are_masked() {
        let replies = b"JR 8 2 1795998679 1795998680\r\nabcdefgh\r\nJN too_old\r\n";
        assert_eq!(comparable(replies, TEXT), b"JR 8 2 * *\r\nabcdefgh\r\nJN too_old\r\n");
    }

    #[test]
    fn access_times_are_masked_only_once_the_clock_moved_far() {
        let replies = b"ME c exp=-1 la=2147450818 cas=6 fetch=no cls=1 size=62\r\nVA 2 l5 t-1 f0\r\nlo\r\nHD l12\r\nEN\r\n";
        assert_eq!(comparable(replies, TEXT), replies);
        let far = Compare { access_times: false, ..TEXT };
        assert_eq!(
            comparable(replies, far),
            b"ME c exp=-1 la=* cas=6 fetch=no cls=1 size=62\r\nVA 2 l* t-1 f0\r\nlo\r\nHD l*\r\nEN\r\n"
        );
    }

    #[test]
    fn dumped_keys_compare_by_number_and_not_at_all_once_a_walk_was_overlapped() {
        let replies = b"ITEM y [5 b; 1700000002 s]\r\nEND\r\nVALUE ITEM 0 1\r\nx\r\n";
        assert_eq!(comparable(replies, TEXT), b"<key>\r\nEND\r\nVALUE ITEM 0 1\r\nx\r\n");
        let meta = b"OK\r\nkey=a exp=-1 la=3 cas=1 fetch=no cls=1 size=63 flags=0\nkey=b exp=-1 la=3 cas=2 fetch=no cls=1 size=63 flags=0\nEND\r\n";
        assert_eq!(comparable(meta, TEXT), b"OK\r\n<key>\r\n<key>\r\nEND\r\n");
        assert_eq!(comparable(b"OK\r\nmg a\r\nmg AAE= b\r\nEN\r\n", TEXT), b"OK\r\n<key>\r\n<key>\r\nEN\r\n");
        // A value's own line, ended like any reply line, is left as it is.
        assert_eq!(comparable(b"VALUE v 0 5\r\nkey=a\r\nEND\r\n", TEXT), b"VALUE v 0 5\r\nkey=a\r\nEND\r\n");
        let (walked, other_order) = (b"ITEM k [1 b; 0 s]\r\nITEM login [12 b; 0 s]\r\nEND\r\n", b"ITEM login [12 b; 0 s]\r\nITEM k [1 b; 0 s]\r\nEND\r\n");
        assert_eq!(comparable(walked, TEXT), comparable(other_order, TEXT));
        assert_ne!(comparable(walked, TEXT), comparable(b"ITEM k [1 b; 0 s]\r\nEND\r\n", TEXT));
        let overlapped = Compare { dump_items: false, ..TEXT };
        assert_eq!(comparable(replies, overlapped), b"END\r\nVALUE ITEM 0 1\r\nx\r\n");
    }
}
