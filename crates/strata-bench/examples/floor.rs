//! The floor: the least a memcached-protocol server on epoll can do per
//! request, to measure what the kernel alone costs on this machine.
//!
//! Text `get`, `set` and `version`, binary GET, SET and NOOP (a
//! connection's first byte picks its protocol, as in memcached), values in
//! a `HashMap`, one event loop on mio: per readable connection one `read`
//! (more only when it fills the buffer), run every complete request, one
//! `write`. No stats, no expiry, no limits: not a server, a baseline for
//! `strata-bench compare` or `scripts/bench/solo.py`:
//!
//! ```sh
//! cargo build --release -p strata-bench --example floor
//! target/release/strata-bench compare --a "memcached -p {port} -U 0 -u root -t 1" \
//!     --b "target/release/examples/floor {port}" --preset memaslap
//! ```

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

/// Key to (flags, value), shared by both protocols.
type Store = HashMap<Vec<u8>, (u32, Vec<u8>)>;

struct Client {
    stream: TcpStream,
    binary: Option<bool>,
    input: Vec<u8>,
    output: Vec<u8>,
}

/// Run every complete request at the front of `input`, appending replies;
/// returns how many bytes were consumed.
fn serve(input: &[u8], store: &mut Store, out: &mut Vec<u8>) -> usize {
    let mut at = 0;
    while let Some(end) = input[at..].windows(2).position(|w| w == b"\r\n") {
        let line = &input[at..at + end];
        let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
        match words.next() {
            Some(b"get") => {
                for key in words {
                    if let Some((flags, value)) = store.get(key) {
                        out.extend_from_slice(b"VALUE ");
                        out.extend_from_slice(key);
                        out.extend_from_slice(format!(" {flags} {}\r\n", value.len()).as_bytes());
                        out.extend_from_slice(value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                out.extend_from_slice(b"END\r\n");
                at += end + 2;
            }
            Some(b"set") => {
                let fields: Vec<&[u8]> = words.collect();
                let number = |i: usize| std::str::from_utf8(fields.get(i)?).ok()?.parse::<usize>().ok();
                let (Some(key), Some(flags), Some(len)) = (fields.first(), number(1), number(3)) else {
                    out.extend_from_slice(b"ERROR\r\n");
                    at += end + 2;
                    continue;
                };
                let data = at + end + 2;
                if input.len() < data + len + 2 {
                    break;
                }
                store.insert(key.to_vec(), (flags as u32, input[data..data + len].to_vec()));
                out.extend_from_slice(b"STORED\r\n");
                at = data + len + 2;
            }
            Some(b"version") => {
                out.extend_from_slice(b"VERSION floor\r\n");
                at += end + 2;
            }
            _ => {
                out.extend_from_slice(b"ERROR\r\n");
                at += end + 2;
            }
        }
    }
    at
}

/// Binary-protocol counterpart of [`serve`]: GET, SET and NOOP; other
/// opcodes get "Unknown command".
fn serve_binary(input: &[u8], store: &mut Store, out: &mut Vec<u8>) -> usize {
    let mut at = 0;
    while input.len() >= at + 24 {
        let h = &input[at..at + 24];
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if input.len() < at + 24 + body {
            break;
        }
        let (opcode, keylen, extlen) = (h[1], u16::from_be_bytes([h[2], h[3]]) as usize, h[4] as usize);
        let body_at = at + 24;
        let (key_at, value_at) = (body_at + extlen.min(body), body_at + (extlen + keylen).min(body));
        let (extras, key, value) = (&input[body_at..key_at], &input[key_at..value_at], &input[value_at..body_at + body]);
        let reply = |out: &mut Vec<u8>, status: u16, extras: &[u8], value: &[u8]| {
            out.extend_from_slice(&[0x81, opcode, 0, 0, extras.len() as u8, 0]);
            out.extend_from_slice(&status.to_be_bytes());
            out.extend_from_slice(&((extras.len() + value.len()) as u32).to_be_bytes());
            out.extend_from_slice(&h[12..16]);
            out.extend_from_slice(&[0; 8]);
            out.extend_from_slice(extras);
            out.extend_from_slice(value);
        };
        match opcode {
            0x00 => match store.get(key) {
                Some((flags, value)) => reply(out, 0, &flags.to_be_bytes(), value),
                None => reply(out, 1, &[], b"Not found"),
            },
            0x01 if extras.len() == 8 => {
                store.insert(key.to_vec(), (u32::from_be_bytes([extras[0], extras[1], extras[2], extras[3]]), value.to_vec()));
                reply(out, 0, &[], &[]);
            }
            0x0a => reply(out, 0, &[], &[]),
            _ => reply(out, 0x81, &[], b"Unknown command"),
        }
        at = body_at + body;
    }
    at
}

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(11311);
    let mut listener = TcpListener::bind(([127, 0, 0, 1], port).into())?;
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, Token(usize::MAX), Interest::READABLE)?;
    let mut clients: HashMap<usize, Client> = HashMap::new();
    let mut store = HashMap::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    let mut next = 0;
    loop {
        poll.poll(&mut events, None)?;
        for event in &events {
            if event.token() == Token(usize::MAX) {
                while let Ok((mut stream, _)) = listener.accept() {
                    stream.set_nodelay(true)?;
                    poll.registry().register(&mut stream, Token(next), Interest::READABLE)?;
                    clients.insert(next, Client { stream, binary: None, input: Vec::new(), output: Vec::new() });
                    next += 1;
                }
                continue;
            }
            let Some(client) = clients.get_mut(&event.token().0) else { continue };
            // Edge-triggered: read until a read comes back short (the
            // socket is then empty; one read per wake-up in the steady state).
            let mut closed = false;
            loop {
                match client.stream.read(&mut buf) {
                    Ok(0) => closed = true,
                    Ok(n) => {
                        client.input.extend_from_slice(&buf[..n]);
                        if n == buf.len() {
                            continue;
                        }
                    }
                    Err(e) => closed = e.kind() != ErrorKind::WouldBlock,
                }
                break;
            }
            if client.binary.is_none() && !client.input.is_empty() {
                client.binary = Some(client.input[0] == 0x80);
            }
            let used = match client.binary {
                Some(true) => serve_binary(&client.input, &mut store, &mut client.output),
                Some(false) => serve(&client.input, &mut store, &mut client.output),
                None => 0,
            };
            client.input.drain(..used);
            let mut written = 0;
            while written < client.output.len() {
                match client.stream.write(&client.output[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(_) => break,
                }
            }
            client.output.clear();
            if closed {
                clients.remove(&event.token().0);
            }
        }
    }
}
