//! UDP transport on the wire: frame headers, one datagram series per reply
//! object, dropped multi-datagram requests, and the amplification cap.

use std::net::UdpSocket;
use std::time::Duration;

use strata_server::settings::IoEngine;
use strata_server::{Server, Settings};
use strata_store::{EngineConfig, MapStore};

const ENGINES: [IoEngine; 2] = [IoEngine::Epoll, IoEngine::Uring];

fn start(udp_max_reply_bytes: usize, io_engine: IoEngine) -> (Server, std::net::SocketAddr) {
    let settings = Settings {
        io_engine,
        tcp_listen: vec!["127.0.0.1:0".parse().unwrap()],
        udp_enabled: true,
        udp_port: 0,
        threads: 2,
        udp_max_reply_bytes,
        ..Settings::default()
    };
    let server = Server::start(settings, Box::new(MapStore::new(EngineConfig::default()))).unwrap();
    let addr = server.udp_addrs[0];
    (server, addr)
}

/// A request datagram: the 8-byte frame header (request id, sequence 0,
/// `total` datagrams, reserved) and the payload.
fn frame(id: u16, total: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    for word in [id, 0, total, 0] {
        frame.extend_from_slice(&word.to_be_bytes());
    }
    frame.extend_from_slice(payload);
    frame
}

/// Send one request frame; collect (seq, total, payload) of every reply datagram.
fn exchange(socket: &UdpSocket, server: std::net::SocketAddr, id: u16, total: u16, payload: &[u8]) -> Vec<(u16, u16, Vec<u8>)> {
    socket.send_to(&frame(id, total, payload), server).unwrap();
    let mut replies = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, _)) = socket.recv_from(&mut buf) {
        assert!(n <= 1400, "datagram of {n} bytes");
        assert_eq!(u16::from_be_bytes([buf[0], buf[1]]), id);
        replies.push((u16::from_be_bytes([buf[2], buf[3]]), u16::from_be_bytes([buf[4], buf[5]]), buf[8..n].to_vec()));
    }
    replies
}

#[test]
fn udp_frames_like_memcached() {
    for engine in ENGINES {
        udp_frames(engine);
    }
}

fn udp_frames(engine: IoEngine) {
    let (server, addr) = start(64 << 10, engine);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let big = vec![b'x'; 5000];
    let mut set = b"set big 0 0 5000\r\n".to_vec();
    set.extend_from_slice(&big);
    set.extend_from_slice(b"\r\nset a 0 0 3\r\nabc\r\n");
    let stored = exchange(&socket, addr, 1, 1, &set);
    assert_eq!(stored, vec![(0, 1, b"STORED\r\n".to_vec()), (0, 1, b"STORED\r\n".to_vec())]);

    let got = exchange(&socket, addr, 2, 1, b"get a big missing\r\n");
    let shape: Vec<(u16, u16)> = got.iter().map(|(seq, total, _)| (*seq, *total)).collect();
    assert_eq!(shape, vec![(0, 1), (0, 4), (1, 4), (2, 4), (3, 4), (0, 1)]);
    assert_eq!(got[0].2, b"VALUE a 0 3\r\nabc\r\n");
    let value: Vec<u8> = got[1..5].iter().flat_map(|(_, _, p)| p.clone()).collect();
    assert_eq!(value.len(), "VALUE big 0 5000\r\n".len() + 5000 + 2);
    assert_eq!(got[5].2, b"END\r\n", "END rides with the last key, which missed");

    assert!(exchange(&socket, addr, 3, 2, b"get a\r\n").is_empty(), "multi-datagram requests are dropped");

    let binary_get = [&[0x80u8, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1][..], &[0; 12], b"a"].concat();
    let got = exchange(&socket, addr, 4, 1, &binary_get);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2[0], 0x81);
    assert!(got[0].2.ends_with(b"abc"));
    server.shutdown();
    server.wait();
}

#[test]
fn amplification_cap_refuses_large_replies() {
    for engine in ENGINES {
        amplification_cap(engine);
    }
}

fn amplification_cap(engine: IoEngine) {
    let (server, addr) = start(3000, engine);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut set = b"set big 0 0 5000\r\n".to_vec();
    set.extend_from_slice(&[b'y'; 5000]);
    set.extend_from_slice(b"\r\n");
    exchange(&socket, addr, 1, 1, &set);
    let got = exchange(&socket, addr, 2, 1, b"get big\r\n");
    assert_eq!(got, vec![(0, 1, b"SERVER_ERROR reply too large for UDP\r\n".to_vec())]);
    let mut text = String::new();
    let stats = exchange(&socket, addr, 3, 1, b"stats\r\n");
    for (_, _, part) in stats {
        text.push_str(&String::from_utf8_lossy(&part));
    }
    assert!(text.contains("STAT udp_replies_refused 1"), "{text}");
    server.shutdown();
    server.wait();
}

/// Many peers with several requests each in flight at once: the worker takes
/// them in batches (`recvmmsg`) and sends the replies together (`sendmmsg`);
/// every reply must reach its own peer, with its own request id and value.
#[test]
fn batched_datagrams_reach_their_peers() {
    for engine in ENGINES {
        batched_datagrams(engine);
    }
}

fn batched_datagrams(engine: IoEngine) {
    let (server, addr) = start(64 << 10, engine);
    const PEERS: usize = 40;
    const EACH: u16 = 8;
    let value_of = |p: usize| format!("value-of-{p}-{}", "v".repeat(p * 30));
    let peers: Vec<UdpSocket> = (0..PEERS).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    for (p, socket) in peers.iter().enumerate() {
        socket.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let value = value_of(p);
        let set = format!("set peer{p} {p} 0 {}\r\n{value}\r\n", value.len());
        socket.send_to(&frame(0, 1, set.as_bytes()), addr).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = socket.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[8..n], b"STORED\r\n");
    }
    // Every peer sends all its gets before anyone reads a reply.
    for (p, socket) in peers.iter().enumerate() {
        for id in 1..=EACH {
            socket.send_to(&frame(id, 1, format!("get peer{p}\r\n").as_bytes()), addr).unwrap();
        }
    }
    for (p, socket) in peers.iter().enumerate() {
        let value = value_of(p);
        let expected = format!("VALUE peer{p} {p} {}\r\n{value}\r\nEND\r\n", value.len());
        let mut ids = Vec::new();
        let mut buf = [0u8; 2048];
        for _ in 0..EACH {
            let (n, from) = socket.recv_from(&mut buf).expect("a reply for every request");
            assert_eq!(from, addr);
            assert_eq!(&buf[2..6], &[0, 0, 0, 1], "one datagram per reply");
            assert_eq!(&buf[8..n], expected.as_bytes(), "peer {p} got another peer's reply");
            ids.push(u16::from_be_bytes([buf[0], buf[1]]));
        }
        ids.sort_unstable();
        assert_eq!(ids, (1..=EACH).collect::<Vec<_>>());
    }
    server.shutdown();
    server.wait();
}
