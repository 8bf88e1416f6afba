//! Wire tests of the connection state machine and the socket path:
//! requests split at every byte boundary give the same replies as in one
//! piece, and 1,000 mixed pipelined commands in one write are all answered,
//! in order, over a real TCP connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use strata_server::conn::{Conn, Progress};
use strata_server::service::Service;
use strata_server::runtime::Runtime;
use strata_server::settings::IoEngine;
use strata_server::{Server, Settings};
use strata_store::{Clock, EngineConfig, MapStore};

fn shared() -> Arc<Runtime> {
    shared_with(Settings { threads: 1, ..Settings::default() }, None)
}

fn shared_with(settings: Settings, sasl: Option<strata_server::auth::Credentials>) -> Arc<Runtime> {
    let engine = MapStore::new(EngineConfig {
        item_size_max_bytes: settings.item_size_max,
        ..EngineConfig::default()
    });
    let clock = Clock::starting_at(1_700_000_000);
    let auth = strata_server::auth::Auth { text: None, sasl };
    Arc::new(Runtime::with_auth(settings, Box::new(engine), clock, auth))
}

/// Feed `chunks` one after another to a fresh connection; return all replies.
fn run_chunks(chunks: &[&[u8]]) -> Vec<u8> {
    run_chunks_on(shared(), chunks)
}

fn run_chunks_on(shared: Arc<Runtime>, chunks: &[&[u8]]) -> Vec<u8> {
    let mut svc = Service::new(&shared, 0);
    let mut conn = Conn::new(shared.auth.required(), None);
    for chunk in chunks {
        conn.input.extend_from_slice(chunk);
        loop {
            match conn.process(&mut svc, 1000) {
                Progress::Yield | Progress::OutputFull => continue,
                _ => break,
            }
        }
    }
    conn.out.to_vec()
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

/// A binary request.
fn bin(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// Every opcode memcached serves, and every status it answers with.
fn binary_stream() -> Vec<u8> {
    let set_extras = [0, 0, 0, 7, 0, 0, 0, 0];
    let delta = |d: u64, initial: u64, exp: u32| [&d.to_be_bytes()[..], &initial.to_be_bytes(), &exp.to_be_bytes()].concat();
    let ttl = 100u32.to_be_bytes();
    [
        bin(0x01, b"k", &set_extras, b"hello", 0),     // SET
        bin(0x11, b"q", &set_extras, b"quiet", 0),     // SETQ: silent
        bin(0x00, b"k", &[], &[], 0),                  // GET hit
        bin(0x09, b"missing", &[], &[], 0),            // GETQ miss: silent
        bin(0x0c, b"missing", &[], &[], 0),            // GETK miss: key back
        bin(0x0d, b"k", &[], &[], 0),                  // GETKQ hit
        bin(0x02, b"k", &set_extras, b"x", 0),         // ADD exists
        bin(0x12, b"a", &set_extras, b"x", 0),         // ADDQ
        bin(0x03, b"nope", &set_extras, b"x", 0),      // REPLACE missing
        bin(0x13, b"k", &set_extras, b"hi", 0),        // REPLACEQ
        bin(0x01, b"k", &set_extras, b"v", 999),       // SET with a wrong CAS
        bin(0x0e, b"k", &[], b"++", 0),                // APPEND
        bin(0x19, b"nope", &[], b"++", 0),             // APPENDQ missing: NOT_STORED
        bin(0x0f, b"k", &[], b"--", 0),                // PREPEND
        bin(0x1a, b"k", &[], b"<", 0),                 // PREPENDQ
        bin(0x05, b"n", &delta(1, 10, 0), &[], 0),     // INCREMENT creates
        bin(0x15, b"n", &delta(5, 0, 0), &[], 0),      // INCREMENTQ
        bin(0x06, b"n", &delta(100, 0, 0), &[], 0),    // DECREMENT clamps
        bin(0x16, b"none", &delta(1, 0, u32::MAX), &[], 0), // DECREMENTQ missing
        bin(0x05, b"k", &delta(1, 0, 0), &[], 0),      // non-numeric
        bin(0x1c, b"k", &ttl, &[], 0),                 // TOUCH
        bin(0x1d, b"k", &ttl, &[], 0),                 // GAT
        bin(0x1e, b"nope", &ttl, &[], 0),              // GATQ miss
        bin(0x23, b"k", &ttl, &[], 0),                 // GATK
        bin(0x24, b"k", &ttl, &[], 0),                 // GATKQ
        bin(0x04, b"a", &[], &[], 0),                  // DELETE
        bin(0x14, b"a", &[], &[], 0),                  // DELETEQ missing
        bin(0x0b, b"", &[], &[], 0),                   // VERSION
        bin(0x10, b"", &[], &[], 0),                   // STAT
        bin(0x10, b"nonsense", &[], &[], 0),           // STAT unknown group
        bin(0x08, b"", &[], &[], 0),                   // FLUSH
        bin(0x18, b"", &0u32.to_be_bytes(), &[], 0),   // FLUSHQ
        bin(0x20, b"", &[], &[], 0),                   // SASL without -S
        bin(0x0a, b"", &[], &[], 0),                   // NOOP
        bin(0x17, b"", &[], &[], 0),                   // QUITQ
    ]
    .concat()
}

/// The (opcode, status) pairs in a binary reply stream.
fn statuses(mut replies: &[u8]) -> Vec<(u8, u16)> {
    let mut out = Vec::new();
    while replies.len() >= 24 {
        let body = u32::from_be_bytes(replies[8..12].try_into().unwrap()) as usize;
        out.push((replies[1], u16::from_be_bytes([replies[6], replies[7]])));
        replies = &replies[24 + body..];
    }
    out
}

#[test]
fn binary_every_opcode_and_split_point() {
    let stream = binary_stream();
    let whole = run_chunks(&[&stream]);
    let got = statuses(&whole);
    let stat_lines = got.iter().filter(|&&(op, st)| op == 0x10 && st == 0).count();
    let rest: Vec<_> = got.iter().copied().filter(|&(op, _)| op != 0x10).collect();
    assert_eq!(
        rest,
        vec![
            (0x01, 0), (0x00, 0), (0x0c, 1), (0x0d, 0), (0x02, 2), (0x03, 1), (0x01, 2), (0x0e, 0),
            (0x19, 5), (0x0f, 0), (0x05, 0), (0x06, 0), (0x16, 1), (0x05, 6), (0x1c, 0), (0x1d, 0), (0x23, 0),
            (0x24, 0), (0x04, 0), (0x14, 1), (0x0b, 0), (0x08, 0), (0x20, 0x81), (0x0a, 0),
        ]
    );
    assert!(stat_lines > 10, "general stats and their terminator");
    assert!(got.contains(&(0x10, 1)), "unknown stats group is KEY_ENOENT");
    for split in 1..stream.len() {
        let (a, b) = stream.split_at(split);
        assert_eq!(statuses(&run_chunks(&[a, b])), got, "split at byte {split}");
    }
}

/// Both I/O engines; every socket-level test runs on each.
const ENGINES: [IoEngine; 2] = [IoEngine::Epoll, IoEngine::Uring];

/// The statuses that need a setting: E2BIG (a value over -I), AUTH_ERROR
/// (SASL on, not logged in) and EINVAL (a malformed header, which closes).
#[test]
fn binary_error_statuses_at_every_split_point() {
    let small = || shared_with(Settings { threads: 1, item_size_max: 1024, ..Settings::default() }, None);
    let big = vec![b'v'; 2000];
    let stream = [bin(0x01, b"k", &[0; 8], &big, 0), bin(0x0a, b"", &[], &[], 0), bin(0x00, b"", &[], &[], 0)].concat();
    let whole = run_chunks_on(small(), &[&stream]);
    assert_eq!(statuses(&whole), vec![(0x01, 0x03), (0x0a, 0), (0x00, 0x04)]);
    for split in 1..stream.len() {
        let (a, b) = stream.split_at(split);
        assert_eq!(statuses(&run_chunks_on(small(), &[a, b])), statuses(&whole), "split at byte {split}");
    }

    let path = std::env::temp_dir().join(format!("strata-wire-sasl-{}", std::process::id()));
    std::fs::write(&path, "u:p\n").unwrap();
    let sasl = || {
        let settings = Settings { threads: 1, sasl: true, ..Settings::default() };
        shared_with(settings, Some(strata_server::auth::Credentials::load(&path).unwrap()))
    };
    let stream = [bin(0x21, b"PLAIN", &[], b"\0u\0bad", 0), bin(0x00, b"k", &[], &[], 0)].concat();
    let whole = run_chunks_on(sasl(), &[&stream]);
    assert_eq!(statuses(&whole), vec![(0x21, 0x20), (0x00, 0x20)]);
    for split in 1..stream.len() {
        let (a, b) = stream.split_at(split);
        assert_eq!(statuses(&run_chunks_on(sasl(), &[a, b])), statuses(&whole), "split at byte {split}");
    }
    let _ = std::fs::remove_file(&path);
}

fn start_server(io_engine: IoEngine) -> (Server, std::net::SocketAddr) {
    let settings = Settings {
        tcp_listen: vec!["127.0.0.1:0".parse().unwrap()],
        threads: 2,
        io_engine,
        ..Settings::default()
    };
    let server = Server::start(settings, Box::new(MapStore::new(EngineConfig::default()))).unwrap();
    let addr = server.tcp_addrs[0];
    (server, addr)
}

#[test]
fn a_thousand_pipelined_commands_in_one_write() {
    for engine in ENGINES {
        a_thousand_pipelined_commands(engine);
    }
}

fn a_thousand_pipelined_commands(engine: IoEngine) {
    let (server, addr) = start_server(engine);
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
    for engine in ENGINES {
        overlong_line_and_quit(engine);
    }
}

fn overlong_line_and_quit(engine: IoEngine) {
    let (server, addr) = start_server(engine);
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
    for engine in ENGINES {
        connection_limit(engine);
    }
}

fn connection_limit(io_engine: IoEngine) {
    let settings = Settings {
        tcp_listen: vec!["127.0.0.1:0".parse().unwrap()],
        threads: 1,
        max_connections: 2,
        io_engine,
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

/// The storage headers the server parsed, all workers (`stats` does not
/// show this count: it is the tests').
fn headers_parsed(rt: &Runtime) -> u64 {
    rt.core.stats().store_headers_parsed
}

/// A storage command's header is parsed and admitted once, however many
/// pieces its data block arrives in: the connection waits for the rest of
/// the block (`Conn::awaiting`) and runs the command from the header it
/// held. Here every byte is a piece of its own, run through `Conn::process`
/// one after another.
#[test]
fn a_data_block_in_a_thousand_pieces_is_parsed_once() {
    let value = vec![b'v'; 1000];
    let mut set = b"set k 7 0 1000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\nms m 1000 T0 F3\r\n");
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\nget k\r\nmg m v f\r\n");
    let pieces: Vec<&[u8]> = set.chunks(1).collect();
    let rt = shared();
    let replies = run_chunks_on(rt.clone(), &pieces);
    let text = String::from_utf8_lossy(&replies);
    let value = String::from_utf8_lossy(&value);
    assert_eq!(text, format!("STORED\r\nHD\r\nVALUE k 7 1000\r\n{value}\r\nEND\r\nVA 1000 f3\r\n{value}\r\n"));
    assert_eq!(headers_parsed(&rt), 2, "each of the set's and the ms's lines parsed once");
}

/// `-R` counts the requests that run, not the times a request was looked
/// at: under `-R 1` a set whose data block comes a byte at a time never
/// yields (each piece only waits for the rest), and a pipeline of three
/// gets runs one request a turn, yielding twice.
#[test]
fn reqs_per_event_counts_requests_that_run() {
    let rt = shared();
    let mut svc = Service::new(&rt, 0);
    let mut conn = Conn::new(false, None);
    let mut set = b"set k 0 0 1000\r\n".to_vec();
    set.extend_from_slice(&[b'v'; 1000]);
    set.extend_from_slice(b"\r\n");
    for (i, piece) in set.chunks(1).enumerate() {
        conn.input.extend_from_slice(piece);
        assert_eq!(conn.process(&mut svc, 1), Progress::NeedInput, "byte {i}");
    }
    assert_eq!(conn.out.to_vec(), b"STORED\r\n");
    assert_eq!(headers_parsed(&rt), 1);
    conn.input.extend_from_slice(b"get k\r\nget k\r\nget k\r\n");
    let turns: Vec<Progress> = (0..3).map(|_| conn.process(&mut svc, 1)).collect();
    assert_eq!(turns, [Progress::Yield, Progress::Yield, Progress::NeedInput]);
    assert_eq!(conn.out.to_vec().windows(5).filter(|w| w == b"VALUE").count(), 3);
}

/// The same over a socket, on each I/O engine: a 1 MiB `set` written a
/// byte at a time (each byte its own write, Nagle off) is parsed once, and
/// under `-R 1` it is one request (the connection never yields).
#[test]
fn a_megabyte_set_sent_a_byte_at_a_time_is_parsed_once() {
    for engine in ENGINES {
        let settings = Settings {
            tcp_listen: vec!["127.0.0.1:0".parse().unwrap()],
            threads: 1,
            io_engine: engine,
            item_size_max: 2 << 20,
            reqs_per_event: 1,
            ..Settings::default()
        };
        let engine_config = EngineConfig { item_size_max_bytes: settings.item_size_max, ..EngineConfig::default() };
        let server = Server::start(settings, Box::new(MapStore::new(engine_config))).unwrap();
        let mut stream = TcpStream::connect(server.tcp_addrs[0]).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut request = format!("set big 0 0 {}\r\n", 1 << 20).into_bytes();
        request.extend((0..1 << 20).map(|i| b'a' + (i % 26) as u8));
        request.extend_from_slice(b"\r\n");
        for byte in &request {
            stream.write_all(std::slice::from_ref(byte)).unwrap();
        }
        let mut reply = [0u8; 8];
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"STORED\r\n", "{engine:?}");
        stream.write_all(b"mg big s\r\n").unwrap();
        let mut size = vec![0u8; "HD s1048576\r\n".len()];
        stream.read_exact(&mut size).unwrap();
        assert_eq!(size, b"HD s1048576\r\n", "{engine:?}");
        assert_eq!(headers_parsed(&server.runtime), 1, "{engine:?}: the set's line parsed once");
        assert_eq!(server.runtime.core.stats().conn_yields, 0, "{engine:?}: -R 1 counts the set once");
        server.shutdown();
        server.wait();
    }
}
