//! Shared by the server's test files: a server on an ephemeral loopback
//! port and a line-reading client. (Each test file uses a part of it.)
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use strata_server::{Server, Settings};
use strata_store::SegStore;

/// A server with `settings` (two workers unless set) on 127.0.0.1, any port.
pub fn start(settings: Settings) -> (Server, SocketAddr) {
    let settings = Settings { tcp_listen: vec!["127.0.0.1:0".parse().unwrap()], ..settings };
    let engine = SegStore::new(settings.engine_config());
    let server = Server::start(settings, Box::new(engine)).unwrap();
    let addr = server.tcp_addrs[0];
    (server, addr)
}

pub fn connect(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

pub fn line(r: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l
}
