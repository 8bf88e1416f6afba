//! `stats hotkeys` on the wire (ops/hotkeys.rs): a zipf stream's hottest
//! keys are found, binary and multi-get keys count, `stats reset` clears,
//! `-o no_hotkeys` samples nothing, on both I/O engines.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

use strata_server::settings::IoEngine;
use strata_server::{Server, Settings};

const ENGINES: [IoEngine; 2] = [IoEngine::Epoll, IoEngine::Uring];

fn start(io_engine: IoEngine, hotkeys: bool) -> (Server, SocketAddr) {
    common::start(Settings { threads: 2, io_engine, hotkeys, ..Settings::default() })
}

/// The header fields and the ranked (key, estimate) list.
type Reply = (Vec<(String, String)>, Vec<(String, u64)>);

/// `stats hotkeys`.
fn hotkeys(s: &mut TcpStream, r: &mut BufReader<TcpStream>) -> Reply {
    s.write_all(b"stats hotkeys\r\n").unwrap();
    let (mut head, mut ranked) = (Vec::new(), Vec::new());
    loop {
        let l = common::line(r);
        let l = l.trim_end();
        if l == "END" {
            return (head, ranked);
        }
        let (name, value) = l.strip_prefix("STAT ").and_then(|l| l.split_once(' ')).unwrap_or_else(|| panic!("{l:?}"));
        match name.split_once(':') {
            Some((rank, key)) => {
                assert_eq!(rank.parse::<usize>().unwrap(), ranked.len() + 1, "{l}");
                ranked.push((key.to_string(), value.parse().unwrap()));
            }
            None => head.push((name.to_string(), value.to_string())),
        }
    }
}

/// Send `n` requests in one write and read `n` lines ending each reply.
fn pipeline(s: &mut TcpStream, r: &mut BufReader<TcpStream>, cmds: &str, n: usize, end: &str) {
    s.write_all(cmds.as_bytes()).unwrap();
    let mut seen = 0;
    while seen < n {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert!(!l.is_empty());
        if l == end {
            seen += 1;
        }
    }
}

/// Key ranks drawn from zipf(1.0) over `keys` keys.
struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    fn new(keys: usize) -> Zipf {
        let weights: Vec<f64> = (1..=keys).map(|k| 1.0 / k as f64).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights.iter().map(|w| {
            acc += w / total;
            acc
        });
        Zipf { cdf: cdf.collect(), state: 0x2545_f491_4f6c_dd1d }
    }

    fn next(&mut self) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

#[test]
fn the_five_hottest_keys_of_a_zipf_stream_are_in_the_top_ten() {
    for engine in ENGINES {
        let (_server, addr) = start(engine, true);
        // Two connections, so both workers sample.
        let mut conns: Vec<_> = (0..2).map(|_| common::connect(addr)).collect();
        let mut zipf = Zipf::new(2000);
        for batch in 0..2400 {
            let cmds: String = (0..100).map(|_| format!("get key{}\r\n", zipf.next())).collect();
            let (s, r) = &mut conns[batch % 2];
            pipeline(s, r, &cmds, 100, "END\r\n");
        }
        let (s, r) = &mut conns[0];
        let (head, ranked) = hotkeys(s, r);
        assert_eq!(head[0], ("enabled".to_string(), "1".to_string()));
        assert_eq!(ranked.len(), 20, "{ranked:?}");
        let top10: Vec<&str> = ranked.iter().take(10).map(|(k, _)| k.as_str()).collect();
        for hot in 0..5 {
            assert!(top10.contains(&format!("key{hot}").as_str()), "{engine:?}: key{hot} not in {top10:?}");
        }
        assert!(ranked.windows(2).all(|w| w[0].1 >= w[1].1), "{ranked:?}");
        // key0 drew 240000/H(2000) = ~29,300 requests; the estimate is near.
        let key0 = ranked.iter().find(|(k, _)| k == "key0").map(|(_, c)| *c).unwrap();
        assert!((14_600..58_600).contains(&key0), "{engine:?}: key0 estimated {key0}");
    }
}

#[test]
fn multi_get_binary_and_storage_keys_count_and_reset_clears() {
    for engine in ENGINES {
        let (_server, addr) = start(engine, true);
        let (mut s, mut r) = common::connect(addr);
        let cmds = "get multi1 multi2\r\n".repeat(3000);
        pipeline(&mut s, &mut r, &cmds, 3000, "END\r\n");
        pipeline(&mut s, &mut r, &"set stored 0 0 1\r\nx\r\n".repeat(3000), 3000, "STORED\r\n");
        // Binary GETK of a key with a space and a control byte in it.
        let key = b"bin key\x01";
        let mut req = vec![0x80, 0x0c, 0, key.len() as u8, 0, 0, 0, 0, 0, 0, 0, key.len() as u8];
        req.extend_from_slice(&[0; 12]);
        req.extend_from_slice(key);
        let (mut b, _) = common::connect(addr);
        b.write_all(&req.repeat(3000)).unwrap();
        for _ in 0..3000 {
            let mut head = [0u8; 24];
            b.read_exact(&mut head).unwrap();
            let mut body = vec![0; u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize];
            b.read_exact(&mut body).unwrap();
        }
        let (_, ranked) = hotkeys(&mut s, &mut r);
        let keys: Vec<&str> = ranked.iter().map(|(k, _)| k.as_str()).collect();
        for k in ["multi1", "multi2", "stored", "bin%20key%01"] {
            assert!(keys.contains(&k), "{engine:?}: {k} not in {ranked:?}");
        }
        s.write_all(b"stats reset\r\n").unwrap();
        assert_eq!(common::line(&mut r), "RESET\r\n");
        let (_, ranked) = hotkeys(&mut s, &mut r);
        assert!(ranked.is_empty(), "{ranked:?}");
    }
}

#[test]
fn off_switch_samples_nothing() {
    let (_server, addr) = start(IoEngine::Epoll, false);
    let (mut s, mut r) = common::connect(addr);
    pipeline(&mut s, &mut r, &"get a\r\n".repeat(500), 500, "END\r\n");
    let (head, ranked) = hotkeys(&mut s, &mut r);
    assert_eq!(head[0], ("enabled".to_string(), "0".to_string()));
    assert!(ranked.is_empty());
}
