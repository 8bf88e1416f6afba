//! Cross-seeds for the fuzz targets that reach the text, meta and binary
//! service code behind something else first: every text input
//! (`fuzz/corpus/text`, `fuzz/grown/text`) and binary seed, wrapped as an
//! input of
//!
//! - sasl: mode 0, a `-Y` login (`set login 0 0 12` / `alice secret`),
//!   the text; mode 1, a binary SASL PLAIN login as alice, the binary
//!   request(s);
//! - udp: one datagram (request id, 0 of 1) of the first 1400 bytes;
//! - conn: a script of raw chunks on connection 0, delivered whole and
//!   processed four times; every other text input over the flash store.
//!
//! The sessions of `strata_server::fuzzing::catalog` (every command the
//! text service knows, with its sub-commands and flags) the same way: sasl
//! behind the `-Y` login, udp one datagram, conn a script over the map
//! store and one over the flash store.
//!
//! And every conn input (corpus and grown), each of its connections' bytes
//! (raw chunks and requests, in the script's order) as one client's:
//! sasl behind the login (binary when the stream starts with the binary
//! magic), udp one datagram. conn's scripts reach service paths (`stats`
//! groups, `lru_crawler`, `watch`, meta flags) the text target's inputs,
//! made for the parser, do not.
//!
//! And back: every sasl input's client bytes (modes 0 and 1) and every udp
//! input's datagram payloads, one stream an input, as a conn script (over
//! the map store or the flash store, by turns) and as an input of the
//! other one. sasl and udp run the service three to six times as many
//! inputs a second as conn, so they reach its commands' paths first.
//!
//! Written to `target/fuzz-scratch/TARGET` (or DIR/TARGET), for
//! `scripts/fuzz TARGET merge` to keep what brings coverage.
//!
//!     cargo run --release -p strata-server --example fuzz_cross_seeds -- [DIR]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use strata_proto::udp::{UdpHeader, HEADER_LEN, MAX_DATAGRAM};
use strata_server::fuzzing::catalog::SESSIONS;
use strata_server::fuzzing::script::{binary_request, Script, Step};
use strata_store::fuzzing::corpus::{inputs, Kept};
use strata_store::hash_key;

/// `-Y`'s login: a set whose data is `user password` (fuzzing/sasl.rs's table).
const TEXT_LOGIN: &[u8] = b"set login 0 0 12\r\nalice secret\r\n";
/// The first byte of a binary request.
const BINARY_MAGIC: u8 = 0x80;
/// Binary SASL authentication.
const SASL_AUTH: u8 = 0x21;
/// The longest stream a conn cross-seed carries.
const CONN_TEXT_MAX: usize = 4096;

fn main() {
    let out = std::env::args().nth(1).map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-scratch"), PathBuf::from);
    let bodies = |target, kept| inputs(target, kept).into_iter().map(|(_, data)| data).filter(|data| !data.is_empty());
    let text: Vec<Vec<u8>> = bodies("text", Kept::Seeds).chain(bodies("text", Kept::Grown)).collect();
    let binary: Vec<Vec<u8>> = bodies("binary", Kept::Seeds).chain(bodies("binary", Kept::Grown)).collect();
    let plain_login = binary_request(SASL_AUTH, b"PLAIN", &[], b"\0alice\0secret", 0);
    let put = |target: &str, data: Vec<u8>| {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        // Named by the bytes' hash, so the same input is written once.
        let path = dir.join(format!("x-{:016x}", hash_key(&data)));
        std::fs::write(&path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    };
    for (i, t) in text.iter().enumerate() {
        put("sasl", [&[0], TEXT_LOGIN, t].concat());
        put("udp", datagram(t, i as u16));
        put("conn", conn_script(t, i % 2 == 1));
    }
    for (i, b) in binary.iter().enumerate() {
        put("sasl", [&[1], &plain_login[..], b].concat());
        put("udp", datagram(b, i as u16));
        put("conn", conn_script(b, false));
    }
    for (i, session) in SESSIONS.iter().enumerate() {
        put("sasl", [&[0], TEXT_LOGIN, session.as_bytes()].concat());
        put("udp", datagram(session.as_bytes(), i as u16));
        for flash in [false, true] {
            put("conn", conn_script(session.as_bytes(), flash));
        }
    }
    let streams: Vec<Vec<u8>> = bodies("conn", Kept::Seeds).chain(bodies("conn", Kept::Grown)).flat_map(|data| conn_streams(&data)).collect();
    for (i, s) in streams.iter().enumerate() {
        put("sasl", behind_login(s, &plain_login));
        put("udp", datagram(s, i as u16));
    }
    let from_sasl: Vec<Vec<u8>> = bodies("sasl", Kept::Seeds).chain(bodies("sasl", Kept::Grown)).filter_map(|data| sasl_stream(&data)).collect();
    let from_udp: Vec<Vec<u8>> = bodies("udp", Kept::Seeds).chain(bodies("udp", Kept::Grown)).filter_map(|data| udp_stream(&data)).collect();
    for (i, s) in from_sasl.iter().enumerate() {
        put("conn", conn_script(s, i % 2 == 1));
        put("udp", datagram(s, i as u16));
    }
    for (i, s) in from_udp.iter().enumerate() {
        put("conn", conn_script(s, i % 2 == 1));
        put("sasl", behind_login(s, &plain_login));
    }
    println!(
        "cross-seeds: {} text and {} binary inputs and {} catalog sessions, each into {dir}/{{sasl,udp,conn}}; {} conn streams into {dir}/{{sasl,udp}}; {} sasl streams into {dir}/{{conn,udp}}; {} udp streams into {dir}/{{conn,sasl}}",
        text.len(),
        binary.len(),
        SESSIONS.len(),
        streams.len(),
        from_sasl.len(),
        from_udp.len(),
        dir = out.display()
    );
}

/// The conn target's input: one client's bytes, cut at `CONN_TEXT_MAX`,
/// as a script over the map store or the flash store.
fn conn_script(stream: &[u8], flash: bool) -> Vec<u8> {
    Script::stream(&stream[..stream.len().min(CONN_TEXT_MAX)], flash).encode()
}

/// A sasl input of one client's bytes: behind the binary PLAIN login when
/// they start with the binary magic, else behind the `-Y` text login.
fn behind_login(stream: &[u8], plain_login: &[u8]) -> Vec<u8> {
    match stream.first() {
        Some(&BINARY_MAGIC) => [&[1], plain_login, stream].concat(),
        _ => [&[0], TEXT_LOGIN, stream].concat(),
    }
}

/// A sasl input's client bytes (its text or binary client; none for a
/// credentials file).
fn sasl_stream(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    (mode < 2 && !rest.is_empty()).then(|| rest.to_vec())
}

/// A udp input's datagram payloads, header off, one after another (the
/// target's framing: a u16 length, then that many bytes).
fn udp_stream(data: &[u8]) -> Option<Vec<u8>> {
    let (mut rest, mut stream) = (data, Vec::new());
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let datagram = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[2 + datagram.len()..];
        stream.extend_from_slice(datagram.get(HEADER_LEN..).unwrap_or_default());
    }
    (!stream.is_empty()).then_some(stream)
}

/// The udp target's input: one datagram, its u16 length first.
fn datagram(payload: &[u8], request_id: u16) -> Vec<u8> {
    let mut d = Vec::new();
    UdpHeader { request_id, seq: 0, total: 1, reserved: 0 }.write(&mut d);
    d.extend_from_slice(&payload[..payload.len().min(MAX_DATAGRAM)]);
    [&(d.len() as u16).to_be_bytes()[..], &d].concat()
}

/// Each connection's bytes in a conn input: its raw chunks and requests,
/// in the script's order.
fn conn_streams(data: &[u8]) -> Vec<Vec<u8>> {
    let mut streams: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
    for step in Script::decode(data).steps {
        match step {
            Step::Raw { conn, bytes } => streams.entry(conn).or_default().extend_from_slice(&bytes),
            Step::Request { conn, req } => streams.entry(conn).or_default().extend(req.wire()),
            Step::Deliver { .. } | Step::Process { .. } | Step::Complete { .. } => {}
        }
    }
    streams.into_values().filter(|s| !s.is_empty()).collect()
}
