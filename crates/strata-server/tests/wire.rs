//! Wire tests of the connection state machine and the socket path:
//! requests split at every byte boundary give the same replies as in one
//! piece, and 1,000 mixed pipelined commands in one write are all answered,
//! in order, over a real TCP connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use strata_server::conn::{Conn, Progress};
use strata_server::exec::Executor;
use strata_server::shared::Shared;
use strata_server::{Server, Settings};
use strata_store::{Clock, EngineConfig, MapStore};

fn shared() -> Arc<Shared> {
    let settings = Settings { threads: 1, ..Settings::default() };
    let engine = MapStore::new(EngineConfig::default());
    Arc::new(Shared::new(settings, Box::new(engine), Clock::starting_at(1_700_000_000)))
}

/// Feed `chunks` one after another to a fresh connection; return all replies.
fn run_chunks(chunks: &[&[u8]]) -> Vec<u8> {
    let shared = shared();
    let stats = shared.worker_stats[0].clone();
    let exec = Executor { shared: &shared, stats: &stats };
    let mut conn = Conn::default();
    for chunk in chunks {
        conn.input.extend_from_slice(chunk);
        loop {
            match conn.process(&exec, 1000) {
                Progress::Yield | Progress::OutputFull => continue,
                _ => break,
            }
        }
    }
    conn.out
}

const STREAM: &[u8] = b"set a 5 0 3\r\nabc\r\nget a b\r\ngets a\r\nappend a 0 0 2 noreply\r\nde\r\n\
mg a v f k c s t\r\nms b 4 T0 F7 c\r\nwxyz\r\nmg b v q\r\nmg nope q\r\nmn\r\nincr c 1\r\n\
set c 0 0 2\r\n10\r\ndecr c 3\r\nma c D4 v\r\nmd a q\r\nmg a\r\nset d 0 0 3\r\nabcde\r\n\
delete b 0\r\ntouch c 100\r\ngat 0 c\r\nverbosity 1\r\nms e 2 MX\r\nzz\r\nbogus\r\n\
ms f S2\r\nhi\r\n\nme c\r\nflush_all\r\nget c\r\n";

#[test]
fn every_split_point_gives_the_same_replies() {
    let whole = run_chunks(&[STREAM]);
    assert!(whole.ends_with(b"END\r\n"), "{}", String::from_utf8_lossy(&whole));
    assert!(whole.windows(6).any(|w| w == b"STORED"));
    for split in 1..STREAM.len() {
        let (a, b) = STREAM.split_at(split);
        let replies = run_chunks(&[a, b]);
        assert_eq!(
            String::from_utf8_lossy(&replies),
            String::from_utf8_lossy(&whole),
            "split at byte {split}"
        );
    }
    let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
    assert_eq!(run_chunks(&bytes), whole, "one byte at a time");
}

fn start_server() -> (Server, std::net::SocketAddr) {
    let settings = Settings {
        tcp_listen: vec!["127.0.0.1:0".parse().unwrap()],
        threads: 2,
        ..Settings::default()
    };
    let server = Server::start(settings, Box::new(MapStore::new(EngineConfig::default()))).unwrap();
    let addr = server.tcp_addrs[0];
    (server, addr)
}

#[test]
fn a_thousand_pipelined_commands_in_one_write() {
    let (server, addr) = start_server();
    let mut request = Vec::new();
    let mut expected = Vec::new();
    for i in 0..250 {
        let value = format!("value-{i}");
        request.extend_from_slice(format!("set key{i} {i} 0 {}\r\n{value}\r\n", value.len()).as_bytes());
        expected.extend_from_slice(b"STORED\r\n");
        request.extend_from_slice(format!("get key{i}\r\n").as_bytes());
        expected.extend_from_slice(format!("VALUE key{i} {i} {}\r\n{value}\r\nEND\r\n", value.len()).as_bytes());
        request.extend_from_slice(format!("mg key{i} s f v\r\n").as_bytes());
        expected.extend_from_slice(format!("VA {0} s{0} f{i}\r\n{value}\r\n", value.len()).as_bytes());
        request.extend_from_slice(format!("incr n{i} 1\r\n").as_bytes());
        expected.extend_from_slice(b"NOT_FOUND\r\n");
    }
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(&request).unwrap();
    let mut got = vec![0u8; expected.len()];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&expected));
    server.shutdown();
    server.wait();
}

#[test]
fn overlong_line_closes_and_quit_flushes_first() {
    let (server, addr) = start_server();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"version\r\nquit\r\nversion\r\n").unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).unwrap();
    assert!(got.starts_with(b"VERSION "), "{}", String::from_utf8_lossy(&got));
    assert_eq!(got.iter().filter(|&&b| b == b'\n').count(), 1, "nothing after quit");

    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(&[b'x'; 4096]).unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    assert!(got.is_empty(), "closed without a reply");
    server.shutdown();
    server.wait();
}

#[test]
fn connections_past_the_limit_get_memcacheds_error() {
    let settings = Settings {
        tcp_listen: vec!["127.0.0.1:0".parse().unwrap()],
        threads: 1,
        max_connections: 2,
        ..Settings::default()
    };
    let server = Server::start(settings, Box::new(MapStore::new(EngineConfig::default()))).unwrap();
    let addr = server.tcp_addrs[0];
    let mut kept = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"mn\r\n").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        kept.push(s);
    }
    let mut third = TcpStream::connect(addr).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = third.read_to_end(&mut got);
    assert_eq!(got, b"ERROR Too many open connections\r\n");
    server.shutdown();
    server.wait();
}
