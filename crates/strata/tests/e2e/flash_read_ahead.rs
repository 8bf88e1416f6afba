//! A multi-get's keys on flash go to the device together (issue 33): the
//! first key on flash parks the request, and the reads of its later keys
//! on flash (up to 16 in all) are queued with that one, counted in
//! `extstore_reads_ahead`, so the request runs again once they are all
//! back rather than once per key, as memcached queues a multi-get's
//! extstore reads together; so are the reads of the single-key reads
//! pipelined behind it (text `get`, meta `mg`, binary `GETKQ`).
//! Checked on both engines: every value in order,
//! each key counted once in `get_extstore` and none aborted, a key asked
//! twice in one request (the second answered from the first's bytes),
//! `gat` (the flash copies brought back into RAM), a request that ends in
//! an error after its reads, and a connection closed with its reads in
//! flight (each handed-out read finished or abandoned: `extstore_io_queue`
//! back to 0).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::common::{Conn, Server};

const KEYS: usize = 1000;

fn value(i: usize) -> Vec<u8> {
    format!("{i:05}").repeat(20).into_bytes()
}

fn key(i: usize) -> String {
    format!("r{i:03}")
}

/// Send `line`, read the `VALUE` replies up to `END` in order: (key, value).
fn values(c: &mut Conn, line: &str) -> Vec<(String, Vec<u8>)> {
    c.stream.write_all(format!("{line}\r\n").as_bytes()).unwrap();
    read_values(c)
}

/// Single-key reads of `ids` sent at once as `kind` (`get`, `mg` with
/// an `mn` after, or binary `getkq` with a `NOOP` after): the values, in
/// order.
fn pipeline(c: &mut Conn, kind: &str, ids: &[usize]) -> Vec<(String, Vec<u8>)> {
    let mut req = Vec::new();
    for &i in ids {
        match kind {
            "get" => req.extend_from_slice(format!("get {}\r\n", key(i)).as_bytes()),
            "mg" => req.extend_from_slice(format!("mg {} v k\r\n", key(i)).as_bytes()),
            _ => req.extend_from_slice(&binary(0x0d, key(i).as_bytes())),
        }
    }
    match kind {
        "mg" => req.extend_from_slice(b"mn\r\n"),
        "getkq" => req.extend_from_slice(&binary(0x0a, b"")),
        _ => {}
    }
    c.stream.write_all(&req).unwrap();
    let mut out = Vec::new();
    for _ in ids {
        match kind {
            "get" => out.extend(read_values(c)),
            "mg" => {
                let header = c.line();
                let f: Vec<&str> = header.split_whitespace().collect();
                assert_eq!(f[0], "VA", "{header}");
                let mut data = vec![0u8; f[1].parse::<usize>().unwrap() + 2];
                c.reader.read_exact(&mut data).unwrap();
                data.truncate(data.len() - 2);
                out.push((f[2].strip_prefix('k').unwrap().to_string(), data));
            }
            _ => {
                let mut header = [0u8; 24];
                c.reader.read_exact(&mut header).unwrap();
                assert_eq!((header[0], header[1], header[7]), (0x81, 0x0d, 0), "a GETKQ hit");
                let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
                let body = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
                let mut data = vec![0u8; body];
                c.reader.read_exact(&mut data).unwrap();
                let extras = usize::from(header[4]);
                let k = String::from_utf8(data[extras..extras + key_len].to_vec()).unwrap();
                out.push((k, data[extras + key_len..].to_vec()));
            }
        }
    }
    match kind {
        "mg" => assert_eq!(c.line(), "MN\r\n"),
        "getkq" => {
            let mut noop = [0u8; 24];
            c.reader.read_exact(&mut noop).unwrap();
            assert_eq!((noop[0], noop[1]), (0x81, 0x0a));
        }
        _ => {}
    }
    out
}

/// A binary request of `opcode` for `key`, no extras or value.
fn binary(opcode: u8, key: &[u8]) -> Vec<u8> {
    let mut r = vec![0x80, opcode];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0; 4]);
    r.extend_from_slice(&(key.len() as u32).to_be_bytes());
    r.extend_from_slice(&[0; 12]);
    r.extend_from_slice(key);
    r
}

/// The `VALUE` replies up to `END`, in order: (key, value).
fn read_values(c: &mut Conn) -> Vec<(String, Vec<u8>)> {
    c.values().into_iter().map(|(key, value, _, _)| (key, value)).collect()
}

/// A server with a 64 MiB flash tier in a directory of its own (removed by
/// the caller), 8 MiB of RAM and `threads` workers.
fn flash_server(tag: &str, engine: &str, threads: &str) -> (Server, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("strata-flash-{tag}-{engine}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!("io_engine={engine},ext_path={}:64m,ext_page_size=8,ext_wbuf_size=2", dir.join("flash").display());
    (Server::strata(&["-t", threads, "-m", "8", "-o", &ext]), dir)
}

fn run_on(engine: &str) {
    let (server, dir) = flash_server("ahead", engine, "1");
    let mut c = Conn::to(&server);
    for i in 0..KEYS {
        assert_eq!(c.set(&key(i), &value(i)), "STORED\r\n");
    }
    // 24 MB of later items push the first ones out of RAM and out of the
    // write buffer (2 MiB), onto flash.
    c.fill("f", 12_000, 2000);
    assert!(c.stat("extstore_objects_written") > 1000, "items went to flash");

    // 60 gets of 16 keys 61 apart (in different blocks, mostly).
    let (ahead_before, fetched_before, aborted_before) =
        (c.stat("extstore_reads_ahead"), c.stat("get_extstore"), c.stat("get_aborted_extstore"));
    let mut asked = 0;
    for j in 0..60 {
        let ids: Vec<usize> = (0..16).map(|m| (j + 61 * m) % KEYS).collect();
        let line = format!("get {}", ids.iter().map(|&i| key(i)).collect::<Vec<_>>().join(" "));
        let got = values(&mut c, &line);
        let want: Vec<(String, Vec<u8>)> = ids.iter().map(|&i| (key(i), value(i))).collect();
        assert_eq!(got, want, "{line}");
        asked += ids.len() as u64;
    }
    let ahead = c.stat("extstore_reads_ahead") - ahead_before;
    let fetched = c.stat("get_extstore") - fetched_before;
    assert!(fetched >= asked * 9 / 10, "the keys were on flash: {fetched} of {asked}");
    assert!(fetched <= asked, "each key fetched from flash once: {fetched} for {asked} keys");
    // At most 15 of each get's 16 reads go ahead of its first; keys whose
    // blocks another key's read covers, or that are back in RAM, need none.
    assert!(ahead >= 60 * 10, "{ahead} reads went ahead in 60 gets of 16 keys on flash");
    assert!(ahead <= 60 * 15, "{ahead}");
    assert_eq!(c.stat("get_aborted_extstore"), aborted_before, "every read queued ahead was used");

    // Pipelines of single-key reads (text, meta, binary GETKQ as
    // libmemcached's multi-get sends them): each request finds the read
    // queued for it when the first parked.
    for (p, kind) in ["get", "mg", "getkq"].iter().enumerate() {
        let ahead_before = c.stat("extstore_reads_ahead");
        // A connection speaks the protocol of its first byte.
        let mut own = Conn::to(&server);
        for j in 0..10 {
            let ids: Vec<usize> = (0..16).map(|m| (400 + 20 * p + j + 61 * m) % KEYS).collect();
            let got = pipeline(&mut own, kind, &ids);
            let want: Vec<(String, Vec<u8>)> = ids.iter().map(|&i| (key(i), value(i))).collect();
            assert_eq!(got, want, "{kind} pipeline {j}");
        }
        let ahead = c.stat("extstore_reads_ahead") - ahead_before;
        assert!(ahead >= 10 * 8, "{kind}: {ahead} reads went ahead in 10 pipelines of 16 reads of keys on flash");
    }
    assert_eq!(c.stat("get_aborted_extstore"), aborted_before, "every read queued ahead was used");
    // Longer than the 16 reads a park queues: it parks again further on.
    let ids: Vec<usize> = (0..40).map(|m| (700 + 23 * m) % KEYS).collect();
    let want: Vec<(String, Vec<u8>)> = ids.iter().map(|&i| (key(i), value(i))).collect();
    assert_eq!(pipeline(&mut Conn::to(&server), "get", &ids), want);

    // A key asked three times: one read, the same value three times.
    let got = values(&mut c, &format!("get {} {} {} {}", key(500), key(500), key(3), key(500)));
    let want = vec![(key(500), value(500)), (key(500), value(500)), (key(3), value(3)), (key(500), value(500))];
    assert_eq!(got, want);

    // gat: the flash copies come back into RAM with the new time, each once.
    let ids = [7usize, 68, 129, 190, 190, 251];
    let line = format!("gat 0 {}", ids.iter().map(|&i| key(i)).collect::<Vec<_>>().join(" "));
    let want: Vec<(String, Vec<u8>)> = ids.iter().map(|&i| (key(i), value(i))).collect();
    assert_eq!(values(&mut c, &line), want);
    let fetched_before = c.stat("get_extstore");
    assert_eq!(values(&mut c, &line), want, "now from RAM");
    assert_eq!(c.stat("get_extstore"), fetched_before, "brought back into RAM: no flash fetch");

    // An error after the reads: memcached's answer, nothing left in flight.
    let long = "k".repeat(251);
    c.stream.write_all(format!("get {} {} {} {long}\r\n", key(11), key(72), key(133)).as_bytes()).unwrap();
    assert!(c.line().starts_with("CLIENT_ERROR"), "a key too long ends the get with an error");
    assert_eq!(c.line(), "\r\n", "1.6.45's error line, sent with another CRLF");
    assert_eq!(c.get(&key(72)), Some(value(72)), "the connection goes on");
    assert_eq!(c.stat("extstore_io_queue"), 0, "every read handed out was finished");

    // A connection that goes away with its reads in flight abandons them.
    for j in 0..8 {
        let mut gone = Conn::to(&server);
        let ids: Vec<usize> = (0..16).map(|m| (300 + j + 61 * m) % KEYS).collect();
        let line = format!("get {}\r\n", ids.iter().map(|&i| key(i)).collect::<Vec<_>>().join(" "));
        gone.stream.write_all(line.as_bytes()).unwrap();
        drop(gone);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stat("extstore_io_queue") != 0 {
        assert!(Instant::now() < deadline, "reads of closed connections still counted in flight");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.stat("badcrc_from_extstore"), 0);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads queued ahead race sets and deletes of their keys from another
/// connection (every 7th key, flipped twelve times): every value read is
/// one written for that key, and once the writer is done, multi-gets and
/// pipelines of every key return exactly what it left (a key set anew: the
/// new value; deleted: a miss; the others from flash), never a flash copy
/// from before the change.
fn races_on(engine: &str) {
    let (server, dir) = flash_server("ahead-race", engine, "2");
    let versioned = |i: usize, generation: usize| format!("{i:05}g{generation:04}").repeat(10).into_bytes();
    let mut c = Conn::to(&server);
    for i in 0..KEYS {
        assert_eq!(c.set(&key(i), &versioned(i, 0)), "STORED\r\n");
    }
    c.fill("f", 12_000, 2000);
    let writer = {
        let mut w = Conn::to(&server);
        std::thread::spawn(move || {
            let mut last = vec![Some(0usize); KEYS];
            for generation in 1..=12 {
                // Every 7th key, set anew or deleted in turn.
                for i in (0..KEYS).step_by(7) {
                    if (i + generation) % 3 == 0 {
                        w.stream.write_all(format!("delete {}\r\n", key(i)).as_bytes()).unwrap();
                        let reply = w.line();
                        assert!(reply == "DELETED\r\n" || reply == "NOT_FOUND\r\n", "{reply}");
                        last[i] = None;
                    } else {
                        assert_eq!(w.set(&key(i), &format!("{i:05}g{generation:04}").repeat(10).into_bytes()), "STORED\r\n");
                        last[i] = Some(generation);
                    }
                }
            }
            last
        })
    };
    let check = |got: &[(String, Vec<u8>)]| {
        for (k, v) in got {
            let i: usize = k[1..].parse().unwrap();
            let text = String::from_utf8(v.clone()).unwrap();
            assert!(text.starts_with(&format!("{i:05}g")) && v.len() == 100, "{k}: {text}");
        }
    };
    let mut pipe = Conn::to(&server);
    let mut j = 0;
    while !writer.is_finished() {
        // The first half only: the second stays on flash for the scan.
        let ids: Vec<usize> = (0..16).map(|m| (j + 31 * m) % (KEYS / 2)).collect();
        let line = format!("get {}", ids.iter().map(|&i| key(i)).collect::<Vec<_>>().join(" "));
        check(&values(&mut c, &line));
        check(&pipeline(&mut pipe, "get", &ids[..8]));
        j += 1;
    }
    let last = writer.join().unwrap();
    let want = |ids: &[usize]| -> Vec<(String, Vec<u8>)> {
        ids.iter().filter_map(|&i| last[i].map(|g| (key(i), versioned(i, g)))).collect()
    };
    // Every key once, by multi-gets of keys 64 apart, then by pipelines.
    let order: Vec<usize> = (0..64).flat_map(|j| (j..KEYS).step_by(64)).collect();
    let fetched_before = c.stat("get_extstore");
    for ids in order.chunks(16) {
        let line = format!("get {}", ids.iter().map(|&i| key(i)).collect::<Vec<_>>().join(" "));
        assert_eq!(values(&mut c, &line), want(ids), "{line}");
    }
    for ids in order.chunks(8).take(20) {
        assert_eq!(pipeline(&mut pipe, "get", ids), want(ids), "pipelined {ids:?}");
    }
    let fetched = c.stat("get_extstore") - fetched_before;
    assert!(fetched > 300, "the scan read the keys left alone from flash: {fetched}");
    assert_eq!(c.stat("badcrc_from_extstore"), 0);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reads_ahead_racing_sets_and_deletes_return_only_written_values_with_epoll() {
    races_on("epoll");
}

#[test]
fn reads_ahead_racing_sets_and_deletes_return_only_written_values_with_the_default_engine() {
    races_on("auto");
}

#[test]
fn a_multi_get_reads_its_keys_on_flash_together_with_epoll() {
    run_on("epoll");
}

#[test]
fn a_multi_get_reads_its_keys_on_flash_together_with_the_default_engine() {
    run_on("auto");
}
