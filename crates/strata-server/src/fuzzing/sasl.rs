//! `sasl`: logins before a client may do anything, against a fixed
//! credentials table: binary SASL PLAIN (`-S`) and the text protocol's
//! `-Y` login (`set <key> <flags> <exptime> <n>` carrying `user password`),
//! and the credentials file's own parser.
//!
//! Input: a mode byte, then (mode 0) the bytes of a `-Y` text client,
//! (mode 1) those of an `-S` binary client, (otherwise) a credentials
//! file. Checked: a connection becomes authenticated only by a request
//! that, decoded independently here, carries a user and password of the
//! table; a binary PLAIN request with a right pair always authenticates;
//! every line of a credentials file that parses is the password its user
//! checks with.

use std::path::Path;

use strata_proto::binary::{Header, HEADER_LEN};

use crate::auth::Credentials;
use crate::conn::{Conn, Protocol};
use crate::service::Service;
use crate::Settings;

/// The table every exchange logs in against (`user:password` lines).
pub const TABLE: &[u8] = b"alice:secret\nbob:hunter2:x\n\n:empty-user\ncarol:\r\n";

/// Whether `user`/`password` is a pair of [`TABLE`], read here without
/// the code under test.
fn in_table(user: &[u8], password: &[u8]) -> bool {
    TABLE.split(|&b| b == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.iter().position(|&b| b == b':').is_some_and(|c| &line[..c] == user && &line[c + 1..] == password)
    })
}

pub fn sasl(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode {
        0 => _ = exchange(rest, false),
        1 => _ = exchange(rest, true),
        _ => credentials_file(rest),
    }
}

fn table() -> Credentials {
    Credentials::from_bytes(Path::new("fuzz-table"), TABLE).expect("the fixed table parses")
}

/// One client's bytes, one request at a time, to a server with `-Y`
/// (text) or `-S` (binary); whether it ends authenticated.
fn exchange(stream: &[u8], binary: bool) -> bool {
    let (text_auth, sasl_auth) = if binary { (None, Some(table())) } else { (Some(table()), None) };
    let shared = super::server(Settings::default(), text_auth, sasl_auth);
    let mut svc = Service::new(&shared, 0);
    let mut conn = Conn::new(true, None);
    conn.protocol = if binary { Protocol::Binary } else { Protocol::Text };
    conn.input.extend_from_slice(stream);
    let mut replies = Vec::new();
    loop {
        // The request about to run: what follows a block being discarded.
        let before = conn.input.filled().to_vec();
        let front = &before[conn.swallowing().min(before.len())..];
        let was_unauthenticated = conn.unauthenticated;
        let progress = conn.process(&mut svc, 1);
        replies.extend_from_slice(conn.out.pending());
        let n = conn.out.pending_len();
        conn.consume_output(n);
        if was_unauthenticated {
            let login = if binary { binary_login(front) } else { text_login(front) };
            if !conn.unauthenticated {
                assert!(login == Some(true), "authenticated by {:?}", String::from_utf8_lossy(&front[..front.len().min(200)]));
            } else if binary && login == Some(true) {
                panic!("a right PLAIN login was refused: {front:?}");
            }
        }
        let stuck = conn.input.filled() == &before[..] && conn.swallowing() == 0;
        if stuck || !matches!(progress, crate::conn::Progress::Yield | crate::conn::Progress::NeedInput) || conn.input.is_empty() {
            break;
        }
    }
    !conn.unauthenticated
}

/// The binary request at the front: `Some(true)` for a whole SASL_AUTH
/// (0x21) with mechanism PLAIN and `authzid NUL user NUL password` of the
/// table, `Some(false)` for any other whole request, `None` if cut short.
fn binary_login(front: &[u8]) -> Option<bool> {
    let h = Header::parse(front)?;
    let (ext, key, body) = (usize::from(h.extras_len), usize::from(h.key_len), h.body_len as usize);
    let payload = front.get(HEADER_LEN..HEADER_LEN + body)?;
    if h.magic != 0x80 || h.opcode != 0x21 || ext != 0 || key > body || &payload[..key] != b"PLAIN" {
        return Some(false);
    }
    let message = &payload[key..];
    let first = message.iter().position(|&b| b == 0);
    let pair = first.and_then(|a| {
        let rest = &message[a + 1..];
        rest.iter().position(|&b| b == 0).map(|b| (&rest[..b], &rest[b + 1..]))
    });
    Some(pair.is_some_and(|(user, password)| in_table(user, password)))
}

/// The text request at the front: `Some(true)` for `set <key> <flags>
/// <exptime> <n>[ noreply]\r\n` followed by `n` bytes `user password` of
/// the table and `\r\n`.
fn text_login(front: &[u8]) -> Option<bool> {
    let end = front.iter().position(|&b| b == b'\n')?;
    // The line ends at its first NUL, as memcached's C strings do
    // (strata_proto::text).
    let line = front[..end].strip_suffix(b"\r").unwrap_or(&front[..end]);
    let line = line.split(|&b| b == 0).next().unwrap_or_default();
    let words: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
    let (Some(&b"set"), Some(n)) = (words.first().map(|w| &w[..]).as_ref(), words.get(4)) else { return Some(false) };
    let Some(n) = std::str::from_utf8(n).ok().and_then(|n| n.parse::<usize>().ok()) else { return Some(false) };
    let start = end + 1;
    let token = front.get(start..start.checked_add(n)?)?;
    let space = token.iter().position(|&b| b == b' ');
    Some(space.is_some_and(|s| in_table(&token[..s], &token[s + 1..])))
}

/// A credentials file: parsed or refused, never a panic; every pair of a
/// parsed file checks, and one password off does not.
fn credentials_file(file: &[u8]) {
    let Ok(creds) = Credentials::from_bytes(Path::new("fuzz-file"), file) else { return };
    let mut last = std::collections::HashMap::new();
    for line in file.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(c) = line.iter().position(|&b| b == b':') {
            last.insert(&line[..c], &line[c + 1..]);
        }
    }
    for (user, password) in last {
        assert!(creds.check(user, password), "{user:?} does not check with its password");
        assert!(!creds.check(user, &[password, b"x"].concat()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sasl_request(opcode: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let body_len = (key.len() + value.len()) as u32;
        Header { magic: 0x80, opcode, key_len: key.len() as u16, extras_len: 0, data_type: 0, vbucket: 0, body_len, opaque: 1, cas: 0 }.write(&mut out);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    /// The seeds of `fuzz/corpus/sasl`: PLAIN as libmemcached sends it
    /// (LIST_MECHS, then AUTH `\0user\0password`), and pymemcache's `-Y`
    /// login (`STRATA_WRITE_CORPUS=1` rewrites the files).
    fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let get = {
            let mut r = Vec::new();
            Header { magic: 0x80, opcode: 0x00, key_len: 1, extras_len: 0, data_type: 0, vbucket: 0, body_len: 1, opaque: 2, cas: 0 }.write(&mut r);
            r.push(b'k');
            r
        };
        vec![
            ("plain-ok", [vec![1], sasl_request(0x20, b"", b""), sasl_request(0x21, b"PLAIN", b"\0alice\0secret"), get.clone()].concat()),
            ("plain-authzid", [vec![1], sasl_request(0x21, b"PLAIN", b"alice\0bob\0hunter2:x")].concat()),
            ("plain-wrong-then-step", [vec![1], sasl_request(0x21, b"PLAIN", b"\0alice\0secreT"), sasl_request(0x22, b"PLAIN", b"\0alice\0secret")].concat()),
            ("plain-other-mech", [vec![1], sasl_request(0x21, b"CRAM-MD5", b"\0alice\0secret")].concat()),
            ("unauthenticated-get", [vec![1], get].concat()),
            ("text-login", [&[0][..], b"set login 0 0 12\r\nalice secret\r\nget login\r\n"].concat()),
            ("text-bad-format", [&[0][..], b"set x 0 0 5\r\nalice\r\nget x\r\nset x 0 0 11\r\nbob hunter2\r\n"].concat()),
            ("text-noreply-empty-user", [&[0][..], b"set x 0 0 11 noreply\r\n empty-user\r\n"].concat()),
            ("text-empty-password", [&[0][..], b"set y 1 2 5\r\ncarol\r\nset y 1 2 6\r\ncarol \r\n"].concat()),
            ("file", [&[2][..], b"alice:secret\r\n\r\nbob:a:b\nmallory:\n"].concat()),
        ]
    }

    #[test]
    fn write_corpus() {
        super::super::tests::write_seeds("sasl", &seeds());
    }

    /// The seeds that log in do, the others do not: the oracle above is
    /// not checking an exchange that never authenticates.
    #[test]
    fn seeds_log_in_as_expected() {
        for (name, seed) in seeds() {
            let (mode, rest) = seed.split_first().unwrap();
            let want = matches!(name, "plain-ok" | "plain-authzid" | "text-login" | "text-noreply-empty-user" | "text-empty-password");
            if *mode < 2 {
                assert_eq!(exchange(rest, *mode == 1), want, "{name}");
            }
        }
    }

    #[test]
    fn the_oracle_reads_the_table() {
        assert!(in_table(b"alice", b"secret") && in_table(b"bob", b"hunter2:x") && in_table(b"", b"empty-user") && in_table(b"carol", b""));
        assert!(!in_table(b"alice", b"secret\r") && !in_table(b"bob", b"hunter2"));
    }
}
