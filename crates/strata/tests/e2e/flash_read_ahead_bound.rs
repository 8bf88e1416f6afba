//! Flash read-ahead holds at most `ext_read_ahead_max` bytes across all
//! connections (`read_ahead_budget.rs`): 300 connections park at once on
//! keys on flash, each with 16 reads to queue (a multi-get of 16 keys, or
//! 16 pipelined gets), while a sampler reads `flash_read_ahead_bytes` in
//! `stats memory`. It never passes the bound, reads beyond it are refused
//! (`extstore_reads_ahead_refused`), every reply is right, and once the
//! connections are done, or closed with their reads in flight, the bytes
//! held are back to 0. The engine is the suite's (`STRATA_IO_ENGINE`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{stats_of, Conn, ScratchDir, Server};

const KEYS: usize = 1000;
/// Connections parked at once.
const CONNS: usize = 300;
/// Keys each asks for: a park and up to 15 reads ahead.
const ASKED: usize = 16;
/// The bound: 16 reads of 4 KiB, about what one parked connection queues.
const BOUND: u64 = 64 << 10;

fn key(i: usize) -> String {
    format!("b{i:03}")
}

fn value(i: usize) -> Vec<u8> {
    format!("{i:05}").repeat(20).into_bytes()
}

fn held(stream: &mut std::net::TcpStream) -> u64 {
    let lines = stats_of(stream, "memory");
    lines.iter().find(|(n, _)| n == "flash_read_ahead_bytes").expect("flash_read_ahead_bytes in stats memory").1.parse().unwrap()
}

/// Connection `c`'s keys: 16 keys 61 apart, in different blocks mostly.
fn ids(c: usize) -> Vec<usize> {
    (0..ASKED).map(|m| (c * 7 + 61 * m) % KEYS).collect()
}

/// The requests of connection `c`: a multi-get of its keys (even `c`) or
/// one `get` a key, pipelined (odd), sent in one write.
fn request(c: usize) -> String {
    let keys: Vec<String> = ids(c).into_iter().map(key).collect();
    if c % 2 == 0 {
        format!("get {}\r\n", keys.join(" "))
    } else {
        keys.iter().map(|k| format!("get {k}\r\n")).collect()
    }
}

/// The values [`request`]`(c)` got, in order.
fn replies(conn: &mut Conn, c: usize) -> Vec<(String, Vec<u8>)> {
    let ends = if c % 2 == 0 { 1 } else { ASKED };
    (0..ends).flat_map(|_| conn.values()).map(|(k, v, _, _)| (k, v)).collect()
}

#[test]
fn parked_connections_stay_under_the_read_ahead_bound() {
    let dir = ScratchDir::new("flash", "ahead-bound");
    let ext = format!("ext_path={}:64m,ext_page_size=8,ext_wbuf_size=2,ext_read_ahead_max={BOUND}", dir.join("flash").display());
    let server = Server::strata(&["-t", "2", "-m", "8", "-o", &ext]);
    let mut c = Conn::to(&server);
    assert!(stats_of(&mut c.stream, "settings").contains(&("ext_read_ahead_max".to_string(), BOUND.to_string())));
    for i in 0..KEYS {
        assert_eq!(c.set(&key(i), &value(i)), "STORED\r\n");
    }
    // 24 MB of later items push the first ones onto flash.
    c.fill("f", 12_000, 2000);
    assert!(c.stat("extstore_objects_written") > 1000, "items went to flash");
    let (ahead_before, refused_before, fetched_before) = (c.stat("extstore_reads_ahead"), c.stat("extstore_reads_ahead_refused"), c.stat("get_extstore"));

    // The sampler: `stats memory` as fast as it answers.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, mut s) = (stop.clone(), Conn::to(&server).stream);
        std::thread::spawn(move || {
            let (mut most, mut samples) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                most = most.max(held(&mut s));
                samples += 1;
            }
            (most, samples)
        })
    };
    // Every connection sends before any reads: they park together. A few
    // go away with their reads in flight.
    let mut conns: Vec<(usize, Conn)> = (0..CONNS).map(|i| (i, Conn::to(&server))).collect();
    for (i, conn) in &mut conns {
        conn.stream.write_all(request(*i).as_bytes()).unwrap();
    }
    let gone: Vec<(usize, Conn)> = conns.split_off(CONNS - CONNS / 10);
    drop(gone);
    for (i, conn) in &mut conns {
        let want: Vec<(String, Vec<u8>)> = ids(*i).into_iter().map(|k| (key(k), value(k))).collect();
        assert_eq!(replies(conn, *i), want, "connection {i}");
    }
    stop.store(true, Ordering::Relaxed);
    let (most, samples) = sampler.join().unwrap();
    assert!(samples > 0);
    assert!(most <= BOUND, "read-ahead held {most} bytes, over its bound of {BOUND}");

    let ahead = c.stat("extstore_reads_ahead") - ahead_before;
    let refused = c.stat("extstore_reads_ahead_refused") - refused_before;
    let fetched = c.stat("get_extstore") - fetched_before;
    eprintln!("{ahead} reads ahead, {refused} refused, {fetched} flash fetches; at most {most} bytes held in {samples} samples");
    assert!(fetched >= (CONNS - CONNS / 10) as u64 * ASKED as u64 * 9 / 10, "the keys were on flash: {fetched} fetches");
    assert!(ahead > 0, "reads went ahead");
    assert!(refused > 0, "{CONNS} connections parked at once wanted more than {BOUND} bytes ahead");

    // Used, abandoned at the end of a run, or dropped with a closed
    // connection: every read-ahead's bytes come back.
    drop(conns);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = held(&mut c.stream);
        if now == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{now} bytes of read-ahead still held after every connection finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.stat("extstore_io_queue"), 0, "every read handed out was finished");
}

/// `ext_read_ahead_max=0`: no read goes ahead, and multi-gets and
/// pipelines of keys on flash are still answered, a park a key.
#[test]
fn no_read_ahead_at_zero() {
    let dir = ScratchDir::new("flash", "ahead-zero");
    let ext = format!("ext_path={}:64m,ext_page_size=8,ext_wbuf_size=2,ext_read_ahead_max=0", dir.join("flash").display());
    let server = Server::strata(&["-t", "1", "-m", "8", "-o", &ext]);
    let mut c = Conn::to(&server);
    for i in 0..KEYS {
        assert_eq!(c.set(&key(i), &value(i)), "STORED\r\n");
    }
    c.fill("f", 12_000, 2000);
    let fetched_before = c.stat("get_extstore");
    for i in 0..4 {
        c.stream.write_all(request(i).as_bytes()).unwrap();
        let want: Vec<(String, Vec<u8>)> = ids(i).into_iter().map(|k| (key(k), value(k))).collect();
        assert_eq!(replies(&mut c, i), want, "request {i}");
    }
    assert!(c.stat("get_extstore") - fetched_before >= 4 * ASKED as u64 * 9 / 10, "the keys were on flash");
    assert_eq!(c.stat("extstore_reads_ahead"), 0);
    assert!(c.stat("extstore_reads_ahead_refused") > 0);
}
